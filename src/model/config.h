// Hyper-parameters of a supported architecture, read from GGUF metadata.
#pragma once

#include <cstdint>
#include <string>

#include "simd/rope.h"
#include "src/model/architecture.h"

namespace sparrow {
namespace gguf {
class GgufFile;
}

struct ModelConfig {
  std::string arch;  // general.architecture: a row of architecture.cc
  const Architecture* architecture = nullptr;  // that row
  std::string name;  // general.name, for display
  uint32_t n_layers = 0;
  uint32_t d_model = 0;
  uint32_t d_ff = 0;
  uint32_t n_heads = 0;
  uint32_t n_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t rope_dims = 0;
  uint32_t n_vocab = 0;
  uint32_t context_length = 0;  // the model's training context
  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;
  float rope_position_scale = 1.0f;  // linear RoPE scaling: positions * this
  // From the architecture's row.
  simd::RopeStyle rope_style = simd::RopeStyle::kAdjacentPairs;
  bool qkv_bias = false;

  uint32_t q_dim() const { return n_heads * head_dim; }
  uint32_t kv_dim() const { return n_kv_heads * head_dim; }

  // Reads `<arch>.*` keys; InputError for an unsupported architecture or
  // inconsistent values. n_vocab comes from the tokenizer token count.
  static ModelConfig FromGguf(const gguf::GgufFile& file);
};

}  // namespace sparrow
