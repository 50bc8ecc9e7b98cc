// Per-target rotary position embedding (rope.h).
//
// Each pair (x0, x1) becomes (x0 cos - x1 sin, x0 sin + x1 cos). The products
// are written as separate multiplies; GCC may still fuse one of them into an
// FMA on targets that have it (C++ defaults to -ffp-contract=fast), so
// results can differ from the scalar reference in the last bit.

#if defined(SPARROW_SIMD_ROPE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SPARROW_SIMD_ROPE_INL_H_
#undef SPARROW_SIMD_ROPE_INL_H_
#else
#define SPARROW_SIMD_ROPE_INL_H_
#endif

#include <cstddef>

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace sparrow::simd {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

template <class D, class V = hn::Vec<D>>
HWY_INLINE void RotatePairs(D /*d*/, V& x0, V& x1, V c, V s) {
  const V r0 = hn::Sub(hn::Mul(x0, c), hn::Mul(x1, s));
  const V r1 = hn::Add(hn::Mul(x0, s), hn::Mul(x1, c));
  x0 = r0;
  x1 = r1;
}

HWY_INLINE void RotatePairScalar(float* HWY_RESTRICT p0,
                                 float* HWY_RESTRICT p1, float c, float s) {
  const float x0 = *p0;
  const float x1 = *p1;
  *p0 = x0 * c - x1 * s;
  *p1 = x0 * s + x1 * c;
}

// Pairs (2i, 2i + 1) of the first rope_dims floats of one head.
HWY_INLINE void RopeAdjacentHead(float* HWY_RESTRICT head, size_t pairs,
                                 const float* HWY_RESTRICT cos,
                                 const float* HWY_RESTRICT sin) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= pairs; i += N) {
    hn::Vec<decltype(d)> x0, x1;
    hn::LoadInterleaved2(d, head + 2 * i, x0, x1);
    RotatePairs(d, x0, x1, hn::LoadU(d, cos + i), hn::LoadU(d, sin + i));
    hn::StoreInterleaved2(x0, x1, d, head + 2 * i);
  }
  // Head sizes are usually multiples of the vector; short heads (and
  // 64-lane SVE) finish here.
  for (; i < pairs; ++i) {
    RotatePairScalar(head + 2 * i, head + 2 * i + 1, cos[i], sin[i]);
  }
}

// Pairs (i, i + pairs) of the first rope_dims = 2 * pairs floats of one head.
HWY_INLINE void RopeHalvesHead(float* HWY_RESTRICT head, size_t pairs,
                               const float* HWY_RESTRICT cos,
                               const float* HWY_RESTRICT sin) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  float* HWY_RESTRICT second = head + pairs;
  size_t i = 0;
  for (; i + N <= pairs; i += N) {
    auto x0 = hn::LoadU(d, head + i);
    auto x1 = hn::LoadU(d, second + i);
    RotatePairs(d, x0, x1, hn::LoadU(d, cos + i), hn::LoadU(d, sin + i));
    hn::StoreU(x0, d, head + i);
    hn::StoreU(x1, d, second + i);
  }
  for (; i < pairs; ++i) {
    RotatePairScalar(head + i, second + i, cos[i], sin[i]);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::simd
HWY_AFTER_NAMESPACE();

#endif  // SPARROW_SIMD_ROPE_INL_H_ toggle guard
