#!/bin/bash
# Cross-builds Sparrow for 64-bit Arm Linux (aarch64) on a Debian bookworm
# x86-64 machine and runs it under qemu-user on emulated CPUs with and
# without SVE, so that every Highway target the compiler builds for Arm is
# executed, at several SVE vector lengths:
#   - the SIMD unit tests (each kernel on every target the CPU offers, via
#     ForEachTarget) and the format, tokenizer and engine unit tests;
#   - greedy stories260K generation with each target forced in turn
#     (SPARROW_SIMD_TARGET), compared byte for byte with the x86 reference.
# Installs what is missing (root; one apt-get update), builds into
# build-arm64 (release, oneDNN off: see below), exits non-zero on any failure.
#
# Environment: ARM64_BUILD_DIR (default build-arm64), SPARROW_SHARED_DIR
# (default ../shared), ARM64_JOBS (ninja -j; default: all cores),
# ARM64_HOST_SPARROW (a native sparrow: it measures the reference
# perplexities of the packed-model check instead of qemu, ~1 s each against
# 19-38 s; scripts/test.sh passes its release build).
#
# Why oneDNN is off: Debian's libdnnl-dev:arm64 cannot be installed beside
# libdnnl-dev:amd64 (both ship /usr/include/oneapi/dnnl/dnnl_config.h with
# different contents although marked Multi-Arch: same), and phones (Termux)
# have no oneDNN either. Without it prompt batches run through the same
# Highway GEMV kernels as decoding, so every kernel is exercised per target.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
start=$SECONDS
stage() { printf '\n=== arm64: %s (%d s elapsed)\n' "$1" $((SECONDS - start)); }

build=${ARM64_BUILD_DIR:-build-arm64}
shared=${SPARROW_SHARED_DIR:-$repo/../shared}
shared=$(cd "$shared" && pwd)
jobs=${ARM64_JOBS:-$(nproc)}
host_sparrow=${ARM64_HOST_SPARROW:-}
if [ -n "$host_sparrow" ] && [ ! -x "$host_sparrow" ]; then
  echo "arm64_check: ARM64_HOST_SPARROW=$host_sparrow is not an executable" >&2
  exit 1
fi
model=$shared/models/stories260K.gguf
reference=$shared/reference/stories260K_greedy_200.txt
for f in "$model" "$reference"; do
  [ -f "$f" ] || { echo "arm64_check: fixture $f is missing" >&2; exit 1; }
done

# --- 1. Packages ------------------------------------------------------------
stage "packages"
# :arm64 libraries are Multi-Arch: same, so they install beside the amd64
# ones; apt upgrades an amd64 package when its arm64 twin must match a newer
# version. Header-only packages (cxxopts, doctest) are architecture: all.
packages=(g++-aarch64-linux-gnu qemu-user pkg-config cmake meson ninja-build
          libhwy-dev:arm64 libgomp1:arm64 liburing-dev:arm64 libcpp-httplib-dev:arm64
          libcxxopts-dev doctest-dev)
installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}
missing=()
for p in "${packages[@]}"; do installed "$p" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "arm64_check: missing packages (run as root to install): ${missing[*]}" >&2
    exit 1
  fi
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    dpkg --add-architecture arm64
  fi
  echo "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
qemu-aarch64 --version | head -n 1

# --- 2. Cross build ---------------------------------------------------------
stage "cross build ($build)"
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" --cross-file scripts/cross/aarch64-linux-gnu.ini \
    --buildtype=release -Donednn=disabled -Dtests=enabled
fi
unit_tests=(formats_tests tokenizer_tests engine_tests bundle_tests)
meson compile -C "$build" -j "$jobs" sparrow simd_tests "${unit_tests[@]}"
# Where Meson put an executable target.
exe() {
  meson introspect "$build" --targets | python3 -c '
import json, sys
for t in json.load(sys.stdin):
    if t["name"] == sys.argv[1] and t["type"] == "executable":
        print(t["filename"][0])
        break
else:
    sys.exit("no executable target " + sys.argv[1])
' "$1"
}
sparrow=$(exe sparrow)
simd_tests=$(exe simd_tests)
aarch64-linux-gnu-readelf -h "$sparrow" | grep -E 'Class|Machine' || true

