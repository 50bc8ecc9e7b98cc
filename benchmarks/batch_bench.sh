#!/bin/bash
# Block decoding (sparrow batch): aggregate generated tok/s of the same
# prompts at each block size, the block sizes alternating within each
# round, and whether every prompt's greedy text is the same at every block
# size (it should be while the block stays below the weight type's GEMM
# threshold, src/ops/matmul.cc).
#
#   benchmarks/batch_bench.sh MODEL [batch flags...]
#
# Environment: SPARROW=build/sparrow  BLOCKS="1 16"  PROMPTS=32  N=32
# ROUNDS=2  THREADS=2  CTX=256  MEMCAP=../shared/tools/memcap.sh  MEMCAP_MIB=
# (with both, each run goes under that cgroup memory limit, as on a machine
# with only that much RAM; give --dram-budget among the flags).
# E.g. MEMCAP=../shared/tools/memcap.sh MEMCAP_MIB=586 \
#        benchmarks/batch_bench.sh model.sparrow --dram-budget 558M
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,15p' "$0" >&2; exit 2; }
model=$1; shift
sparrow=${SPARROW:-build/sparrow}
blocks=${BLOCKS:-1 16}
prompts=${PROMPTS:-32}
tokens=${N:-32}
rounds=${ROUNDS:-2}
threads=${THREADS:-2}
ctx=${CTX:-256}
[ -x "$sparrow" ] || { echo "batch_bench: $sparrow is not an executable" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for i in $(seq 1 "$prompts"); do
  printf '{"id": %d, "prompt": "Once upon a time, story number %d", "n_predict": %d, "temperature": 0}\n' \
    "$i" "$i" "$tokens"
done >"$work/prompts.jsonl"

extra=("$@")
run() {  # BLOCK OUT: the run's summary line
  local cmd=("$sparrow" batch -m "$model" -f "$work/prompts.jsonl" -o "$2" --block "$1"
             -c "$ctx" -t "$threads" "${extra[@]}")
  if [ -n "${MEMCAP:-}" ] && [ -n "${MEMCAP_MIB:-}" ]; then cmd=("$MEMCAP" "$MEMCAP_MIB" "${cmd[@]}"); fi
  "${cmd[@]}" 2>&1 >/dev/null | grep '^batch:'
}
tok_s() { sed -n 's/.*: \([0-9.]*\) tok\/s.*/\1/p'; }
same_texts() {  # A B: how many prompts got the same text in both outputs
  python3 -c '
import json, sys
a = [json.loads(l)["text"] for l in open(sys.argv[1])]
b = [json.loads(l)["text"] for l in open(sys.argv[2])]
print(sum(x == y for x, y in zip(a, b)), "of", len(a))' "$1" "$2"
}

echo "model: $model; $prompts prompts x $tokens tokens, greedy, -t $threads -c $ctx $*"
echo
echo "| round | block | tok/s | texts equal to block ${blocks%% *}'s |"
echo "|---:|---:|---:|---:|"
first=${blocks%% *}
for round in $(seq 1 "$rounds"); do
  for b in $blocks; do
    line=$(run "$b" "$work/out.$b.jsonl")
    echo "| $round | $b | $(echo "$line" | tok_s) | $(same_texts "$work/out.$first.jsonl" "$work/out.$b.jsonl") |"
  done
done
