// Synthetic llama models: valid GGUF files with random weights of any shape
// and weight type, and a small valid SentencePiece tokenizer, so benchmarks
// build their own large models instead of downloading them. Written tensor
// by tensor; memory use is bounded by a few MiB of row buffers whatever the
// model size. Weights depend only on the seed and the tensor/row, not on the
// thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "formats/tensor_type.h"

namespace sparrow {

struct SynthSpec {
  uint32_t dim = 0;
  uint32_t ffn = 0;
  uint32_t layers = 0;
  uint32_t heads = 0;
  uint32_t kv_heads = 0;
  uint32_t vocab = 0;
  uint32_t context_length = 4096;
  TensorType type = TensorType::kF32;
  uint64_t seed = 1;
};

// InputError for an impossible shape (with the reason) or unsupported type.
void ValidateSynthSpec(const SynthSpec& spec);

// Writes the model to `path` (temporary file, renamed at the end).
// progress(bytes_done, bytes_total) is called as tensor data is written.
void WriteSyntheticModel(
    const SynthSpec& spec, const std::string& path,
    const std::function<void(uint64_t, uint64_t)>& progress = nullptr);

}  // namespace sparrow