# --- 3. Emulated CPUs -------------------------------------------------------
# name | qemu -cpu | Highway targets that must be available there, best first
#      | targets simd_tests runs there ("all", or a list; "-": none)
#      | the 8-bit dot product the packed kernels use there ("plain": none,
#        the 16-bit kernels run instead), as `sparrow info` prints it.
# SVE code must not depend on the vector length, so SVE and SVE2 run at 128,
# 256, 512 and 2048 bits; SVE_256 and SVE2_128 are Highway's fixed-length
# variants, offered only where the length matches. a64fx has SVE without
# SVE2. qemu emulates SVE loads and stores of more than 128 bits slowly
# (about 5x per element), so beyond 128 bits the unit tests run one SVE
# flavour per length; the greedy runs still cover every target at every one.
# neon80 is Armv8.0 (Cortex-A72: Raspberry Pi 4), without the dot-product
# extension that neoverse-n1 (Armv8.2) has: NEON runs the emulated 8-bit
# form there in the unit tests, and `sdot` on neoverse-n1. qemu's "max" adds
# i8mm (smmla), which a64fx lacks. The unit tests also run every form with
# the run-time extensions hidden.
cpus=(
  "neon80|cortex-a72|NEON|all|plain"
  "neon|neoverse-n1|NEON|all|sdot (NEON dotprod)"
  "sve128|max,sve-default-vector-length=16|SVE2_128 SVE2 SVE NEON|all|sdot (SVE), smmla (i8mm) for pairs of Q4_0 tokens"
  "sve256|max,sve-default-vector-length=32|SVE_256 SVE2 SVE NEON|SVE_256|sdot (SVE), smmla (i8mm) for pairs of Q4_0 tokens"
  "sve512|max,sve-default-vector-length=64|SVE2 SVE NEON|SVE|sdot (SVE), smmla (i8mm) for pairs of Q4_0 tokens"
  "sve2048|max,sve-default-vector-length=256|SVE2 SVE NEON|SVE2|sdot (SVE), smmla (i8mm) for pairs of Q4_0 tokens"
  "a64fx|a64fx|SVE NEON|-|sdot (SVE)"
)

# The CPU for everything that does not test a vector length or an
# extension (the format, tokenizer, engine and bundle unit tests, the
# programs they spawn, the packed models' reference perplexities): "max"
# at 128-bit SVE. Plain "max" has 512-bit SVE, which qemu emulates several
# times slower: engine_tests took 359 s of CPU there and 72 s at 128 bits
# (2 vCPU Xeon). The vector lengths are covered by the SIMD unit tests and
# the greedy runs below, on each CPU.
plain_cpu="max,sve-default-vector-length=16"

passed=0
failed=0
failures=()
ok() { passed=$((passed + 1)); echo "PASS: $1"; }
bad() { failed=$((failed + 1)); failures+=("$1"); echo "FAIL: $1"; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# emulate LIMIT QEMU_ARGS...: qemu-aarch64 QEMU_ARGS, given LIMIT seconds.
# Why not plain `timeout`: once (CI at stop 64) bundle_tests, 20 s here, sat
# for its whole 900 s limit, and hundreds of runs since, alone and side by
# side, never did it again; whether the guest or qemu-user hung is not
# known. So a run past its limit has its threads' states written down
# (running or asleep, CPU time, the system call each is in) for the report
# at the end, and runs once more; its output is the run that finished. A
# second overrun fails as a first one did before. The limits are ten or more
# times each kind of run's longest on a 2 vCPU Xeon.
emulate() {
  local limit=$1 try pid waited rc=0 out err
  shift
  out=$(mktemp -p "$work") err=$(mktemp -p "$work")
  for try in 1 2; do
    rc=0
    qemu-aarch64 "$@" >"$out" 2>"$err" &
    pid=$!
    waited=0
    while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt "$limit" ]; do
      sleep 1
      waited=$((waited + 1))
    done
    if kill -0 "$pid" 2>/dev/null; then
      describe_overrun "$pid" "try $try of qemu-aarch64 $* (SPARROW_SIMD_TARGET=${SPARROW_SIMD_TARGET:-}) still ran after $limit s" >>"$work/overruns.log"
    fi
    if ! kill -0 "$pid" 2>/dev/null; then  # done, perhaps while described
      wait "$pid" || rc=$?
      break
    fi
    kill -TERM "$pid" 2>/dev/null || true
    sleep 5
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" || true
    rc=124
    { echo "what it printed last:"; tail -n 8 "$out" | grep -v "^=*$"; tail -n 3 "$err"; } | sed "s/^/  /" >>"$work/overruns.log"
  done
  cat "$out"
  cat "$err" >&2
  rm -f "$out" "$err"
  return $rc
}
# describe_overrun PID HEADLINE: each thread of PID, and its CPU time over
# two seconds (a spinning thread gains ~200 ticks, a blocked one none).
describe_overrun() {
  local pid=$1 t
  declare -A before=()
  echo "$2; its threads (tid state cpu-ticks-in-2s wchan syscall):"
  for t in /proc/"$pid"/task/*; do
    before[$t]=$(awk '{sub(/.*\) /, ""); print $12 + $13}' "$t/stat" 2>/dev/null)
  done
  sleep 2
  for t in /proc/"$pid"/task/*; do
    awk -v was="${before[$t]:-0}" -v tid="${t##*/}" \
      '{sub(/.*\) /, ""); printf "  %s %s %d ", tid, $1, $12 + $13 - was}' "$t/stat" 2>/dev/null
    printf '%s %s\n' "$(cat "$t/wchan" 2>/dev/null)" "$(cut -d' ' -f1-3 "$t/syscall" 2>/dev/null)"
  done
}
# Tests that spawn `sparrow` exec a script, which runs it under qemu too
# (no binfmt_misc needed).
cat >"$work/sparrow" <<EOF
#!/bin/sh
exec qemu-aarch64 -cpu $plain_cpu "$sparrow" "\$@"
EOF
chmod +x "$work/sparrow"
export SPARROW_SHARED_DIR=$shared SPARROW_BIN=$work/sparrow

