// What tells one supported architecture from another, in one table
// (architecture.cc): the facts the forward pass (model.cc) and the loader
// (weights.cc) read instead of comparing names. An architecture whose block
// is the llama family's -- norm, attention with optional Q/K/V biases and
// RoPE, gated FFN -- is one more row here; one with other tensor names
// gives its names.
#pragma once

#include <string>
#include <string_view>

#include "simd/rope.h"

namespace sparrow {

// The norm before attention, before the FFN and before the output head.
enum class NormKind { kRms };
// The FFN: down(act(gate x) * up x).
enum class FfnActivation { kSwiGlu };

// GGUF tensor names: whole-model tensors, and per-layer ones after the
// "blk.<i>." prefix (Q/K/V/output as stems, with ".weight"/".bias").
struct TensorNames {
  const char* token_embd = "token_embd.weight";
  const char* output_norm = "output_norm.weight";
  const char* output = "output.weight";          // absent: tied to token_embd
  const char* rope_freqs = "rope_freqs.weight";  // optional (Llama 3.1)
  const char* attn_norm = "attn_norm.weight";
  const char* attn_q = "attn_q";
  const char* attn_k = "attn_k";
  const char* attn_v = "attn_v";
  const char* attn_output = "attn_output";
  const char* ffn_norm = "ffn_norm.weight";
  const char* ffn_gate = "ffn_gate.weight";
  const char* ffn_up = "ffn_up.weight";
  const char* ffn_down = "ffn_down.weight";
};

struct Architecture {
  const char* name;  // general.architecture
  NormKind norm;
  FfnActivation activation;
  bool qkv_bias;              // attn_q/k/v carry biases
  simd::RopeStyle rope_style;  // which dimensions RoPE rotates together
  float default_rms_eps;      // when the file gives none
  // The converter to GGUF reordered Q/K rows for adjacent-pair RoPE, so
  // deltas in Hugging Face's row order (PEFT LoRA adapters) need the same.
  bool qk_rows_permuted;
  TensorNames names;
};

// The row for general.architecture, or nullptr.
const Architecture* FindArchitecture(std::string_view name);
// "llama, qwen2": for messages.
std::string SupportedArchitectures();

}  // namespace sparrow
