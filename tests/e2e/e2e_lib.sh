# Shared by the end-to-end scripts (sourced after they set WORK): the
# PASS/FAIL lines, the failure count, the bad-input check, numeric
# comparisons and a bundle's minimum budget.
failures=0
pass() { echo "PASS: $1"; }
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }

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
# small" message of a run at 1M.
min_budget_kib() {
  "$SPARROW" run -m "$1" -p hi --dram-budget 1M 2>&1 \
    | sed -n 's/.*the minimum for this model is \([0-9.]*\) MiB.*/\1/p' | awk '{printf "%d", $1 * 1024}'
}
