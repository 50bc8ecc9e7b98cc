#!/bin/bash
# End-to-end checks of the sparrow CLI against ../shared's fixtures and
# llama.cpp's reference figures. Usage: run_e2e.sh SPARROW_BIN SHARED_DIR
set -u
SPARROW=$1
SHARED=$2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
source "$(dirname "$0")/e2e_lib.sh"


STORIES=$SHARED/models/stories260K.gguf
for f in "$STORIES" "$SHARED/models/llama-2-tiny-random.gguf" "$SHARED/reference/stories260K_greedy_200.txt" \
         "$SHARED/corpora/tinystories_val_excerpt.txt"; do
  [ -f "$f" ] || { echo "FAIL: fixture $f is missing"; exit 1; }
done

# 1. Greedy generation equals llama.cpp's, byte for byte (trailing whitespace aside).
"$SPARROW" run -m "$STORIES" -p "Once upon a time" -n 200 --temp 0 >"$WORK/greedy.txt" 2>"$WORK/greedy.err"
rc=$?
# Trailing white space (per line and at the end) is not significant.
got=$(sed 's/[[:space:]]*$//' "$WORK/greedy.txt")
want=$(sed 's/[[:space:]]*$//' "$SHARED/reference/stories260K_greedy_200.txt")
if [ $rc -eq 0 ] && [ "$got" = "$want" ]; then
  pass "greedy stories260K output equals the llama.cpp reference"
else
  fail "greedy stories260K output differs from the reference (rc=$rc)"
  diff <(echo "$got") <(echo "$want") | head -20
fi
if tail -n 1 "$WORK/greedy.err" | grep -Eq '^prompt: [0-9.]+ tok/s, generation: [0-9.]+ tok/s, peak rss: [0-9.]+ MiB$'; then
  pass "run prints the throughput line on stderr"
else
  fail "run's stderr summary line is malformed: $(tail -n 1 "$WORK/greedy.err")"
fi

# 2. Perplexity equals llama.cpp's figure.
#    (On a shorter text, see e2e_lib.sh, the later runs are checked against
#    this one's figure.)
e2e_text "$WORK/ppl.txt"
"$SPARROW" perplexity -m "$STORIES" -f "$WORK/ppl.txt" -c 256 >"$WORK/ppl.out" 2>"$WORK/ppl.err"
ppl=$(ppl_of <"$WORK/ppl.out")
want_ppl=3.9392
full_text || want_ppl=$ppl
if [ -n "$ppl" ] && within "$ppl" "$want_ppl" 0.0005; then
  full_text && pass "perplexity $ppl equals llama.cpp's 3.9392 +/- 0.0005" \
    || pass "perplexity $ppl on the first $E2E_TEXT_BYTES bytes (llama.cpp's figure is for 100000)"
else
  fail "perplexity '$(tail -n 1 "$WORK/ppl.out")' is not $want_ppl +/- 0.0005"; tail -3 "$WORK/ppl.err"
fi

# 2b. KV cache types (default f16, as above): f32 gives the same figure,
#     Q8_0 (llama.cpp's -ctk/-ctv spelling) and Q4_0 values stay within
#     0.5%. (Q4_0 keys cost far more on stories260K's 8-value heads: 8.72.)
kv_ppl() { "$SPARROW" perplexity -m "$STORIES" -f "$WORK/ppl.txt" -c 256 "$@" 2>/dev/null | ppl_of; }
ppl_f32=$(kv_ppl --cache-type-k f32 --cache-type-v f32)
ppl_q8=$(kv_ppl -ctk q8_0 -ctv q8_0)
ppl_q4v=$(kv_ppl -ctk q8_0 -ctv q4_0)
if [ -n "$ppl_f32" ] && within "$ppl_f32" "$want_ppl" 0.0005 && [ -n "$ppl_q8" ] && within_rel "$ppl_q8" "$ppl" 0.005 &&
   [ -n "$ppl_q4v" ] && within_rel "$ppl_q4v" "$ppl" 0.005 && [ "$ppl_q4v" != "$ppl_q8" ]; then
  pass "KV cache: f32 $ppl_f32, f16 $ppl, q8_0 $ppl_q8, q8_0 keys and q4_0 values $ppl_q4v"
