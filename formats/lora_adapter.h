// LoRA adapters, read from either of the two forms users have:
//  - llama.cpp's GGUF adapters: general.type = "adapter", adapter.type =
//    "lora", adapter.lora.alpha, and per adapted base tensor NAME the pair
//    NAME.lora_a (dims [n_in, r]) and NAME.lora_b (dims [r, n_out]) in F32,
//    F16, BF16 or Q8_0;
//  - Hugging Face PEFT folders: adapter_config.json (peft_type LORA, r,
//    lora_alpha, target_modules, use_rslora, fan_in_fan_out) and
//    adapter_model.safetensors with Hugging Face tensor names
//    (base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight,
//    shape [r, n_in]; ...lora_B.weight, shape [n_out, r]), which are mapped
//    to GGUF names for the llama and qwen2 families.
// Either way the result is the same: per base tensor, A (r x n_in) and
// B (n_out x r) in f32, row-major, and the update is
//   W' = W + scale * (alpha / r) * B A      (alpha / sqrt(r) with rsLoRA)
// with W stored as GGUF stores it (n_out rows of n_in).
//
// What a reader cannot know is left to the caller that has the base model:
// whether the names and shapes match it, and the q/k row order (Hugging
// Face keeps q and k rows in the order the checkpoint uses, llama.cpp's
// converter permutes them for its RoPE; `hf_row_order` says which).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/tensor_type.h"

namespace sparrow {

// One stored LoRA matrix, as the file holds it, in GGUF's dimension order
// (dims[0] is the contiguous one): A has dims {n_in, r}, B {r, n_out}.
struct LoraMatrix {
  TensorType type = TensorType::kF32;  // F32, F16, BF16 or Q8_0
  std::vector<uint64_t> dims;
  const uint8_t* data = nullptr;       // valid while the LoraAdapterFile lives
  uint64_t n_bytes = 0;
};

struct LoraTensorPair {
  std::string base_name;  // GGUF name of the adapted tensor, e.g. "blk.0.attn_q.weight"
  uint32_t rank = 0;
  uint32_t n_in = 0;      // columns of W (its GGUF dims[0])
  uint32_t n_out = 0;     // rows of W (dims[1])
  LoraMatrix a;           // rank rows of n_in
  LoraMatrix b;           // n_out rows of rank
};

struct LoraAdapterFile {
  std::string path;
  std::string format;        // "gguf" or "peft"
  std::string architecture;  // general.architecture of a GGUF adapter; "" for PEFT
  float alpha = 0.0f;        // 0 in a GGUF adapter: no alpha/r factor (llama.cpp's rule)
  bool rslora = false;       // alpha / sqrt(r) instead of alpha / r
  // Hugging Face row order for q and k (PEFT): B's rows must be permuted
  // like the base's q/k weights were before B A is added to a GGUF tensor.
  bool hf_row_order = false;
  uint32_t crc32c = 0;       // of the adapter's file(s), to record what was fused
  std::vector<LoraTensorPair> pairs;
  std::shared_ptr<const void> storage;  // keeps the matrices' bytes alive

  // The factor on B A at user scale `scale`.
  float Factor(const LoraTensorPair& pair, float scale) const;
};

// A GGUF adapter file or a PEFT folder (a directory holding
// adapter_config.json), by what `path` is. InputError with one line naming
// the file and the problem for anything malformed: wrong general.type or
// adapter.type, a missing or unpaired lora_a/lora_b, shapes whose ranks
// disagree (including a lora_a stored untransposed), unsupported tensor
// types, bad JSON, a peft_type other than LORA, DoRA, fan_in_fan_out,
// unknown module names. Shapes against the base model are the caller's
// check (src/lora.h).
LoraAdapterFile ReadLoraAdapter(const std::string& path);

// The metadata key (string array) where a fused model records its
// adapters, one "NAME (FORMAT, crc32c 0x..., scale S)" line each.
inline constexpr char kFusedAdaptersKey[] = "sparrow.lora.fused";

// Hugging Face llama/qwen2 module name -> GGUF tensor name:
// "model.layers.3.self_attn.q_proj" -> "blk.3.attn_q.weight"; "" when the
// name is not one a llama-family GGUF has.
std::string GgufNameForHfModule(const std::string& hf_module);

}  // namespace sparrow
