// SwiGLU feed-forward over resident weights: down(silu(gate x) * up x).
#pragma once

#include <cstddef>

#include "src/model/feed_forward.h"
#include "src/model/weights.h"

namespace sparrow {

// Runs in scratch its session's workspace holds (gate and up, max_tokens x
// d_ff each: WorkspacePlan::ffn), so a session's FFN state is its own.
class DenseFeedForward : public FeedForward {
 public:
  DenseFeedForward(const ModelWeights& weights, float* gate, float* up, size_t max_tokens)
      : weights_(weights), gate_(gate), up_(up), max_tokens_(max_tokens) {}
  void Forward(uint32_t layer, const float* x, size_t n, float* out) override;

 private:
  const ModelWeights& weights_;
  float* gate_;
  float* up_;
  size_t max_tokens_;
};

}  // namespace sparrow
