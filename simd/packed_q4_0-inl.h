// Per-target kernels of packed_q4_0.h: the int8 activation quantizer and
// the GEMV over groups of 8 interleaved Q4_0 rows.
//
// One vector of 32-bit lanes maps a lane to a row: a 32-byte chunk holds 4
// nibble bytes of each of the 8 rows, so multiplying it by the block's 4
// matching activations (the same 4 bytes in every lane) and summing each
// lane's 4 products gives all 8 rows' partial dot products at once. On x86
// the 8-bit products and their pairwise sums are SSSE3's pmaddubsw (u8 x i8
// -> i16): Highway 1.0.3 has no 8-bit multiply-add, and emulating it takes 8
// ops instead of 1 (see packed_q4_0.h for the measurement). Other targets
// run the same steps emulated with Highway ops, and the engine keeps the
// plain kernel there (PackedQ4_0Preferred).
//
// Exactness: a lane's int16 sum over one block covers 16 products of a
// nibble (0..15) and an int8 (-127..127), |sum| <= 30480, so no step
// saturates; the Q4_0 offset of -8 is applied per block through the exact
// sum of the activations, as in gemv-inl.h.

#if defined(SPARROW_SIMD_PACKED_Q4_0_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SPARROW_SIMD_PACKED_Q4_0_INL_H_
#undef SPARROW_SIMD_PACKED_Q4_0_INL_H_
#else
#define SPARROW_SIMD_PACKED_Q4_0_INL_H_
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include "simd/quant_blocks.h"  // HalfBitsToFloat
#include "simd/quantize-inl.h"  // PromoteHalf