else
  fail "KV cache: f32 '$ppl_f32', f16 '$ppl', q8_0 '$ppl_q8', q8_0/q4_0 '$ppl_q4v'"
fi
expect_input_error "unknown KV cache type" "$SPARROW" run -m "$STORIES" -p hi -ctk q4_1
# --prompt-gemm bf16 runs where oneDNN has a bf16 kernel for this CPU (info
# names it) and is refused with one line elsewhere.
if "$SPARROW" info -m "$STORIES" | grep -Eq '^  prompt batches: oneDNN (bf16|f32 \(bf16 with)'; then
  if "$SPARROW" run -m "$STORIES" -p "Once upon a time" -n 4 --prompt-gemm bf16 >/dev/null 2>"$WORK/bf16.err"; then
    pass "--prompt-gemm bf16 runs where info names a bf16 kernel"
  else
    fail "--prompt-gemm bf16: $(tail -n 1 "$WORK/bf16.err")"
  fi
else
  expect_input_error "--prompt-gemm bf16 without a bf16 kernel" "$SPARROW" run -m "$STORIES" -p hi --prompt-gemm bf16
fi

# 3. The F16, 32000-token format fixture runs.
if "$SPARROW" run -m "$SHARED/models/llama-2-tiny-random.gguf" -p "Hello world" -n 16 --temp 0 >"$WORK/tiny.out" 2>"$WORK/tiny.err"; then
  pass "llama-2-tiny-random.gguf (F16, 32000 vocab) runs"
else
  fail "llama-2-tiny-random.gguf failed: $(tail -n 1 "$WORK/tiny.err")"
fi

# 4. Every weight type round-trips through synth, and the fast kernels agree
#    with the scalar reference within 1e-3 relative in perplexity.
head -c 20000 "$SHARED/corpora/tinystories_val_excerpt.txt" >"$WORK/synth_text.txt"
synth_chunks=$(chunks_for_stage 4 2)
for type in f32 f16 bf16 q8_0 q4_0 q4_K q6_K; do
  model=$WORK/synth-$type.gguf
  if ! "$SPARROW" synth -o "$model" --dim 256 --ffn 512 --layers 2 --heads 4 --kv-heads 2 --vocab 1000 \
       --type "$type" --seed 5 2>"$WORK/synth.err"; then
    fail "synth --type $type: $(tail -n 1 "$WORK/synth.err")"; continue
  fi
  if ! "$SPARROW" info -m "$model" | grep -Eq "^  $type +[0-9]+ tensors"; then
    fail "info does not list $type tensors in the synth model"
  fi
  fast=$("$SPARROW" perplexity -m "$model" -f "$WORK/synth_text.txt" -c 128 --chunks "$synth_chunks" --kernels fast 2>/dev/null | tail -n 1 | awk '{print $3}')
  ref=$("$SPARROW" perplexity -m "$model" -f "$WORK/synth_text.txt" -c 128 --chunks "$synth_chunks" --kernels reference 2>/dev/null | tail -n 1 | awk '{print $3}')
  if [ -n "$fast" ] && [ -n "$ref" ] && within_rel "$fast" "$ref" 0.001; then
    pass "synth $type: perplexity fast $fast vs reference $ref within 1e-3"
  else
    fail "synth $type: perplexity fast '$fast' vs reference '$ref' not within 1e-3"
  fi
done

