#include "src/model/dense_ffn.h"

namespace sparrow {

uint64_t DenseFeedForward::ScratchBytes(size_t d_ff, size_t n) {
  return 2ull * n * d_ff * sizeof(float);
}

void DenseFeedForward::Forward(uint32_t layer, const float* x, size_t n,
                               float* out) {
  const LayerWeights& l = weights_.layers[layer];
  const size_t d_ff = l.up.rows;
  if (gate_.size() < n * d_ff) {  // two buffers: ScratchBytes
    gate_.Reset(n * d_ff);
    up_.Reset(n * d_ff);
  }
  ops::MatMul(l.gate, x, n, gate_.data());
  ops::MatMul(l.up, x, n, up_.data());
  ops::SiluMul(gate_.data(), up_.data(), n * d_ff, gate_.data());
  ops::MatMul(l.down, gate_.data(), n, out);
}

}  // namespace sparrow
