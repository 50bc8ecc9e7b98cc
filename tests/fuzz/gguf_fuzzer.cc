// libFuzzer target for the GGUF reader and TokenizerData.
//
// Any input must either load or be rejected with an InputError whose message
// is one non-empty line. Everything a loaded file exposes is then touched
// (every metadata value, every typed lookup, the first and last byte of
// every tensor) so that a bad bound shows up as an ASan report, and the
// tokenizer is read from it. Any other exception or a broken invariant
// aborts, which libFuzzer records as a crash.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"
#include "formats/gguf.h"
#include "formats/tokenizer_data.h"

namespace {

using sparrow::InputError;
using namespace sparrow::gguf;

[[noreturn]] void Violated(const char* what, const std::string& detail = "") {
  std::fprintf(stderr, "gguf_fuzzer: invariant violated: %s %s\n", what, detail.c_str());
  std::abort();
}

void CheckMessage(const InputError& e) {
  const std::string msg = e.what();
  if (msg.empty() || msg.find('\n') != std::string::npos) Violated("message not one line:", msg);
}

volatile uint64_t g_sink;

void Walk(const Value& v, uint32_t depth) {
  if (depth > kMaxArrayDepth + 1) Violated("nesting deeper than the reader allows");
  g_sink = g_sink + v.AsUInt().value_or(0) + static_cast<uint64_t>(v.AsInt().value_or(0)) +
           static_cast<uint64_t>(v.AsBool().value_or(false));
  if (v.AsFloat().has_value()) g_sink = g_sink + 1;
  if (const std::string* s = v.AsString()) g_sink = g_sink + s->size();
  if (const Array* a = v.AsArray()) {
    for (const Value& e : a->elements) {
      if (e.type != a->element_type) Violated("array element of another type");
      Walk(e, depth + 1);
    }
  }
  (void)TypeDescription(v);
}

// Typed lookups may throw InputError for a mismatched type; nothing else.
template <typename F>
void Lookup(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    CheckMessage(e);
  }
}

void Exercise(const GgufFile& file) {
  for (const KeyValue& kv : file.metadata()) {
    if (kv.key.empty()) Violated("empty key accepted");
    if (file.Find(kv.key) != &kv.value) Violated("Find disagrees with metadata()");
    Walk(kv.value, 0);
    Lookup([&] { (void)file.GetString(kv.key); });
    Lookup([&] { (void)file.GetUInt(kv.key); });
    Lookup([&] { (void)file.GetFloat(kv.key); });
    Lookup([&] { (void)file.GetBool(kv.key); });
    Lookup([&] { (void)file.GetStringArray(kv.key); });
    Lookup([&] { (void)file.GetFloatArray(kv.key); });
    Lookup([&] { (void)file.GetIntArray(kv.key); });
  }
  const uint8_t* begin = file.file_data();
  const uint8_t* end = begin + file.file_size();
  if (file.data_offset() % file.alignment() != 0) Violated("unaligned data section");
  for (const TensorInfo& t : file.tensors()) {
    if (file.FindTensor(t.name) != &t) Violated("FindTensor disagrees with tensors()");
    if (t.dims.empty() || t.dims.size() > kMaxDims) Violated("bad rank accepted");
    if (t.offset % file.alignment() != 0) Violated("unaligned tensor accepted");
    uint64_t elems = 1;
    for (uint64_t d : t.dims) elems *= d;
    if (elems != t.n_elements || t.rows() * t.row_elems() != t.n_elements) {
      Violated("element count", t.name);
    }
    if (t.data < begin || t.n_bytes > static_cast<uint64_t>(end - t.data)) {
      Violated("tensor data outside the file", t.name);
    }
    if (t.n_bytes > 0) g_sink = g_sink + t.data[0] + t.data[t.n_bytes - 1];
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  // The header alone from a prefix (a bundle's resident section planned
  // before it loads): the image's size taken from its last 8 bytes, so
  // the fuzzer reaches extents that end past the prefix. One line or a
  // header whose tensors all end within that size.
  if (size >= 8) {
    uint64_t image_size = 0;
    std::memcpy(&image_size, data + size - 8, 8);
    image_size = std::max<uint64_t>(image_size % (uint64_t{1} << 40), size - 8);
    try {
      const GgufFile header = GgufFile::HeaderFromPrefix(
          std::vector<uint8_t>(data, data + size - 8), image_size, "fuzz.gguf");
      for (const TensorInfo& t : header.tensors()) {
        if (t.data != nullptr) Violated("header-only tensor with data", t.name);
        if (header.data_offset() + t.offset + t.n_bytes > image_size) {
          Violated("header-only tensor past the image", t.name);
        }
      }
    } catch (const InputError& e) {
      CheckMessage(e);
    }
  }
  try {
    const GgufFile file = GgufFile::FromBytes(std::move(bytes), "fuzz.gguf");
    Exercise(file);
    try {
      const sparrow::TokenizerData t = sparrow::TokenizerData::FromGguf(file);
      const size_t n = t.tokens.size();
      if (n == 0 || t.scores.size() != n || t.types.size() != n) Violated("tokenizer sizes");
      for (int32_t id : {t.bos_id, t.eos_id, t.unk_id, t.pad_id, t.eot_id}) {
        if (id < -1 || (id >= 0 && static_cast<size_t>(id) >= n)) Violated("special id");
      }
      if (t.model != "llama" && t.model != "gpt2") Violated("model");
      if (t.model == "gpt2" && t.merges.empty() && file.Find("tokenizer.ggml.merges") == nullptr) {
        Violated("gpt2 without merges");
      }
    } catch (const InputError& e) {
      CheckMessage(e);
    }
  } catch (const InputError& e) {
    CheckMessage(e);
  }
  return 0;
}