# 5. Bad input: exit status 2 and exactly one line on stderr.
head -c 5000 "$STORIES" >"$WORK/truncated.gguf"
printf 'not a model at all' >"$WORK/garbage.gguf"
expect_input_error "missing model file" "$SPARROW" run -m "$WORK/nope.gguf" -p hi
expect_input_error "truncated GGUF" "$SPARROW" run -m "$WORK/truncated.gguf" -p hi
expect_input_error "not a GGUF" "$SPARROW" info -m "$WORK/garbage.gguf"
expect_input_error "unknown flag" "$SPARROW" run -m "$STORIES" --no-such-flag
expect_input_error "unknown command" "$SPARROW" frobnicate
expect_input_error "missing -m" "$SPARROW" run -p hi
# Progress: quiet off a terminal, a line per 10% with --progress.
"$SPARROW" synth -o "$WORK/progress.gguf" --dim 64 --ffn 128 --layers 2 --heads 2 --vocab 400 --type q8_0 \
  2>"$WORK/quiet.err"
"$SPARROW" convert -m "$WORK/progress.gguf" -o "$WORK/progress.sparrow" --progress 2>"$WORK/progress.err"
if ! grep -q '%' "$WORK/quiet.err" && grep -Eq '^convert .* 100\.0% .* MB/s$' "$WORK/progress.err" \
   && [ "$(grep -c '%' "$WORK/progress.err")" -le 11 ]; then
  pass "progress: quiet off a terminal, a line per 10% with --progress"
else
  fail "progress: $(head -n 2 "$WORK/quiet.err" "$WORK/progress.err" | tr '\n' ' ')"
fi
expect_input_error "bad synth type" "$SPARROW" synth -o "$WORK/x.gguf" --dim 64 --ffn 64 --layers 1 --heads 2 --vocab 400 --type q5_K
expect_input_error "synth shape not a block multiple" "$SPARROW" synth -o "$WORK/x.gguf" --dim 100 --ffn 64 --layers 1 --heads 2 --vocab 400 --type q8_0
expect_input_error "missing perplexity text" "$SPARROW" perplexity -m "$STORIES" -f "$WORK/none.txt"
expect_input_error "temperature not a number" "$SPARROW" run -m "$STORIES" -p hi --temp 0.x
expect_input_error "bad thread list" "$SPARROW" bench -m "$STORIES" -t 1,x
expect_input_error "a logit bias that is not ID+BIAS" "$SPARROW" run -m "$STORIES" -p hi --logit-bias 13x
expect_input_error "a logit bias outside the vocabulary" "$SPARROW" run -m "$STORIES" -p hi --logit-bias 512+1
expect_input_error "a repeat penalty of 0" "$SPARROW" chat -m "$STORIES" --repeat-penalty 0
[ ! -e "$WORK/x.gguf" ] && pass "failed synth left no output file" || fail "failed synth left $WORK/x.gguf"
if "$SPARROW" synth -o "$model" --dim 256 --ffn 512 --layers 1 --heads 4 --vocab 1000 --type f32 2>/dev/null; then
  fail "synth overwrote an existing file without --force"
else
  pass "synth refuses to overwrite without --force"
fi

# 6. Seeded sampling is repeatable.
a=$("$SPARROW" run -m "$STORIES" -p "Once" -n 40 --temp 0.9 --seed 42 2>/dev/null)
b=$("$SPARROW" run -m "$STORIES" -p "Once" -n 40 --temp 0.9 --seed 42 2>/dev/null)
c=$("$SPARROW" run -m "$STORIES" -p "Once" -n 40 --temp 0.9 --seed 43 2>/dev/null)
[ "$a" = "$b" ] && pass "same seed, same text" || fail "same seed gave different text"
[ "$a" != "$c" ] && pass "different seeds, different text" || fail "different seeds gave the same text"

# 7. bench prints a row per thread count and test, in both formats.
rows=$("$SPARROW" bench -m "$STORIES" -p 16 -n 16 -t 1,2 -r 2 2>/dev/null | grep -Ec '\| +(pp|tg)16 \| +[0-9.]+ ± [0-9.]+ \|$')
[ "$rows" = 4 ] && pass "bench md: 4 rows" || fail "bench md printed $rows result rows, expected 4"
json=$("$SPARROW" bench -m "$STORIES" -p 16 -n 0 -t 1 -r 2 -o json 2>/dev/null)
echo "$json" | grep -q '"test": "pp16"' && echo "$json" | grep -q '"avg_ts": [0-9]' \
  && pass "bench json" || fail "bench json malformed: $json"
