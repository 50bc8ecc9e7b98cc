#!/bin/bash
# Configures (once) and builds a build directory. Usage: build.sh [DIR [meson options...]]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
if [ ! -f "$dir/build.ninja" ]; then
  meson setup "$dir" --buildtype=release "$@"
fi
ninja -C "$dir"
