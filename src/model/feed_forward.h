// The one place the dense and streamed engines differ: where the
// feed-forward weights come from. For each forward pass the model calls
// BeginPass, then Forward() once per layer in order with the normalised
// hidden states, then EndPass; implementations decide which units to use,
// where they live and how they are multiplied.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sparrow {

class FeedForward {
 public:
  virtual ~FeedForward() = default;
  // A pass over `n` tokens (a prompt batch, or one decode token) begins.
  virtual void BeginPass(size_t n) { (void)n; }
  // out[t] = FFN_layer(x[t]) for t < n; x and out are n x d_model.
  virtual void Forward(uint32_t layer, const float* x, size_t n, float* out) = 0;
  // The pass is over: `completed` is false when an exception abandoned it
  // part way (a read failed, a request was cancelled), and the next pass
  // must start clean, as a server's next request does. EndPass(false) runs
  // during stack unwinding and must not throw.
  virtual void EndPass(bool completed) { (void)completed; }
};

}  // namespace sparrow
