// The one place the dense and streamed engines differ: where the
// feed-forward weights come from. The model calls Forward() per layer with
// the normalised hidden states; implementations decide which units to use,
// where they live and how they are multiplied.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sparrow {

class FeedForward {
 public:
  virtual ~FeedForward() = default;
  // out[t] = FFN_layer(x[t]) for t < n; x and out are n x d_model.
  virtual void Forward(uint32_t layer, const float* x, size_t n, float* out) = 0;
};

}  // namespace sparrow