# Runs simd_tests on one emulated CPU, limited to `targets` ("all": every
# one there); checks that it passes, that it ran exactly those targets, and
# that every per-target test case ran on all of them (the listener in
# simd/targets_test.cc prints both).
run_simd_tests() {
  local name=$1 cpu=$2 expected=$3 targets=$4
  local log=$work/simd-$name.log
  local only=""
  if [ "$targets" != all ]; then
    only=${targets// /,}
    expected=$targets
  fi
  local rc=0
  SPARROW_SIMD_TARGET=$only emulate 900 -cpu "$cpu" "$simd_tests" >"$log" 2>&1 || rc=$?
  grep -E '^\[targets\] available:|^\[doctest\] (test cases|assertions)' "$log" |
    sed "s/^/  [$name] /" || true
  if [ $rc -ne 0 ]; then
    grep -E 'ERROR|FAIL|values:|  [A-Za-z_.]+ := ' "$log" | head -n 40 || true
    tail -n 5 "$log"
    bad "simd_tests on $name ($cpu): exit $rc"
    return
  fi
  local summary
  summary=$(grep '^\[targets\] available:' "$log" | tail -n 1 || true)
  local got
  got=$(sed -n 's/^\[targets\] available: \(.*\) (cpu: .*/\1/p' <<<"$summary")
  if [ "$got" != "$expected" ]; then
    bad "simd_tests on $name: targets '$got', expected '$expected'"
    return
  fi
  local all total
  all=$(sed -n 's/.*; \([0-9]*\) of \([0-9]*\) per-target.*/\1/p' <<<"$summary")
  total=$(sed -n 's/.*; \([0-9]*\) of \([0-9]*\) per-target.*/\2/p' <<<"$summary")
  if [ -z "$total" ] || [ "$total" -eq 0 ] || [ "$all" != "$total" ]; then
    bad "simd_tests on $name: only $all of $total per-target test cases ran on every target"
    grep '^\[targets\]' "$log" | grep -v "^\[targets\] $expected :" | head -n 20 || true
    return
  fi
  ok "simd_tests on $name: $total per-target test cases x {$got}"
}

# Greedy generation with dispatch forced to `target` (empty: Highway's own
# choice); the text must equal the x86 reference, trailing white space aside.
run_greedy() {
  local name=$1 cpu=$2 target=$3
  local label="greedy stories260K on $name, target ${target:-default}"
  local out=$work/greedy-$name-${target:-default}
  local rc=0
  SPARROW_SIMD_TARGET=$target emulate 300 -cpu "$cpu" "$sparrow" run \
    -m "$model" -p "Once upon a time" -n 200 --temp 0 >"$out.txt" 2>"$out.err" || rc=$?
  if [ $rc -ne 0 ]; then
    bad "$label: exit $rc: $(tail -n 3 "$out.err")"
    return
  fi
  if diff <(sed 's/[[:space:]]*$//' "$out.txt") <(sed 's/[[:space:]]*$//' "$reference") >"$out.diff"; then
    ok "$label ($(tail -n 1 "$out.err"))"
  else
    bad "$label: output differs from the x86 reference"
    head -n 20 "$out.diff" || true
  fi
}

stage "sparrow info on each CPU"
for entry in "${cpus[@]}"; do
  IFS='|' read -r name cpu expected _ form <<<"$entry"
  info=$(emulate 120 -cpu "$cpu" "$sparrow" info -m "$model" 2>&1) || {
    bad "sparrow info on $name: $(tail -n 1 <<<"$info")"; continue; }
  grep -E 'cpu features|simd targets|Q4_0/Q4_K/Q8_0 kernels' <<<"$info" | sed "s/^ */  [$name] /" || true
  best=${expected%% *}
  if grep -q "simd targets: $expected (in use: $best)" <<<"$info"; then
    ok "sparrow info on $name reports targets {$expected}, using $best"
  else
    bad "sparrow info on $name: expected 'simd targets: $expected (in use: $best)'"
  fi
  if [ "$form" = plain ]; then
    want="  Q4_0/Q4_K/Q8_0 kernels: plain rows, 16-bit activations"
  else
    want="  Q4_0/Q4_K/Q8_0 kernels: packed rows, 8-bit activations, $form"
  fi
  if grep -qxF "$want" <<<"$info"; then
    ok "sparrow info on $name: Q4_0/Q4_K/Q8_0 kernels use ${form}"
  else
    bad "sparrow info on $name: expected '$want' in its Q4_0/Q4_K/Q8_0 kernels line"
  fi
done

# Cortex-A72 without the crypto extension (Raspberry Pi 4): Highway 1.0.3
# wants AES for NEON; simd/targets.cc makes NEON available anyway. A guest
# LD_PRELOAD hides HWCAP_AES from getauxval.
cat >"$work/noaes.c" <<'EOF'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sys/auxv.h>
unsigned long getauxval(unsigned long type) {
  static unsigned long (*real)(unsigned long);
  if (!real) real = (unsigned long (*)(unsigned long))dlsym(RTLD_NEXT, "getauxval");
  const unsigned long v = real(type);
  return type == AT_HWCAP ? v & ~(1UL << 3) : v;
}
EOF
aarch64-linux-gnu-gcc -shared -fPIC -O1 -o "$work/noaes.so" "$work/noaes.c" -ldl
rc=0
emulate 120 -cpu cortex-a72 -E LD_PRELOAD="$work/noaes.so" "$sparrow" info -m "$model" \
  >"$work/noaes.out" 2>"$work/noaes.err" || rc=$?
grep -E 'cpu features|simd targets' "$work/noaes.out" | sed "s/^ */  [no-aes] /" || true
if [ $rc -eq 0 ] && grep -q 'simd targets: NEON (in use: NEON)' "$work/noaes.out" &&
   [ ! -s "$work/noaes.err" ]; then
  ok "sparrow info on a CPU without AES uses NEON, stderr empty"
else
  bad "sparrow info on a CPU without AES: exit $rc, $(head -c 300 "$work/noaes.err")"
fi

# qemu runs one guest thread per host thread and the runs below are
# independent: they go side by side, ARM64_PARALLEL (default: all cores) at a
# time, each into its own log. Their PASS/FAIL lines are counted afterwards,
# in the order the jobs were listed.
parallel=${ARM64_PARALLEL:-$(nproc)}
jobs_run=0
job_cmds=()
run_side_by_side() {
  local first=$jobs_run cmd
  for cmd in "$@"; do
    while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do wait -n || true; done
    ( set +e; t0=$SECONDS; eval "$cmd"; echo $? >"$work/job-$jobs_run.rc"
      echo "  ($((SECONDS - t0)) s: $cmd)" ) >"$work/job-$jobs_run.out" 2>&1 &
    job_cmds[$jobs_run]=$cmd
    jobs_run=$((jobs_run + 1))
  done
  wait || true
  local i line verdicts
  for ((i = first; i < jobs_run; ++i)); do
    cat "$work/job-$i.out"
    verdicts=0
    while IFS= read -r line; do
      case $line in
        "PASS: "*) passed=$((passed + 1)); verdicts=$((verdicts + 1)) ;;
        "FAIL: "*) failed=$((failed + 1)); failures+=("${line#FAIL: }"); verdicts=$((verdicts + 1)) ;;
      esac
    done <"$work/job-$i.out"
    if [ "$verdicts" -eq 0 ]; then
      bad "job '${job_cmds[$i]}' ended (status $(cat "$work/job-$i.rc" 2>/dev/null || echo '?')) without a verdict"
    fi
  done
}

