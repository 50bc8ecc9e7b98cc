#!/bin/bash
# Installs what is missing, builds build/sparrow, and generates text from the
# default model. Extra arguments go to `sparrow run` (e.g. -m MODEL -p PROMPT).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh build
bash scripts/build.sh build
model=../shared/models/stories260K.gguf
if [ $# -eq 0 ]; then
  set -- -m "$model" -p "Once upon a time" -n 200 --temp 0
fi
exec build/sparrow run "$@"
