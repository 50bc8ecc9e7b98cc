#!/bin/bash
# End-to-end checks of the sparsity policies (--sparsity, --mlp-density,
# --gamma) on bundles of stories260K and of a small synthetic model.
# Usage: sparsity_e2e.sh SPARROW_BIN SHARED_DIR
set -u
SPARROW=$1
SHARED=$2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
source "$(dirname "$0")/e2e_lib.sh"

STORIES=$SHARED/models/stories260K.gguf
# The issue's text is the excerpt's first 100000 bytes (shorter in the
# sanitizer stage: e2e_lib.sh). Every check here compares runs on it.
e2e_text "$WORK/ppl.txt"
dense=$("$SPARROW" perplexity -m "$STORIES" -f "$WORK/ppl.txt" -c 256 2>/dev/null | ppl_of)
[ -n "$dense" ] || { echo "FAIL: dense perplexity did not run"; exit 1; }
for layout in dip split neuron; do
  "$SPARROW" convert -m "$STORIES" -o "$WORK/s-$layout.sparrow" --type f32 --layout $layout 2>/dev/null \
    || fail "convert --layout $layout"
done
bundle_for() { case $1 in up|gate) echo "$WORK/s-split.sparrow" ;; *) echo "$WORK/s-dip.sparrow" ;; esac; }

# 1. At density 1.0 every policy is the dense model, exactly.
for policy in dense dip dip-ca glu up gate; do
  got=$("$SPARROW" perplexity -m "$(bundle_for $policy)" -f "$WORK/ppl.txt" -c 256 \
        --sparsity $policy --mlp-density 1.0 2>/dev/null | ppl_of)
  [ "$got" = "$dense" ] && pass "$policy at density 1.0: perplexity $got equals dense" \
    || fail "$policy at density 1.0: perplexity '$got' differs from dense $dense"
done
got=$("$SPARROW" perplexity -m "$WORK/s-split.sparrow" -f "$WORK/ppl.txt" -c 256 2>/dev/null | ppl_of)
[ "$got" = "$dense" ] && pass "split layout, dense: $got" || fail "split layout, dense: '$got' != $dense"

# 2. Per-token masks: perplexity in batches of 64 equals token by token.
#    Computing a batch with the union of its tokens' units gives a different
#    figure. The sums run in a different order (cached rows in slot order,
#    then the misses as they arrive), so the two agree to rounding: with
#    reference kernels and an f32 KV cache, to every printed digit. (With the
#    default f16 cache a last-bit difference can round a K/V value the other
#    way, and a model pruned to half moves by ~0.03% from it.)
batch_chunks=$(chunks_for_stage 6 3)
for policy in dip glu up gate; do
  density=0.5; [ $policy = glu ] && density=0.8
  one=$("$SPARROW" perplexity -m "$(bundle_for $policy)" -f "$WORK/ppl.txt" -c 256 --chunks "$batch_chunks" -b 1 \
        --kernels reference -ctk f32 -ctv f32 --sparsity $policy --mlp-density $density 2>/dev/null | ppl_of)
  many=$("$SPARROW" perplexity -m "$(bundle_for $policy)" -f "$WORK/ppl.txt" -c 256 --chunks "$batch_chunks" -b 64 \
         --kernels reference -ctk f32 -ctv f32 --sparsity $policy --mlp-density $density 2>/dev/null | ppl_of)
  if [ -n "$one" ] && [ "$one" = "$many" ] && [ "$one" != "$dense" ]; then
    pass "$policy at $density: batches of 64 and single tokens both give $one"
  else
    fail "$policy at $density: -b 1 gives '$one', -b 64 gives '$many'"
  fi
done

# 3. Pruning costs accuracy, less of it at higher density.
dense8=$("$SPARROW" perplexity -m "$WORK/s-dip.sparrow" -f "$WORK/ppl.txt" -c 256 --chunks 8 2>/dev/null | ppl_of)
lo=$("$SPARROW" perplexity -m "$WORK/s-dip.sparrow" -f "$WORK/ppl.txt" -c 256 --chunks 8 --sparsity dip \
     --mlp-density 0.5 2>/dev/null | ppl_of)