# At a depth (llama-bench's -d): the tests start after 40 tokens in the cache.
json=$("$SPARROW" bench -m "$STORIES" -p 8 -n 8 -d 40 -t 1 -r 1 -o json 2>/dev/null)
[ "$(echo "$json" | grep -Ec '"test": "(pp|tg)8 @ d40".*"n_depth": 40')" = 2 ] \
  && pass "bench -d 40: pp8 @ d40 and tg8 @ d40" || fail "bench -d: $json"
expect_input_error "-d must be non-negative" "$SPARROW" bench -m "$STORIES" -d -3

# 8. Bundles: both layouts with F32 records reproduce the dense greedy text
#    exactly and its perplexity to the printed digits, give or take one in
#    the last (a bundle adds the down projection's terms row by row, the
#    GEMV sums each output's dot product in its own order: with SSE4's four
#    lanes 3.8214 against 3.8213 over this test's text); Q8_0 records stay
#    within 0.5% in perplexity; tight budgets still work.
for layout in neuron dip; do
  b=$WORK/stories-$layout.sparrow
  if ! "$SPARROW" convert -m "$STORIES" -o "$b" --type f32 --layout $layout 2>"$WORK/conv.err"; then
    fail "convert --layout $layout: $(tail -n 1 "$WORK/conv.err")"; continue
  fi
  got=$("$SPARROW" run -m "$b" -p "Once upon a time" -n 200 --temp 0 2>/dev/null | sed 's/[[:space:]]*$//')
  [ "$got" = "$want" ] && pass "$layout bundle (f32): greedy output equals the dense run" \
    || fail "$layout bundle (f32): greedy output differs"
  bppl=$("$SPARROW" perplexity -m "$b" -f "$WORK/ppl.txt" -c 256 2>/dev/null | tail -n 1 | awk '{print $3}')
  if [ -n "$bppl" ] && within "$bppl" "$ppl" 0.00011; then
    pass "$layout bundle (f32): perplexity $bppl equals dense $ppl to the last digit"
  else
    fail "$layout bundle (f32): perplexity '$bppl' differs from dense '$ppl'"
  fi
done
"$SPARROW" convert -m "$STORIES" -o "$WORK/stories-q8.sparrow" --type q8_0 2>/dev/null
q8=$("$SPARROW" perplexity -m "$WORK/stories-q8.sparrow" -f "$WORK/ppl.txt" -c 256 2>/dev/null | tail -n 1 | awk '{print $3}')
if [ -n "$q8" ] && within_rel "$q8" "$ppl" 0.005; then
  pass "q8_0 bundle: perplexity $q8 within 0.5% of dense $ppl"
else
  fail "q8_0 bundle: perplexity '$q8' not within 0.5% of dense $ppl"
fi
# Q4_0 records in GGUF's block layout and as Q4_0S (scales apart, its own
# kernels): the same stored values, so the same perplexity give or take the
# kernels' rounding, and each within 1e-3 of the scalar reference (on the
# first 8 chunks: the reference kernels are slow).
bundle_ppl() { "$SPARROW" perplexity -m "$1" -f "$WORK/ppl.txt" -c 256 --chunks 8 "${@:2}" 2>/dev/null | tail -n 1 | awk '{print $3}'; }
"$SPARROW" convert -m "$STORIES" -o "$WORK/stories-q4_0.sparrow" --type q4_0 2>/dev/null
"$SPARROW" convert -m "$STORIES" -o "$WORK/stories-q4_0s.sparrow" --type q4_0s 2>/dev/null
p_q4_0=$(bundle_ppl "$WORK/stories-q4_0.sparrow")
p_q4_0s=$(bundle_ppl "$WORK/stories-q4_0s.sparrow")
p_ref=$(bundle_ppl "$WORK/stories-q4_0s.sparrow" --kernels reference)
if [ -n "$p_q4_0" ] && [ -n "$p_q4_0s" ] && [ -n "$p_ref" ] && within_rel "$p_q4_0s" "$p_q4_0" 0.001 \
    && within_rel "$p_q4_0s" "$p_ref" 0.001; then
  pass "q4_0s bundle: perplexity $p_q4_0s, q4_0 $p_q4_0, reference $p_ref (within 1e-3)"
