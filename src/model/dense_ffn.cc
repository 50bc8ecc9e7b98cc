#include "src/model/dense_ffn.h"

#include <stdexcept>

#include "base/error.h"

namespace sparrow {

void DenseFeedForward::Forward(uint32_t layer, const float* x, size_t n,
                               float* out) {
  const LayerWeights& l = weights_.layers[layer];
  const size_t d_ff = l.up.rows;
  if (n > max_tokens_) {
    throw std::logic_error(StrCat("DenseFeedForward: ", n, " tokens, scratch planned for ",
                                  max_tokens_));
  }
  ops::MatMul(l.gate, x, n, gate_);
  ops::MatMul(l.up, x, n, up_);
  ops::SiluMul(gate_, up_, n * d_ff, gate_);
  ops::MatMul(l.down, gate_, n, out);
}

}  // namespace sparrow
