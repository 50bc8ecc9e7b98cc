// LoRA fusion: W' = W + sum over adapters of factor * B A (formats/lora_adapter.h
// reads the adapters), computed once, into tensors of W's own type, so a
// fused model needs no extra memory per weight and no extra compute per
// token. Used at load (`run --lora`) and by `convert --lora` (bundles and
// merged GGUFs).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/aligned_buffer.h"
#include "formats/gguf.h"
#include "formats/lora_adapter.h"

namespace sparrow {

struct LoraSpec {
  std::string path;    // a GGUF adapter or a PEFT folder
  float scale = 1.0f;  // llama.cpp's --lora-scaled
};

class FusedLora {
 public:
  struct TensorChange {
    std::string name;
    double relative_change = 0;  // ||W' - W|| / ||W|| (Frobenius), as stored
  };
  struct AdapterInfo {
    std::string name;  // file or folder name
    std::string format;
    uint32_t crc32c = 0;
    float scale = 1.0f;
  };

  // Reads every adapter and checks it against `base`: the same architecture
  // (GGUF adapters), every adapted tensor present with matching shape, and
  // a type fusion can write back. Then fuses: each adapted tensor is
  // dequantized to f32, the updates added, and quantized back to its type.
  // progress(done, total) counts bytes of the adapted tensors. InputError naming the adapter
  // and tensor for any mismatch.
  static FusedLora Fuse(const gguf::GgufFile& base, const std::vector<LoraSpec>& specs,
                        const std::function<void(uint64_t, uint64_t)>& progress = nullptr);

  // Bytes of the fused tensors (what fusing at load adds to memory).
  uint64_t bytes() const { return bytes_; }
  // Points `base`'s adapted tensors at the fused bytes; this FusedLora must
  // outlive every use of them.
  void ApplyTo(gguf::GgufFile& base) const;
  const std::vector<TensorChange>& changes() const { return changes_; }
  const std::vector<AdapterInfo>& adapters() const { return adapters_; }
  // One line per adapter, "NAME (FORMAT, crc32c 0x..., scale S)", for the
  // metadata key kFusedAdaptersKey of what convert writes.
  std::vector<std::string> Describe() const;

 private:
  std::map<std::string, AlignedBuffer<uint8_t>> fused_;
  std::vector<TensorChange> changes_;
  std::vector<AdapterInfo> adapters_;
  uint64_t bytes_ = 0;
};

}  // namespace sparrow