HWY_BEFORE_NAMESPACE();
namespace sparrow::simd {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

inline constexpr size_t kPackedBlockBytes = 8 * 18;  // one block of 8 rows
inline constexpr size_t kPackedScaleBytes = 16;      // 8 f16 scales first

// x86 targets with pmaddubsw, in the widths our capped tags produce.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_SSSE3
#define SPARROW_PACKED_Q4_0_MADDUBS 1
#else
#undef SPARROW_PACKED_Q4_0_MADDUBS
#endif

HWY_INLINE bool PackedPreferredImpl() {
#ifdef SPARROW_PACKED_Q4_0_MADDUBS
  return true;
#else
  return false;
#endif
}

// Quantizes x (n a multiple of 32) to int8 per block of 32.
HWY_INLINE void QuantizeInt8Impl(const float* HWY_RESTRICT x, size_t n,
                                 int8_t* HWY_RESTRICT q, float* HWY_RESTRICT scales,
                                 float* HWY_RESTRICT sums) {
  const hn::CappedTag<float, 16> df;
  const hn::Rebind<int32_t, decltype(df)> di32;
  const hn::Rebind<int16_t, decltype(df)> di16;
  const hn::Rebind<int8_t, decltype(df)> di8;
  const size_t N = hn::Lanes(df);
  for (size_t b = 0; b < n / 32; ++b) {
    const float* xb = x + 32 * b;
    auto vmax = hn::Zero(df);
    auto poison = hn::Zero(df);  // NaN iff some element is inf or NaN
    for (size_t s = 0; s < 32; s += N) {
      const auto v = hn::LoadU(df, xb + s);
      vmax = hn::Max(vmax, hn::Abs(v));
      poison = hn::MulAdd(v, hn::Zero(df), poison);
    }
    const float amax = hn::GetLane(hn::SumOfLanes(df, poison)) +
                       hn::GetLane(hn::MaxOfLanes(df, vmax));
    if (!std::isfinite(amax)) {
      scales[b] = std::numeric_limits<float>::quiet_NaN();
      sums[b] = 0.0f;
      std::memset(q + 32 * b, 0, 32);
      continue;
    }
    scales[b] = amax / 127.0f;
    const auto vinv = hn::Set(df, amax > 0.0f ? 127.0f / amax : 0.0f);
    auto vsum = hn::Zero(di32);
    for (size_t s = 0; s < 32; s += N) {
      const auto qi = hn::NearestInt(hn::Mul(hn::LoadU(df, xb + s), vinv));
      hn::StoreU(hn::DemoteTo(di8, hn::DemoteTo(di16, qi)), di8, q + 32 * b + s);
      vsum = hn::Add(vsum, qi);
    }
    sums[b] = static_cast<float>(hn::GetLane(hn::SumOfLanes(di32, vsum)));
  }
}

#if HWY_TARGET == HWY_SCALAR
// One lane per vector: the integer steps in plain code, per row.
HWY_INLINE void PackedQ4_0GroupImpl(const uint8_t* HWY_RESTRICT p, size_t nblocks,
                                    const int8_t* HWY_RESTRICT xq,
                                    const float* HWY_RESTRICT sx,
                                    const float* HWY_RESTRICT sums, float* HWY_RESTRICT y) {
  float acc[8] = {}, off[8] = {};
  for (size_t b = 0; b < nblocks; ++b, p += kPackedBlockBytes) {
    const int8_t* xb = xq + 32 * b;
    for (size_t r = 0; r < 8; ++r) {
      int32_t dot = 0;
      for (size_t k = 0; k < 4; ++k) {
        for (size_t j = 0; j < 4; ++j) {
          const uint8_t byte = p[kPackedScaleBytes + 32 * k + 4 * r + j];
          dot += (byte & 15) * xb[4 * k + j] + (byte >> 4) * xb[16 + 4 * k + j];
        }
      }
      uint16_t h;
      std::memcpy(&h, p + 2 * r, 2);
      const float scale = HalfBitsToFloat(h) * sx[b];
      acc[r] += static_cast<float>(dot) * scale;
      off[r] += scale * sums[b];
    }
  }
  for (size_t r = 0; r < 8; ++r) y[r] = acc[r] - 8.0f * off[r];
}
#else

// Lane i of the result (int16) = a[2i] * b[2i] + a[2i+1] * b[2i+1], with a
// unsigned and b signed bytes; the callers' operands never saturate it.
template <class DU8>
HWY_INLINE hn::Vec<hn::Repartition<int16_t, DU8>> MulAddBytePairs(DU8 du8, hn::Vec<DU8> a,
                                                                 hn::Vec<DU8> b) {
  const hn::Repartition<int16_t, DU8> di16;
#ifdef SPARROW_PACKED_Q4_0_MADDUBS
  (void)du8;
#if HWY_TARGET <= HWY_AVX2  // CappedTag<uint8_t, 32>: 256-bit vectors
  return hn::Vec<decltype(di16)>{_mm256_maddubs_epi16(a.raw, b.raw)};
#else
  return hn::Vec<decltype(di16)>{_mm_maddubs_epi16(a.raw, b.raw)};
#endif
#else
  const auto a16 = hn::BitCast(di16, a);
  const auto b16 = hn::BitCast(di16, b);
  const auto a_even = hn::And(a16, hn::Set(di16, 0xFF));
  const auto a_odd = hn::BitCast(di16, hn::ShiftRight<8>(hn::BitCast(hn::RebindToUnsigned<decltype(di16)>(), a16)));
  const auto b_even = hn::ShiftRight<8>(hn::ShiftLeft<8>(b16));
  const auto b_odd = hn::ShiftRight<8>(b16);
  return hn::Add(hn::Mul(a_even, b_even), hn::Mul(a_odd, b_odd));
#endif
}

// Lane i of the result (int32) = lanes 2i and 2i+1 of v (int16) summed.
template <class DI16>
HWY_INLINE hn::Vec<hn::RepartitionToWide<DI16>> SumInt16Pairs(DI16 di16, hn::Vec<DI16> v) {
  const hn::RepartitionToWide<DI16> di32;
#ifdef SPARROW_PACKED_Q4_0_MADDUBS
  (void)di16;
#if HWY_TARGET <= HWY_AVX2
  return hn::Vec<decltype(di32)>{_mm256_madd_epi16(v.raw, _mm256_set1_epi16(1))};
#else
  return hn::Vec<decltype(di32)>{_mm_madd_epi16(v.raw, _mm_set1_epi16(1))};
#endif
#else
  const auto v32 = hn::BitCast(di32, v);
  return hn::Add(hn::ShiftRight<16>(hn::ShiftLeft<16>(v32)), hn::ShiftRight<16>(v32));
#endif
}

// One vector's rows (all 8, or 4 on 128-bit targets: part 0 or 1) of one
// block: adds their dot products times their scales to `acc`, and the
// scales times the block's activation sum to `off`.
template <class DU8, class DF>
HWY_INLINE void PackedQ4_0Part(DU8 du8, DF df, const uint8_t* HWY_RESTRICT p,
                               const int8_t* HWY_RESTRICT xb, size_t part, hn::Vec<DF> vsx,
                               hn::Vec<DF> vsum, hn::Vec<DF>& acc, hn::Vec<DF>& off) {
  const hn::Repartition<int16_t, DU8> di16;
  const hn::Repartition<int32_t, DU8> di32;
  const hn::Repartition<uint16_t, DU8> du16;
  const hn::Rebind<hwy::float16_t, DF> df16;
  const size_t bytes = hn::Lanes(du8);
  const auto low4 = hn::Set(du8, 15);
  auto dot16 = hn::Zero(di16);
  for (size_t k = 0; k < 4; ++k) {
    const auto w = hn::LoadU(du8, p + kPackedScaleBytes + 32 * k + bytes * part);
    const auto lo = hn::And(w, low4);
    const auto hi = hn::And(hn::BitCast(du8, hn::ShiftRight<4>(hn::BitCast(du16, w))), low4);
    int32_t x_lo, x_hi;
    std::memcpy(&x_lo, xb + 4 * k, 4);
    std::memcpy(&x_hi, xb + 16 + 4 * k, 4);
    dot16 = hn::Add(dot16, MulAddBytePairs(du8, lo, hn::BitCast(du8, hn::Set(di32, x_lo))));
    dot16 = hn::Add(dot16, MulAddBytePairs(du8, hi, hn::BitCast(du8, hn::Set(di32, x_hi))));
  }
  const auto dw = PromoteHalf(
      df, hn::LoadU(df16, reinterpret_cast<const hwy::float16_t*>(p) + bytes / 4 * part));
  const auto scale = hn::Mul(dw, vsx);
  acc = hn::MulAdd(hn::ConvertTo(df, SumInt16Pairs(di16, dot16)), scale, acc);
  off = hn::MulAdd(scale, vsum, off);
}

// One group of 8 rows: y[0..7].
HWY_INLINE void PackedQ4_0GroupImpl(const uint8_t* HWY_RESTRICT p, size_t nblocks,
                                    const int8_t* HWY_RESTRICT xq,
                                    const float* HWY_RESTRICT sx,
                                    const float* HWY_RESTRICT sums, float* HWY_RESTRICT y) {
  // At most 32 bytes (8 rows) per vector; 128-bit targets take two parts
  // of 4 rows per chunk.
  const hn::CappedTag<uint8_t, 32> du8;
  const hn::Repartition<float, decltype(du8)> df;
  static_assert(hn::MaxLanes(du8) >= 16, "needs at least 128-bit vectors");
  const bool two_parts = hn::Lanes(du8) < 32;
  auto acc0 = hn::Zero(df), acc1 = hn::Zero(df);
  auto off0 = hn::Zero(df), off1 = hn::Zero(df);
  for (size_t b = 0; b < nblocks; ++b, p += kPackedBlockBytes) {
    hwy::Prefetch(p + 2048);
    hwy::Prefetch(p + 2048 + 64);
    hwy::Prefetch(p + 2048 + 128);
    const int8_t* xb = xq + 32 * b;
    const auto vsx = hn::Set(df, sx[b]);
    const auto vsum = hn::Set(df, sums[b]);
    PackedQ4_0Part(du8, df, p, xb, 0, vsx, vsum, acc0, off0);
    if (two_parts) PackedQ4_0Part(du8, df, p, xb, 1, vsx, vsum, acc1, off1);
  }
  const auto eight = hn::Set(df, 8.0f);
  hn::StoreU(hn::NegMulAdd(eight, off0, acc0), df, y);
  if (two_parts) hn::StoreU(hn::NegMulAdd(eight, off1, acc1), df, y + hn::Lanes(df));
}
#endif  // HWY_TARGET == HWY_SCALAR

HWY_INLINE void PackedQ4_0GemvImpl(const uint8_t* HWY_RESTRICT data, size_t cols,
                                   const int8_t* HWY_RESTRICT xq,
                                   const float* HWY_RESTRICT sx,
                                   const float* HWY_RESTRICT sums, size_t group_begin,
                                   size_t group_end, float* HWY_RESTRICT y) {
  const size_t nblocks = cols / 32;
  const size_t group_bytes = nblocks * kPackedBlockBytes;
  for (size_t g = group_begin; g < group_end; ++g) {
    PackedQ4_0GroupImpl(data + g * group_bytes, nblocks, xq, sx, sums, y + 8 * g);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::simd
HWY_AFTER_NAMESPACE();

#endif  // include guard
