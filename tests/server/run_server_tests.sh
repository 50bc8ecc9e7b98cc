#!/bin/bash
# `sparrow serve` with real clients: OpenAI's npm package, headless
# Chromium (puppeteer-core) and a load test, all on Node.js, against
# stories260K. Usage: run_server_tests.sh SPARROW_BIN SHARED_DIR
# The packages come from tests/server/package-lock.json (`npm ci`, which
# scripts/test.sh runs); Chromium from Debian (/usr/bin/chromium).
set -u
SPARROW=$1
SHARED=$2
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d)
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
source "$HERE/../e2e/e2e_lib.sh"

if [ ! -d "$HERE/node_modules/openai" ] || [ ! -d "$HERE/node_modules/puppeteer-core" ]; then
  echo "FAIL: tests/server/node_modules is missing: run 'npm ci --prefix tests/server' (scripts/test.sh does)"
  exit 1
fi
command -v node >/dev/null || { echo "FAIL: node is not installed"; exit 1; }

STORIES=$SHARED/models/stories260K.gguf
KEY=test-key-$$
"$SPARROW" run -m "$STORIES" -p "Once upon a time" -n 200 --temp 0 >"$WORK/run.txt" 2>/dev/null

BUDGET_MIB=64
"$SPARROW" serve -m "$STORIES" --port 0 --alias stories260K --api-key "$KEY" -c 1024 \
  --max-body 65536 --queue 4 -t 1 --dram-budget ${BUDGET_MIB}M 2>"$WORK/serve.err" &
server_pid=$!
port=
for _ in $(seq 100); do
  port=$(sed -n 's|.*http://127.0.0.1:\([0-9]*\)/.*|\1|p' "$WORK/serve.err")
  [ -n "$port" ] && break
  sleep 0.1
done
if [ -z "$port" ]; then
  echo "FAIL: the server did not start: $(cat "$WORK/serve.err")"
  exit 1
fi
export SPARROW_URL=http://127.0.0.1:$port SPARROW_API_KEY=$KEY SPARROW_PID=$server_pid
export SPARROW_BUDGET_MIB=$BUDGET_MIB
# Sanitizer builds keep shadow memory and quarantines: the RSS bound is for
# release builds (the figure is printed either way).
if grep -q __asan_init "$SPARROW"; then export SPARROW_RSS_CHECK=0; fi
export REFERENCE_FILE=$SHARED/reference/stories260K_greedy_200.txt RUN_FILE=$WORK/run.txt

for t in openai_client web_page load; do
  if node --test "$HERE/$t.test.mjs" >"$WORK/$t.log" 2>&1; then
    pass "server: $t ($(grep -E '^# (pass|fail)' "$WORK/$t.log" | tr '\n' ' '))"
    grep -E '^# load:' "$WORK/$t.log"
  else
    fail "server: $t"
    cat "$WORK/$t.log"
  fi
done

if kill -0 "$server_pid" 2>/dev/null; then
  pass "server: still up after every test"
else
  fail "server: it died: $(tail -n 3 "$WORK/serve.err")"
fi
kill -TERM "$server_pid"
wait "$server_pid"
rc=$?
server_pid=
if [ $rc -eq 0 ] && grep -q "sparrow serve: stopped" "$WORK/serve.err"; then
  pass "server: SIGTERM stops it cleanly (exit 0)"
else
  fail "server: SIGTERM gave exit $rc: $(tail -n 2 "$WORK/serve.err")"
fi

echo "server tests: $failures failure(s)"
[ $failures -eq 0 ]
