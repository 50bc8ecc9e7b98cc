// Per-target code for the small vector operations (vector_ops.h), plus the
// partial-vector load/store helpers every kernel family in simd/ shares.
//
// Included once per target by simd/vector_ops.cc (foreach_target) and by other
// families' -inl.h files, so everything here is inline or a template.

// Per-target include guard: toggled by foreach_target.h for each target.
#if defined(SPARROW_SIMD_VECTOR_OPS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SPARROW_SIMD_VECTOR_OPS_INL_H_
#undef SPARROW_SIMD_VECTOR_OPS_INL_H_
#else
#define SPARROW_SIMD_VECTOR_OPS_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <limits>

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace sparrow::simd {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// Targets whose MaskedLoad/BlendedStore never touch masked-off memory (AVX2
// vmaskmov, AVX-512 and SVE predication). Elsewhere (SSE4, NEON) Highway
// 1.0.3 emulates them with a full-width access, which could read or write
// past the end of the caller's array, so we go through a stack buffer.
#undef SPARROW_SIMD_HAVE_SAFE_MASKED_ACCESS
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || \
    HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_SVE || \
    HWY_TARGET == HWY_SVE2 || HWY_TARGET == HWY_SVE_256 || \
    HWY_TARGET == HWY_SVE2_128
#define SPARROW_SIMD_HAVE_SAFE_MASKED_ACCESS 1
#else
#define SPARROW_SIMD_HAVE_SAFE_MASKED_ACCESS 0
#endif

// Loads the first `count` (< Lanes(d)) elements of `p`; the other lanes are
// zero. Never reads past p[count - 1].
template <class D>
HWY_INLINE hn::Vec<D> LoadTail(D d, const hn::TFromD<D>* HWY_RESTRICT p,
                               size_t count) {
#if SPARROW_SIMD_HAVE_SAFE_MASKED_ACCESS
  return hn::MaskedLoad(hn::FirstN(d, count), d, p);
#else
  using T = hn::TFromD<D>;
  HWY_ALIGN T buf[HWY_MAX_BYTES / sizeof(T)] = {};
  std::memcpy(buf, p, count * sizeof(T));
  return hn::Load(d, buf);
#endif
}

// Stores the first `count` (< Lanes(d)) lanes of `v` to `p`; never writes
// past p[count - 1].
template <class D>
HWY_INLINE void StoreTail(D d, hn::Vec<D> v, hn::TFromD<D>* HWY_RESTRICT p,
                          size_t count) {
#if SPARROW_SIMD_HAVE_SAFE_MASKED_ACCESS
  hn::BlendedStore(v, hn::FirstN(d, count), d, p);
#else
  using T = hn::TFromD<D>;
  HWY_ALIGN T buf[HWY_MAX_BYTES / sizeof(T)];
  hn::Store(v, d, buf);
  std::memcpy(p, buf, count * sizeof(T));
#endif
}

// Sum of a[i] * b[i] in f32 with four independent accumulator vectors (hides
// the FMA latency; also 4 * Lanes partial sums, which keeps the rounding error
// well below that of one running sum).
template <class D>
HWY_INLINE float DotImpl(D d, const float* HWY_RESTRICT a,
                         const float* HWY_RESTRICT b, size_t n) {
  const size_t N = hn::Lanes(d);
  auto sum0 = hn::Zero(d);
  auto sum1 = hn::Zero(d);
  auto sum2 = hn::Zero(d);
  auto sum3 = hn::Zero(d);
  size_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    sum0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), sum0);
    sum1 = hn::MulAdd(hn::LoadU(d, a + i + N), hn::LoadU(d, b + i + N), sum1);
    sum2 = hn::MulAdd(hn::LoadU(d, a + i + 2 * N),
                      hn::LoadU(d, b + i + 2 * N), sum2);
    sum3 = hn::MulAdd(hn::LoadU(d, a + i + 3 * N),
                      hn::LoadU(d, b + i + 3 * N), sum3);
  }
  for (; i + N <= n; i += N) {
    sum0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), sum0);
  }
  if (i < n) {
    // Zero-filled lanes add 0 * 0.
    sum1 = hn::MulAdd(LoadTail(d, a + i, n - i), LoadTail(d, b + i, n - i),
                      sum1);
  }
  sum0 = hn::Add(hn::Add(sum0, sum1), hn::Add(sum2, sum3));
  return hn::GetLane(hn::SumOfLanes(d, sum0));
}

