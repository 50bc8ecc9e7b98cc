// Per-target SwiGLU gate (activation.h): out = g / (1 + exp(-g)) * up.

#if defined(SPARROW_SIMD_ACTIVATION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SPARROW_SIMD_ACTIVATION_INL_H_
#undef SPARROW_SIMD_ACTIVATION_INL_H_
#else
#define SPARROW_SIMD_ACTIVATION_INL_H_
#endif

#include <cstddef>

#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include "simd/vector_ops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sparrow::simd {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// silu(g) * up, rounded like the scalar expression g / (1 + exp(-g)) * up.
template <class D>
HWY_INLINE hn::Vec<D> SiluMulVec(D d, hn::Vec<D> g, hn::Vec<D> up) {
  // Highway's Exp is specified up to +104; exp(-g) already overflows to
  // +inf at 88.8, so clamping at 100 changes nothing but keeps us in range
  // (g -> -inf still gives -inf / inf = NaN, as libm does).
  const auto e = hn::Exp(d, hn::Min(hn::Neg(g), hn::Set(d, 100.0f)));
  const auto silu = hn::Div(g, hn::Add(hn::Set(d, 1.0f), e));
  return hn::Mul(silu, up);
}

// `out` may alias `gate` or `up` (each element is read before it is written).
HWY_INLINE void SiluMulImpl(const float* gate, const float* up, size_t n,
                            float* out) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    hn::StoreU(SiluMulVec(d, hn::LoadU(d, gate + i), hn::LoadU(d, up + i)), d,
               out + i);
  }
  if (i < n) {
    const auto r = SiluMulVec(d, LoadTail(d, gate + i, n - i),
                              LoadTail(d, up + i, n - i));
    StoreTail(d, r, out + i, n - i);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::simd
HWY_AFTER_NAMESPACE();

#endif  // SPARROW_SIMD_ACTIVATION_INL_H_ toggle guard