hi=$("$SPARROW" perplexity -m "$WORK/s-dip.sparrow" -f "$WORK/ppl.txt" -c 256 --chunks 8 --sparsity dip \
     --mlp-density 0.9 2>/dev/null | ppl_of)
if [ -n "$lo" ] && [ -n "$hi" ] && awk -v l="$lo" -v h="$hi" -v d="$dense8" 'BEGIN { exit !(l > h && h > d) }'; then
  pass "dip: perplexity $lo at density 0.5 > $hi at 0.9 > dense $dense8 (8 chunks)"
else
  fail "dip: perplexity '$lo' at 0.5, '$hi' at 0.9, dense '$dense8' (8 chunks)"
fi

# 4. Cache-aware masking: under a budget whose caches hold about a quarter
#    of the FFN, dip-ca hits the cache more often than dip at the same density.
"$SPARROW" synth -o "$WORK/syn.gguf" --dim 128 --ffn 512 --layers 4 --heads 4 --vocab 1000 \
  --type f32 --seed 5 2>/dev/null
"$SPARROW" convert -m "$WORK/syn.gguf" -o "$WORK/syn.sparrow" --type f32 --layout dip 2>/dev/null
min_kib=$(min_budget_kib "$WORK/syn.sparrow")
budget="$((min_kib + 400))K"
hit_rate() {  # decode-token hit rate (last column of the summary row)
  "$SPARROW" run -m "$WORK/syn.sparrow" -p "Once upon a time" -n 48 --temp 0 --dram-budget "$budget" \
    --cache lfu --sparsity "$1" --mlp-density 0.5 --stats 2>&1 >/dev/null \
    | sed -n 's/.*cache hit rate.* \([0-9.]*\)%$/\1/p'
}
dip_hits=$(hit_rate dip)
ca_hits=$(hit_rate dip-ca)
if [ -n "$dip_hits" ] && [ -n "$ca_hits" ] && awk -v a="$ca_hits" -v b="$dip_hits" 'BEGIN { exit !(a > b) }'; then
  pass "budget $budget: dip-ca hit rate $ca_hits% > dip $dip_hits%"
else
  fail "budget $budget: dip-ca hit rate '$ca_hits' not above dip '$dip_hits'"
fi

# 5. --read-gap: reading the gaps between scattered missing records makes
#    fewer, larger reads and changes nothing else (the gap bytes are dropped).
#    With --io pread, where a read call is one read (uring counts ring entries).
gap_run() {
  "$SPARROW" run -m "$WORK/syn.sparrow" -p "Once upon a time" -n 24 --temp 0 --dram-budget "$budget" \
    --cache lfu --sparsity dip --mlp-density 0.5 --read-gap "$1" --io pread --stats 2>"$WORK/gap-$1.err"
}
text0=$(gap_run 0)
text64=$(gap_run 64K)
calls() { sed -n 's/^  read calls *\([0-9]*\) .*/\1/p' "$WORK/gap-$1.err"; }
if [ -n "$text0" ] && [ "$text0" = "$text64" ] && [ -n "$(calls 0)" ] && [ -n "$(calls 64K)" ] \
   && [ "$(calls 64K)" -lt "$(calls 0)" ]; then
  pass "--read-gap 64K: same text, $(calls 64K) read calls instead of $(calls 0)"
else
  fail "--read-gap 64K: text or read calls ($(calls 64K) vs $(calls 0)) not as expected"
fi
expect_input_error "--read-gap nonsense" "$SPARROW" run -m "$WORK/syn.sparrow" -p hi --read-gap lots

# 5. The trace: valid JSON with per-group entries that add up.
"$SPARROW" run -m "$WORK/s-dip.sparrow" -p "Once upon a time" -n 8 --temp 0 --sparsity dip-ca \
  --mlp-density 0.5 --stats-json "$WORK/trace.json" >/dev/null 2>&1
if python3 - "$WORK/trace.json" <<'EOF'
import json, sys
t = json.load(open(sys.argv[1]))
assert t["format"] == "sparrow-trace" and t["version"] == 1
assert t["model"]["policy"] == "dip-ca" and t["model"]["layout"] == "dip"
n = len(t["groups"])
assert n == 2 * t["model"]["n_layers"]
for r in t["tokens"]:
    assert len(r["groups"]) == n
    assert sum(g[0] for g in r["groups"]) == r["units_needed"]
    assert sum(g[3] for g in r["groups"]) == r["bytes_read"]
    assert r["wall_seconds"] >= r["select_seconds"] >= 0
