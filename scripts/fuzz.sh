#!/bin/bash
# Builds the libFuzzer targets with clang + ASan + UBSan in build-fuzz/ and
# runs each for N seconds (default 60): the GGUF reader fuzzer, the bundle
# reader fuzzer, the safetensors and LoRA adapter fuzzers (--lora), the
# trace reader fuzzer (sparrow simulate), the calibration trailer fuzzer
# (sparrow calibrate) and the server's request fuzzer always, the tokenizer fuzzer once its source is
# written. Exits non-zero if a fuzzer finds a crash, leak, timeout or
# sanitizer report; the reproducer is left in build-fuzz/artifacts/.
#
#   scripts/fuzz.sh [SECONDS]
#   scripts/fuzz.sh --build-only   # configure and build everything there
#                                  # (tests too), run nothing
#
# build-fuzz is also the project's sanitizer build: scripts/test.sh runs
# the unit and end-to-end tests in it (--build-only first), so one
# ASan+UBSan compile serves both.
#
# Seeds: small valid GGUF files derived from $SPARROW_SHARED_DIR/models/*.gguf
# (default ../shared next to the repository), text snippets from
# $SPARROW_SHARED_DIR/corpora, tiny bundles of a synthetic model in every
# layout, and small valid traces and calibration trailers written here. Corpora grow in build-fuzz/corpus/ across runs.
set -euo pipefail

BUILD_ONLY=""
if [ "${1:-}" = --build-only ]; then
  BUILD_ONLY=1
  shift
fi
SECONDS_PER_FUZZER="${1:-60}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SHARED="${SPARROW_SHARED_DIR:-$ROOT/../shared}"
BUILD="${FUZZ_BUILD_DIR:-$ROOT/build-fuzz}"

log() { echo "fuzz.sh: $*" >&2; }

# clang and its libFuzzer/sanitizer runtimes (Debian: clang, libclang-rt-14-dev).
have_toolchain() {
  command -v clang++ >/dev/null 2>&1 &&
    [ -f "$(clang++ -print-file-name=libclang_rt.fuzzer-x86_64.a 2>/dev/null)" -o \
      -f "$(clang++ -print-file-name=libclang_rt.fuzzer-aarch64.a 2>/dev/null)" ]
}
if ! have_toolchain; then
  log "installing clang and libclang-rt-14-dev"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null 2>&1 || { log "need root (or sudo) to apt-get install clang"; exit 1; }
    SUDO=sudo
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq clang libclang-rt-14-dev
  have_toolchain || { log "clang's libFuzzer runtime is still missing"; exit 1; }
fi

# Lighter than a release build where that costs no coverage: -O1 without
# debug info (reports still name functions), no benchmarks, the kernels for
# three Highway targets (512-bit, 128-bit and scalar: every tail length)
# instead of five; the release build runs them on every target.
SETUP_ARGS=(-Dfuzzers=true -Db_sanitize=address,undefined -Db_lundef=false
            -Dbuildtype=debugoptimized -Doptimization=1 -Ddebug=false -Dbenchmarks=false
            "-Dsimd_skip_targets=HWY_AVX3|HWY_AVX2"
            # Coverage instrumentation for every library the fuzzers link but
            # the SIMD kernels (tests/fuzz/coverage_ignorelist.txt), and UBSan
            # findings as hard failures.
            "-Dcpp_args=-fsanitize=fuzzer-no-link -fno-sanitize-recover=all -fsanitize-coverage-ignorelist=$ROOT/tests/fuzz/coverage_ignorelist.txt")
RECONFIGURE=()
[ -f "$BUILD/build.ninja" ] && RECONFIGURE=(--reconfigure)
SETUP_LOG="$(mktemp)"
if ! CXX=clang++ meson setup "${RECONFIGURE[@]}" "$BUILD" "$ROOT" "${SETUP_ARGS[@]}" \
    >"$SETUP_LOG" 2>&1; then
  tail -n 20 "$SETUP_LOG" >&2
  log "meson setup failed"
  exit 1
