// Test helpers for the GGUF tests: a byte-level GGUF builder written from the
// format description, independent of formats/gguf_writer.cc, so the reader is
// checked against bytes the code under test did not produce (and malformed
// files can be made field by field), plus fixture and temp-dir helpers.
#pragma once

#include <doctest/doctest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/read_file.h"
#include "tests/temp_dir.h"

namespace sparrow::testing {

using Bytes = std::vector<uint8_t>;

inline void PutLE(Bytes& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// Encoded value payloads (without the type id).
inline Bytes EncU8(uint8_t v) { return Bytes{v}; }
inline Bytes EncU32(uint32_t v) { Bytes b; PutLE(b, v, 4); return b; }
inline Bytes EncU64(uint64_t v) { Bytes b; PutLE(b, v, 8); return b; }
inline Bytes EncI32(int32_t v) { Bytes b; PutLE(b, static_cast<uint32_t>(v), 4); return b; }
inline Bytes EncF32(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return EncU32(bits);
}
inline Bytes EncStr(std::string_view s) {
  Bytes b;
  PutLE(b, s.size(), 8);
  b.insert(b.end(), s.begin(), s.end());
  return b;
}
// Array header followed by already-encoded elements.
inline Bytes EncArray(uint32_t element_type, uint64_t count, const Bytes& elements) {
  Bytes b;
  PutLE(b, element_type, 4);
  PutLE(b, count, 8);
  b.insert(b.end(), elements.begin(), elements.end());
  return b;
}
inline Bytes EncStrArray(const std::vector<std::string>& v) {
  Bytes e;
  for (const std::string& s : v) {
    Bytes one = EncStr(s);
    e.insert(e.end(), one.begin(), one.end());
  }
  return EncArray(8, v.size(), e);
}
inline Bytes EncF32Array(const std::vector<float>& v) {
  Bytes e;
  for (float f : v) {
    Bytes one = EncF32(f);
    e.insert(e.end(), one.begin(), one.end());
  }
  return EncArray(6, v.size(), e);
}
inline Bytes EncI32Array(const std::vector<int32_t>& v) {
  Bytes e;
  for (int32_t i : v) PutLE(e, static_cast<uint32_t>(i), 4);
  return EncArray(5, v.size(), e);
}

// GGUF value type ids and tensor type ids, spelled out from the format
// description rather than taken from formats/.
enum : uint32_t { kTU8 = 0, kTI8, kTU16, kTI16, kTU32, kTI32, kTF32, kTBool, kTString,
                  kTArray, kTU64, kTI64, kTF64 };
enum : uint32_t { kGgmlF32 = 0, kGgmlF16 = 1, kGgmlQ4_0 = 2, kGgmlQ8_0 = 8, kGgmlQ4_K = 12,
                  kGgmlQ6_K = 14, kGgmlBF16 = 30 };

struct RawKv {
  std::string key;
  uint32_t type;
  Bytes value;
};

struct RawTensor {
  std::string name;
  std::vector<uint64_t> dims;
  uint32_t type;
  uint64_t offset;
};

// A GGUF file described field by field. Build() lays it out exactly as the
// format says: magic, version, counts, key/values, tensor infos, padding to
// the alignment, data.
struct RawFile {
  uint32_t magic = 0x46554747;
  uint32_t version = 3;
  std::optional<uint64_t> tensor_count;  // overrides tensors.size()
  std::optional<uint64_t> kv_count;      // overrides kvs.size()
  std::vector<RawKv> kvs;
  std::vector<RawTensor> tensors;
  uint64_t alignment = 32;  // for the padding only; add general.alignment yourself
  Bytes data;

  // `field_ends` receives the offset just past every header field.
  Bytes Build(std::vector<size_t>* field_ends = nullptr) const {
    Bytes b;
    const auto mark = [&] { if (field_ends != nullptr) field_ends->push_back(b.size()); };
    PutLE(b, magic, 4); mark();
    PutLE(b, version, 4); mark();
    PutLE(b, tensor_count.value_or(tensors.size()), 8); mark();
    PutLE(b, kv_count.value_or(kvs.size()), 8); mark();
    for (const RawKv& kv : kvs) {
      PutLE(b, kv.key.size(), 8); mark();
      b.insert(b.end(), kv.key.begin(), kv.key.end()); mark();
      PutLE(b, kv.type, 4); mark();
      b.insert(b.end(), kv.value.begin(), kv.value.end()); mark();
    }
    for (const RawTensor& t : tensors) {
      PutLE(b, t.name.size(), 8); mark();
      b.insert(b.end(), t.name.begin(), t.name.end()); mark();
      PutLE(b, t.dims.size(), 4); mark();
      for (uint64_t d : t.dims) { PutLE(b, d, 8); mark(); }
      PutLE(b, t.type, 4); mark();
      PutLE(b, t.offset, 8); mark();
    }
    while (b.size() % alignment != 0) b.push_back(0);
    mark();
    b.insert(b.end(), data.begin(), data.end());
    return b;
  }
};

// A small valid llama-style file: metadata of several types, a SentencePiece
// tokenizer of 4 tokens and three tensors (f32, q8_0, f16) whose data ends
// exactly at the end of the file, so every truncation is detectable.
inline RawFile ValidRawFile() {
  RawFile f;
  f.kvs = {
      {"general.architecture", kTString, EncStr("llama")},
      {"llama.embedding_length", kTU32, EncU32(8)},
      {"llama.attention.layer_norm_rms_epsilon", kTF32, EncF32(1e-5f)},
      {"tokenizer.ggml.model", kTString, EncStr("llama")},
      {"tokenizer.ggml.tokens", kTArray, EncStrArray({"<unk>", "<s>", "</s>", "a"})},
      {"tokenizer.ggml.scores", kTArray, EncF32Array({0, 0, 0, -1})},
      {"tokenizer.ggml.token_type", kTArray, EncI32Array({2, 3, 3, 1})},
      {"tokenizer.ggml.bos_token_id", kTU32, EncU32(1)},
  };
  f.tensors = {
      {"a", {8}, kGgmlF32, 0},            // 32 bytes
      {"b", {32, 2}, kGgmlQ8_0, 32},      // 2 blocks of 34 = 68 bytes
      {"c", {8, 2}, kGgmlF16, 128},       // 32 bytes
  };
  f.data.resize(160);
  for (size_t i = 0; i < f.data.size(); ++i) f.data[i] = static_cast<uint8_t>(i * 7 + 1);
  return f;
}

// The fixtures directory from SPARROW_SHARED_DIR (tests/meson.build sets it).
inline std::string SharedDir() {
  const char* dir = std::getenv("SPARROW_SHARED_DIR");
  if (dir == nullptr || *dir == '\0') {
    FAIL("SPARROW_SHARED_DIR is not set: run through `meson test` or set it to the "
         "fixtures directory (e.g. /work/shared)");
  }
  return dir;
}

inline std::string ModelPath(const char* file) {
  const std::string path = SharedDir() + "/models/" + file;
  REQUIRE_MESSAGE(std::filesystem::exists(path), "missing fixture " << path);
  return path;
}

inline void WriteFile(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

inline Bytes ReadFile(const std::string& path) {
  return ReadWholeFileBytes(path, "test file");
}

}  // namespace sparrow::testing