else
  fail "q4_0s bundle: perplexity '$p_q4_0s', q4_0 '$p_q4_0', reference '$p_ref' not within 1e-3"
fi
# The dip layout sums each input record's two parts (up, gate) as one row;
# a Q4_0S part keeps its scales in front of it, so the parts must be read
# apart (read as one row they gave NaN): a number, within 1e-3 of the
# scalar reference under the dense policy; pruned at density 0.5 within
# 1e-2 (the kernels' last bits can change which units the top-K picks).
"$SPARROW" convert -m "$STORIES" -o "$WORK/stories-dip-q4_0s.sparrow" --type q4_0s --layout dip 2>/dev/null
for policy in dense:1:0.001 dip:0.5:0.01; do
  IFS=: read -r name density tolerance <<<"$policy"
  p_fast=$(bundle_ppl "$WORK/stories-dip-q4_0s.sparrow" --sparsity "$name" --mlp-density "$density")
  p_slow=$(bundle_ppl "$WORK/stories-dip-q4_0s.sparrow" --sparsity "$name" --mlp-density "$density" \
    --kernels reference)
  case "$p_fast" in [0-9]*) ;; *) p_fast="" ;; esac
  if [ -n "$p_fast" ] && [ -n "$p_slow" ] && within_rel "$p_fast" "$p_slow" "$tolerance"; then
    pass "q4_0s dip bundle, $name $density: perplexity $p_fast, reference $p_slow (within $tolerance)"
  else
    fail "q4_0s dip bundle, $name $density: perplexity '$p_fast', reference '$p_slow' not within $tolerance"
  fi
done
# Two threads split the down rows' columns (64 at a time, 512 per thread at
# least), so rows of 1024 give each its half: the text of one thread, for
# Q4_0S records (whose second half is not a pointer into the row) and Q8_0.
"$SPARROW" synth -o "$WORK/wide.gguf" --dim 1024 --ffn 256 --layers 2 --heads 8 --vocab 1000 \
  --type q4_0 --seed 3 2>/dev/null
for type in q4_0s q8_0; do
  "$SPARROW" convert -m "$WORK/wide.gguf" -o "$WORK/wide-$type.sparrow" --type $type 2>/dev/null
  one=$("$SPARROW" run -m "$WORK/wide-$type.sparrow" -p "Once upon a time" -n 16 --temp 0 -t 1 2>/dev/null)
  two=$("$SPARROW" run -m "$WORK/wide-$type.sparrow" -p "Once upon a time" -n 16 --temp 0 -t 2 2>/dev/null)
  if [ -n "$one" ] && [ "$one" = "$two" ]; then
    pass "$type bundle with 1024-element rows: the same text at one and two threads"
  else
    fail "$type bundle with 1024-element rows: '$one' at one thread, '$two' at two"
  fi
done
# A budget that holds only part of the feed-forward: still the same text.
# A synthetic model with 3 MiB of feed-forward records keeps the margin well
# above the run-to-run noise of the process's own footprint. The minimum
# comes from the error a too-small budget gives; 1.5 MiB more holds about
# half of the records. Every token needs every unit (dense), so the caches
# keep the units they took first and the rest are computed where they were
# read: nothing is evicted, and units are computed outside the caches.
"$SPARROW" synth -o "$WORK/budget.gguf" --dim 128 --ffn 512 --layers 4 --heads 4 --vocab 1000 \
  --type f32 --seed 9 2>/dev/null