decode = [r for r in t["tokens"] if r["tokens"] == 1]
assert decode and decode[-1]["overlap_units"] > 0
EOF
then pass "--stats-json trace: per-group entries add up"; else fail "--stats-json trace malformed"; fi

# 6. Bad combinations are one-line errors.
expect_input_error "dip on a neuron bundle" "$SPARROW" run -m "$WORK/s-neuron.sparrow" -p hi --sparsity dip --mlp-density 0.5
expect_input_error "up on a dip bundle" "$SPARROW" run -m "$WORK/s-dip.sparrow" -p hi --sparsity up --mlp-density 0.5
expect_input_error "glu below 2/3" "$SPARROW" run -m "$WORK/s-dip.sparrow" -p hi --sparsity glu --mlp-density 0.5
expect_input_error "gate below 1/3" "$SPARROW" run -m "$WORK/s-split.sparrow" -p hi --sparsity gate --mlp-density 0.2
expect_input_error "pruning a GGUF" "$SPARROW" run -m "$STORIES" -p hi --sparsity dip --mlp-density 0.5
expect_input_error "density 0" "$SPARROW" run -m "$WORK/s-dip.sparrow" -p hi --sparsity dip --mlp-density 0
expect_input_error "density 1.5" "$SPARROW" run -m "$WORK/s-dip.sparrow" -p hi --sparsity dip --mlp-density 1.5
expect_input_error "density without a policy" "$SPARROW" run -m "$WORK/s-dip.sparrow" -p hi --mlp-density 0.5
# The policies it offers are the pruning ones, not dense (which was given).
if grep -q "(dip, dip-ca, glu, up, gate)" "$WORK/bad.err"; then
  pass "the density error offers the pruning policies"
else
  fail "the density error offers: $(cat "$WORK/bad.err")"
fi
expect_input_error "gamma 2" "$SPARROW" run -m "$WORK/s-dip.sparrow" -p hi --sparsity dip-ca --gamma 2
expect_input_error "unknown policy" "$SPARROW" perplexity -m "$WORK/s-dip.sparrow" -f "$WORK/ppl.txt" --sparsity topk

# 7. Calibration: `calibrate` stores the best split of a density between input
#    and down columns in the bundle (a trailer after its own bytes); `info`
#    shows it; runs use it unless --input-fraction is given; a damaged one is
#    refused; a directory it cannot write leaves the bundle as it was.
bundle_bytes=$(stat -c %s "$WORK/s-dip.sparrow")
cp "$WORK/s-dip.sparrow" "$WORK/cal.sparrow"
cal_args=(-f "$WORK/ppl.txt" -c 64 --chunks 2)
if "$SPARROW" calibrate -m "$WORK/cal.sparrow" "${cal_args[@]}" --mlp-density 0.5 \
     >"$WORK/cal.md" 2>"$WORK/cal.err" && grep -q '^| 0.5 | 0.5 |' "$WORK/cal.md" \
     && [ "$(grep -c '^calibrate \[' "$WORK/cal.err")" -ge 8 ] \
     && cmp -s -n "$bundle_bytes" "$WORK/cal.sparrow" "$WORK/s-dip.sparrow"; then
  pass "calibrate: $(grep '^| 0.5' "$WORK/cal.md"), the bundle's own bytes unchanged"
else
  fail "calibrate: $(tail -n 2 "$WORK/cal.err") $(cat "$WORK/cal.md")"
fi
f_in=$("$SPARROW" info -m "$WORK/cal.sparrow" 2>/dev/null \
       | sed -n 's/^  density 0.5: input \([0-9.]*\) \/ down [0-9.]* (calibrated).*/\1/p')
[ -n "$f_in" ] && pass "info: density 0.5 calibrated to input $f_in" \
  || fail "info shows no calibration for density 0.5"