// y[i] += alpha * x[i] (one fused multiply-add where the target has FMA).
template <class D>
HWY_INLINE void AxpyImpl(D d, float alpha, const float* HWY_RESTRICT x,
                         float* HWY_RESTRICT y, size_t n) {
  const size_t N = hn::Lanes(d);
  const auto va = hn::Set(d, alpha);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    hn::StoreU(hn::MulAdd(va, hn::LoadU(d, x + i), hn::LoadU(d, y + i)), d,
               y + i);
  }
  if (i < n) {
    const auto r =
        hn::MulAdd(va, LoadTail(d, x + i, n - i), LoadTail(d, y + i, n - i));
    StoreTail(d, r, y + i, n - i);
  }
}

template <class D>
HWY_INLINE void AddInPlaceImpl(D d, const float* HWY_RESTRICT x,
                               float* HWY_RESTRICT y, size_t n) {
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    hn::StoreU(hn::Add(hn::LoadU(d, y + i), hn::LoadU(d, x + i)), d, y + i);
  }
  if (i < n) {
    const auto r =
        hn::Add(LoadTail(d, y + i, n - i), LoadTail(d, x + i, n - i));
    StoreTail(d, r, y + i, n - i);
  }
}

template <class D>
HWY_INLINE void ScaleInPlaceImpl(D d, float alpha, float* HWY_RESTRICT y,
                                 size_t n) {
  const size_t N = hn::Lanes(d);
  const auto va = hn::Set(d, alpha);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    hn::StoreU(hn::Mul(hn::LoadU(d, y + i), va), d, y + i);
  }
  if (i < n) {
    StoreTail(d, hn::Mul(LoadTail(d, y + i, n - i), va), y + i, n - i);
  }
}

// Largest value of x[0, n), ignoring NaN; -inf if there is none.
template <class D>
HWY_INLINE float MaxIgnoringNaN(D d, const float* HWY_RESTRICT x, size_t n) {
  const size_t N = hn::Lanes(d);
  const auto neg_inf = hn::Set(d, -std::numeric_limits<float>::infinity());
  // Max() of a NaN lane is target-dependent, so NaN lanes become -inf first.
  auto max0 = neg_inf;
  auto max1 = neg_inf;
  size_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    const auto v0 = hn::LoadU(d, x + i);
    const auto v1 = hn::LoadU(d, x + i + N);
    max0 = hn::Max(max0, hn::IfThenElse(hn::IsNaN(v0), neg_inf, v0));
    max1 = hn::Max(max1, hn::IfThenElse(hn::IsNaN(v1), neg_inf, v1));
  }
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(d, x + i);
    max0 = hn::Max(max0, hn::IfThenElse(hn::IsNaN(v), neg_inf, v));
  }
  if (i < n) {
    const auto v = LoadTail(d, x + i, n - i);
    const auto keep = hn::And(hn::FirstN(d, n - i), hn::Not(hn::IsNaN(v)));
    max1 = hn::Max(max1, hn::IfThenElse(keep, v, neg_inf));
  }
  // The lanes by hand, not MaxOfLanes: Highway 1.0.3's EMU128 version
  // starts from the lowest finite float, so lanes that are all -inf gave
  // -FLT_MAX (seen with clang 14), which no element equals.
  HWY_ALIGN float lanes[hn::MaxLanes(D())];
  hn::Store(hn::Max(max0, max1), d, lanes);
  float best = lanes[0];
  for (size_t k = 1; k < N; ++k) best = std::max(best, lanes[k]);
  return best;
}

// Lowest index i with x[i] == value (never true for NaN); n if none.
template <class D>
HWY_INLINE size_t FindFirstEqual(D d, const float* HWY_RESTRICT x, size_t n,
                                 float value) {
  const size_t N = hn::Lanes(d);
  const auto vv = hn::Set(d, value);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const intptr_t pos = hn::FindFirstTrue(d, hn::Eq(hn::LoadU(d, x + i), vv));
    if (pos >= 0) return i + static_cast<size_t>(pos);
  }
  if (i < n) {
    const auto hit = hn::And(hn::FirstN(d, n - i),
                             hn::Eq(LoadTail(d, x + i, n - i), vv));
    const intptr_t pos = hn::FindFirstTrue(d, hit);
    if (pos >= 0) return i + static_cast<size_t>(pos);
  }
  return n;
}

// Two passes (maximum, then its first occurrence): both stream through the
// data at full vector width, and the second usually stops early.
template <class D>
HWY_INLINE size_t ArgMaxImpl(D d, const float* HWY_RESTRICT x, size_t n) {
  if (n == 0) return 0;
  const size_t at = FindFirstEqual(d, x, n, MaxIgnoringNaN(d, x, n));
  return at == n ? 0 : at;  // every value NaN
}

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::simd
HWY_AFTER_NAMESPACE();

#endif  // SPARROW_SIMD_VECTOR_OPS_INL_H_ toggle guard
