// Dispatch, GemvInput and the scalar reference for GEMV.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "simd/gemv.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "simd/gemv-inl.h"
#include "simd/gemv.h"

HWY_BEFORE_NAMESPACE();
namespace sparrow::simd {
namespace HWY_NAMESPACE {

void GemvT(TensorType type, const void* weights, size_t row_bytes, size_t cols,
           const GemvInput* x, size_t n, size_t row_begin, size_t row_end, float* y,
           size_t y_stride) {
  GemvImpl(type, weights, row_bytes, cols, x, n, row_begin, row_end, y, y_stride);
}

void QuantizeActivationsT(const float* x, size_t n, bool pair_layout, bool split_quads, bool q8_0,
                          int16_t* q, float* scales, float* sums, float* group_sums,
                          float* group_scales) {
  QuantizeActivationsImpl(x, n, pair_layout, split_quads, q8_0, q, scales, sums, group_sums,
                          group_scales);
}

bool Q4_0ActivationsAreInt8T() { return Q4_0ActivationsAreInt8(); }  // gemv-inl.h
bool Q6_KActivationsAreInt8T() { return Q6_KActivationsAreInt8(); }
bool Q8_0ActivationsAreInt8T() { return kQ8_0Int8; }
const char* GemvByteDotFormT() { return ByteDotFormName(); }  // int8_dot-inl.h

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include <cstring>
#include <stdexcept>
#include <vector>

#include "base/error.h"
#include "simd/quantize.h"

namespace sparrow::simd {
namespace {

// Zeroed slack after the per-block arrays (gemv-inl.h: kGemvPad).
constexpr size_t kGemvPadFloats = 64;

// Grows `buf` to at least `count` elements (contents unspecified).
template <typename T>
void Reserve(AlignedBuffer<T>& buf, size_t count) {
  if (buf.size() < count) buf.Reset(count);
}

// Q4_0 and its split-scale record layout Q4_0S: the same activations.
bool IsQ4_0Family(TensorType type) {
  return type == TensorType::kQ4_0 || type == TensorType::kQ4_0S;
}

bool IsQuantized(TensorType type) {
  return type == TensorType::kQ8_0 || IsQ4_0Family(type) || type == TensorType::kQ4_K ||
         type == TensorType::kQ6_K;
}

}  // namespace

HWY_EXPORT(GemvT);
HWY_EXPORT(QuantizeActivationsT);
HWY_EXPORT(Q4_0ActivationsAreInt8T);
HWY_EXPORT(Q6_KActivationsAreInt8T);
HWY_EXPORT(Q8_0ActivationsAreInt8T);
HWY_EXPORT(GemvByteDotFormT);

const char* GemvByteDotForm() { return HWY_DYNAMIC_DISPATCH(GemvByteDotFormT)(); }

int GemvActivationMax(TensorType type) {
  if (!IsQuantized(type)) return 0;
  if (IsQ4_0Family(type) && HWY_DYNAMIC_DISPATCH(Q4_0ActivationsAreInt8T)()) {
    return kInt8ActivationMax;
  }
  if (type == TensorType::kQ6_K && HWY_DYNAMIC_DISPATCH(Q6_KActivationsAreInt8T)()) {
    return kInt8ActivationMax;
  }
  if (type == TensorType::kQ8_0 && HWY_DYNAMIC_DISPATCH(Q8_0ActivationsAreInt8T)()) {
    return kInt8ActivationMax;
  }
  return 32767;
}

bool GemvSupports(TensorType type) { return TensorTypeCan(type, TypeAbility::kGemv); }

GemvInput::Sizes GemvInput::SizesFor(TensorType weight_type, size_t n) {
  Sizes s;
  s.x = n + kGemvPadFloats;
  if (!IsQuantized(weight_type)) return s;
  const size_t blocks = n / 32;
  s.q = n + 256;
  s.scales = s.sums = blocks + kGemvPadFloats;
  if (weight_type == TensorType::kQ6_K) s.group_sums = s.group_scales = 2 * blocks + kGemvPadFloats;
  return s;
}

uint64_t GemvInput::Bytes(TensorType weight_type, size_t n) {
  const Sizes s = SizesFor(weight_type, n);
  return (s.x + s.scales + s.sums + s.group_sums + s.group_scales) * sizeof(float) +
         s.q * sizeof(int16_t);
}

void GemvInput::Prepare(TensorType weight_type, const float* x, size_t n) {
  if (!GemvSupports(weight_type)) {
    ThrowInputError("no GEMV kernel for tensor type ",
                    TensorTypeName(weight_type));
  }
  const uint32_t block = GetTensorTypeInfo(weight_type).block_elems;
  if (n % block != 0) {
    ThrowInputError("GEMV input of ", n, " elements is not a whole number of ",
                    TensorTypeName(weight_type), " blocks of ", block);
  }
  type_ = weight_type;
  n_ = n;
  const Sizes sizes = SizesFor(weight_type, n);
  Reserve(x_, sizes.x);
  std::memcpy(x_.data(), x, n * sizeof(float));
  if (!IsQuantized(weight_type)) return;

  const size_t blocks = n / 32;
  // Q4_0 pairs blocks (gemv-inl.h: PairLayoutIndex); an odd last block gets
  // a zero partner. Q4_0S too, or in quads where the activations are int8
  // (QuadLayoutIndex), as Q4_0 on targets that take its quad form (the
  // target decides: QuantizeActivationsImpl).
  const bool pairs = IsQ4_0Family(weight_type);
  const bool quads = weight_type == TensorType::kQ4_0S;
  Reserve(q_, sizes.q);
  if (pairs && blocks % 2 == 1) std::memset(q_.data() + 32 * (blocks - 1), 0, 64 * sizeof(int16_t));
  Reserve(scales_, sizes.scales);
  Reserve(sums_, sizes.sums);
  const bool groups = weight_type == TensorType::kQ6_K;
  if (groups) {
    Reserve(group_sums_, sizes.group_sums);
    Reserve(group_scales_, sizes.group_scales);
  }
  HWY_DYNAMIC_DISPATCH(QuantizeActivationsT)
  (x, n, pairs, quads, weight_type == TensorType::kQ8_0, q_.data(), scales_.data(), sums_.data(),
   groups ? group_sums_.data() : nullptr, groups ? group_scales_.data() : nullptr);
  // Zero padding: kernels load whole vectors past the last block and
  // multiply the extra lanes by these zeros.
  std::memset(scales_.data() + blocks, 0, kGemvPadFloats * sizeof(float));
  std::memset(sums_.data() + blocks, 0, kGemvPadFloats * sizeof(float));
  if (groups) {
    std::memset(group_sums_.data() + 2 * blocks, 0, kGemvPadFloats * sizeof(float));
    std::memset(group_scales_.data() + 2 * blocks, 0, kGemvPadFloats * sizeof(float));
  }
}

void GemvBatch(TensorType type, const void* weights, size_t row_bytes, size_t cols,
               const GemvInput* x, size_t n, size_t row_begin, size_t row_end, float* y,
               size_t y_stride) {
  for (size_t t = 0; t < n; ++t) {
    if (x[t].weight_type() != type || x[t].size() != cols) {
      throw std::invalid_argument(StrCat(
          "Gemv: input prepared for ", TensorTypeName(x[t].weight_type()), " x ",
          x[t].size(), ", used with ", TensorTypeName(type), " x ", cols));
    }
  }
  uint64_t bytes = 0;
  if (!TensorTypeBytes(type, cols, &bytes) || bytes > row_bytes) {
    throw std::invalid_argument(StrCat("Gemv: rows of ", row_bytes,
                                       " bytes cannot hold ", cols, " ",
                                       TensorTypeName(type), " elements"));
  }
  if (row_begin >= row_end || n == 0) return;
  if (cols == 0) {  // empty dot products (the kernels assume a block)
    for (size_t t = 0; t < n; ++t) {
      for (size_t r = row_begin; r < row_end; ++r) y[t * y_stride + r] = 0.0f;
    }
    return;
  }
  HWY_DYNAMIC_DISPATCH(GemvT)(type, weights, row_bytes, cols, x, n, row_begin, row_end, y,
                              y_stride);
}

void Gemv(TensorType type, const void* weights, size_t row_bytes, size_t cols,
          const GemvInput& x, size_t row_begin, size_t row_end, float* y) {
  GemvBatch(type, weights, row_bytes, cols, &x, 1, row_begin, row_end, y, 0);
}

void GemvReference(TensorType type, const void* weights, size_t row_bytes,
                   size_t cols, const float* x, size_t row_begin,
                   size_t row_end, float* y) {
  std::vector<float> row(cols);
  const uint8_t* base = static_cast<const uint8_t*>(weights);
  for (size_t r = row_begin; r < row_end; ++r) {
    DequantizeRowReference(type, base + r * row_bytes, cols, row.data());
    double sum = 0.0;
    for (size_t i = 0; i < cols; ++i) {
      sum += static_cast<double>(row[i]) * static_cast<double>(x[i]);
    }
    y[r] = static_cast<float>(sum);
  }
}

}  // namespace sparrow::simd

#endif  // HWY_ONCE