"$SPARROW" convert -m "$WORK/budget.gguf" -o "$WORK/budget.sparrow" --type f32 2>/dev/null
bwant=$("$SPARROW" run -m "$WORK/budget.gguf" -p "Once upon a time" -n 200 --temp 0 2>/dev/null | sed 's/[[:space:]]*$//')
min_kib=$(min_budget_kib "$WORK/budget.sparrow")
budget="$((min_kib + 1536))K"
for mode in pread direct mmap; do
  # Each loader's own minimum: the reads in flight by default, and so the
  # footprint charged for them, depend on the mode.
  budget="$(($(min_budget_kib "$WORK/budget.sparrow" --io $mode) + 1536))K"
  got=$("$SPARROW" run -m "$WORK/budget.sparrow" -p "Once upon a time" -n 200 --temp 0 \
        --dram-budget "$budget" --cache lru --io $mode --stats 2>"$WORK/budget.err" | sed 's/[[:space:]]*$//')
  if [ -n "$bwant" ] && [ "$got" = "$bwant" ] && grep -Eq "units evicted +0 " "$WORK/budget.err" \
     && grep -Eq "units not cached +[1-9]" "$WORK/budget.err" \
     && grep -Eq "prefetch accuracy +100.0%" "$WORK/budget.err"; then
    pass "synthetic bundle under a $budget budget with --io $mode: same greedy text, units computed outside the caches, next layers prefetched"
  else
    fail "synthetic bundle under a $budget budget with --io $mode: $(grep -E 'units evicted|units not cached|prefetch accuracy|error' "$WORK/budget.err" | tr '\n' ' ')"
  fi
done
budget="$((min_kib + 1536))K"
# Deterministic budgets: the same command gets the same caches, loads the
# same units and writes the same text every time, whatever the allocator and
# the page cache do (the footprint charged is computed, not measured).
"$SPARROW" convert -m "$WORK/budget.gguf" -o "$WORK/budget-dip.sparrow" --type f32 --layout dip 2>/dev/null
runs=""
for i in 1 2 3 4 5 6 7 8; do
  out=$(MALLOC_PERTURB_=$((i * 31)) "$SPARROW" run -m "$WORK/budget-dip.sparrow" -p "Once upon a time" -n 24 \
        --temp 0 --dram-budget "$budget" --cache lfu --sparsity dip-ca --mlp-density 0.5 --stats 2>&1)
  runs+="$(printf '%s\n' "$out" | grep -E '^unit caches|^ +units loaded|^Once' | md5sum)"$'\n'
done
if [ "$(printf '%s' "$runs" | sort -u | wc -l)" = 1 ] && printf '%s\n' "$out" | grep -q '^dram budget .*unit caches'; then
  pass "eight runs under $budget: identical cache sizes, units loaded and text"
else
  fail "eight runs under $budget: $(printf '%s' "$runs" | sort -u | wc -l) different outcomes"
fi
# With room for every unit (no budget), the sliding window drops nothing:
# a pruned run whose selection moves from token to token reads each record
# once instead of again whenever it was unused for four tokens.
out=$("$SPARROW" run -m "$WORK/budget-dip.sparrow" -p "Once upon a time" -n 24 --temp 0 --cache window \
      --sparsity dip --mlp-density 0.5 --stats 2>&1)
if printf '%s\n' "$out" | grep -q '^unit caches: .* 100.0% of the FFN' \
   && printf '%s\n' "$out" | grep -Eq "^ +units evicted +0 "; then
  pass "room for every unit: the window evicts nothing under dip 0.5"
else
  fail "room for every unit under dip 0.5: $(printf '%s\n' "$out" | grep -E '^unit caches|units evicted' | tr '\n' ' ')"
