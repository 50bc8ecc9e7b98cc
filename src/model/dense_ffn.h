// SwiGLU feed-forward over resident weights: down(silu(gate x) * up x).
#pragma once

#include <vector>

#include "base/aligned_buffer.h"
#include "src/model/feed_forward.h"
#include "src/model/weights.h"

namespace sparrow {

class DenseFeedForward : public FeedForward {
 public:
  explicit DenseFeedForward(const ModelWeights& weights) : weights_(weights) {}
  void Forward(uint32_t layer, const float* x, size_t n, float* out) override;
  // Bytes of its scratch for a pass of up to n tokens (what Forward allocates).
  static uint64_t ScratchBytes(size_t d_ff, size_t n);

 private:
  const ModelWeights& weights_;
  AlignedBuffer<float> gate_, up_;
};

}  // namespace sparrow
