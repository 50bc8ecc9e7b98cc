// The model's tensors bound by their GGUF names, with shapes and types
// checked against the config. Matrices point into storage owned elsewhere
// (the mapped GGUF file, or a bundle's resident section).
#pragma once

#include <string>
#include <vector>

#include "formats/gguf.h"
#include "src/model/config.h"
#include "src/ops/ops.h"

namespace sparrow {

struct LayerWeights {
  std::vector<float> attn_norm;
  ops::MatrixView wq, wk, wv, wo;
  std::vector<float> bq, bk, bv;  // empty unless config.qkv_bias
  std::vector<float> ffn_norm;
  // The dense feed-forward; unset (data == nullptr) when it is streamed.
  ops::MatrixView gate, up, down;
};

struct ModelWeights {
  ops::MatrixView token_embd;
  std::vector<float> output_norm;
  ops::MatrixView output;  // token_embd itself when the model ties them
  // Per rotation pair, divisors of the RoPE frequency (Llama 3.1's
  // rope_freqs tensor); empty when the model has none.
  std::vector<float> rope_freq_factors;
  std::vector<LayerWeights> layers;
};

// Binds every tensor the architecture needs. `with_ffn` = false skips
// ffn_gate/up/down (streamed instead). InputError names the first missing,
// misshapen or unsupported tensor. `source_name` is used in messages.
ModelWeights BindWeights(const ModelConfig& config,
                         const std::vector<gguf::TensorInfo>& tensors,
                         const std::string& source_name, bool with_ffn);

// Repacks in place the matrices the packed decode kernels are faster for
// (ops::WantsPacking: Q4_0 and Q4_K on x86) when the fast kernels are in use. The
// embedding table is left alone (rows are looked up one by one, and the
// output head shares it when the model ties them). A matrix whose memory
// cannot be made writable stays as it is. Call it once per storage: the
// bytes change in place, so weights bound a second time from the same
// storage would be packed twice (Model::Open maps or reads its own copy).
void PackWeightsForDecode(ModelWeights& weights);

}  // namespace sparrow
