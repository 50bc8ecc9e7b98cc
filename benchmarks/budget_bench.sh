#!/bin/bash
# Streaming under a DRAM budget (issue 3's acceptance figures): a bundle run
# at budgets of 100%, 75% and 50% of its size with each --io mode. For every
# run: generation tok/s, peak RSS (GNU time) against the budget, bytes read
# and cache hit rate per decode token, the I/O / memory management / compute
# split per decode token (--stats), and how much of the bundle the page
# cache holds afterwards (fincore). The page cache is dropped before each run
# when this runs as root, so every run starts cold.
#
#   benchmarks/budget_bench.sh [SPARROW] [BUNDLE]
#
# Without BUNDLE it synthesizes a TinyLlama-1.1B-shaped model (dim 2048, ffn
# 5632, 22 layers, 32 heads, 4 KV heads, vocab 32000) with the engine's own
# synth tool and converts it to a Q8_0 bundle in $BUDGET_BENCH_DIR (default
# /tmp/sparrow-budget-bench; about 2.4 GB of disk). Environment:
#   BUDGETS="100 75 50"  IO_MODES="pread direct mmap uring"  TOKENS=16
#   CTX=512 (the KV cache is part of the budget)  CACHE=window  PROMPT=...
#   MEMCAP=../shared/tools/memcap.sh  runs each command under that tool's
#   cgroup memory limit (page cache included) at budget + 5%, as on a machine
#   that has only that much RAM: buffered --io modes then cannot lean on a
#   page cache larger than the budget.
set -euo pipefail
sparrow=${1:-build/sparrow}
bundle=${2:-}
dir=${BUDGET_BENCH_DIR:-/tmp/sparrow-budget-bench}
budgets=${BUDGETS:-100 75 50}
io_modes=${IO_MODES:-pread direct mmap uring}
tokens=${TOKENS:-16}
ctx=${CTX:-512}
cache=${CACHE:-window}
prompt=${PROMPT:-Once upon a time there was a little robot who}

[ -x "$sparrow" ] || { echo "budget_bench: $sparrow is not an executable" >&2; exit 1; }
command -v /usr/bin/time >/dev/null || { echo "budget_bench: needs GNU time (apt-get install time)" >&2; exit 1; }
command -v fincore >/dev/null || { echo "budget_bench: needs fincore (apt-get install util-linux)" >&2; exit 1; }
mkdir -p "$dir"
if [ -z "$bundle" ]; then
  bundle=$dir/tinyllama-shape-q8_0.sparrow
  if [ ! -f "$bundle" ]; then
    gguf=$dir/tinyllama-shape-q8_0.gguf
    [ -f "$gguf" ] || "$sparrow" synth -o "$gguf" --dim 2048 --ffn 5632 --layers 22 --heads 32 \
                        --kv-heads 4 --vocab 32000 --type q8_0 --seed 1
    "$sparrow" convert -m "$gguf" -o "$bundle" --type q8_0
  fi
fi
bundle_bytes=$(stat -c %s "$bundle")

drop_caches() {
  sync
  if [ -w /proc/sys/vm/drop_caches ]; then echo 3 >/proc/sys/vm/drop_caches; fi
}
cached_pages_percent() {
  # fincore's PAGES column against the file's pages.
  local pages
  pages=$(fincore --noheadings --bytes --output PAGES "$1" | tr -d ' ')
  awk -v p="$pages" -v b="$bundle_bytes" 'BEGIN { printf "%.1f", 100 * p * 4096 / b }'
}
# Field `col` (1: total, 2: per token, 3: per decode token; shares in % are
# skipped) of the --stats row labelled `name`; for the hit rate, col 2 is
# the per decode token one.
stat_field() {
  awk -v name="$2" -v c="$3" '
    index($0, "  " name " ") == 1 {
      sub("^  " name " +", "")
      n = 0
      for (i = 1; i <= NF; ++i) {
        if ($i ~ /^(B|KiB|MiB|GiB|ms|us|s)$/) v[n] = v[n] " " $i
        else if ($i ~ /%$/ && name != "cache hit rate") continue
        else v[++n] = $i
      }
      print v[c]
      exit
    }' "$1"
}

echo "machine: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "bundle: $bundle ($((bundle_bytes >> 20)) MiB); $tokens tokens after a $(wc -w <<<"$prompt")-word prompt, ctx $ctx, --cache $cache"
[ -w /proc/sys/vm/drop_caches ] && echo "page cache dropped before each run" || echo "not root: page cache NOT dropped between runs"
[ -n "${MEMCAP:-}" ] && echo "each run under $MEMCAP at budget + 5% (page cache included)"
echo
echo "| budget | --io | gen tok/s | peak RSS MiB | RSS / budget | read per decode token | hit rate | I/O wait | memory mgmt | compute | wall | reads alone | bundle in page cache |"
echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
over=0
failed=0
for pct in $budgets; do
  budget_bytes=$((bundle_bytes * pct / 100))
  for io in $io_modes; do
    drop_caches
    log=$dir/run-$pct-$io.log
    cap=()
    [ -n "${MEMCAP:-}" ] && cap=("$MEMCAP" $((budget_bytes * 105 / 100 >> 20)))
    if ! "${cap[@]}" /usr/bin/time -v "$sparrow" run -m "$bundle" -p "$prompt" -n "$tokens" -c "$ctx" --temp 0 \
         --dram-budget "$pct%" --io "$io" --cache "$cache" --stats >/dev/null 2>"$log"; then
      echo "| $pct% | $io | failed: $(grep -m1 error "$log") |"
      failed=$((failed + 1))
      continue
    fi
    rss_kib=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$log")
    ratio=$(awk -v r="$rss_kib" -v b="$budget_bytes" 'BEGIN { printf "%.2f", r * 1024 / b }')
    awk -v x="$ratio" 'BEGIN { exit !(x > 1.05) }' && over=$((over + 1))
    gen=$(sed -n 's/.*generation: \([0-9.]*\) tok\/s.*/\1/p' "$log")
    echo "| $pct% ($((budget_bytes >> 20)) MiB) | $io | $gen | $((rss_kib >> 10)) | $ratio |" \
         "$(stat_field "$log" "bytes read" 3) | $(stat_field "$log" "cache hit rate" 2) |" \
         "$(stat_field "$log" "I/O wait" 3) | $(stat_field "$log" "memory mgmt" 3) | $(stat_field "$log" "compute" 3) |" \
         "$(stat_field "$log" "wall" 3) | $(stat_field "$log" "reads alone" 3) |" \
         "$(cached_pages_percent "$bundle")% |"
  done
done
echo
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "runs over budget + 5%: $over, failed runs: $failed"
[ "$over" -eq 0 ] && [ "$failed" -eq 0 ]
