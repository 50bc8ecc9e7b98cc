// Keys and values of every layer for positions [0, n_ctx), f32, laid out
// [layer][position][kv_head * head_dim] so one head's keys are a strided run.
#pragma once

#include <cstddef>

#include "base/aligned_buffer.h"

namespace sparrow {

class KvCache {
 public:
  KvCache(size_t n_layers, size_t n_ctx, size_t kv_dim);

  float* keys(size_t layer, size_t pos) { return At(k_, layer, pos); }
  float* values(size_t layer, size_t pos) { return At(v_, layer, pos); }
  size_t n_ctx() const { return n_ctx_; }
  size_t kv_dim() const { return kv_dim_; }
  size_t bytes() const { return 2 * k_.size() * sizeof(float); }

 private:
  float* At(AlignedBuffer<float>& b, size_t layer, size_t pos) {
    return b.data() + (layer * n_ctx_ + pos) * kv_dim_;
  }

  size_t n_ctx_;
  size_t kv_dim_;
  AlignedBuffer<float> k_;
  AlignedBuffer<float> v_;
};

}  // namespace sparrow