fi
# Without -c, a run reserves the context its prompt and -n can reach, not
# the model's: the same budget leaves more to the unit caches than at -c 2048.
caches_mib() {
  "$SPARROW" run -m "$WORK/budget.sparrow" -p "Once upon a time" -n 8 --temp 0 --dram-budget "$1" \
    --stats "${@:2}" 2>&1 >/dev/null | sed -n 's/^unit caches: \([0-9.]*\) MiB.*/\1/p'
}
long_budget="$(($(min_budget_kib "$WORK/budget.sparrow" -c 2048) + 1536))K"
short=$(caches_mib "$long_budget")
long=$(caches_mib "$long_budget" -c 2048)
if [ -n "$short" ] && [ -n "$long" ] && awk -v a="$short" -v b="$long" 'BEGIN { exit !(a > b) }'; then
  pass "under $long_budget, -n 8 without -c: $short MiB of unit caches, against $long MiB at -c 2048"
else
  fail "under $long_budget: unit caches '$short' MiB without -c, not above '$long' MiB at -c 2048"
fi
# Reads that bypass the page cache leave nothing of the bundle in it but
# the header (read-ahead past the magic, the header or the resident section
# used to leave megabytes of records behind, outside the budget). On tmpfs
# the page cache is the file itself, so there is nothing to check.
if [ "$(stat -f -c %T "$WORK")" = tmpfs ] || ! command -v fincore >/dev/null; then
  echo "SKIP: page cache after --io direct/uring (tmpfs or no fincore)"
else
  resident_at=$("$SPARROW" info -m "$WORK/budget.sparrow" | awk '/^  resident section/ {print $4}')
  for mode in direct uring; do
    python3 -c 'import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' \
      "$WORK/budget.sparrow"
    if ! "$SPARROW" run -m "$WORK/budget.sparrow" -p "Once upon a time" -n 8 --dram-budget "$budget" \
         --io $mode >/dev/null 2>"$WORK/cache.err"; then
      echo "SKIP: page cache after --io $mode: $(head -n 1 "$WORK/cache.err")"
      continue
    fi
    cached=$(fincore -n -b -o RES "$WORK/budget.sparrow" | tr -d ' ')
    if [ -n "$resident_at" ] && [ -n "$cached" ] && [ "$cached" -le "$resident_at" ]; then
      pass "--io $mode leaves $cached bytes of the bundle in the page cache (header: $resident_at)"
    else
      fail "--io $mode leaves '$cached' bytes of the bundle in the page cache, more than its header ($resident_at)"
    fi
  done
fi
expect_input_error "budget too small" "$SPARROW" run -m "$WORK/stories-neuron.sparrow" -p hi --dram-budget 2M
cp "$WORK/stories-neuron.sparrow" "$WORK/flipped.sparrow"
# Flip a byte inside record 3 of layer 0 (offset of its section from `info`).
first=$("$SPARROW" info -m "$WORK/flipped.sparrow" | sed -n 's/.*sparrow.groups.offset .*{\([0-9]*\),.*/\1/p')
record=$("$SPARROW" info -m "$WORK/flipped.sparrow" | sed -n 's/.*sparrow.groups.record_bytes .*{\([0-9]*\),.*/\1/p')
printf '\xff' | dd of="$WORK/flipped.sparrow" bs=1 seek=$((first + 3 * record + 5)) conv=notrunc 2>/dev/null
size=$(stat -c %s "$WORK/flipped.sparrow")
expect_input_error "corrupted FFN record" "$SPARROW" run -m "$WORK/flipped.sparrow" -p "Once upon a time" -n 4 --temp 0
head -c $((size / 2)) "$WORK/stories-neuron.sparrow" >"$WORK/truncated.sparrow"
expect_input_error "truncated bundle" "$SPARROW" run -m "$WORK/truncated.sparrow" -p hi
expect_input_error "a GGUF of q4_0s (a bundle record type)" "$SPARROW" convert -m "$STORIES" -o "$WORK/q4s.gguf" --type q4_0s
expect_input_error "synth --type q4_0s" "$SPARROW" synth -o "$WORK/q4s.gguf" --dim 64 --ffn 128 --layers 1 --heads 2 --vocab 100 --type q4_0s
expect_input_error "convert over an existing file" "$SPARROW" convert -m "$STORIES" -o "$WORK/stories-neuron.sparrow"

