// Per-target kernels of packed_gemv.h: GEMV over groups of 8 interleaved
// Q4_0 or Q4_K rows, with 8-bit activations (int8_dot-inl.h).
//
// One vector of 32-bit lanes maps a lane to a row: a 32-byte chunk holds 4
// nibble bytes of each of the 8 rows, so multiplying it by the 4 matching
// activations (the same 4 bytes in every lane) and summing each lane's 4
// products gives all 8 rows' partial dot products at once. On x86 the 8-bit
// products and their pairwise sums are one instruction; other targets run
// the same steps emulated with Highway ops, and the engine keeps the plain
// kernels there (PackedGemvPreferred). 128-bit targets take each chunk as
// two parts of 4 rows.
//
// Exactness: a lane's int16 sum covers 16 products of a nibble (0..15) and
// an int8 (-127..127) -- a Q4_0 block, or a Q4_K sub-block -- so |sum| <=
// 30480 and no step saturates. Q4_0's offset of -8 and Q4_K's mins are
// applied per block through the exact sum of the activations, as in
// gemv-inl.h.

#if defined(SPARROW_SIMD_PACKED_GEMV_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SPARROW_SIMD_PACKED_GEMV_INL_H_
#undef SPARROW_SIMD_PACKED_GEMV_INL_H_
#else
#define SPARROW_SIMD_PACKED_GEMV_INL_H_
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include "formats/tensor_type.h"
#include "simd/int8_dot-inl.h"
#include "simd/quant_blocks.h"  // HalfBitsToFloat
#include "simd/quantize-inl.h"  // PromoteHalf

