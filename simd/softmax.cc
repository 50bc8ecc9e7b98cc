// Dispatch and scalar reference for softmax.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "simd/softmax.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "simd/softmax-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sparrow::simd {
namespace HWY_NAMESPACE {

void SoftmaxT(float* x, size_t n) { SoftmaxImpl(x, n); }

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include <cmath>
#include <limits>

#include "simd/softmax.h"

namespace sparrow::simd {

HWY_EXPORT(SoftmaxT);

void Softmax(float* x, size_t n) { HWY_DYNAMIC_DISPATCH(SoftmaxT)(x, n); }

void SoftmaxReference(float* x, size_t n) {
  if (n == 0) return;
  float max = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < n; ++i) {
    if (x[i] > max) max = x[i];  // false for NaN: NaN is skipped
  }
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += static_cast<double>(x[i]);
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (size_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace sparrow::simd

#endif  // HWY_ONCE