fi
rm -f "$SETUP_LOG"

TARGETS=(tests/fuzz/gguf_fuzzer)
if ! head -n 1 "$ROOT/tests/fuzz/tokenizer_fuzzer.cc" | grep -q "Placeholder"; then
  TARGETS+=(tests/fuzz/tokenizer_fuzzer)
else
  log "tests/fuzz/tokenizer_fuzzer.cc is still a placeholder: skipping it"
fi
TARGETS+=(tests/fuzz/bundle_fuzzer tests/fuzz/safetensors_fuzzer tests/fuzz/lora_adapter_fuzzer
         tests/fuzz/trace_fuzzer tests/fuzz/calibration_fuzzer tests/fuzz/server_request_fuzzer)
# sparrow itself writes the bundle seeds.
ninja -C "$BUILD" "${TARGETS[@]}" sparrow
if [ -n "$BUILD_ONLY" ]; then
  ninja -C "$BUILD"
  exit 0
fi

SEEDS="$BUILD/seeds"
mkdir -p "$SEEDS/gguf" "$SEEDS/tokenizer" "$SEEDS/trace" "$SEEDS/calibration" "$SEEDS/server_request" \
         "$SEEDS/bundle" "$SEEDS/safetensors" "$SEEDS/lora_adapter" \
         "$BUILD/corpus/gguf" "$BUILD/corpus/tokenizer" "$BUILD/corpus/trace" \
         "$BUILD/corpus/calibration" "$BUILD/corpus/bundle" "$BUILD/corpus/safetensors" \
         "$BUILD/corpus/lora_adapter" "$BUILD/corpus/server_request" "$BUILD/artifacts" \
         "$BUILD/scratch"

# Seeds for the safetensors and adapter fuzzers: the PEFT fixture's
# weights; the GGUF adapter fixture and the PEFT config behind the adapter
# fuzzer's form byte (even: GGUF adapter, odd: adapter_config.json).
LORA="$SHARED/models/lora"
cp "$LORA/stories260K-lora-r4-peft/adapter_model.safetensors" "$SEEDS/safetensors/peft.safetensors"
{ printf '\x00'; cat "$LORA/stories260K-lora-r4.gguf"; } >"$SEEDS/lora_adapter/gguf_adapter.bin"
{ printf '\x01'; cat "$LORA/stories260K-lora-r4-peft/adapter_config.json"; } >"$SEEDS/lora_adapter/peft_config.bin"

# Seeds for the bundle fuzzer: a tiny synthetic model (tens of KiB) in each
# layout and record type, so mutations reach every section.
tiny="$SEEDS/bundle/tiny.gguf"
ASAN_OPTIONS=detect_leaks=0 "$BUILD/sparrow" synth -o "$tiny" --dim 32 --ffn 64 --layers 2 \
  --heads 2 --vocab 354 --type q8_0 --force -t 1 2>/dev/null
for layout in neuron dip split; do
  for type in q8_0 f16; do
    ASAN_OPTIONS=detect_leaks=0 "$BUILD/sparrow" convert -m "$tiny" -o \
      "$SEEDS/bundle/tiny_${layout}_${type}.sparrow" --layout "$layout" --type "$type" \
      --force -t 1 2>/dev/null
  done
done
rm -f "$tiny"