HWY_BEFORE_NAMESPACE();
namespace sparrow::simd {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

inline constexpr size_t kPackedBlockBytes = 8 * 18;  // one Q4_0 block of 8 rows
inline constexpr size_t kPackedScaleBytes = 16;      // 8 f16 scales first
inline constexpr size_t kPackedSuperBytes = 8 * 144;  // one Q4_K super-block of 8 rows
// Offsets in a packed Q4_K super-block (packed_gemv.h).
inline constexpr size_t kPackedKDmin = 16, kPackedKScales = 32, kPackedKMinsLow = 96,
                        kPackedKQs = 128;

HWY_INLINE bool PackedPreferredImpl() {
#ifdef SPARROW_INT8_MADDUBS
  return true;
#else
  return false;
#endif
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

// Row r's sub-block s scale and min from a packed Q4_K super-block.
HWY_INLINE void PackedQ4_KScaleMin(const uint8_t* p, size_t r, size_t s, int32_t& sc,
                                   int32_t& m) {
  const uint8_t b = p[kPackedKScales + 8 * s + r];
  const uint8_t low = p[kPackedKMinsLow + 8 * (s / 2) + r];
  sc = b & 63;
  m = ((s & 1) ? (low >> 4) : (low & 15)) | ((b >> 6) << 4);
}

HWY_INLINE void PackedQ4_KGroupImpl(const uint8_t* HWY_RESTRICT p, size_t nsuper,
                                    const int8_t* HWY_RESTRICT xq,
                                    const float* HWY_RESTRICT sx,
                                    const float* HWY_RESTRICT sums, float* HWY_RESTRICT y) {
  float acc[8] = {}, mins[8] = {};
  for (size_t sb = 0; sb < nsuper; ++sb, p += kPackedSuperBytes) {
    const int8_t* xs = xq + 256 * sb;
    for (size_t r = 0; r < 8; ++r) {
      uint16_t hd, hm;
      std::memcpy(&hd, p + 2 * r, 2);
      std::memcpy(&hm, p + kPackedKDmin + 2 * r, 2);
      const float d = HalfBitsToFloat(hd), dmin = HalfBitsToFloat(hm);
      for (size_t g = 0; g < 4; ++g) {
        int32_t dot_a = 0, dot_b = 0;
        for (size_t k = 0; k < 8; ++k) {
          for (size_t j = 0; j < 4; ++j) {
            const uint8_t byte = p[kPackedKQs + 256 * g + 32 * k + 4 * r + j];
            dot_a += (byte & 15) * xs[64 * g + 4 * k + j];
            dot_b += (byte >> 4) * xs[64 * g + 32 + 4 * k + j];
          }
        }
        for (size_t h = 0; h < 2; ++h) {
          const size_t s = 2 * g + h;
          int32_t sc, m;
          PackedQ4_KScaleMin(p, r, s, sc, m);
          const float xscale = sx[8 * sb + s];
          acc[r] += static_cast<float>(h ? dot_b : dot_a) * (d * static_cast<float>(sc) * xscale);
          mins[r] += dmin * static_cast<float>(m) * xscale * sums[8 * sb + s];
        }
      }
    }
  }
  for (size_t r = 0; r < 8; ++r) y[r] = acc[r] - mins[r];
}
#else

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
// One part (all 8 rows, or 4 on 128-bit targets) of one packed Q4_K
// super-block: adds the rows' scaled dot products to `acc` and their mins'
// share to `mins`.
template <class DU8, class DF>
HWY_INLINE void PackedQ4_KPart(DU8 du8, DF df, const uint8_t* HWY_RESTRICT p,
                               const int8_t* HWY_RESTRICT xs, const float* HWY_RESTRICT sx,
                               const float* HWY_RESTRICT sums, size_t part, hn::Vec<DF>& acc,
                               hn::Vec<DF>& mins) {
  const hn::Repartition<int16_t, DU8> di16;
  const hn::Repartition<int32_t, DU8> di32;
  const hn::Repartition<uint16_t, DU8> du16;
  const hn::Rebind<int32_t, DF> di32f;
  const hn::Rebind<uint8_t, DF> du8f;
  const hn::Rebind<hwy::float16_t, DF> df16;
  const size_t bytes = hn::Lanes(du8);
  const size_t row0 = bytes / 4 * part;
  const auto low4 = hn::Set(du8, 15);
  const auto d = PromoteHalf(df, hn::LoadU(df16, reinterpret_cast<const hwy::float16_t*>(p) + row0));
  const auto dmin = PromoteHalf(
      df, hn::LoadU(df16, reinterpret_cast<const hwy::float16_t*>(p + kPackedKDmin) + row0));
  for (size_t g = 0; g < 4; ++g) {
    auto a16 = hn::Zero(di16), b16 = hn::Zero(di16);
    const uint8_t* chunk = p + kPackedKQs + 256 * g + bytes * part;
    const int8_t* xg = xs + 64 * g;
    for (size_t k = 0; k < 8; ++k) {
      const auto w = hn::LoadU(du8, chunk + 32 * k);
      const auto lo = hn::And(w, low4);
      const auto hi = hn::And(hn::BitCast(du8, hn::ShiftRight<4>(hn::BitCast(du16, w))), low4);
      int32_t x_lo, x_hi;
      std::memcpy(&x_lo, xg + 4 * k, 4);
      std::memcpy(&x_hi, xg + 32 + 4 * k, 4);
      a16 = hn::Add(a16, MulAddBytePairs(du8, lo, hn::BitCast(du8, hn::Set(di32, x_lo))));
      b16 = hn::Add(b16, MulAddBytePairs(du8, hi, hn::BitCast(du8, hn::Set(di32, x_hi))));
    }
    const auto lows = hn::PromoteTo(di32f, hn::LoadU(du8f, p + kPackedKMinsLow + 8 * g + row0));
    for (size_t h = 0; h < 2; ++h) {
      const size_t s = 2 * g + h;
      const auto b = hn::PromoteTo(di32f, hn::LoadU(du8f, p + kPackedKScales + 8 * s + row0));
      const auto sc = hn::And(b, hn::Set(di32f, 63));
      const auto m_low = h ? hn::ShiftRight<4>(lows) : hn::And(lows, hn::Set(di32f, 15));
      const auto m = hn::Or(m_low, hn::ShiftLeft<4>(hn::ShiftRight<6>(b)));
      const auto vsx = hn::Set(df, sx[s]);
      const auto scale = hn::Mul(hn::Mul(d, hn::ConvertTo(df, sc)), vsx);
      acc = hn::MulAdd(hn::ConvertTo(df, SumInt16Pairs(di16, h ? b16 : a16)), scale, acc);
      mins = hn::MulAdd(hn::Mul(dmin, hn::ConvertTo(df, m)), hn::Mul(vsx, hn::Set(df, sums[s])),
                        mins);
    }
  }
}

HWY_INLINE void PackedQ4_KGroupImpl(const uint8_t* HWY_RESTRICT p, size_t nsuper,
                                    const int8_t* HWY_RESTRICT xq,
                                    const float* HWY_RESTRICT sx,
                                    const float* HWY_RESTRICT sums, float* HWY_RESTRICT y) {
  const hn::CappedTag<uint8_t, 32> du8;
  const hn::Repartition<float, decltype(du8)> df;
  const bool two_parts = hn::Lanes(du8) < 32;
  auto acc0 = hn::Zero(df), acc1 = hn::Zero(df);
  auto mins0 = hn::Zero(df), mins1 = hn::Zero(df);
  for (size_t sb = 0; sb < nsuper; ++sb, p += kPackedSuperBytes) {
    for (size_t i = 0; i < kPackedSuperBytes; i += 64) hwy::Prefetch(p + 2048 + i);
    PackedQ4_KPart(du8, df, p, xq + 256 * sb, sx + 8 * sb, sums + 8 * sb, 0, acc0, mins0);
    if (two_parts) {
      PackedQ4_KPart(du8, df, p, xq + 256 * sb, sx + 8 * sb, sums + 8 * sb, 1, acc1, mins1);
    }
  }
  hn::StoreU(hn::Sub(acc0, mins0), df, y);
  if (two_parts) hn::StoreU(hn::Sub(acc1, mins1), df, y + hn::Lanes(df));
}
#endif  // HWY_TARGET == HWY_SCALAR

HWY_INLINE void PackedGemvImpl(TensorType type, const uint8_t* HWY_RESTRICT data, size_t cols,
                               const int8_t* HWY_RESTRICT xq, const float* HWY_RESTRICT sx,
                               const float* HWY_RESTRICT sums, size_t group_begin,
                               size_t group_end, float* HWY_RESTRICT y) {
  if (type == TensorType::kQ4_K) {
    const size_t nsuper = cols / 256;
    for (size_t g = group_begin; g < group_end; ++g) {
      PackedQ4_KGroupImpl(data + g * nsuper * kPackedSuperBytes, nsuper, xq, sx, sums, y + 8 * g);
    }
    return;
  }
  const size_t nblocks = cols / 32;
  for (size_t g = group_begin; g < group_end; ++g) {
    PackedQ4_0GroupImpl(data + g * nblocks * kPackedBlockBytes, nblocks, xq, sx, sums, y + 8 * g);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::simd
HWY_AFTER_NAMESPACE();

#endif  // include guard