stage "SIMD unit tests on each CPU"
simd_jobs=()
for entry in "${cpus[@]}"; do
  IFS='|' read -r name cpu expected targets _ <<<"$entry"
  [ "$targets" = - ] && continue
  simd_jobs+=("run_simd_tests '$name' '$cpu' '$expected' '$targets'")
done
run_side_by_side "${simd_jobs[@]}"

stage "format, tokenizer, engine and bundle unit tests (qemu -cpu $plain_cpu)"
# run_unit_test BINARY [LABEL DOCTEST_FILTER]: the filter runs part of a
# binary, so that a long one can be split across the cores.
run_unit_test() {
  local t=$1 label=${2:-$1} filter=${3:-} rc=0
  emulate 300 -cpu "$plain_cpu" "$(exe "$t")" ${filter:+"$filter"} >"$work/$label.log" 2>&1 || rc=$?
  grep -E '^\[doctest\] (test cases|assertions)' "$work/$label.log" | sed "s/^/  [$label] /" || true
  if [ $rc -eq 0 ]; then
    ok "$label"
  else
    grep -E 'ERROR|FAIL|values:' "$work/$label.log" | head -n 40 || true
    tail -n 5 "$work/$label.log"
    bad "$label: exit $rc"
  fi
}
# engine_tests takes most of this stage under qemu (72 s of CPU on a 2 vCPU
# Xeon, 33 s of it in its two matrix-product cases), so it runs as two parts
# side by side; the two filters together select every case.
engine_heavy='*batched MatMul equals MatVec*,packed Q4_0*'
unit_jobs=("run_unit_test engine_tests 'engine_tests (matrix products)' '--test-case=$engine_heavy'"
           "run_unit_test engine_tests 'engine_tests (the rest)' '--test-case-exclude=$engine_heavy'")
