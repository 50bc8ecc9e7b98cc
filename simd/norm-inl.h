// Per-target RMSNorm (norm.h).
//
// Rounding follows llama.cpp's CPU RMSNorm step by step, so both engines see
// the same normalised activations: each square is an f32 product, the squares
// are summed in double, mean = f32(sum / n), scale = 1 / sqrtf(mean + eps) in
// f32, and out = (x * scale) * weight. Only the order of the double additions
// differs, which moves the f32 mean only when the double sum lands within
// ~1e-16 relative of an f32 rounding boundary.

#if defined(SPARROW_SIMD_NORM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SPARROW_SIMD_NORM_INL_H_
#undef SPARROW_SIMD_NORM_INL_H_
#else
#define SPARROW_SIMD_NORM_INL_H_
#endif

#include <cmath>
#include <cstddef>

#include <hwy/highway.h>

#include "simd/vector_ops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sparrow::simd {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// Sum of the f32 squares x[i] * x[i], accumulated in double.
HWY_INLINE double SumOfSquares(const float* HWY_RESTRICT x, size_t n) {
#if HWY_HAVE_FLOAT64
  // Half-width f32 vectors, squared in f32, widened to full f64 vectors.
  // Two accumulators hide the add latency. For n = 4096 this is a few
  // hundred cycles, small next to the GEMV that follows.
  const hn::ScalableTag<double> d64;
  const hn::Rebind<float, decltype(d64)> d32;
  const size_t N = hn::Lanes(d64);
  auto sum0 = hn::Zero(d64);
  auto sum1 = hn::Zero(d64);
  size_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    const auto v0 = hn::LoadU(d32, x + i);
    const auto v1 = hn::LoadU(d32, x + i + N);
    sum0 = hn::Add(sum0, hn::PromoteTo(d64, hn::Mul(v0, v0)));
    sum1 = hn::Add(sum1, hn::PromoteTo(d64, hn::Mul(v1, v1)));
  }
  double sum = hn::GetLane(hn::SumOfLanes(d64, hn::Add(sum0, sum1)));
  for (; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  return sum;
#else
  // No f64 lanes (e.g. 32-bit Arm): f32 with 4 * Lanes partial sums, each
  // of n / (4 * Lanes) terms. Squares are positive, so the relative error is
  // below (n / (4 * Lanes) + log2(4 * Lanes)) * 2^-24, ~2e-6 for n = 8192
  // with 4 lanes: the mean then differs from the double one by a few ulp.
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  auto sum0 = hn::Zero(d);
  auto sum1 = hn::Zero(d);
  auto sum2 = hn::Zero(d);
  auto sum3 = hn::Zero(d);
  size_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    const auto v0 = hn::LoadU(d, x + i);
    const auto v1 = hn::LoadU(d, x + i + N);
    const auto v2 = hn::LoadU(d, x + i + 2 * N);
    const auto v3 = hn::LoadU(d, x + i + 3 * N);
    sum0 = hn::Add(sum0, hn::Mul(v0, v0));
    sum1 = hn::Add(sum1, hn::Mul(v1, v1));
    sum2 = hn::Add(sum2, hn::Mul(v2, v2));
    sum3 = hn::Add(sum3, hn::Mul(v3, v3));
  }
  sum0 = hn::Add(hn::Add(sum0, sum1), hn::Add(sum2, sum3));
  double sum = hn::GetLane(hn::SumOfLanes(d, sum0));
  for (; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  return sum;
#endif
}

// `out` may alias `x`: every x[i] is read before out[i] is written.
HWY_INLINE void RmsNormImpl(const float* x, const float* HWY_RESTRICT weight,
                            size_t n, float eps, float* out) {
  if (n == 0) return;
  const float mean = static_cast<float>(SumOfSquares(x, n) /
                                        static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);

  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto vscale = hn::Set(d, scale);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto r = hn::Mul(hn::Mul(hn::LoadU(d, x + i), vscale),
                           hn::LoadU(d, weight + i));
    hn::StoreU(r, d, out + i);
  }
  if (i < n) {
    const auto r = hn::Mul(hn::Mul(LoadTail(d, x + i, n - i), vscale),
                           LoadTail(d, weight + i, n - i));
    StoreTail(d, r, out + i, n - i);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::simd
HWY_AFTER_NAMESPACE();

#endif  // SPARROW_SIMD_NORM_INL_H_ toggle guard