# Seeds for the GGUF fuzzer: each fixture shrunk to a few KiB (arrays cut to
# 64 entries, tensors cut to one or two small rows) but still valid, plus a
# gpt2-tokenizer and a version-2 variant, so mutations start from files that
# reach the tensor and tokenizer checks.
python3 - "$SEEDS/gguf" "$SHARED"/models/*.gguf <<'PY'
import os, struct, sys
out_dir, paths = sys.argv[1], sys.argv[2:]
BLOCKS = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24),
          8: (32, 34), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176),
          14: (256, 210), 30: (1, 2)}
FIXED = {0: 'B', 1: 'b', 2: 'H', 3: 'h', 4: 'I', 5: 'i', 6: 'f', 7: 'B', 10: 'Q', 11: 'q', 12: 'd'}
KEEP = 64

def parse(b):
    p = 0
    def rd(f):
        nonlocal p
        v = struct.unpack_from('<' + f, b, p)[0]; p += struct.calcsize(f); return v
    def rs():
        nonlocal p
        n = rd('Q'); s = b[p:p + n]; p += n; return s
    def rv(t):
        if t == 8: return rs()
        if t == 9:
            et = rd('I'); n = rd('Q'); return (et, [rv(et) for _ in range(n)])
        return rd(FIXED[t])
    assert b[:4] == b'GGUF'
    p = 4; version = rd('I'); nt = rd('Q'); nkv = rd('Q')
    kvs = []
    for _ in range(nkv):
        k = rs(); t = rd('I'); kvs.append([k, t, rv(t)])
    tensors = []
    for _ in range(nt):
        name = rs(); nd = rd('I'); dims = [rd('Q') for _ in range(nd)]; ty = rd('I'); rd('Q')
        tensors.append((name, dims, ty))
    return version, kvs, tensors

def enc_value(t, v):
    if t == 8: return struct.pack('<Q', len(v)) + v
    if t == 9:
        et, items = v
        return struct.pack('<IQ', et, len(items)) + b''.join(enc_value(et, x) for x in items)
    return struct.pack('<' + FIXED[t], v)

def build(version, kvs, tensors):
    out = b'GGUF' + struct.pack('<IQQ', version, len(tensors), len(kvs))
    for k, t, v in kvs:
        out += struct.pack('<Q', len(k)) + k + struct.pack('<I', t) + enc_value(t, v)
    data = b''
    infos = b''
    for i, (name, dims, ty) in enumerate(tensors):
        elems, size = BLOCKS[ty]
        row = 32 if elems <= 32 else 256
        dims = [row] + [2] * (len(dims) - 1)
        n = 1
        for d in dims: n *= d
        nbytes = n // elems * size
        data += b'\0' * ((-len(data)) % 32)
        infos += struct.pack('<Q', len(name)) + name + struct.pack('<I', len(dims))
        infos += b''.join(struct.pack('<Q', d) for d in dims) + struct.pack('<IQ', ty, len(data))
        data += bytes((i * 31 + j * 7) & 0xff for j in range(nbytes))
    out += infos
    out += b'\0' * ((-len(out)) % 32)
    return out + data

def shrink(kvs):
    res = []
    for k, t, v in kvs:
        if t == 9:
            v = (v[0], v[1][:KEEP])
        if k.endswith(b'_token_id') and t == 4 and v >= KEEP and v != 0xffffffff:
            v = 0
        res.append([k, t, v])
    return res

for path in paths:
    base = os.path.splitext(os.path.basename(path))[0]
    version, kvs, tensors = parse(open(path, 'rb').read())
    kvs = shrink(kvs)
    tensors = [t for t in tensors if t[2] in BLOCKS][:8]
    variants = {'': (version, kvs)}
    gpt2 = [kv for kv in kvs if kv[0] != b'tokenizer.ggml.model']
    gpt2 += [[b'tokenizer.ggml.model', 8, b'gpt2'], [b'tokenizer.ggml.pre', 8, b'llama-bpe'],
             [b'tokenizer.ggml.merges', 9, (8, [b'a b', b'\xc4\xa0 t', b'ab c'])]]
    variants['_gpt2'] = (version, gpt2)
    variants['_v2'] = (2, kvs)
    for suffix, (ver, kv) in variants.items():
        with open(os.path.join(out_dir, base + suffix + '.gguf'), 'wb') as f:
            f.write(build(ver, kv, tensors))
PY

# Seeds for the tokenizer fuzzer: short slices of the text corpora.
python3 - "$SEEDS/tokenizer" "$SHARED"/corpora/*.txt <<'PY'
import os, sys
out_dir, paths = sys.argv[1], sys.argv[2:]
for path in paths:
    data = open(path, 'rb').read(1 << 16)
    base = os.path.splitext(os.path.basename(path))[0]
    pos, i = 0, 0
    while pos < len(data) and i < 48:
        size = 32 + (i * 97) % 480
        with open(os.path.join(out_dir, '%s_%02d.txt' % (base, i)), 'wb') as f:
            f.write(data[pos:pos + size])
        pos += size * 3
        i += 1
PY

# Seeds for the trace fuzzer (sparrow simulate's reader): small valid
# traces, one with a prompt batch and decode records, one with a null ratio.
python3 - "$SEEDS/trace" <<'PY'
import json, os, sys
out_dir = sys.argv[1]
def trace(n_groups, records):
    groups = [{"layer": i // 2, "kind": "dip-input" if i % 2 == 0 else "dip-output",
               "n_units": 64, "record_bytes": 1092, "payload_bytes": 1088, "capacity": 32}
              for i in range(n_groups)]
    tokens = []
    for i, (n, per_group) in enumerate(records):
        tot = [sum(g[k] for g in per_group) for k in range(5)]
        tokens.append({"record": i, "tokens": n, "bytes_read": tot[3], "read_calls": tot[4],
                       "mean_read_bytes": tot[3] / tot[4] if tot[4] else None,
                       "units_needed": tot[0], "units_hit": tot[1],
                       "hit_rate": tot[1] / tot[0] if tot[0] else None,
                       "units_loaded": tot[2], "units_evicted": 0, "io_seconds": 0.001,
                       "memory_seconds": 0.0002, "compute_seconds": 0.0005,
                       "select_seconds": 0.0001, "wall_seconds": 0.002, "groups": per_group})
    return {"format": "sparrow-trace", "version": 1,
            "model": {"layout": "dip", "record_type": "q8_0", "n_layers": (n_groups + 1) // 2,
                      "d_model": 64, "d_ff": 64, "resident_bytes": 100000, "ffn_bytes": 140000,
                      "cache_bytes": 70000, "dram_budget": 0, "threads": 2, "io": "pread",
                      "policy": "dip-ca", "mlp_density": 0.5, "gamma": 0.2},
            "groups": groups, "tokens": tokens}
seeds = {
    "batch_and_decode": trace(4, [(3, [[40, 0, 40, 43680, 2]] * 4),
                                  (1, [[32, 20, 12, 13104, 3]] * 4),
                                  (1, [[32, 32, 0, 0, 0]] * 4)]),
    "one_group": trace(1, [(1, [[0, 0, 0, 0, 0]]), (1, [[10, 5, 5, 5460, 5]])]),
}
for name, doc in seeds.items():
    with open(os.path.join(out_dir, name + ".json"), "w") as f:
        json.dump(doc, f, indent=1)
PY

# Seeds for the calibration fuzzer: valid trailers (formats/calibration.h)
# for the header CRC the fuzzer assumes, one entry and several.
python3 - "$SEEDS/calibration" <<'PY'
import os, struct, sys
out_dir = sys.argv[1]
HEADER_CRC = 0x12345678  # kFuzzHeaderCrc in tests/fuzz/calibration_fuzzer.cc
def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF
def trailer(entries):
    body = struct.pack('<II', HEADER_CRC, len(entries))
    for density, f_in, ppl, default_ppl, policy, ctx, chunks, tokens, name in entries:
        body += struct.pack('<ddddIIIQI', density, f_in, ppl, default_ppl, policy, ctx, chunks,
                            tokens, len(name)) + name
    t = b'SPRWCALB' + struct.pack('<II', 1, len(body)) + body
    t += struct.pack('<I', crc32c(t))
    return t + b'\0' * (-len(t) % 4096)
seeds = {
    "one": [(0.5, 0.5556, 4.8, 5.66, 0, 64, 2, 24000, b'ppl.txt')],
    "three": [(0.3, 0.25, 9.1, 9.9, 0, 256, 8, 3000, b'tinystories.txt'),
              (0.5, 0.45, 6.2, 6.4, 1, 256, 8, 3000, b'tinystories.txt'),
              (0.9, 1.0, 5.1, 5.2, 0, 512, 1, 512, b'')],
}
for name, entries in seeds.items():
    with open(os.path.join(out_dir, name + ".bin"), "wb") as f:
        f.write(trailer(entries))
PY

# Seeds for the server request fuzzer: one byte for the endpoint (even:
# chat, odd: completions), then a body using every field.
printf '\x00{"model":"m","messages":[{"role":"system","content":"S"},{"role":"user","content":[{"type":"text","text":"Hi"}]},{"role":"assistant","content":null}],"max_tokens":8,"temperature":0.5,"top_p":0.9,"top_k":4,"seed":1,"stop":["a","b"],"stream":true,"stream_options":{"include_usage":true},"n":1}' \
  >"$SEEDS/server_request/chat.bin"
printf '\x01{"prompt":"Once upon a time","max_tokens":16,"stop":"x","max_completion_tokens":3}' \
  >"$SEEDS/server_request/completion.bin"

export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:allocator_may_return_null=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"

# The fuzzers run side by side (one process each, one core each on a
# 2-core machine), each logging to its own file, shown when it ends.
run() {
  local name="$1" max_len="$2"
  # Fuzzers whose readers take a path write their inputs under TMPDIR
  # (tests/fuzz/scratch_path.h) and remove them on a clean exit.
  TMPDIR="$BUILD/scratch" "$BUILD/tests/fuzz/$name" -max_total_time="$SECONDS_PER_FUZZER" -max_len="$max_len" \
    -timeout=20 -rss_limit_mb=2560 -print_final_stats=1 \
    -artifact_prefix="$BUILD/artifacts/$name-" \
    "$BUILD/corpus/${name%_fuzzer}" "$SEEDS/${name%_fuzzer}" >"$BUILD/$name.log" 2>&1
}
names=(gguf_fuzzer)
run gguf_fuzzer 65536 &
pids=($!)
if [[ " ${TARGETS[*]} " == *" tests/fuzz/tokenizer_fuzzer "* ]]; then
  names+=(tokenizer_fuzzer)
  run tokenizer_fuzzer 4096 &
  pids+=($!)
fi
names+=(bundle_fuzzer)
run bundle_fuzzer 262144 &
pids+=($!)
names+=(safetensors_fuzzer)
run safetensors_fuzzer 65536 &
pids+=($!)
names+=(lora_adapter_fuzzer)
run lora_adapter_fuzzer 131072 &
pids+=($!)
names+=(trace_fuzzer)
run trace_fuzzer 65536 &
pids+=($!)
names+=(calibration_fuzzer)
run calibration_fuzzer 16384 &
pids+=($!)
names+=(server_request_fuzzer)
run server_request_fuzzer 8192 &
pids+=($!)
log "running ${names[*]} for ${SECONDS_PER_FUZZER}s each, in parallel"
status=0
for i in "${!pids[@]}"; do
  name=${names[$i]}
  if wait "${pids[$i]}"; then
    log "$name: $(grep -E '^(#[0-9]+.*DONE|Done [0-9]+ runs)' "$BUILD/$name.log" | tail -n 1)"
  else
    tail -n 40 "$BUILD/$name.log"
    log "$name FAILED: see the reproducer in $BUILD/artifacts/"
    status=1
  fi
done
if [ "$status" = 0 ]; then log "no crashes"; fi
exit "$status"
