// Matrix-vector products over weights in GGUF's own block layouts, the
// decode-time hot path. Each call handles a range of rows so the caller can
// split a matrix across threads; the activation is converted once per
// product into whatever form the weight type's kernel wants (GemvInput).
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/aligned_buffer.h"
#include "formats/tensor_type.h"

namespace sparrow::simd {

// Types the kernels below accept: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K.
bool GemvSupports(TensorType type);

// The activation vector prepared for one weight type. Prepare it once, then
// use it from any number of threads for disjoint row ranges.
class GemvInput {
 public:
  // `n` must be a whole number of the type's blocks.
  void Prepare(TensorType weight_type, const float* x, size_t n);

  TensorType weight_type() const { return type_; }
  size_t size() const { return n_; }
  const float* x() const { return x_.data(); }
  // Kernel-private: quantized activations and their per-block scales, in the
  // layout the kernels of weight_type() want.
  const int16_t* quantized() const { return q_.data(); }
  const float* scales() const { return scales_.data(); }
  const float* sums() const { return sums_.data(); }

 private:
  TensorType type_ = TensorType::kF32;
  size_t n_ = 0;
  AlignedBuffer<float> x_;
  AlignedBuffer<int16_t> q_;
  AlignedBuffer<float> scales_;
  AlignedBuffer<float> sums_;
};

// y[r] = dot(row r of W, x) for r in [row_begin, row_end). Rows are
// `row_bytes` apart starting at `weights`; each holds `cols` elements.
void Gemv(TensorType type, const void* weights, size_t row_bytes, size_t cols,
          const GemvInput& x, size_t row_begin, size_t row_end, float* y);

// Scalar reference: dequantizes each row to f32 and accumulates in double.
void GemvReference(TensorType type, const void* weights, size_t row_bytes,
                   size_t cols, const float* x, size_t row_begin,
                   size_t row_end, float* y);

}  // namespace sparrow::simd
