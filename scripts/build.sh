#!/bin/bash
# Configures (once) and builds a build directory. Usage: build.sh [DIR [meson options...]]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
# Where Debian's oneDNN is installed, require it: a CMake package that fails
# to load (as it does without OpenCL's headers) would otherwise leave a build
# without batched GEMM, silently.
extra=()
if [[ " $* " != *onednn* ]] &&
   dpkg-query -W -f='${Status}' libdnnl-dev 2>/dev/null | grep -q "install ok installed"; then
  extra+=(-Donednn=enabled)
fi
if [ ! -f "$dir/build.ninja" ]; then
  meson setup "$dir" --buildtype=release "${extra[@]}" "$@"
fi
ninja -C "$dir"
