#!/bin/bash
# Hostile-user checks of the sparrow CLI: files that change under
# a run, lost output, interrupted writes, and inputs that must not be
# accepted quietly. Each check failed before its fix.
# Usage: reliability_e2e.sh SPARROW_BIN SHARED_DIR
set -u
SPARROW=$1
SHARED=$2
WORK=$(mktemp -d)
BG=()
cleanup() {
  for pid in "${BG[@]}"; do kill "$pid" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
STORIES=$SHARED/models/stories260K.gguf
source "$(dirname "$0")/e2e_lib.sh"

# A synthetic model whose feed-forward does not fit a tight budget, so a run
# keeps reading records from the bundle for as long as it generates.
"$SPARROW" synth -o "$WORK/m.gguf" --dim 128 --ffn 512 --layers 4 --heads 4 --vocab 1000 \
  --type f32 --seed 9 2>/dev/null
"$SPARROW" synth -o "$WORK/m2.gguf" --dim 128 --ffn 512 --layers 4 --heads 4 --vocab 1000 \
  --type f32 --seed 10 2>/dev/null
"$SPARROW" convert -m "$WORK/m.gguf" -o "$WORK/m.sparrow" --type f32 2>/dev/null
"$SPARROW" convert -m "$WORK/m2.gguf" -o "$WORK/m2.sparrow" --type f32 2>/dev/null
min_kib=$(min_budget_kib "$WORK/m.sparrow")
budget="$((min_kib + 512))K"
# The same, at -c 4096 with --io mmap (whose footprint differs from uring's).
long_budget="$(($(min_budget_kib "$WORK/m.sparrow" -c 4096 --io mmap) + 512))K"

# 1. A bundle that shrinks under --io mmap: exit 2 "truncated while in use",
#    not SIGBUS (exit 135). The truncation comes once the run has started
#    generating (its prompt is on stdout).
size=$(stat -c %s "$WORK/m.sparrow")
cp "$WORK/m.sparrow" "$WORK/shrinks.sparrow"
"$SPARROW" run -m "$WORK/shrinks.sparrow" -p "Once upon a time" -n 100000 -c 4096 --temp 0 \
  --dram-budget "$long_budget" --io mmap >"$WORK/shrinks.out" 2>"$WORK/shrinks.err" &
pid=$!
for _ in $(seq 200); do [ -s "$WORK/shrinks.out" ] && break; sleep 0.05; done
sleep 0.2
truncate -s $((size / 2)) "$WORK/shrinks.sparrow"
wait $pid
rc=$?
if [ $rc -eq 2 ] && grep -q "truncated while in use" "$WORK/shrinks.err" && [ "$(wc -l <"$WORK/shrinks.err")" -eq 1 ]; then
  pass "bundle truncated under --io mmap -> exit 2: $(cat "$WORK/shrinks.err")"
else
  fail "bundle truncated under --io mmap -> exit $rc: $(head -c 300 "$WORK/shrinks.err")"
fi

# 2. One file, opened once: while `convert --force` keeps replacing the path
#    with one of two bundles of the same shape, every run prints exactly
#    the text of one of them, or fails cleanly; never a mix.
want1=$("$SPARROW" run -m "$WORK/m.sparrow" -p "Once upon a time" -n 24 --temp 0 --dram-budget "$budget" 2>/dev/null)
want2=$("$SPARROW" run -m "$WORK/m2.sparrow" -p "Once upon a time" -n 24 --temp 0 --dram-budget "$budget" 2>/dev/null)
cp "$WORK/m.sparrow" "$WORK/race.sparrow"
(
  while :; do
    "$SPARROW" convert -m "$WORK/m2.gguf" -o "$WORK/race.sparrow" --type f32 --force 2>/dev/null
    "$SPARROW" convert -m "$WORK/m.gguf" -o "$WORK/race.sparrow" --type f32 --force 2>/dev/null
  done
) &
BG+=($!)
mixed=0 clean=0 failed=0
for i in $(seq 30); do
  out=$("$SPARROW" run -m "$WORK/race.sparrow" -p "Once upon a time" -n 24 --temp 0 \
        --dram-budget "$budget" 2>"$WORK/race.err")
  rc=$?
  if [ $rc -eq 0 ] && { [ "$out" = "$want1" ] || [ "$out" = "$want2" ]; }; then
    clean=$((clean + 1))
  elif [ $rc -eq 2 ] && [ "$(wc -l <"$WORK/race.err")" -eq 1 ]; then
    failed=$((failed + 1))
  else
    mixed=$((mixed + 1))
    echo "  run $i: exit $rc, stderr: $(head -c 200 "$WORK/race.err")"
  fi
done
kill "${BG[-1]}" 2>/dev/null; wait "${BG[-1]}" 2>/dev/null
if [ "$want1" != "$want2" ] && [ $mixed -eq 0 ]; then
  pass "30 runs while convert --force replaces the bundle: $clean with one model's text, $failed clean errors, 0 mixed"
else
  fail "30 runs while convert --force replaces the bundle: $mixed runs neither one model's text nor a clean error"
fi

# 3. Records bound to their place: a record of another bundle of the same
#    shape written over this one's (dd conv=notrunc) is refused.
first=$("$SPARROW" info -m "$WORK/m.sparrow" | sed -n 's/.*sparrow.groups.offset .*{\([0-9]*\),.*/\1/p')
record=$("$SPARROW" info -m "$WORK/m.sparrow" | sed -n 's/.*sparrow.groups.record_bytes .*{\([0-9]*\),.*/\1/p')
cp "$WORK/m.sparrow" "$WORK/spliced.sparrow"
"$SPARROW" convert -m "$WORK/m.gguf" -o "$WORK/same.sparrow" --type f32 2>/dev/null
dd if="$WORK/same.sparrow" of="$WORK/spliced.sparrow" bs=1 skip=$((first + 3 * record)) \
  seek=$((first + 3 * record)) count="$record" conv=notrunc 2>/dev/null
if cmp -s "$WORK/m.sparrow" "$WORK/spliced.sparrow"; then
  fail "the spliced record is identical: the two bundles' records are not bound to their bundle"
else
  expect_input_error "a record from another bundle of the same shape" \
    "$SPARROW" info -m "$WORK/spliced.sparrow" --verify
fi

# 4. Output errors are errors; SIGPIPE stays the usual end.
head -c 20000 "$SHARED/corpora/tinystories_val_excerpt.txt" >"$WORK/text.txt"
"$SPARROW" perplexity -m "$STORIES" -f "$WORK/text.txt" -c 128 >/dev/full 2>"$WORK/full.err"
rc=$?
if [ $rc -eq 1 ] && grep -q "cannot write to standard output" "$WORK/full.err"; then
  pass "perplexity > /dev/full -> exit 1: $(tail -n 1 "$WORK/full.err")"
else
  fail "perplexity > /dev/full -> exit $rc: $(tail -n 1 "$WORK/full.err")"
fi
"$SPARROW" run -m "$STORIES" -p "Once upon a time" -n 50 --temp 0 >/dev/full 2>"$WORK/full.err"
rc=$?
[ $rc -eq 1 ] && pass "run > /dev/full -> exit 1" || fail "run > /dev/full -> exit $rc"
"$SPARROW" run -m "$STORIES" -p "Once upon a time" -n 400 --temp 0 2>/dev/null | head -c 5 >/dev/null
rc=${PIPESTATUS[0]}
[ $rc -eq 141 ] && pass "run | head ends by SIGPIPE (exit 141)" || fail "run | head -> exit $rc, expected SIGPIPE's 141"

# 5. Interrupted writes leave nothing; stale temporaries of dead processes
#    are removed by the next convert to the same destination.
big_out="$WORK/out/int.sparrow"
mkdir -p "$WORK/out"
"$SPARROW" synth -o "$WORK/big.gguf" --dim 1024 --ffn 4096 --layers 6 --heads 8 --vocab 4000 \
  --type f32 --seed 3 2>/dev/null
# Job control on: without it bash starts background jobs with SIGINT
# ignored, as a terminal's Ctrl-C must not reach them (and sparrow leaves an
# ignored signal ignored, so such a job finishes its file).
set -m
for sig in INT TERM HUP; do
  for cmd in convert synth; do
    rm -rf "$WORK/out"; mkdir -p "$WORK/out"
    if [ $cmd = convert ]; then
      "$SPARROW" convert -m "$WORK/big.gguf" -o "$big_out" --type f32 -t 1 2>/dev/null &
    else
      "$SPARROW" synth -o "$WORK/out/int.gguf" --dim 1024 --ffn 4096 --layers 6 --heads 8 \
        --vocab 4000 --type f32 -t 1 2>/dev/null &
    fi
    pid=$!
    for _ in $(seq 400); do [ -n "$(ls "$WORK/out")" ] && break; sleep 0.01; done
    sleep 0.1
    kill -s $sig $pid; wait $pid
    rc=$?
    left=$(ls "$WORK/out")
    if [ -z "$left" ] && [ $rc -ne 0 ]; then
      pass "$cmd stopped by SIG$sig (exit $rc) leaves no file"
    else
      fail "$cmd stopped by SIG$sig (exit $rc) left: $left"
    fi
  done
done
rm -rf "$WORK/out"; mkdir -p "$WORK/out"
"$SPARROW" convert -m "$WORK/big.gguf" -o "$big_out" --type f32 -t 1 2>/dev/null &
pid=$!
for _ in $(seq 400); do [ -n "$(ls "$WORK/out")" ] && break; sleep 0.01; done
kill -s KILL $pid; wait $pid 2>/dev/null
set +m
stale=$(ls "$WORK/out")
"$SPARROW" convert -m "$WORK/m.gguf" -o "$big_out" --type f32 2>/dev/null
if [ -n "$stale" ] && [ "$(ls "$WORK/out")" = "int.sparrow" ]; then
  pass "a later convert removed the SIGKILLed convert's temporary file ($stale)"
else
  fail "stale temporaries: before '$stale', after '$(ls "$WORK/out" | tr '\n' ' ')'"
fi

# 6. Sizes and output paths checked before any work.
expect_input_error "synth of a model larger than the file system" \
  "$SPARROW" synth -o "$WORK/huge.gguf" --dim 65536 --ffn 262144 --layers 400 --heads 64 --vocab 32000 --type f32
grep -q "it needs .* free" "$WORK/bad.err" && pass "the refusal gives the size needed and the space free" \
  || fail "synth did not check the space before writing: $(cat "$WORK/bad.err")"
[ -z "$(ls "$WORK" | grep huge)" ] && pass "the refused synth wrote nothing" || fail "the refused synth left $(ls "$WORK" | grep huge)"
expect_input_error "--stats-json into a missing directory" \
  "$SPARROW" run -m "$WORK/m.sparrow" -p hi -n 2 --stats-json "$WORK/no/such/dir/s.json"
grep -q "No such file or directory" "$WORK/bad.err" && pass "the --stats-json error names the reason" \
  || fail "the --stats-json error does not name the reason: $(cat "$WORK/bad.err")"
[ ! -s "$WORK/bad.out" ] && pass "the unwritable --stats-json was refused before the run" \
  || fail "the unwritable --stats-json was found only after the run (it printed: $(head -c 80 "$WORK/bad.out"))"
expect_input_error "--stats-json that is a directory" \
  "$SPARROW" run -m "$WORK/m.sparrow" -p hi -n 2 --stats-json "$WORK"
expect_input_error "probe-io --csv into a missing directory" \
  "$SPARROW" probe-io "$WORK/m.sparrow" --sizes 4K --threads 1 --seconds 0.05 --csv "$WORK/no/x.csv"
expect_input_error "tradeoff -o into a missing directory" \
  "$SPARROW" tradeoff -m "$WORK/m.sparrow" -f "$WORK/text.txt" --policies dense --densities 1 -o "$WORK/no/t"

# 7. No quiet acceptance.
expect_input_error "--top-p above 1" "$SPARROW" run -m "$STORIES" -p hi -n 2 --top-p 1.5
expect_input_error "negative --top-k" "$SPARROW" run -m "$STORIES" -p hi -n 2 --top-k -3
echo "Once upon a time" >"$WORK/short.txt"
expect_input_error "-f and -p together" "$SPARROW" run -m "$STORIES" -p hi -f "$WORK/short.txt" -n 2
expect_input_error "-f DIRECTORY (run)" "$SPARROW" run -m "$STORIES" -f "$WORK" -n 2
expect_input_error "-f DIRECTORY (perplexity)" "$SPARROW" perplexity -m "$STORIES" -f "$WORK"
"$SPARROW" run -m "$STORIES" -p hi -n 2 -c 4096 --temp 0 >/dev/null 2>"$WORK/ctx.err"
if grep -q "^warning: the context (-c 4096) is longer than the model's trained context (2048" "$WORK/ctx.err"; then
  pass "a context past the trained one warns: $(head -n 1 "$WORK/ctx.err")"
else
  fail "no warning for -c 4096 on a 2048-token model: $(head -c 200 "$WORK/ctx.err")"
fi
"$SPARROW" info -m "$STORIES" --verify >"$WORK/verify.out" 2>/dev/null
if grep -q "^verify: a GGUF has no checksums; checked: .*can be read.*no NaN or infinity" "$WORK/verify.out"; then
  pass "info --verify on a GGUF says what it verified"
else
  fail "info --verify on a GGUF does not say what it verified"
fi
cp "$WORK/m.sparrow" "$WORK/magic.sparrow"
printf 'X' | dd of="$WORK/magic.sparrow" bs=1 seek=2 conv=notrunc 2>/dev/null
expect_input_error "bundle with a damaged magic" "$SPARROW" run -m "$WORK/magic.sparrow" -p hi
grep -q "damaged Sparrow bundle" "$WORK/bad.err" && pass "it is called a damaged bundle" \
  || fail "a damaged magic is not called a damaged bundle: $(cat "$WORK/bad.err")"

echo "reliability e2e: $failures failure(s)"
[ $failures -eq 0 ]
