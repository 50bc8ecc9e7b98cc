// libFuzzer target for the LoRA adapter readers (formats/lora_adapter.h).
// The first byte picks the form: even, the rest is a GGUF adapter file;
// odd, the rest is a PEFT folder's adapter_config.json beside a small valid
// adapter_model.safetensors. Reading must succeed or end in an InputError
// whose message is one non-empty line; a successful read must hold what the
// reader promises (ranks agree, dims match the matrices' bytes). Anything
// else aborts, which libFuzzer records as a crash.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "formats/lora_adapter.h"
#include "tests/fuzz/scratch_path.h"

namespace {

[[noreturn]] void Violated(const char* what, const std::string& detail = "") {
  std::fprintf(stderr, "lora_adapter_fuzzer: invariant violated: %s %s\n", what, detail.c_str());
  std::abort();
}

void Write(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) Violated("cannot write", path);
}

// One valid rank-2 pair for blk.0.attn_q (n_in 4, n_out 4), F32.
std::vector<uint8_t> SmallSafetensors() {
  const std::string header =
      R"({"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": )"
      R"({"dtype": "F32", "shape": [2, 4], "data_offsets": [0, 32]}, )"
      R"("base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight": )"
      R"({"dtype": "F32", "shape": [4, 2], "data_offsets": [32, 64]}})";
  std::vector<uint8_t> out(8);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(uint64_t{header.size()} >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  out.resize(out.size() + 64, 0);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const std::string dir = sparrow::fuzz::ScratchPath("lora_adapter_fuzzer");
  static const std::string gguf = sparrow::fuzz::ScratchPath("lora_adapter_fuzzer", ".gguf");
  static const bool made = [] {
    ::mkdir(dir.c_str(), 0700);
    const std::vector<uint8_t> st = SmallSafetensors();
    Write(dir + "/adapter_model.safetensors", st.data(), st.size());
    return true;
  }();
  (void)made;
  const bool peft = (data[0] & 1) != 0;
  const std::string& path = peft ? dir : gguf;
  Write(peft ? dir + "/adapter_config.json" : path, data + 1, size - 1);
  try {
    const sparrow::LoraAdapterFile a = sparrow::ReadLoraAdapter(path);
    for (const sparrow::LoraTensorPair& p : a.pairs) {
      if (p.a.dims.size() != 2 || p.b.dims.size() != 2) Violated("dims", p.base_name);
      if (p.a.dims[1] != p.rank || p.b.dims[0] != p.rank) Violated("rank", p.base_name);
      if (p.a.dims[0] != p.n_in || p.b.dims[1] != p.n_out) Violated("shape", p.base_name);
      if (p.a.data == nullptr || p.b.data == nullptr) Violated("data", p.base_name);
    }
  } catch (const sparrow::InputError& e) {
    const std::string msg = e.what();
    if (msg.empty() || msg.find('\n') != std::string::npos) Violated("message not one line:", msg);
  }
  return 0;
}
