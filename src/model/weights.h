// The model's tensors bound by their GGUF names, with shapes and types
// checked against the config. Matrices point into storage owned elsewhere
// (the mapped GGUF file, or a bundle's resident section) until
// PrepareWeightsForDecode moves the ones decoding reads into a buffer of
// their own.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/huge_pages.h"
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
  // Where PrepareWeightsForDecode put the matrices (null before, or when it
  // left them in place).
  std::shared_ptr<HugePageBuffer> decode_matrices;
  // When set, the embedding table is not in memory (token_embd gives its
  // type and shape, and its data must not be read): this writes the row of
  // a token, dequantized, to `out` (d_model floats).
  std::function<void(uint32_t token, float* out)> embedding_row;
};

// Binds every tensor the architecture needs. `with_ffn` = false skips
// ffn_gate/up/down (streamed instead). InputError names the first missing,
// misshapen or unsupported tensor. `source_name` is used in messages.
ModelWeights BindWeights(const ModelConfig& config,
                         const std::vector<gguf::TensorInfo>& tensors,
                         const std::string& source_name, bool with_ffn);

// Readies the matrices a decode step reads (all but the embedding table,
// whose rows are looked up one by one; the output head shares it when the
// model ties them):
// - where the system has transparent huge pages and they hold at least 32
//   MiB, copies them into one
//   HugePageBuffer (base/huge_pages.h says why), 64-byte aligned, giving
//   the source's pages back as each is copied, so memory does not double;
// - repacks the ones the packed decode kernels are faster for
//   (ops::WantsPacking: Q4_0, Q4_K and Q8_0 where the CPU has a fast 8-bit dot)
//   when the fast kernels are in use; in place where they were not copied
//   (a matrix whose memory cannot be made writable then stays as it is).
// Call it once per storage: the source's bytes are released or changed.
void PrepareWeightsForDecode(ModelWeights& weights);
// What that adds to the matrices' own bytes at most, for budgets, given a
// bound on those bytes (e.g. the whole file): the buffer's rounding to whole
// huge pages and, per matrix, its alignment and the two source pages it
// shares with its neighbours (not released).
uint64_t DecodeMatricesOverheadBytes(size_t n_matrices, uint64_t bytes_at_most);
// The number of matrices PrepareWeightsForDecode takes for a model of this
// config (the dense feed-forward's three per layer only when resident).
size_t DecodeMatrixCount(const ModelConfig& config, bool with_ffn);

}  // namespace sparrow
