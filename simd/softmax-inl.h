// Per-target softmax (softmax.h).
//
// Same steps and roundings as llama.cpp's CPU softmax: subtract the maximum
// in f32, exponentiate, sum the f32 exponentials in double, multiply by
// f32(1 / sum). Exp is Highway's (contrib/math, <= 1 ulp) instead of libm's.

#if defined(SPARROW_SIMD_SOFTMAX_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SPARROW_SIMD_SOFTMAX_INL_H_
#undef SPARROW_SIMD_SOFTMAX_INL_H_
#else
#define SPARROW_SIMD_SOFTMAX_INL_H_
#endif

#include <cstddef>

#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include "simd/vector_ops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sparrow::simd {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// exp(v - max) for arguments <= 0 (and NaN). Highway's Exp maps NaN to 0;
// we pass NaN through so a NaN logit poisons the sum (like libm's expf)
// instead of silently vanishing.
template <class D>
HWY_INLINE hn::Vec<D> ExpShifted(D d, hn::Vec<D> v, hn::Vec<D> vmax) {
  const auto a = hn::Sub(v, vmax);
  return hn::IfThenElse(hn::IsNaN(a), a, hn::Exp(d, a));
}

// Writes exp(x[i] - max) to x and returns their sum, accumulated in double.
HWY_INLINE double ExpShiftedInPlace(float* HWY_RESTRICT x, size_t n,
                                   float max) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto vmax = hn::Set(d, max);
  double sum = 0.0;
  size_t i = 0;
#if HWY_HAVE_FLOAT64
  const hn::ScalableTag<double> d64;
  const hn::Rebind<float, decltype(d64)> d32;  // half as many f32 lanes
  const size_t N64 = hn::Lanes(d64);
  auto vsum = hn::Zero(d64);
  for (; i + N <= n; i += N) {
    hn::StoreU(ExpShifted(d, hn::LoadU(d, x + i), vmax), d, x + i);
    // Reload what we just stored as halves and widen (there is no portable
    // upper-half promotion in Highway 1.0.3); the loads hit the store buffer.
    for (size_t j = 0; j < N; j += N64) {
      vsum = hn::Add(vsum, hn::PromoteTo(d64, hn::LoadU(d32, x + i + j)));
    }
  }
  sum = hn::GetLane(hn::SumOfLanes(d64, vsum));
#else
  // f32 lanes only: Lanes partial sums of values in [0, 1].
  auto vsum = hn::Zero(d);
  for (; i + N <= n; i += N) {
    const auto e = ExpShifted(d, hn::LoadU(d, x + i), vmax);
    hn::StoreU(e, d, x + i);
    vsum = hn::Add(vsum, e);
  }
  sum = hn::GetLane(hn::SumOfLanes(d, vsum));
#endif
  if (i < n) {
    StoreTail(d, ExpShifted(d, LoadTail(d, x + i, n - i), vmax), x + i,
              n - i);
    for (; i < n; ++i) sum += static_cast<double>(x[i]);
  }
  return sum;
}

HWY_INLINE void SoftmaxImpl(float* HWY_RESTRICT x, size_t n) {
  if (n == 0) return;
  const hn::ScalableTag<float> d;
  const double sum = ExpShiftedInPlace(x, n, MaxIgnoringNaN(d, x, n));
  ScaleInPlaceImpl(d, static_cast<float>(1.0 / sum), x, n);
}

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::simd
HWY_AFTER_NAMESPACE();

#endif  // SPARROW_SIMD_SOFTMAX_INL_H_ toggle guard