"$SPARROW" info -m "$WORK/s-dip.sparrow" 2>/dev/null | grep -q '^calibration: none$' \
  && pass "info: an uncalibrated bundle says 'calibration: none'" || fail "info: no 'calibration: none'"
stats=$("$SPARROW" perplexity -m "$WORK/cal.sparrow" "${cal_args[@]}" --sparsity dip --mlp-density 0.5 \
        --stats 2>&1 >/dev/null | grep 'sparsity dip at density 0.5')
if [ -n "$f_in" ] && echo "$stats" | grep -q "input $f_in / down [0-9.]* (calibrated)"; then
  pass "--stats: the calibrated split (${stats##*; })"
else
  fail "--stats does not report the calibrated split: '$stats'"
fi
cal_ppl=$("$SPARROW" perplexity -m "$WORK/cal.sparrow" "${cal_args[@]}" --sparsity dip --mlp-density 0.5 \
          2>/dev/null | ppl_of)
explicit_ppl=$("$SPARROW" perplexity -m "$WORK/cal.sparrow" "${cal_args[@]}" --sparsity dip \
               --mlp-density 0.5 --input-fraction "$f_in" 2>/dev/null | ppl_of)
default_ppl=$("$SPARROW" perplexity -m "$WORK/s-dip.sparrow" "${cal_args[@]}" --sparsity dip \
              --mlp-density 0.5 2>/dev/null | ppl_of)
if [ -n "$cal_ppl" ] && [ "$cal_ppl" = "$explicit_ppl" ] && grep -q "| $cal_ppl | [+-]" "$WORK/cal.md" \
   && grep -q "^| 0.5 | 0.5 | $default_ppl |" "$WORK/cal.md"; then
  pass "perplexity $cal_ppl with the calibrated default = with --input-fraction $f_in = calibrate's table (default split $default_ppl)"
else
  fail "calibrated '$cal_ppl', explicit '$explicit_ppl', default '$default_ppl', table: $(grep '^| 0.5' "$WORK/cal.md")"
fi
cp "$WORK/cal.sparrow" "$WORK/cal-bad.sparrow"
python3 -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(int(sys.argv[2])); b = f.read(1); f.seek(int(sys.argv[2])); f.write(bytes([b[0] ^ 1]))' \
  "$WORK/cal-bad.sparrow" $((bundle_bytes + 40))
expect_input_error "perplexity with a damaged calibration" "$SPARROW" perplexity -m "$WORK/cal-bad.sparrow" \
  "${cal_args[@]}" --sparsity dip --mlp-density 0.5
expect_input_error "info with a damaged calibration" "$SPARROW" info -m "$WORK/cal-bad.sparrow"
expect_input_error "calibrate on a split bundle" "$SPARROW" calibrate -m "$WORK/s-split.sparrow" \
  "${cal_args[@]}" --mlp-density 0.5
expect_input_error "calibrate at density 1" "$SPARROW" calibrate -m "$WORK/cal.sparrow" "${cal_args[@]}" --mlp-density 1
# Refused before its first progress line, so the error is a line of its own.
expect_input_error "calibrate on a text shorter than one chunk" "$SPARROW" calibrate \
  -m "$WORK/cal.sparrow" -f /dev/null -c 64 --mlp-density 0.5
grep -q '^error: ' "$WORK/bad.err" || fail "calibrate's short-text error is not a line of its own: $(cat "$WORK/bad.err")"
expect_input_error "an infeasible --input-fraction" "$SPARROW" run -m "$WORK/cal.sparrow" -p hi \
  --sparsity dip --mlp-density 0.3 --input-fraction 0.9
expect_input_error "--input-fraction without dip" "$SPARROW" run -m "$WORK/cal.sparrow" -p hi \
  --sparsity glu --mlp-density 0.8 --input-fraction 0.9

# A read-only directory (root ignores permissions: then as nobody, when
# setpriv can switch to it and nobody can reach the files).
mkdir "$WORK/ro"
cp "$WORK/s-dip.sparrow" "$WORK/ro/b.sparrow"
chmod 666 "$WORK/ro/b.sparrow"
chmod 555 "$WORK/ro"
as_user=()
if [ "$(id -u)" = 0 ]; then
  chmod 755 "$WORK"
  as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
  "${as_user[@]}" "$SPARROW" info -m "$WORK/ro/b.sparrow" >/dev/null 2>&1 || as_user=(skip)
