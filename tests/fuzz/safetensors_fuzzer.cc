// libFuzzer target for the safetensors reader (formats/safetensors.h), which
// reads PEFT adapters. Each input is a whole file: it must be read or be
// rejected with an InputError whose message is one non-empty line. A file
// that is read must hold what the reader promises: every tensor inside the
// data, n_bytes = elements x element size, no two tensors overlapping.
// Anything else aborts, which libFuzzer records as a crash.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/error.h"
#include "formats/safetensors.h"

namespace {

[[noreturn]] void Violated(const char* what, const std::string& detail = "") {
  std::fprintf(stderr, "safetensors_fuzzer: invariant violated: %s %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sparrow::safetensors;
  std::vector<uint8_t> bytes(data, data + size);
  try {
    const SafetensorsFile file = SafetensorsFile::FromBytes(bytes, "fuzz.safetensors");
    const uint8_t* previous_end = nullptr;
    for (const Tensor& t : file.tensors()) {
      const uint64_t element = t.dtype == DType::kF32 ? 4 : 2;
      if (t.n_bytes != t.n_elements * element) Violated("size", t.name);
      if (t.n_bytes > 0 && (t.data < previous_end)) Violated("overlap", t.name);
      volatile uint8_t sink = 0;
      for (uint64_t i = 0; i < t.n_bytes; ++i) sink = sink ^ t.data[i];  // inside the buffer (ASan)
      if (t.n_bytes > 0) previous_end = t.data + t.n_bytes;
      if (file.Find(t.name) == nullptr) Violated("Find", t.name);
    }
  } catch (const sparrow::InputError& e) {
    const std::string msg = e.what();
    if (msg.empty() || msg.find('\n') != std::string::npos) Violated("message not one line:", msg);
  }
  return 0;
}
