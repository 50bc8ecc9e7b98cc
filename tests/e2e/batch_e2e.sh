#!/bin/bash
# sparrow batch end to end: each prompt's greedy text equals `sparrow run`'s
# whatever the block, on a GGUF and on a bundle under a DRAM budget; output
# in input order; bad input refused with the line; the README's GNU
# parallel recipe with two local workers gives the single run's results.
# Usage: batch_e2e.sh SPARROW_BIN SHARED_DIR
set -u
SPARROW=$1
SHARED=$2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
source "$(dirname "$0")/e2e_lib.sh"

STORIES=$SHARED/models/stories260K.gguf
PROMPTS=("Once upon a time" "The little dog" "Lily had a red ball and" "Tom and Sam went"
         "One day, a bird" "The sun was hot")
: >"$WORK/p.jsonl"
for i in "${!PROMPTS[@]}"; do
  printf '{"id": "p%d", "prompt": "%s", "n_predict": %d, "temperature": 0}\n' \
    "$i" "${PROMPTS[$i]}" $((8 + 3 * i)) >>"$WORK/p.jsonl"
done
printf '\n{"id": "zero", "prompt": "Nothing", "n_predict": 0}\n' >>"$WORK/p.jsonl"

# What `sparrow run` generates for each prompt (its stdout is the prompt,
# then the text, then a newline).
expected() {  # MODEL [run flags...]
  local model=$1; shift
  : >"$WORK/want.txt"
  for i in "${!PROMPTS[@]}"; do
    "$SPARROW" run -m "$model" -p "${PROMPTS[$i]}" -n $((8 + 3 * i)) --temp 0 "$@" \
      2>/dev/null | python3 -c 'import sys; p=sys.argv[1]; t=sys.stdin.read()[:-1]; print(t[len(p):] if t.startswith(p) else "MISMATCH:" + t)' "${PROMPTS[$i]}" >>"$WORK/want.txt"
  done
  echo "" >>"$WORK/want.txt"  # the n_predict 0 line
}
# The ids and texts of a batch output, one "id<TAB>text" per line.
texts() { python3 -c '
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(r["text"])' "$1"; }
ids() { python3 -c '
import json, sys
print(" ".join(json.loads(l)["id"] for l in open(sys.argv[1])))' "$1"; }
WANT_IDS="p0 p1 p2 p3 p4 p5 zero"

# Blocks below the GEMM threshold of the weight type (src/ops/matmul.cc: 24
# tokens for F32) run their passes through the batched GEMV kernels, whose
# results are bit for bit each token's alone: every text equals run's.
check_batch() {  # WHAT MODEL [batch flags...]
  local what=$1 model=$2; shift 2
  if ! "$SPARROW" batch -m "$model" -f "$WORK/p.jsonl" "$@" >"$WORK/got.jsonl" 2>"$WORK/got.err"; then
    fail "$what: exit $?: $(tail -n 1 "$WORK/got.err")"; return
  fi
  if [ "$(ids "$WORK/got.jsonl")" != "$WANT_IDS" ]; then
    fail "$what: ids out of order: $(ids "$WORK/got.jsonl")"; return
  fi
  local same
  same=$(python3 -c '
import json, sys
got = [json.loads(l)["text"] for l in open(sys.argv[1])]
want = open(sys.argv[2]).read().split("\n")[:len(got)]
print(sum(g == w for g, w in zip(got, want)))' "$WORK/got.jsonl" "$WORK/want.txt")
  if [ "$same" -eq 7 ]; then
    pass "$what: $same of 7 texts equal sparrow run's, in input order"
  else
    fail "$what: $same of 7 texts equal sparrow run's: $(texts "$WORK/got.jsonl" | diff - "$WORK/want.txt" | head -4)"
  fi
}

# 1. GGUF, resident.
expected "$STORIES"
check_batch "GGUF --block 1" "$STORIES" --block 1
check_batch "GGUF --block 3" "$STORIES" --block 3
check_batch "GGUF --block auto" "$STORIES" --stats
grep -q "^block auto: 7 sequences" "$WORK/got.err" \
  && pass "--block auto with no budget takes every prompt (7)" \
  || fail "--block auto line: $(grep block "$WORK/got.err")"
python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["stop"] for r in rows] == ["length"] * 7, rows
assert all(r["generated_tokens"] == 8 + 3 * i for i, r in enumerate(rows[:6])), rows
assert rows[6]["generated_tokens"] == 0 and rows[6]["text"] == ""
' "$WORK/got.jsonl" && pass "stop reasons and token counts" || fail "stop reasons and token counts"

# 1b. Penalties and biases from the command line reach each sequence's
# sampler, which counts its own prompt's tokens as run's does.
plain=$(cat "$WORK/want.txt")
PENALTIES=(--repeat-penalty 1.5 --presence-penalty 0.5 --frequency-penalty 0.2 --logit-bias 13-inf)
expected "$STORIES" "${PENALTIES[@]}"
if [ "$(cat "$WORK/want.txt")" = "$plain" ]; then
  fail "the penalties changed none of run's texts"
else
  check_batch "GGUF --block 3 with penalties and a logit bias" "$STORIES" --block 3 "${PENALTIES[@]}"
fi
# The same penalties given per line instead ("n_predict": 0's line too).
expected "$STORIES" --repeat-penalty 1.5 --presence-penalty 0.5 --frequency-penalty 0.2
cp "$WORK/p.jsonl" "$WORK/plain.jsonl"
sed -i 's/}$/, "repeat_penalty": 1.5, "presence_penalty": 0.5, "frequency_penalty": 0.2}/' "$WORK/p.jsonl"
check_batch "GGUF --block 3, penalties per line" "$STORIES" --block 3
mv "$WORK/plain.jsonl" "$WORK/p.jsonl"

# 2. A bundle under a DRAM budget: the block's union of units per pass.
"$SPARROW" convert -m "$STORIES" -o "$WORK/st.sparrow" 2>/dev/null || fail "convert"
expected "$WORK/st.sparrow" --dram-budget 40M
check_batch "bundle --block 3 --dram-budget 40M" "$WORK/st.sparrow" --block 3 --dram-budget 40M
check_batch "bundle --block auto --dram-budget 40M" "$WORK/st.sparrow" --dram-budget 40M --stats
grep -q "^block auto: " "$WORK/got.err" && grep -q "KV cache and activations" "$WORK/got.err" \
  && pass "bundle --stats: $(grep '^block auto' "$WORK/got.err")" \
  || fail "bundle --stats lacks the block or the budget: $(head -c 300 "$WORK/got.err")"

# Without -c, each sequence's KV cache is charged at the context the longest
# job can reach (prompt and n_predict), not the model's 2048 positions, so
# the same budget holds a larger automatic block.
block_of() {  # [batch flags...]: "SEQUENCES KV_MIB" of --block auto
  "$SPARROW" batch -m "$WORK/st.sparrow" -f "$WORK/p.jsonl" --dram-budget 30M --stats "$@" 2>&1 >/dev/null \
    | sed -n 's/^block auto: \([0-9]*\) sequences.*KV cache \([0-9.]*\) MiB per sequence.*/\1 \2/p'
}
short=$(block_of)
long=$(block_of -c 2048)
if [ -n "$short" ] && [ -n "$long" ] \
   && awk -v a="$short" -v b="$long" 'BEGIN { split(a, s, " "); split(b, l, " "); exit !(s[2] < l[2] && s[1] > l[1]) }'; then
  pass "--block auto under 30M: sequences and KV MiB each '$short' without -c, '$long' at -c 2048"
else
  fail "--block auto under 30M: '$short' without -c, '$long' at -c 2048 (sequences, KV MiB each)"
fi

# 3. -o: the file appears whole at the end, nothing left beside it.
"$SPARROW" batch -m "$STORIES" -f "$WORK/p.jsonl" -o "$WORK/out/r.jsonl" 2>/dev/null
[ $? -eq 2 ] && pass "-o into a missing directory -> exit 2" || fail "-o into a missing directory"
mkdir "$WORK/out"
if "$SPARROW" batch -m "$STORIES" -f "$WORK/p.jsonl" -o "$WORK/out/r.jsonl" >"$WORK/o.out" 2>/dev/null \
   && [ ! -s "$WORK/o.out" ] && [ "$(ids "$WORK/out/r.jsonl")" = "$WANT_IDS" ] \
   && [ "$(ls "$WORK/out")" = "r.jsonl" ]; then
  pass "-o writes every line to the file and nothing else"
else
  fail "-o: $(ls "$WORK/out")"
fi

# 3b. A run killed part way (SIGKILL: no handler runs) keeps the lines it
# finished in OUT.partial, and OUT does not appear; without --resume a new
# run refuses to overwrite them; with it, the rest is decoded and OUT
# equals an uninterrupted run's (ids and texts). A second writer is
# refused while the first runs.
: >"$WORK/long.jsonl"
for i in $(seq 1 60); do
  printf '{"id": %d, "prompt": "Once upon a time, %d", "n_predict": 300, "temperature": 0}\n' \
    "$i" "$i" >>"$WORK/long.jsonl"
done
"$SPARROW" batch -m "$STORIES" -f "$WORK/long.jsonl" --block 1 >"$WORK/long.full" 2>/dev/null
"$SPARROW" batch -m "$STORIES" -f "$WORK/long.jsonl" --block 1 -o "$WORK/out/k.jsonl" \
  2>/dev/null &
victim=$!
for _ in $(seq 1 400); do  # until three lines are on disk (at most 20 s)
  [ -f "$WORK/out/k.jsonl.partial" ] && [ "$(wc -l <"$WORK/out/k.jsonl.partial")" -ge 3 ] && break
  sleep 0.05
done
"$SPARROW" batch -m "$STORIES" -f "$WORK/long.jsonl" -o "$WORK/out/k.jsonl" --resume \
  2>"$WORK/second.err" >/dev/null
second=$?
kill -9 $victim 2>/dev/null
wait $victim 2>/dev/null
[ $second -eq 2 ] && grep -q "another process" "$WORK/second.err" \
  && pass "a second writer of the same -o is refused: $(tail -n 1 "$WORK/second.err")" \
  || fail "a second writer: exit $second: $(tail -n 1 "$WORK/second.err")"
kept=$(wc -l <"$WORK/out/k.jsonl.partial")
if [ ! -e "$WORK/out/k.jsonl" ] && [ "$kept" -ge 3 ] && [ "$kept" -lt 60 ]; then
  pass "killed part way: $kept of 60 results kept in OUT.partial, no OUT"
else
  fail "killed part way: $kept lines kept, OUT $( [ -e "$WORK/out/k.jsonl" ] && echo exists || echo absent)"
fi
expect_input_error "a new run over an interrupted one's results" \
  "$SPARROW" batch -m "$STORIES" -f "$WORK/long.jsonl" -o "$WORK/out/k.jsonl"
grep -q -- "--resume" "$WORK/bad.err" || fail "the refusal does not mention --resume"
if "$SPARROW" batch -m "$STORIES" -f "$WORK/long.jsonl" --block 4 -o "$WORK/out/k.jsonl" \
     --resume 2>"$WORK/resume.err" \
   && grep -q "done before this run" "$WORK/resume.err" \
   && [ ! -e "$WORK/out/k.jsonl.partial" ] \
   && python3 -c '
import json, sys
a = [(r["id"], r["text"]) for r in map(json.loads, open(sys.argv[1]))]
b = [(r["id"], r["text"]) for r in map(json.loads, open(sys.argv[2]))]
sys.exit(0 if a == b and len(a) == 60 else 1)' "$WORK/long.full" "$WORK/out/k.jsonl"; then
  pass "--resume: the 60 ids and texts of an uninterrupted run ($(tail -n 1 "$WORK/resume.err" | cut -d, -f1))"
else
  fail "--resume: $(tail -n 1 "$WORK/resume.err")"
fi
# A journal of another job, and --resume without -o.
head -n 2 "$WORK/long.full" >"$WORK/out/p.jsonl.partial"
expect_input_error "--resume over another job's results" \
  "$SPARROW" batch -m "$STORIES" -f "$WORK/p.jsonl" -o "$WORK/out/p.jsonl" --resume
expect_input_error "--resume without -o" "$SPARROW" batch -m "$STORIES" -f "$WORK/p.jsonl" --resume
rm -f "$WORK/out/p.jsonl.partial" "$WORK/out/k.jsonl"

# 4. Bad input: one line, exit 2, naming the line.
printf '{"prompt": "a"}\n{"prompt": 5}\n' >"$WORK/bad1.jsonl"
expect_input_error "a prompt that is not a string" "$SPARROW" batch -m "$STORIES" -f "$WORK/bad1.jsonl"
grep -q "bad1.jsonl:2:" "$WORK/bad.err" || fail "the error does not name line 2"
printf '{"prompt": "a", "n_pedict": 3}\n' >"$WORK/bad2.jsonl"
expect_input_error "an unknown field" "$SPARROW" batch -m "$STORIES" -f "$WORK/bad2.jsonl"
printf '{"prompt": "a"\n' >"$WORK/bad3.jsonl"
expect_input_error "a line that is not JSON" "$SPARROW" batch -m "$STORIES" -f "$WORK/bad3.jsonl"
expect_input_error "an unknown --prompt-gemm" "$SPARROW" batch -m "$STORIES" -f "$WORK/p.jsonl" --prompt-gemm bf8
printf '["a"]\n' >"$WORK/bad4.jsonl"
expect_input_error "a line that is not an object" "$SPARROW" batch -m "$STORIES" -f "$WORK/bad4.jsonl"
printf '\n\n' >"$WORK/empty.jsonl"
expect_input_error "a file with no prompts" "$SPARROW" batch -m "$STORIES" -f "$WORK/empty.jsonl"
expect_input_error "a missing prompts file" "$SPARROW" batch -m "$STORIES" -f "$WORK/none.jsonl"
expect_input_error "--block 0" "$SPARROW" batch -m "$STORIES" -f "$WORK/p.jsonl" --block 0
expect_input_error "a prompt longer than the context" "$SPARROW" batch -m "$STORIES" -f "$WORK/p.jsonl" -c 4
printf '{"prompt": "a", "n_predict": -2}\n' >"$WORK/bad5.jsonl"
expect_input_error "n_predict below -1" "$SPARROW" batch -m "$STORIES" -f "$WORK/bad5.jsonl"

# 5. The README's recipe: GNU parallel splits the JSONL into shards, each
# an independent sparrow batch reading its shard on stdin; --keep-order
# keeps the shards' outputs in input order. Here two local workers (":"
# is this machine in --sshlogin).
"$SPARROW" batch -m "$STORIES" -f "$WORK/p.jsonl" --block 3 >"$WORK/single.jsonl" 2>/dev/null
if parallel --pipe -N 2 --keep-order --sshlogin 2/: \
     "$SPARROW" batch -m "$STORIES" -f /dev/stdin --block 3 \
     <"$WORK/p.jsonl" >"$WORK/sharded.jsonl" 2>"$WORK/par.err"; then
  if [ "$(ids "$WORK/sharded.jsonl")" = "$WANT_IDS" ] \
     && diff -q <(texts "$WORK/sharded.jsonl") <(texts "$WORK/single.jsonl") >/dev/null; then
    pass "GNU parallel, 2 local workers, shards of 2 prompts: the single run's ids and texts"
  else
    fail "GNU parallel shards differ: $(ids "$WORK/sharded.jsonl")"
  fi
else
  fail "GNU parallel recipe failed: $(tail -n 2 "$WORK/par.err")"
fi

echo "batch-e2e: $failures failure(s)"
[ $failures -eq 0 ]