fi
if [ "${as_user[0]:-}" = skip ]; then
  echo "SKIP: calibrate in a read-only directory (running as root without a way to drop privileges)"
else
  expect_input_error "calibrate in a read-only directory" "${as_user[@]}" "$SPARROW" calibrate \
    -m "$WORK/ro/b.sparrow" "${cal_args[@]}" --mlp-density 0.5
  if cmp -s "$WORK/ro/b.sparrow" "$WORK/s-dip.sparrow" && [ "$(ls "$WORK/ro")" = b.sparrow ]; then
    pass "read-only directory: the bundle is byte-identical, no temporary file"
  else
    fail "read-only directory: the bundle changed or a file was left: $(ls "$WORK/ro")"
  fi
fi
chmod 755 "$WORK/ro"

# 8. Placement: `place` writes a copy whose records are ordered by
#    co-activation, with fewer runs of adjacent records per token; it
#    computes what the original computes (dense, to rounding); info shows it;
#    bad requests are refused with one line and write nothing.
place_args=(-m "$WORK/s-dip.sparrow" -f "$WORK/ppl.txt" -c 64 --chunks 4 --sparsity dip --mlp-density 0.5)
if "$SPARROW" place "${place_args[@]}" -o "$WORK/placed.sparrow" >"$WORK/place.md" 2>"$WORK/place.err" \
   && awk -F'|' '/^\| dip-/ { if ($5 + 0 >= $4 + 0) bad = 1; n++ } END { exit bad || n != 2 }' "$WORK/place.md"; then
  pass "place: $(grep '^| dip-' "$WORK/place.md" | tr -s ' ' | tr '\n' ' ')"
else
  fail "place: $(tail -n 2 "$WORK/place.err") $(cat "$WORK/place.md")"
fi
"$SPARROW" info -m "$WORK/placed.sparrow" 2>/dev/null | grep -q '^placement: co-activation of dip at density 0.5 over 256 tokens' \
  && pass "info: $("$SPARROW" info -m "$WORK/placed.sparrow" 2>/dev/null | grep '^placement:')" \
  || fail "info shows no placement"
dense_orig=$("$SPARROW" perplexity -m "$WORK/s-dip.sparrow" -f "$WORK/ppl.txt" -c 64 --chunks 4 2>/dev/null | ppl_of)
dense_placed=$("$SPARROW" perplexity -m "$WORK/placed.sparrow" -f "$WORK/ppl.txt" -c 64 --chunks 4 2>/dev/null | ppl_of)
[ -n "$dense_orig" ] && within_rel "$dense_placed" "$dense_orig" 1e-4 \
  && pass "placed bundle, dense perplexity $dense_placed (unplaced $dense_orig)" \
  || fail "placed bundle, dense perplexity '$dense_placed' against '$dense_orig'"
entries_before=$(ls -A "$WORK" | wc -l)
expect_input_error "place with dense" "$SPARROW" place -m "$WORK/s-dip.sparrow" -f "$WORK/ppl.txt" -o "$WORK/p2.sparrow" --sparsity dense
expect_input_error "place without a density" "$SPARROW" place -m "$WORK/s-dip.sparrow" -f "$WORK/ppl.txt" -o "$WORK/p2.sparrow" --sparsity dip
expect_input_error "place a GGUF" "$SPARROW" place -m "$SHARED/models/stories260K.gguf" -f "$WORK/ppl.txt" -o "$WORK/p2.sparrow" --sparsity dip --mlp-density 0.5
expect_input_error "place over an existing file" "$SPARROW" place "${place_args[@]}" -o "$WORK/placed.sparrow"
expect_input_error "place over its input" "$SPARROW" place "${place_args[@]}" -o "$WORK/s-dip.sparrow" --force
[ "$(ls -A "$WORK" | wc -l)" -eq "$entries_before" ] \
  && pass "refused placements left no files" || fail "a refused placement left a file: $(ls -A "$WORK")"

echo "sparsity e2e: $failures failure(s)"
[ $failures -eq 0 ]
