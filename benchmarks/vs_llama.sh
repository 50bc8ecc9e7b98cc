#!/bin/bash
# Sparrow against llama.cpp on the same GGUF files: `sparrow bench` and
# `llama-bench` (built from source outside this repo) run one after the
# other for each model, thread count and round, so both see the same
# machine conditions; prints a markdown table of tok/s and their ratio.
#
#   benchmarks/vs_llama.sh LLAMA_BENCH MODEL.gguf [MODEL.gguf...]
#
# Environment: SPARROW=build/sparrow  TEST=pp64 (ppN: prompt of N tokens,
# tgN: N generated tokens)  THREADS="1 2"  ROUNDS=2  REPS=3.
# E.g. TEST=tg64 benchmarks/vs_llama.sh ~/llama.cpp/build/bin/llama-bench m.gguf
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,12p' "$0" >&2; exit 2; }
llama=$1; shift
sparrow=${SPARROW:-build/sparrow}
test=${TEST:-pp64}
threads=${THREADS:-1 2}
rounds=${ROUNDS:-2}
reps=${REPS:-3}
[ -x "$llama" ] || { echo "vs_llama: $llama is not an executable" >&2; exit 2; }
[ -x "$sparrow" ] || { echo "vs_llama: $sparrow is not an executable" >&2; exit 2; }
case $test in
  pp[0-9]*) n=${test#pp}; p_flag=$n; n_flag=0 ;;
  tg[0-9]*) n=${test#tg}; p_flag=0; n_flag=$n ;;
  *) echo "vs_llama: TEST must be ppN or tgN, not '$test'" >&2; exit 2 ;;
esac

# The mean tok/s of the $test row of a markdown table on stdin (both tools
# print "| ... | test | t/s ± sd |"; the figure is the last column's first number).
rate_of() { grep -E "\| *$test *\|" | head -n 1 | awk -F'|' '{print $(NF-1)}' | awk '{print $1}'; }

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| model | threads | round | sparrow t/s | llama.cpp t/s | ratio |"
echo "|---|---:|---:|---:|---:|---:|"
for model in "$@"; do
  for t in $threads; do
    for round in $(seq 1 "$rounds"); do
      s=$("$sparrow" bench -m "$model" -p "$p_flag" -n "$n_flag" -r "$reps" -t "$t" 2>/dev/null | rate_of)
      l=$("$llama" -m "$model" -p "$p_flag" -n "$n_flag" -r "$reps" -t "$t" 2>/dev/null | rate_of)
      ratio=$(awk -v a="${s:-0}" -v b="${l:-0}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
      echo "| $(basename "$model") | $t | $round | ${s:--} | ${l:--} | $ratio |"
    done
  done
done
echo
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
