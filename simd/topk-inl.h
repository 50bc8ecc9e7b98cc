// Per-target parts of top-K selection (topk.h): the passes over all n
// values. CollectAtLeast keeps the indices of values whose key reaches a
// threshold; MakeRankItems builds the 64-bit rank items (see topk.cc) of a
// whole array. Choosing the threshold and ordering the survivors is scalar
// work in topk.cc.

#if defined(SPARROW_SIMD_TOPK_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SPARROW_SIMD_TOPK_INL_H_
#undef SPARROW_SIMD_TOPK_INL_H_
#else
#define SPARROW_SIMD_TOPK_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include <hwy/highway.h>

#include "simd/vector_ops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sparrow::simd {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// Lanes whose key (v, or |v| when `abs`) is >= t; NaN never is.
template <class D>
HWY_INLINE hn::Mask<D> KeyAtLeast(D d, hn::Vec<D> v, hn::Vec<D> t, bool abs) {
  (void)d;
  return hn::Ge(abs ? hn::Abs(v) : v, t);
}

// Writes, in increasing order, every index i < n with key(v[i]) >= t to
// `out` and returns how many. `out` must have room for n + Lanes entries:
// each store may write a whole vector past the last kept index.
template <class D>
HWY_INLINE size_t CollectAtLeastImpl(D d, const float* HWY_RESTRICT v,
                                     size_t n, float t, bool abs,
                                     uint32_t* HWY_RESTRICT out) {
  const hn::RebindToUnsigned<D> du;
  const size_t N = hn::Lanes(d);
  const auto vt = hn::Set(d, t);
  auto idx = hn::Iota(du, 0);
  const auto step = hn::Set(du, static_cast<uint32_t>(N));
  size_t count = 0;
  size_t i = 0;
  // The threshold keeps few values, so most vectors have no hit: test four
  // at a time and only compress when something is kept.
  for (; i + 4 * N <= n; i += 4 * N) {
    const auto m0 = KeyAtLeast(d, hn::LoadU(d, v + i), vt, abs);
    const auto m1 = KeyAtLeast(d, hn::LoadU(d, v + i + N), vt, abs);
    const auto m2 = KeyAtLeast(d, hn::LoadU(d, v + i + 2 * N), vt, abs);
    const auto m3 = KeyAtLeast(d, hn::LoadU(d, v + i + 3 * N), vt, abs);
    if (HWY_UNLIKELY(!hn::AllFalse(d, hn::Or(hn::Or(m0, m1), hn::Or(m2, m3))))) {
      count += hn::CompressStore(idx, hn::RebindMask(du, m0), du, out + count);
      idx = hn::Add(idx, step);
      count += hn::CompressStore(idx, hn::RebindMask(du, m1), du, out + count);
      idx = hn::Add(idx, step);
      count += hn::CompressStore(idx, hn::RebindMask(du, m2), du, out + count);
      idx = hn::Add(idx, step);
      count += hn::CompressStore(idx, hn::RebindMask(du, m3), du, out + count);
      idx = hn::Add(idx, step);
    } else {
      idx = hn::Add(idx, hn::Set(du, static_cast<uint32_t>(4 * N)));
    }
  }
  for (; i + N <= n; i += N) {
    const auto m = KeyAtLeast(d, hn::LoadU(d, v + i), vt, abs);
    count += hn::CompressStore(idx, hn::RebindMask(du, m), du, out + count);
    idx = hn::Add(idx, step);
  }
  if (i < n) {
    // Zero-filled lanes past the end are masked off.
    const auto m = hn::And(hn::FirstN(d, n - i),
                           KeyAtLeast(d, LoadTail(d, v + i, n - i), vt, abs));
    count += hn::CompressStore(idx, hn::RebindMask(du, m), du, out + count);
  }
  return count;
}

// The 32-bit order key of topk.cc's OrderKey, for a vector: larger ranks
// first, 0 only for NaN, -0 equal to +0.
template <class DF>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> OrderKeys(DF df, hn::Vec<DF> v,
                                                       bool abs) {
  const hn::RebindToSigned<DF> di;
  const hn::RebindToUnsigned<DF> du;
  const auto is_nan = hn::RebindMask(du, hn::IsNaN(v));
  hn::Vec<decltype(du)> key;
  if (abs) {
    const auto magnitude = hn::And(hn::BitCast(di, v), hn::Set(di, 0x7FFFFFFF));
    key = hn::Add(hn::BitCast(du, magnitude), hn::Set(du, 1u));
  } else {
    // Adding +0 turns -0 into +0. Then negative values get all bits flipped
    // (reversing their order, below every positive value) and non-negative
    // ones get the sign bit set.
    const auto bits = hn::BitCast(di, hn::Add(v, hn::Zero(df)));
    const auto flip =
        hn::Or(hn::BroadcastSignBit(bits),
               hn::Set(di, static_cast<int32_t>(0x80000000u)));
    key = hn::BitCast(du, hn::Xor(bits, flip));
  }
  return hn::IfThenZeroElse(is_nan, key);
}

// items[i] = (~OrderKey(v[i]) << 32) | i for the longest prefix of whole
// vectors; returns its length (the caller finishes the rest).
HWY_INLINE size_t MakeRankItemsImpl(const float* HWY_RESTRICT v, size_t n,
                                    bool abs, uint64_t* HWY_RESTRICT items) {
  const hn::ScalableTag<uint64_t> d64;
  const hn::Rebind<float, decltype(d64)> df;  // as many f32 lanes as u64
  const size_t N = hn::Lanes(d64);
  auto index = hn::Iota(d64, 0);
  const auto step = hn::Set(d64, static_cast<uint64_t>(N));
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto key = OrderKeys(df, hn::LoadU(df, v + i), abs);
    const auto high = hn::ShiftLeft<32>(hn::PromoteTo(d64, hn::Not(key)));
    hn::StoreU(hn::Or(high, index), d64, items + i);
    index = hn::Add(index, step);
  }
  return i;
}

// out[i] = |x[i]| * (rows[i] < 0 ? gamma : 1) for the longest prefix of
// whole vectors; returns its length (the caller finishes the rest with the
// same scalar expression, so every element rounds alike).
template <class D>
HWY_INLINE size_t CacheWeightedMagnitudesImpl(D d, const float* HWY_RESTRICT x,
                                              const int32_t* HWY_RESTRICT rows,
                                              float gamma, size_t n,
                                              float* HWY_RESTRICT out) {
  const hn::RebindToSigned<D> di;
  const size_t N = hn::Lanes(d);
  const auto one = hn::Set(d, 1.0f);
  const auto penalty = hn::Set(d, gamma);
  const auto zero = hn::Zero(di);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto absent = hn::RebindMask(d, hn::Lt(hn::LoadU(di, rows + i), zero));
    const auto weight = hn::IfThenElse(absent, penalty, one);
    hn::StoreU(hn::Mul(hn::Abs(hn::LoadU(d, x + i)), weight), d, out + i);
  }
  return i;
}

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::simd
HWY_AFTER_NAMESPACE();

#endif  // SPARROW_SIMD_TOPK_INL_H_ toggle guard