for t in "${unit_tests[@]}"; do
  [ "$t" = engine_tests ] || unit_jobs+=("run_unit_test $t")
done
run_side_by_side "${unit_jobs[@]}"

stage "greedy stories260K, every target, every vector length"
# NEON runs on the CPU without SVE, by Highway's own choice; each SVE CPU
# runs the targets listed for it (empty: Highway's own choice). Every SVE
# target runs at 128 bits, and SVE and SVE2 each at two longer lengths.
greedy=(
  "neon|"
  "sve128|SVE2_128 SVE2 SVE"
  "sve256|SVE_256 SVE2"
  "sve512|SVE"
  "sve2048|SVE2 SVE"
  "a64fx|"
)
greedy_jobs=()
for entry in "${greedy[@]}"; do
  IFS='|' read -r name targets <<<"$entry"
  cpu=""
  for c in "${cpus[@]}"; do
    IFS='|' read -r cname ccpu _ _ _ <<<"$c"
    [ "$cname" = "$name" ] && cpu=$ccpu
  done
  if [ -z "$targets" ]; then
    greedy_jobs+=("run_greedy '$name' '$cpu' ''")
  else
    for target in $targets; do greedy_jobs+=("run_greedy '$name' '$cpu' '$target'"); done
  fi
done
run_side_by_side "${greedy_jobs[@]}"

