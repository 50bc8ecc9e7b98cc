#!/usr/bin/env python3
"""The layering check passes on the tree and fails on an upward include.

Copies the checked directories to a temporary tree, adds
`#include "src/model/model.h"` to a kernel header, and expects the checker
to exit 1 naming that file and line; then the same for formats/ including
simd/, and a clean copy must pass.
"""
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
CHECKER = os.path.join(ROOT, "scripts", "check_layering.py")


def run(root):
    return subprocess.run([sys.executable, CHECKER, root],
                          capture_output=True, text=True)


def inject(tree, rel, include):
    path = os.path.join(tree, rel)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    with open(path, "w", encoding="utf-8") as f:
        f.write(f'#include "{include}"\n' + text)


def main():
    failures = []
    real = run(ROOT)
    if real.returncode != 0:
        failures.append("the source tree fails the check:\n" + real.stderr)
    cases = [("simd/gemv.h", "src/model/model.h", "simd may not include"),
             ("formats/gguf.h", "simd/gemv.h", "formats may not include"),
             ("src/ops/ops.h", "src/runtime/streamed_ffn.h", "src/ops may not include"),
             ("src/model/model.h", "src/runtime/unit_cache.h", "src/model may not include")]
    for rel, include, expected in cases:
        with tempfile.TemporaryDirectory() as tmp:
            for top in ("base", "formats", "simd", "src"):
                shutil.copytree(os.path.join(ROOT, top), os.path.join(tmp, top))
            if run(tmp).returncode != 0:
                failures.append("a clean copy fails the check")
            inject(tmp, rel, include)
            result = run(tmp)
            if result.returncode != 1 or f"{rel}:1: {expected}" not in result.stderr:
                failures.append(f"including {include} from {rel} was not refused "
                                f"(exit {result.returncode}): {result.stderr.strip()}")
    for failure in failures:
        print("FAIL:", failure)
    print(f"{len(cases)} upward includes tried, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
