#!/bin/bash
# Installs the Debian packages Sparrow needs, only those missing.
#   install_deps.sh build   compiler, Meson/Ninja, Highway, oneDNN, cxxopts, doctest, liburing,
#                           nlohmann/json, cpp-httplib
#   install_deps.sh test    the above plus clang (fuzzers), GNU time, GNU parallel (the
#                           sharded `sparrow batch` recipe), and for the server's
#                           client tests Chromium and Node.js with npm (Debian's, unless a
#                           node and npm are already installed)
set -euo pipefail

# ocl-icd-opencl-dev: Debian's oneDNN CMake package looks for OpenCL and fails
# without it (libdnnl-dev only recommends it), and Meson then builds without
# oneDNN, silently: prompt processing falls back to one GEMV per token.
packages=(g++ pkg-config cmake meson ninja-build libhwy-dev libdnnl-dev ocl-icd-opencl-dev
          libcxxopts-dev doctest-dev liburing-dev nlohmann-json3-dev libcpp-httplib-dev
          ca-certificates)
if [ "${1:-build}" = test ]; then
  packages+=(clang libclang-rt-14-dev time util-linux chromium parallel)
  command -v node >/dev/null || packages+=(nodejs)
  command -v npm >/dev/null || packages+=(npm)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "install_deps: missing packages (run as root to install): ${missing[*]}" >&2
  exit 1
fi
echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
