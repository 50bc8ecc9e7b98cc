// Dispatch and scalar reference for RMSNorm.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "simd/norm.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "simd/norm-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sparrow::simd {
namespace HWY_NAMESPACE {

void RmsNormT(const float* x, const float* weight, size_t n, float eps,
              float* out) {
  RmsNormImpl(x, weight, n, eps, out);
}

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include <cmath>

#include "simd/norm.h"

namespace sparrow::simd {

HWY_EXPORT(RmsNormT);

void RmsNorm(const float* x, const float* weight, size_t n, float eps,
             float* out) {
  HWY_DYNAMIC_DISPATCH(RmsNormT)(x, weight, n, eps, out);
}

// llama.cpp's sequence of roundings, written out one element at a time.
void RmsNormReference(const float* x, const float* weight, size_t n, float eps,
                      float* out) {
  if (n == 0) return;
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (size_t i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

}  // namespace sparrow::simd

#endif  // HWY_ONCE
