#!/bin/bash
# Installs what is missing, builds, and runs every test: unit and end-to-end
# tests (release build), the same under ASan+UBSan, each fuzzer for 30 s, and
# the aarch64 cross build under qemu. Exits non-zero on the first failure.
# The sanitizer tests and the fuzzers share one build (clang, build-fuzz):
# compiling is most of the suite's time on two cores.
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
# The soak test gets 10 s here (its default is 20): the ASan stage gives it
# 40 s with every memory access checked.
SPARROW_SOAK_SECONDS=10 meson test -C build --print-errorlogs

stage "ASan+UBSan build (clang, with the fuzzers) and tests"
# scripts/fuzz.sh configures it (-O1, no debug info, three Highway targets:
# see there) and installs clang if missing.
bash scripts/fuzz.sh --build-only
# The soak test (random damage, files replaced under a run) gets 40 s here:
# a few hundred runs with every memory access checked. (The soak and fuzzer
# times in this script keep the suite under 25 minutes on two cores: fresh
# clones took 1597 and 1628 s with 60/60/60 and 20/40/45 s.)
# The end-to-end scripts read 10000 bytes of text here, not 100000 (18
# chunks of stories260K at -c 256, more than any of their checks needs), and
# take fewer chunks where a check holds at any length (e2e_lib.sh): their
# serial runs were 280 s of this stage with 25000 bytes.
# tests/lsan_suppressions.txt names the one leak that is not ours (libomp).
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  LSAN_OPTIONS=suppressions=$PWD/tests/lsan_suppressions.txt:print_suppressions=0 \
  SPARROW_SOAK_SECONDS=40 SPARROW_E2E_TEXT_BYTES=10000 \
  meson test -C build-fuzz --print-errorlogs --timeout-multiplier 4

stage "fuzzers"
bash scripts/fuzz.sh 30

if [ -f scripts/arm64_check.sh ]; then
  stage "aarch64 under qemu"
  # The release build measures the packed-model check's reference
  # perplexities natively (see arm64_check.sh).
  ARM64_HOST_SPARROW=$PWD/build/sparrow bash scripts/arm64_check.sh
fi

stage "all tests passed"
