// Matrix-vector products over weights in GGUF's own block layouts, the
// decode-time hot path. Each call handles a range of rows so the caller can
// split a matrix across threads; the activation is converted once per
// product into whatever form the weight type's kernel wants (GemvInput).
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/aligned_buffer.h"
#include "base/tensor_type.h"

namespace sparrow::simd {

// Types the kernels below accept (TypeAbility::kGemv in base/tensor_type.cc:
// F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, Q4_0S).
bool GemvSupports(TensorType type);

// The activation vector prepared for one weight type. Prepare it once, then
// use it from any number of threads for disjoint row ranges.
//
// For the quantized weight types the kernels multiply integers: each block
// of 32 activations is scaled to int16 (round to nearest, largest magnitude
// to +-32767, so the relative rounding error is at most 2^-16 of the block's
// largest element), the weight nibbles/bytes are widened to int16, and
// products are summed exactly in int32 within a block before one f32
// multiply-add per block. Non-finite activations make the block scale NaN,
// so they poison the result like they would in f32.
class GemvInput {
 public:
  // `n` must be a whole number of the type's blocks (InputError otherwise).
  // Reuses its buffers when they are big enough.
  void Prepare(TensorType weight_type, const float* x, size_t n);
  // Bytes Prepare allocates for this type and size (for the DRAM budget).
  static uint64_t Bytes(TensorType weight_type, size_t n);

  TensorType weight_type() const { return type_; }
  size_t size() const { return n_; }
  const float* x() const { return x_.data(); }
  // Kernel-private, filled for the quantized types only (each array padded
  // with zeros past the end so kernels may load whole vectors):
  // the int16 activations in natural order (int8, in its bytes, where
  // GemvActivationMax(type) is 127; Q4_0 and Q4_0S in their own orders),
  const int16_t* quantized() const { return q_.data(); }
  // one f32 scale per block of 32 (x ~ quantized * scale),
  const float* scales() const { return scales_.data(); }
  // the exact sum of each block's 32 quantized values (as f32),
  const float* sums() const { return sums_.data(); }
  // and for Q6_K, per group of 16: the same sums and the group's (its
  // block's) scale.
  const float* group_sums() const { return group_sums_.data(); }
  const float* group_scales() const { return group_scales_.data(); }

 private:
  // Elements of each buffer for a type and size: Prepare allocates them,
  // Bytes adds them up.
  struct Sizes {
    size_t x = 0, q = 0, scales = 0, sums = 0, group_sums = 0, group_scales = 0;
  };
  static Sizes SizesFor(TensorType weight_type, size_t n);

  TensorType type_ = TensorType::kF32;
  size_t n_ = 0;
  AlignedBuffer<float> x_;
  AlignedBuffer<int16_t> q_;
  AlignedBuffer<float> scales_;
  AlignedBuffer<float> sums_;
  AlignedBuffer<float> group_sums_;
  AlignedBuffer<float> group_scales_;
};

// y[r] = dot(row r of W, x) for r in [row_begin, row_end). Rows are
// `row_bytes` apart starting at `weights`; each holds `cols` elements.
// `x` must have been prepared for `type` and `cols` (std::invalid_argument
// otherwise). Results match GemvReference to about 1e-5 of sum |w_i x_i|
// (see gemv_test.cc for the bound): the quantized types take activations
// quantized per block of 32 to int16, except where GemvActivationMax(type)
// is 127 (int8), whose int8 activations (as the packed kernels'
// and llama.cpp's) move a dot product by up to sum_blocks max|x_block| / 254
// * sum |w_i| of the block.
void Gemv(TensorType type, const void* weights, size_t row_bytes, size_t cols,
          const GemvInput& x, size_t row_begin, size_t row_end, float* y);

// The same for n inputs: y[t * y_stride + r] = dot(row r of W, x[t]) for
// t < n. Each group of rows is read from memory once for all n inputs, and
// each input's results are bit for bit what Gemv gives it alone (so a
// token's results do not depend on the batch it came in).
void GemvBatch(TensorType type, const void* weights, size_t row_bytes, size_t cols,
               const GemvInput* x, size_t n, size_t row_begin, size_t row_end, float* y,
               size_t y_stride);

// The largest magnitude the current SIMD target's per-row kernels (Gemv,
// and DotRows through them) quantize `type`'s activations to: 127 where
// they are int8 (Q4_0 and Q4_0S on AVX3_DL, AVX2, SSE4 and SVE, on AVX3
// where the CPU has AVX-512 VNNI, on NEON where it has `sdot`; gemv-inl.h:
// Q4_0ActivationsAreInt8; Q8_0 on AVX3_DL: kQ8_0Int8; Q6_K wherever the
// target has a native 8-bit dot product: x86 from SSSE3, SVE, NEON with
// `sdot`; gemv-inl.h: Q6_KRowsInt8), 32767 for the other quantized types, 0
// where activations stay f32 (F32, F16, BF16). Tests, benchmarks and
// `sparrow info` size their bounds and descriptions from it, so a type or
// target that moves to int8 changes in one place.
int GemvActivationMax(TensorType type);
// GemvActivationMax's value for int8 activations.
inline constexpr int kInt8ActivationMax = 127;
// The byte dot product the per-row kernels' int8 forms use on this target
// and CPU (e.g. "vpdpbusd (AVX-VNNI)", "pmaddubsw", "sdot (NEON dotprod)"),
// for `sparrow info`.
const char* GemvByteDotForm();

// Scalar reference: dequantizes each row to f32 and accumulates in double.
void GemvReference(TensorType type, const void* weights, size_t row_bytes,
                   size_t cols, const float* x, size_t row_begin,
                   size_t row_end, float* y);

}  // namespace sparrow::simd
