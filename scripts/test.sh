#!/bin/bash
# Installs what is missing, builds, and runs every test: unit and end-to-end
# tests (release build), the same under ASan+UBSan, each fuzzer for 60 s, and
# the aarch64 cross build under qemu. Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
stage() { echo; echo "=== $1 ($((SECONDS - start)) s elapsed)"; }

stage "dependencies"
bash scripts/install_deps.sh test
# The server tests' clients (OpenAI's npm package, puppeteer-core), pinned
# by tests/server/package-lock.json.
npm ci --prefix tests/server --no-audit --no-fund

stage "release build and tests"
bash scripts/build.sh build
meson test -C build --print-errorlogs

stage "ASan+UBSan build and tests"
# Lighter than the release build where that costs no coverage: -O1 without
# debug info (reports still name functions), no benchmarks, the kernels for
# three Highway targets (512-bit, 128-bit and scalar: every tail length)
# instead of five. The release build above runs them on every target.
bash scripts/build.sh build-asan -Db_sanitize=address,undefined -Db_lundef=false \
  --buildtype=debugoptimized -Doptimization=1 -Ddebug=false -Dbenchmarks=false \
  '-Dsimd_skip_targets=HWY_AVX3|HWY_AVX2'
# The soak test (random damage, files replaced under a run) gets a minute
# here: a few hundred runs with every memory access checked.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  SPARROW_SOAK_SECONDS=60 meson test -C build-asan --print-errorlogs --timeout-multiplier 4

if [ -f scripts/fuzz.sh ]; then
  stage "fuzzers"
  bash scripts/fuzz.sh 60
fi

if [ -f scripts/arm64_check.sh ]; then
  stage "aarch64 under qemu"
  bash scripts/arm64_check.sh
fi

stage "all tests passed"
