# Shared by the end-to-end scripts (sourced after they set WORK): the
# PASS/FAIL lines, the failure count, the bad-input check, numeric
# comparisons and a bundle's minimum budget.
failures=0
pass() { echo "PASS: $1"; }
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }

# llama.cpp's reference perplexities are of the excerpt's first 100000
# bytes. The sanitizer stage of scripts/test.sh sets SPARROW_E2E_TEXT_BYTES
# lower: its runs are many times slower, and what it looks for (memory
# errors, undefined behaviour) does not depend on the length. On a shorter
# text a script checks its runs against its own first figure instead of
# llama.cpp's; the release stage checks llama.cpp's.
E2E_TEXT_BYTES=${SPARROW_E2E_TEXT_BYTES:-100000}
full_text() { [ "$E2E_TEXT_BYTES" -ge 100000 ]; }
# Chunks for a run whose check holds at any length: $1 on the full text,
# $2 (fewer) in the sanitizer stage, where each chunk costs several times more.
chunks_for_stage() { if full_text; then echo "$1"; else echo "$2"; fi; }
# Writes the text perplexities are measured on to $1.
e2e_text() { head -c "$E2E_TEXT_BYTES" "$SHARED/corpora/tinystories_val_excerpt.txt" >"$1"; }

# Runs a command that must fail as bad input: exit 2 and exactly one
# non-empty line on stderr (left in $WORK/bad.err for further checks).
expect_input_error() {
  local what=$1; shift
  "$@" >"$WORK/bad.out" 2>"$WORK/bad.err"
  local rc=$? lines
  lines=$(wc -l <"$WORK/bad.err")
  if [ $rc -eq 2 ] && [ "$lines" -eq 1 ] && [ -s "$WORK/bad.err" ]; then
    pass "$what -> exit 2: $(cat "$WORK/bad.err")"
  else
    fail "$what -> exit $rc with $lines stderr lines: $(head -c 300 "$WORK/bad.err")"
  fi
}

# |a - b| <= tol
within() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= t) }'; }
# |a - b| <= tol * |b|
within_rel() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; exit !(d <= t * m) }'; }
# The value of perplexity's last line, "PPL = <value> +/- <stderr>" (stdin).
ppl_of() { tail -n 1 | sed -n 's/^PPL = \([0-9.]*\) +\/- [0-9.]*$/\1/p'; }
# The least --dram-budget `run` takes for a bundle, in KiB, from the "too
# small" message of a run at 1M: min_budget_kib FILE [RUN OPTIONS]. The KV
# cache charged depends on the context, which without -c is sized to the
# prompt and -n (128 here unless the options say otherwise): pass the -c of
# runs that set one.
min_budget_kib() {
  local file="$1"
  shift
  "$SPARROW" run -m "$file" -p hi --dram-budget 1M "$@" 2>&1 \
    | sed -n 's/.*the minimum for this model is \([0-9.]*\) MiB.*/\1/p' | awk '{printf "%d", $1 * 1024}'
}