stage "Packed models (Q4_0, Q4_K, Q8_0), Q6_K and Q4_0S/Q4_0 bundles: perplexity with each CPU's 8-bit dot product"
# Small synthetic Q4_0, Q4_K, Q8_0 and Q6_K models (made under qemu on $plain_cpu and
# measured with the scalar reference kernels there, or natively by
# ARM64_HOST_SPARROW: the reference is plain scalar code on either, and
# differs between them by far less than the bound): on each CPU the fast kernels --
# packed rows (Q6_K: plain rows, 8-bit activations) with sdot where the CPU
# has it, the 16-bit kernels elsewhere
# -- must give the reference perplexity within 1e-3 relative, the bound the
# x86 end-to-end test uses. The Q4_0 model converted into neuron bundles
# with Q4_0S and Q4_0 records does the same for the gather kernels (their
# dot products take 8-bit activations with sdot, 16-bit ones elsewhere).
head -c 20000 "$shared/corpora/tinystories_val_excerpt.txt" >"$work/ppl.txt"
ppl() {  # ppl CPU MODEL KERNELS -> the perplexity, or nothing
  emulate 600 -cpu "$1" "$sparrow" perplexity -m "$2" -f "$work/ppl.txt" \
    -c 128 --chunks 2 --kernels "$3" 2>/dev/null | tail -n 1 | awk '{print $3}'
}
model_of() {  # a type's model: a synthetic GGUF, or (TYPE-bundle) a bundle of the Q4_0 one
  case $1 in
    *-bundle) echo "$work/$1.sparrow" ;;
    *) echo "$work/synth-$1.gguf" ;;
  esac
}
run_4bit() {
  local name=$1 cpu=$2 type=$3 ref=$4 got
  got=$(ppl "$cpu" "$(model_of "$type")" fast)
  if [ -n "$got" ] && awk -v a="$got" -v b="$ref" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-3 * b) }'; then
    ok "$type perplexity on $name: $got (reference $ref)"
  else
    bad "$type perplexity on $name: '$got', reference $ref: not within 1e-3"
  fi
}
# Each type's model and reference perplexity, the three side by side.
reference_4bit() {
  local type=$1 ref model
  model=$(model_of "$type")
  if [[ $type == *-bundle ]]; then
    if ! emulate 300 -cpu "$plain_cpu" "$sparrow" convert -m "$work/synth-q4_0.gguf" \
         -o "$model" --type "${type%-bundle}" --layout neuron 2>"$work/$type.err" >/dev/null; then
      bad "convert --type ${type%-bundle}: $(tail -n 1 "$work/$type.err")"
      return
    fi
  elif ! emulate 300 -cpu "$plain_cpu" "$sparrow" synth -o "$model" --dim 256 \
       --ffn 512 --layers 2 --heads 4 --kv-heads 2 --vocab 1000 --type "$type" --seed 5 \
       2>"$work/synth-$type.err"; then
    bad "synth --type $type: $(tail -n 1 "$work/synth-$type.err")"
    return
  fi
  if [ -n "$host_sparrow" ]; then
    ref=$(timeout 900 "$host_sparrow" perplexity -m "$model" -f "$work/ppl.txt" \
      -c 128 --chunks 2 --kernels reference 2>/dev/null | tail -n 1 | awk '{print $3}')
  else
    ref=$(ppl "$plain_cpu" "$model" reference)
  fi
  if [ -n "$ref" ]; then
    echo "$ref" >"$work/ref-$type"
    ok "$type reference perplexity: $ref"
  else
    bad "$type reference perplexity failed"
  fi
}
fourbit=(q4_0 q4_K q8_0 q6_K)
reference_jobs=()
for type in "${fourbit[@]}"; do reference_jobs+=("reference_4bit $type"); done
run_side_by_side "${reference_jobs[@]}"
bundles=(q4_0s-bundle q4_0-bundle)  # converted from the Q4_0 model, once it is there
reference_jobs=()
for type in "${bundles[@]}"; do reference_jobs+=("reference_4bit $type"); done
if [ -f "$work/ref-q4_0" ]; then
  run_side_by_side "${reference_jobs[@]}"
  fourbit+=("${bundles[@]}")
fi
fourbit_jobs=()
for type in "${fourbit[@]}"; do
  [ -f "$work/ref-$type" ] || continue  # failed above
  ref=$(cat "$work/ref-$type")
  for entry in "${cpus[@]}"; do
    IFS='|' read -r name cpu _ _ _ <<<"$entry"
    case $name in sve2048|a64fx) continue ;; esac  # slow under qemu; same code as sve512
    fourbit_jobs+=("run_4bit '$name' '$cpu' '$type' '$ref'")
  done
done
run_side_by_side "${fourbit_jobs[@]}"
echo "  ($((SECONDS - start)) s elapsed)"

stage "done"
if [ -s "$work/overruns.log" ]; then
  echo "runs that overran their limit (each ran once more; see emulate):"
  cat "$work/overruns.log"
fi
if [ $failed -gt 0 ]; then
  printf 'failed: %s\n' "${failures[@]}"
fi
echo "arm64: $passed passed, $failed failed"
[ $failed -eq 0 ]