# 9. Chat: the reply to a ChatML-formatted message is what `run` generates
#    after the same text; /reset starts over; bundles chat like their GGUF.
chat_prompt=$'<|im_start|>user\nOnce upon a time<|im_end|>\n<|im_start|>assistant\n'
"$SPARROW" run -m "$STORIES" -p "$chat_prompt" -n 24 --temp 0 >"$WORK/chat-run.out" 2>/dev/null
printf 'Once upon a time\n' | "$SPARROW" chat -m "$STORIES" -n 24 --temp 0 >"$WORK/chat1.out" 2>"$WORK/chat1.err"
rc=$?
if [ $rc -eq 0 ] && [ "$chat_prompt$(cat "$WORK/chat1.out")" = "$(cat "$WORK/chat-run.out")" ] \
    && grep -q "using chatml" "$WORK/chat1.err"; then
  pass "chat: the greedy reply equals run's continuation of the ChatML prompt"
else
  fail "chat: reply '$(head -c 200 "$WORK/chat1.out")' vs run '$(head -c 300 "$WORK/chat-run.out")' (rc=$rc)"
fi
printf 'Once upon a time\n/reset\nOnce upon a time\n/exit\nnever read\n' |
  "$SPARROW" chat -m "$STORIES" -n 24 --temp 0 >"$WORK/chat2.out" 2>"$WORK/chat2.err"
if [ "$(cat "$WORK/chat2.out")" = "$(cat "$WORK/chat1.out" "$WORK/chat1.out")" ] \
    && grep -q '^2 turn(s); prompt: ' "$WORK/chat2.err"; then
  pass "chat: /reset starts the conversation over, /exit quits"
else
  fail "chat: /reset or /exit: $(head -c 300 "$WORK/chat2.out") / $(tail -n 1 "$WORK/chat2.err")"
fi
printf 'Hello\nOnce upon a time\n' | "$SPARROW" chat -m "$STORIES" -n 16 --temp 0 >"$WORK/chat-gguf.out" 2>/dev/null
printf 'Hello\nOnce upon a time\n' | "$SPARROW" chat -m "$WORK/stories-neuron.sparrow" -n 16 --temp 0 \
  >"$WORK/chat-bundle.out" 2>/dev/null
if [ -s "$WORK/chat-gguf.out" ] && cmp -s "$WORK/chat-gguf.out" "$WORK/chat-bundle.out"; then
  pass "chat: a bundle gives the same two-turn conversation as its GGUF"
else
  fail "chat: bundle and GGUF conversations differ"
fi
expect_input_error "unknown chat template" "$SPARROW" chat -m "$STORIES" --chat-template vicuna
grep -q "chatml, llama2" "$WORK/bad.err" || fail "the unknown-template error does not list the names"
# A message too long for the context is refused; the chat goes on.
printf '%s\nOnce upon a time\n' "$(head -c 3000 "$WORK/ppl.txt" | tr '\n' ' ')" |
  "$SPARROW" chat -m "$STORIES" -c 128 -n 8 --temp 0 >"$WORK/chat3.out" 2>"$WORK/chat3.err"
if [ $? -eq 0 ] && grep -q "^error: the message needs" "$WORK/chat3.err" && grep -q '^1 turn(s)' "$WORK/chat3.err"; then
  pass "chat: a message longer than the context is refused and the chat goes on"
else
  fail "chat: long message: $(cat "$WORK/chat3.err" | head -c 300)"
fi

echo "e2e: $failures failure(s)"
[ $failures -eq 0 ]
