// Per-target kernels of packed_gemv.h: GEMV over groups of 8 interleaved
// Q4_0, Q4_K or Q8_0 rows, with 8-bit activations (int8_dot-inl.h).
//
// One vector of 32-bit lanes maps a lane to a row: a 32-byte chunk holds 4
// nibble bytes of each of the 8 rows, so multiplying it by the 4 matching
// activations (the same 4 bytes in every lane) and summing each lane's 4
// products gives all 8 rows' partial dot products at once. On x86 the 8-bit
// products and their pairwise sums are one instruction, on Arm `sdot` (SVE,
// and NEON on cores with the dot-product extension); other targets run the
// same steps emulated with Highway ops, and the engine keeps the plain
// kernels there (PackedGemvPreferred). 128-bit targets take each chunk as
// two parts of 4 rows.
//
// Exactness: a lane's int16 sum covers 16 products of a nibble (0..15) and
// an int8 (-127..127) -- a Q4_0 block, or a Q4_K sub-block -- so |sum| <=
// 30480 and no step saturates. Q4_0's offset of -8 and Q4_K's mins are
// applied per block through the exact sum of the activations, as in
// gemv-inl.h. Q8_0's signed weights go through the forms' signed entry
// points (PrepareSigned, AddSigned), whose int32 lanes carry at most 32
// products of 128 x 127 -- exact everywhere.

#if defined(SPARROW_SIMD_PACKED_GEMV_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SPARROW_SIMD_PACKED_GEMV_INL_H_
#undef SPARROW_SIMD_PACKED_GEMV_INL_H_
#else
#define SPARROW_SIMD_PACKED_GEMV_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include "base/tensor_type.h"
#include "simd/int8_dot-inl.h"
#include "simd/packed_gemv.h"  // kPackedPrefetchAhead, kPackedStreams
#include "simd/quant_blocks.h"  // HalfBitsToFloat
#include "simd/quantize-inl.h"  // PromoteHalf, Q4_0BlockToBF16
#include "simd/targets.h"       // CpuStreamsRowsItself

HWY_BEFORE_NAMESPACE();
namespace sparrow::simd {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

inline constexpr size_t kPackedBlockBytes = 8 * 18;  // one Q4_0 block of 8 rows
inline constexpr size_t kPackedScaleBytes = 16;      // 8 f16 scales first
inline constexpr size_t kPackedSuperBytes = 8 * 144;  // one Q4_K super-block of 8 rows
inline constexpr size_t kPackedQ8BlockBytes = 8 * 34;  // one Q8_0 block of 8 rows
// Offsets in a packed Q4_K super-block (packed_gemv.h).
inline constexpr size_t kPackedKDmin = 16, kPackedKScales = 32, kPackedKMinsLow = 96,
                        kPackedKQs = 128;

// The packed kernels pay off where the CPU has a native 8-bit dot product;
// elsewhere the engine keeps the plain 16-bit kernels of gemv-inl.h.
HWY_INLINE bool PackedPreferredImpl() { return HasFastByteDotSum(); }


#if HWY_TARGET == HWY_SCALAR
// One lane per vector: the integer steps in plain code, per row.
HWY_INLINE void PackedQ4_0OneGroup(const uint8_t* HWY_RESTRICT p, size_t nblocks,
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

HWY_INLINE void PackedQ4_KOneGroup(const uint8_t* HWY_RESTRICT p, size_t nsuper,
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


HWY_INLINE void PackedQ8_0OneGroup(const uint8_t* HWY_RESTRICT p, size_t nblocks,
                                   const int8_t* HWY_RESTRICT xq,
                                   const float* HWY_RESTRICT sx, float* HWY_RESTRICT y) {
  float acc[8] = {};
  for (size_t b = 0; b < nblocks; ++b, p += kPackedQ8BlockBytes) {
    const int8_t* xb = xq + 32 * b;
    for (size_t r = 0; r < 8; ++r) {
      int32_t dot = 0;
      for (size_t k = 0; k < 8; ++k) {
        for (size_t j = 0; j < 4; ++j) {
          dot += static_cast<int8_t>(p[kPackedScaleBytes + 32 * k + 4 * r + j]) * xb[4 * k + j];
        }
      }
      uint16_t h;
      std::memcpy(&h, p + 2 * r, 2);
      acc[r] += static_cast<float>(dot) * (HalfBitsToFloat(h) * sx[b]);
    }
  }
  for (size_t r = 0; r < 8; ++r) y[r] = acc[r];
}

// The scalar target's frame: each group on its own, row by row (Dots is
// unused: scalar code has one form).
struct PackedQ4_0Kernel {
  static void OneGroup(const uint8_t* p, size_t nblocks, const int8_t* xq, const float* sx,
                       const float* sums, float* y) {
    PackedQ4_0OneGroup(p, nblocks, xq, sx, sums, y);
  }
};
struct PackedQ4_KKernel {
  static void OneGroup(const uint8_t* p, size_t nsuper, const int8_t* xq, const float* sx,
                       const float* sums, float* y) {
    PackedQ4_KOneGroup(p, nsuper, xq, sx, sums, y);
  }
};
struct PackedQ8_0Kernel {
  static void OneGroup(const uint8_t* p, size_t nblocks, const int8_t* xq, const float* sx,
                       const float* /*sums*/, float* y) {
    PackedQ8_0OneGroup(p, nblocks, xq, sx, y);
  }
};
template <class Kernel, class Dots, size_t kGroups>
HWY_INLINE void PackedGroups(const uint8_t* const* groups, size_t nblocks,
                             const int8_t* HWY_RESTRICT xq, const float* HWY_RESTRICT sx,
                             const float* HWY_RESTRICT sums, float* const* ys) {
  for (size_t i = 0; i < kGroups; ++i) Kernel::OneGroup(groups[i], nblocks, xq, sx, sums, ys[i]);
}
#else

// The low and the high nibbles of each byte of w, as bytes.
template <class DU8>
HWY_INLINE hn::Vec<DU8> LowNibbles(DU8 du8, hn::Vec<DU8> w) {
  return hn::And(w, hn::Set(du8, 15));
}
template <class DU8>
HWY_INLINE hn::Vec<DU8> HighNibbles(DU8 du8, hn::Vec<DU8> w) {
  const hn::Repartition<uint16_t, DU8> du16;
  return LowNibbles(du8, hn::BitCast(du8, hn::ShiftRight<4>(hn::BitCast(du16, w))));
}

// The high nibbles of w as a form takes them, and the sum of their
// products as the nibbles' own. Where the form multiplies whole unsigned
// bytes (vpdpbusd), they stay where they are (w & 0xF0, 16 times their
// value), and their sum over a block is shifted back once: one instruction
// per vector less than a shift and a mask. 2 vCPU Emerald Rapids VM, one
// thread, six alternated rounds of a throwaway loop over a packed Q4_0
// matrix in L2, rounds in a neighbour's busy spell left out: 768x256
// 40.7-44.2 GB/s against 37.0-39.0, 4096x64 44.8-45.7 against 38.5-40.8.
// From DRAM, `gemv_bench --types q4_0x8,q4_Kx8 --shapes
// 768x3072,2048x5632,4096x4096 --threads 1 --clock cpu`, five rounds:
// Q4_0 85-95% of the four-stream probe against 86-94%, Q4_K 84-91 against
// 84-91 (memory-bound there; the time it frees is the core's).
template <class Dots, class DU8>
HWY_INLINE hn::Vec<DU8> HighNibblesFor(DU8 du8, hn::Vec<DU8> w) {
  if constexpr (Dots::kWholeUnsignedBytes) {
    return hn::And(w, hn::Set(du8, uint8_t{0xF0}));
  } else {
    return HighNibbles(du8, w);
  }
}
template <class Dots, class V32>
HWY_INLINE V32 HighNibbleDot(V32 total) {
  if constexpr (Dots::kWholeUnsignedBytes) {
    return hn::ShiftRight<4>(total);  // exact: every product is a multiple of 16
  } else {
    return total;
  }
}

// Two vectors' rows of one block, sharing the activations: rows of part
// `part_a` of the group at `pa` and of part `part_b` of the group at `pb`
// (the two halves of one group on 128-bit targets, two groups elsewhere).
// Adds their dot products times their scales to acc_*, and the scales
// times the block's activation sum to off_*.
template <class Dots, class DU8, class DF>
HWY_INLINE void PackedQ4_0Parts(DU8 du8, DF df, const uint8_t* HWY_RESTRICT pa, size_t part_a,
                                const uint8_t* HWY_RESTRICT pb, size_t part_b,
                                const int8_t* HWY_RESTRICT xb, hn::Vec<DF> vsx,
                                hn::Vec<DF> vsum, hn::Vec<DF>& acc_a, hn::Vec<DF>& off_a,
                                hn::Vec<DF>& acc_b, hn::Vec<DF>& off_b) {
  const hn::Repartition<int32_t, DU8> di32;
  const hn::Rebind<hwy::float16_t, DF> df16;
  const size_t bytes = hn::Lanes(du8);
  const uint8_t* qa = pa + kPackedScaleBytes + bytes * part_a;
  const uint8_t* qb = pb + kPackedScaleBytes + bytes * part_b;
  auto dot_a = Dots::Zero(), dot_b = Dots::Zero(), high_a = Dots::Zero(), high_b = Dots::Zero();
  for (size_t k = 0; k < 4; ++k) {
    int32_t x_lo, x_hi;
    std::memcpy(&x_lo, xb + 4 * k, 4);
    std::memcpy(&x_hi, xb + 16 + 4 * k, 4);
    const auto xl = hn::BitCast(du8, hn::Set(di32, x_lo));
    const auto xh = hn::BitCast(du8, hn::Set(di32, x_hi));
    const auto wa = hn::LoadU(du8, qa + 32 * k);
    const auto wb = hn::LoadU(du8, qb + 32 * k);
    dot_a = Dots::Add(du8, dot_a, LowNibbles(du8, wa), xl);
    dot_b = Dots::Add(du8, dot_b, LowNibbles(du8, wb), xl);
    high_a = Dots::Add(du8, high_a, HighNibblesFor<Dots>(du8, wa), xh);
    high_b = Dots::Add(du8, high_b, HighNibblesFor<Dots>(du8, wb), xh);
  }
  const auto scale_a = hn::Mul(
      PromoteHalf(df, hn::LoadU(df16, reinterpret_cast<const hwy::float16_t*>(pa) + bytes / 4 * part_a)),
      vsx);
  const auto scale_b = hn::Mul(
      PromoteHalf(df, hn::LoadU(df16, reinterpret_cast<const hwy::float16_t*>(pb) + bytes / 4 * part_b)),
      vsx);
  const auto sum_a = hn::Add(Dots::Total(dot_a), HighNibbleDot<Dots>(Dots::Total(high_a)));
  const auto sum_b = hn::Add(Dots::Total(dot_b), HighNibbleDot<Dots>(Dots::Total(high_b)));
  acc_a = hn::MulAdd(hn::ConvertTo(df, sum_a), scale_a, acc_a);
  acc_b = hn::MulAdd(hn::ConvertTo(df, sum_b), scale_b, acc_b);
  off_a = hn::MulAdd(scale_a, vsum, off_a);
  off_b = hn::MulAdd(scale_b, vsum, off_b);
}

// Software prefetches kPackedPrefetchAhead (packed_gemv.h) bytes ahead of
// where a group's kernel reads, each line once, issued as the kernel gets
// through a block (Upto: the kernel has reached `at`) rather than a whole
// block's lines at the block's start: Q4_K's blocks are 1152 bytes, 18
// lines at once, and Q4_K's kernel now reports each quarter. 2 vCPU Emerald
// Rapids VM, one thread, three alternated rounds of `gemv_bench --types
// q4_0x8,q8_0x8,q4_Kx8 --shapes 2048x5632,4096x4096,768x3072 --threads 1
// --clock cpu`, % of the four-stream probe: Q4_K 78-84 -> 84-90, Q8_0
// (272-byte blocks) 88-93 -> 90-98, Q4_0 unchanged (86-92).
// (The batch kernels below prefetch the same distance ahead, a block at a
// time.)
class StreamPrefetcher {
 public:
  StreamPrefetcher() = default;
  explicit StreamPrefetcher(const uint8_t* start)
      : next_(LineStart(start + kPackedPrefetchAhead)) {}
  HWY_INLINE void Upto(const uint8_t* at) {
    for (const uintptr_t end = reinterpret_cast<uintptr_t>(at) + kPackedPrefetchAhead; next_ < end;
         next_ += 64) {
      hwy::Prefetch(reinterpret_cast<const uint8_t*>(next_));
    }
  }

 private:
  static uintptr_t LineStart(const uint8_t* p) {
    return reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63};
  }
  uintptr_t next_ = 0;
};

// The single-input packed kernels' common frame: kGroups groups of 8 rows
// (groups[i], giving ys[i][0..7]) read side by side, block by block. On
// targets whose vectors hold 8 rows, two groups at a time share the
// activation loads (a lone group fills both vectors: its results are kept
// once); 128-bit targets take each group alone, its chunks as two parts of
// 4 rows. Kernel gives the bytes of one block of 8 rows (kBlockBytes), one
// block's work on two vectors' rows (Block, with an accumulator and a
// second sum per vector: Q4_0's offsets, Q4_K's mins) and the rows'
// results from those (Result).
//
// Four groups side by side keep four streams in flight, which the
// prefetchers fill better than two: 2 vCPU Emerald Rapids VM, one thread,
// `gemv_bench --types q4_0x8,q4_Kx8 --shapes 768x3072,2048x5632,4096x4096
// --threads 1 --clock cpu`, three scripts of four to six alternated
// rounds, % of the four-stream probe in rounds under 100% (a busy
// neighbour's spells lie above it): Q4_0 84-95 (median 91) in pairs against
// 88-98 (median 93) in fours, Q4_K 85-99 (median 88) against 86-96 (90).
template <class Kernel, class Dots, size_t kGroups>
HWY_INLINE void PackedGroups(const uint8_t* const* groups, size_t nblocks,
                             const int8_t* HWY_RESTRICT xq, const float* HWY_RESTRICT sx,
                             const float* HWY_RESTRICT sums, float* const* ys) {
  const hn::CappedTag<uint8_t, 32> du8;
  const hn::Repartition<float, decltype(du8)> df;
  static_assert(hn::MaxLanes(du8) >= 16, "needs at least 128-bit vectors");
  const bool two_parts = hn::Lanes(du8) < 32;
  if constexpr (kGroups > 1) {
    if (two_parts) {  // a group fills both halves here
      for (size_t i = 0; i < kGroups; ++i) {
        PackedGroups<Kernel, Dots, 1>(groups + i, nblocks, xq, sx, sums, ys + i);
      }
      return;
    }
  }
  static_assert(kGroups >= 1 && kGroups <= 4, "one or two pairs of vectors");
  constexpr bool kTwoPairs = kGroups > 2;
  constexpr size_t kBytes = Kernel::kBlockBytes;
  // Each vector's rows: vectors from kGroups on repeat the last group (a
  // lone group's second vector: its other part on 128-bit targets, else the
  // group again, computed and not kept), a stream only the first prefetches.
  const uint8_t* p[4];
  for (size_t i = 0; i < 4; ++i) p[i] = groups[std::min(i, kGroups - 1)];
  const size_t part_b = two_parts ? 1 : 0;
  // (Named, not arrays: SVE's vectors cannot be array elements.)
  auto acc_a = hn::Zero(df), acc_b = hn::Zero(df), acc_c = hn::Zero(df), acc_d = hn::Zero(df);
  auto more_a = hn::Zero(df), more_b = hn::Zero(df), more_c = hn::Zero(df), more_d = hn::Zero(df);
  // Where the hardware follows the streams itself, software prefetches
  // only held them back: Zen 4 VM, one thread, alternated, `gemv_bench
  // --types q4_0x8,q4_Kx8,q8_0x8 --shapes 2048x5632,4096x4096`: Q4_0
  // 24.8-29.2 -> 30.4-31.7 GB/s, Q4_K 17.3-20.2 -> 29.3-30.8, Q8_0
  // 28.6-31.3 -> 31.6-32.7 (98-113% of the four-stream probe after).
  const bool prefetch = !CpuStreamsRowsItself();
  StreamPrefetcher ahead[4];
  for (size_t i = 0; i < 4; ++i) ahead[i] = StreamPrefetcher(p[i]);
  for (size_t b = 0; b < nblocks; ++b) {
    // The block's kernel reports how far into the block it has got.
    const auto reached = [&](size_t first, size_t bytes) HWY_ATTR {
      if (!prefetch) return;
      for (size_t i = first; i < first + 2; ++i) {
        if (i < kGroups) ahead[i].Upto(p[i] + bytes);
      }
    };
    Kernel::template Block<Dots>(du8, df, p[0], p[1], part_b, b, xq, sx, sums, acc_a, more_a, acc_b,
                                 more_b, [&](size_t bytes) HWY_ATTR { reached(0, bytes); });
    if constexpr (kTwoPairs) {
      Kernel::template Block<Dots>(du8, df, p[2], p[3], part_b, b, xq, sx, sums, acc_c, more_c,
                                   acc_d, more_d,
                                   [&](size_t bytes) HWY_ATTR { reached(2, bytes); });
    }
    for (size_t i = 0; i < 4; ++i) p[i] += kBytes;
  }
  hn::StoreU(Kernel::Result(df, acc_a, more_a), df, ys[0]);
  if (two_parts) {
    hn::StoreU(Kernel::Result(df, acc_b, more_b), df, ys[0] + hn::Lanes(df));
    return;
  }
  if constexpr (kGroups > 1) hn::StoreU(Kernel::Result(df, acc_b, more_b), df, ys[1]);
  if constexpr (kGroups > 2) hn::StoreU(Kernel::Result(df, acc_c, more_c), df, ys[2]);
  if constexpr (kGroups > 3) hn::StoreU(Kernel::Result(df, acc_d, more_d), df, ys[3]);
}

struct PackedQ4_0Kernel {
  static constexpr size_t kBlockBytes = kPackedBlockBytes;
  template <class Dots, class DU8, class DF, class VF, class Reached>
  static HWY_INLINE void Block(DU8 du8, DF df, const uint8_t* pa, const uint8_t* pb, size_t part_b,
                               size_t b, const int8_t* xq, const float* sx, const float* sums,
                               VF& acc_a, VF& off_a, VF& acc_b, VF& off_b, const Reached& reached) {
    reached(kBlockBytes);
    PackedQ4_0Parts<Dots>(du8, df, pa, 0, pb, part_b, xq + 32 * b, hn::Set(df, sx[b]),
                          hn::Set(df, sums[b]), acc_a, off_a, acc_b, off_b);
  }
  template <class DF, class VF>
  static HWY_INLINE VF Result(DF df, VF acc, VF off) {
    return hn::NegMulAdd(hn::Set(df, 8.0f), off, acc);
  }
};


// A signed-weight dot product's int32 lanes (int8_dot-inl.h) as floats,
// without the form's bias: dot(w, x) exactly (|dot| < 2^24, and the bias
// times the block's activation sum `sum` is an integer below 2^24 too).
template <class Dots, class DF, class V32>
HWY_INLINE hn::Vec<DF> SignedDotToFloat(DF df, V32 dot, float sum) {
  if constexpr (Dots::kSignedBias != 0) {
    return hn::Sub(hn::ConvertTo(df, dot), hn::Set(df, static_cast<float>(Dots::kSignedBias) * sum));
  } else {
    (void)sum;
    return hn::ConvertTo(df, dot);
  }
}

// Two vectors' rows of one packed Q8_0 block, sharing the activations (as
// PackedQ4_0Parts): acc_* += dot * (d * sx), one fused step per block.
template <class Dots, class DU8, class DF>
HWY_INLINE void PackedQ8_0Parts(DU8 du8, DF df, const uint8_t* HWY_RESTRICT pa, size_t part_a,
                                const uint8_t* HWY_RESTRICT pb, size_t part_b,
                                const int8_t* HWY_RESTRICT xb, hn::Vec<DF> vsx, float sum,
                                hn::Vec<DF>& acc_a, hn::Vec<DF>& acc_b) {
  const hn::Repartition<int32_t, DU8> di32;
  const hn::Rebind<hwy::float16_t, DF> df16;
  const size_t bytes = hn::Lanes(du8);
  const uint8_t* qa = pa + kPackedScaleBytes + bytes * part_a;
  const uint8_t* qb = pb + kPackedScaleBytes + bytes * part_b;
  // Two chains per vector (even and odd chunks): half the latency of one.
  auto dot_a = Dots::SignedZero(), dot_b = Dots::SignedZero();
  auto dot_a2 = Dots::SignedZero(), dot_b2 = Dots::SignedZero();
  for (size_t k = 0; k < 8; k += 2) {
    int32_t xw, xw2;
    std::memcpy(&xw, xb + 4 * k, 4);
    std::memcpy(&xw2, xb + 4 * k + 4, 4);
    const auto xv = hn::BitCast(du8, hn::Set(di32, xw));
    const auto xv2 = hn::BitCast(du8, hn::Set(di32, xw2));
    dot_a = Dots::AddSigned(du8, dot_a, Dots::PrepareSigned(du8, hn::LoadU(du8, qa + 32 * k)), xv);
    dot_b = Dots::AddSigned(du8, dot_b, Dots::PrepareSigned(du8, hn::LoadU(du8, qb + 32 * k)), xv);
    dot_a2 = Dots::AddSigned(du8, dot_a2, Dots::PrepareSigned(du8, hn::LoadU(du8, qa + 32 * k + 32)), xv2);
    dot_b2 = Dots::AddSigned(du8, dot_b2, Dots::PrepareSigned(du8, hn::LoadU(du8, qb + 32 * k + 32)), xv2);
  }
  dot_a = hn::Add(dot_a, dot_a2);
  dot_b = hn::Add(dot_b, dot_b2);
  const auto scale_a = hn::Mul(
      PromoteHalf(df, hn::LoadU(df16, reinterpret_cast<const hwy::float16_t*>(pa) + bytes / 4 * part_a)),
      vsx);
  const auto scale_b = hn::Mul(
      PromoteHalf(df, hn::LoadU(df16, reinterpret_cast<const hwy::float16_t*>(pb) + bytes / 4 * part_b)),
      vsx);
  acc_a = hn::MulAdd(SignedDotToFloat<Dots>(df, dot_a, sum), scale_a, acc_a);
  acc_b = hn::MulAdd(SignedDotToFloat<Dots>(df, dot_b, sum), scale_b, acc_b);
}

struct PackedQ8_0Kernel {
  static constexpr size_t kBlockBytes = kPackedQ8BlockBytes;
  template <class Dots, class DU8, class DF, class VF, class Reached>
  static HWY_INLINE void Block(DU8 du8, DF df, const uint8_t* pa, const uint8_t* pb, size_t part_b,
                               size_t b, const int8_t* xq, const float* sx, const float* sums,
                               VF& acc_a, VF& /*unused*/, VF& acc_b, VF& /*unused*/,
                               const Reached& reached) {
    reached(kBlockBytes);
    PackedQ8_0Parts<Dots>(du8, df, pa, 0, pb, part_b, xq + 32 * b, hn::Set(df, sx[b]), sums[b],
                          acc_a, acc_b);
  }
  template <class DF, class VF>
  static HWY_INLINE VF Result(DF, VF acc, VF /*unused*/) {
    return acc;
  }
};


// For a vector's rows (from row0) of a packed Q4_K super-block at p, and
// sub-blocks 2g + h (h = 0, 1): dsc_h = d * scale and dm_h = dmin * min.
// (Four references, not arrays: SVE vectors cannot be array elements.)
template <class DF>
HWY_INLINE void PackedQ4_KRowFactors(DF df, const uint8_t* HWY_RESTRICT p, size_t row0, size_t g,
                                     hn::Vec<DF> d, hn::Vec<DF> dmin, hn::Vec<DF>& dsc0,
                                     hn::Vec<DF>& dsc1, hn::Vec<DF>& dm0, hn::Vec<DF>& dm1) {
  const hn::Rebind<int32_t, DF> di32f;
  const hn::Rebind<uint8_t, DF> du8f;
  const auto lows = hn::PromoteTo(di32f, hn::LoadU(du8f, p + kPackedKMinsLow + 8 * g + row0));
  for (size_t h = 0; h < 2; ++h) {
    const auto b = hn::PromoteTo(di32f, hn::LoadU(du8f, p + kPackedKScales + 8 * (2 * g + h) + row0));
    const auto sc = hn::And(b, hn::Set(di32f, 63));
    const auto m_low = h ? hn::ShiftRight<4>(lows) : hn::And(lows, hn::Set(di32f, 15));
    const auto m = hn::Or(m_low, hn::ShiftLeft<4>(hn::ShiftRight<6>(b)));
    (h ? dsc1 : dsc0) = hn::Mul(d, hn::ConvertTo(df, sc));
    (h ? dm1 : dm0) = hn::Mul(dmin, hn::ConvertTo(df, m));
  }
}

// A vector's rows (all 8, or 4 on 128-bit targets) of one packed Q4_K
// sub-block pair g, given their int32 dot products for sub-blocks 2g (a32)
// and 2g + 1 (b32): adds the scaled dots to `acc` and the mins' share to
// `mins`.
template <class V32, class DF>
HWY_INLINE void PackedQ4_KApply(DF df, const uint8_t* HWY_RESTRICT p, size_t row0,
                                size_t g, V32 a32, V32 b32,
                                hn::Vec<DF> d, hn::Vec<DF> dmin,
                                const float* HWY_RESTRICT sx, const float* HWY_RESTRICT sums,
                                hn::Vec<DF>& acc, hn::Vec<DF>& mins) {
  auto dsc0 = hn::Zero(df), dsc1 = dsc0, dm0 = dsc0, dm1 = dsc0;
  PackedQ4_KRowFactors(df, p, row0, g, d, dmin, dsc0, dsc1, dm0, dm1);
  for (size_t h = 0; h < 2; ++h) {
    const size_t s = 2 * g + h;
    const auto vsx = hn::Set(df, sx[s]);
    const auto scale = hn::Mul(h ? dsc1 : dsc0, vsx);
    acc = hn::MulAdd(hn::ConvertTo(df, h ? b32 : a32), scale, acc);
    mins = hn::MulAdd(h ? dm1 : dm0, hn::Mul(vsx, hn::Set(df, sums[s])), mins);
  }
}

// Two vectors' rows of one packed Q4_K super-block, sharing the
// activations: part `part_a` of the group at `pa` and part `part_b` of the
// group at `pb` (as PackedQ4_0Parts).
template <class Dots, class DU8, class DF, class Reached>
HWY_INLINE void PackedQ4_KParts(DU8 du8, DF df, const uint8_t* HWY_RESTRICT pa, size_t part_a,
                                const uint8_t* HWY_RESTRICT pb, size_t part_b,
                                const int8_t* HWY_RESTRICT xs, const float* HWY_RESTRICT sx,
                                const float* HWY_RESTRICT sums, hn::Vec<DF>& acc_a,
                                hn::Vec<DF>& mins_a, hn::Vec<DF>& acc_b, hn::Vec<DF>& mins_b,
                                const Reached& reached) {
  const hn::Repartition<int32_t, DU8> di32;
  const hn::Rebind<hwy::float16_t, DF> df16;
  const size_t bytes = hn::Lanes(du8);
  const size_t row_a = bytes / 4 * part_a, row_b = bytes / 4 * part_b;
  auto half = [&](const uint8_t* p, size_t row0) HWY_ATTR {
    return PromoteHalf(df, hn::LoadU(df16, reinterpret_cast<const hwy::float16_t*>(p) + row0));
  };
  const auto d_a = half(pa, row_a), dmin_a = half(pa + kPackedKDmin, row_a);
  const auto d_b = half(pb, row_b), dmin_b = half(pb + kPackedKDmin, row_b);
  for (size_t g = 0; g < 4; ++g) {
    reached((g + 1) * kPackedSuperBytes / 4);  // (StreamPrefetcher)
    auto a = Dots::Zero(), b = Dots::Zero(), c = Dots::Zero(), e = Dots::Zero();
    const uint8_t* qa = pa + kPackedKQs + 256 * g + bytes * part_a;
    const uint8_t* qb = pb + kPackedKQs + 256 * g + bytes * part_b;
    const int8_t* xg = xs + 64 * g;
    for (size_t k = 0; k < 8; ++k) {
      int32_t x_lo, x_hi;
      std::memcpy(&x_lo, xg + 4 * k, 4);
      std::memcpy(&x_hi, xg + 32 + 4 * k, 4);
      const auto xl = hn::BitCast(du8, hn::Set(di32, x_lo));
      const auto xh = hn::BitCast(du8, hn::Set(di32, x_hi));
      const auto wa = hn::LoadU(du8, qa + 32 * k);
      const auto wb = hn::LoadU(du8, qb + 32 * k);
      a = Dots::Add(du8, a, LowNibbles(du8, wa), xl);
      c = Dots::Add(du8, c, LowNibbles(du8, wb), xl);
      b = Dots::Add(du8, b, HighNibblesFor<Dots>(du8, wa), xh);
      e = Dots::Add(du8, e, HighNibblesFor<Dots>(du8, wb), xh);
    }
    PackedQ4_KApply(df, pa, row_a, g, Dots::Total(a), HighNibbleDot<Dots>(Dots::Total(b)), d_a,
                    dmin_a, sx, sums, acc_a, mins_a);
    PackedQ4_KApply(df, pb, row_b, g, Dots::Total(c), HighNibbleDot<Dots>(Dots::Total(e)), d_b,
                    dmin_b, sx, sums, acc_b, mins_b);
  }
}

struct PackedQ4_KKernel {
  static constexpr size_t kBlockBytes = kPackedSuperBytes;
  template <class Dots, class DU8, class DF, class VF, class Reached>
  static HWY_INLINE void Block(DU8 du8, DF df, const uint8_t* pa, const uint8_t* pb, size_t part_b,
                               size_t sb, const int8_t* xq, const float* sx, const float* sums,
                               VF& acc_a, VF& mins_a, VF& acc_b, VF& mins_b,
                               const Reached& reached) {
    PackedQ4_KParts<Dots>(du8, df, pa, 0, pb, part_b, xq + 256 * sb, sx + 8 * sb, sums + 8 * sb,
                          acc_a, mins_a, acc_b, mins_b, reached);
  }
  template <class DF, class VF>
  static HWY_INLINE VF Result(DF, VF acc, VF mins) {
    return hn::Sub(acc, mins);
  }
};



#if !HWY_HAVE_SCALABLE
// One packed Q4_0 group (8 rows, one per 32-bit lane: 256-bit vectors
// only) times T inputs: each block's nibbles are unpacked once and serve
// all T, where the single-input kernel unpacks them per input. Every step
// per input is PackedQ4_0Parts's, in its order, so results are bit for bit
// PackedGemv's. y[t][0..7] for input x[t].
template <class Dots, size_t T, class Input>
HWY_INLINE void PackedQ4_0GroupTokens(const uint8_t* HWY_RESTRICT p, size_t nblocks,
                                      const Input* x, float* const* y) {
  const hn::CappedTag<uint8_t, 32> du8;
  const hn::Repartition<float, decltype(du8)> df;
  const hn::Repartition<int32_t, decltype(du8)> di32;
  const hn::Rebind<hwy::float16_t, decltype(df)> df16;
  using VF = hn::Vec<decltype(df)>;
  VF acc[T], off[T];
  for (size_t t = 0; t < T; ++t) acc[t] = off[t] = hn::Zero(df);
  for (size_t b = 0; b < nblocks; ++b, p += kPackedBlockBytes) {
    hwy::Prefetch(p + kPackedPrefetchAhead);
    hwy::Prefetch(p + kPackedPrefetchAhead + 64);
    hwy::Prefetch(p + kPackedPrefetchAhead + 128);
    hn::Vec<decltype(du8)> lo[4], hi[4];
    for (size_t k = 0; k < 4; ++k) {
      const auto w = hn::LoadU(du8, p + kPackedScaleBytes + 32 * k);
      lo[k] = LowNibbles(du8, w);
      hi[k] = HighNibbles(du8, w);
    }
    const VF d = PromoteHalf(df, hn::LoadU(df16, reinterpret_cast<const hwy::float16_t*>(p)));
    for (size_t t = 0; t < T; ++t) {
      const int8_t* xb = x[t].quantized() + 32 * b;
      auto dot = Dots::Zero();
      for (size_t k = 0; k < 4; ++k) {
        int32_t x_lo, x_hi;
        std::memcpy(&x_lo, xb + 4 * k, 4);
        std::memcpy(&x_hi, xb + 16 + 4 * k, 4);
        dot = Dots::Add(du8, dot, lo[k], hn::BitCast(du8, hn::Set(di32, x_lo)));
        dot = Dots::Add(du8, dot, hi[k], hn::BitCast(du8, hn::Set(di32, x_hi)));
      }
      const VF scale = hn::Mul(d, hn::Set(df, x[t].scales()[b]));
      acc[t] = hn::MulAdd(hn::ConvertTo(df, Dots::Total(dot)), scale, acc[t]);
      off[t] = hn::MulAdd(scale, hn::Set(df, x[t].sums()[b]), off[t]);
    }
  }
  const auto eight = hn::Set(df, 8.0f);
  for (size_t t = 0; t < T; ++t) hn::StoreU(hn::NegMulAdd(eight, off[t], acc[t]), df, y[t]);
}

// One packed Q4_K group (8 rows, 256-bit vectors only) times T inputs: the
// sub-block scales and mins are decoded, and each chunk's nibbles
// unpacked, once for all T. Every step per input is PackedQ4_KParts's and
// PackedQ4_KApply's, in their order, so results are bit for bit
// PackedGemv's. y[t][0..7] for input x[t].
template <class Dots, size_t T, class Input>
HWY_INLINE void PackedQ4_KGroupTokens(const uint8_t* HWY_RESTRICT p, size_t nsuper,
                                      const Input* x, float* const* y) {
  const hn::CappedTag<uint8_t, 32> du8;
  const hn::Repartition<float, decltype(du8)> df;
  const hn::Repartition<int32_t, decltype(du8)> di32;
  const hn::Rebind<hwy::float16_t, decltype(df)> df16;
  using VF = hn::Vec<decltype(df)>;
  VF acc[T], mins[T];
  for (size_t t = 0; t < T; ++t) acc[t] = mins[t] = hn::Zero(df);
  for (size_t sb = 0; sb < nsuper; ++sb, p += kPackedSuperBytes) {
    for (size_t i = 0; i < kPackedSuperBytes; i += 64) hwy::Prefetch(p + kPackedPrefetchAhead + i);
    const VF d = PromoteHalf(df, hn::LoadU(df16, reinterpret_cast<const hwy::float16_t*>(p)));
    const VF dmin = PromoteHalf(
        df, hn::LoadU(df16, reinterpret_cast<const hwy::float16_t*>(p + kPackedKDmin)));
    for (size_t g = 0; g < 4; ++g) {
      VF dsc[2], dm[2];
      PackedQ4_KRowFactors(df, p, 0, g, d, dmin, dsc[0], dsc[1], dm[0], dm[1]);
      typename Dots::Acc lo_dot[T], hi_dot[T];
      for (size_t t = 0; t < T; ++t) lo_dot[t] = hi_dot[t] = Dots::Zero();
      const uint8_t* q = p + kPackedKQs + 256 * g;
      for (size_t k = 0; k < 8; ++k) {
        const auto w = hn::LoadU(du8, q + 32 * k);
        const auto lo = LowNibbles(du8, w);
        const auto hi = HighNibbles(du8, w);
        for (size_t t = 0; t < T; ++t) {
          const int8_t* xg = x[t].quantized() + 256 * sb + 64 * g;
          int32_t x_lo, x_hi;
          std::memcpy(&x_lo, xg + 4 * k, 4);
          std::memcpy(&x_hi, xg + 32 + 4 * k, 4);
          lo_dot[t] = Dots::Add(du8, lo_dot[t], lo, hn::BitCast(du8, hn::Set(di32, x_lo)));
          hi_dot[t] = Dots::Add(du8, hi_dot[t], hi, hn::BitCast(du8, hn::Set(di32, x_hi)));
        }
      }
      for (size_t t = 0; t < T; ++t) {
        for (size_t h = 0; h < 2; ++h) {
          const size_t s = 8 * sb + 2 * g + h;
          const VF vsx = hn::Set(df, x[t].scales()[s]);
          const VF scale = hn::Mul(dsc[h], vsx);
          acc[t] = hn::MulAdd(hn::ConvertTo(df, Dots::Total(h ? hi_dot[t] : lo_dot[t])), scale,
                              acc[t]);
          mins[t] = hn::MulAdd(dm[h], hn::Mul(vsx, hn::Set(df, x[t].sums()[s])), mins[t]);
        }
      }
    }
  }
  for (size_t t = 0; t < T; ++t) hn::StoreU(hn::Sub(acc[t], mins[t]), df, y[t]);
}

// One packed Q8_0 group (8 rows, 256-bit vectors only) times T inputs: each
// block's weight chunks loaded (and prepared for the form) once for all T.
// Every step per input is PackedQ8_0Parts's, in its order, so results are
// bit for bit PackedGemv's. y[t][0..7] for input x[t].
template <class Dots, size_t T, class Input>
HWY_INLINE void PackedQ8_0GroupTokens(const uint8_t* HWY_RESTRICT p, size_t nblocks,
                                      const Input* x, float* const* y) {
  const hn::CappedTag<uint8_t, 32> du8;
  const hn::Repartition<float, decltype(du8)> df;
  const hn::Repartition<int32_t, decltype(du8)> di32;
  const hn::Rebind<hwy::float16_t, decltype(df)> df16;
  using VF = hn::Vec<decltype(df)>;
  VF acc[T];
  for (size_t t = 0; t < T; ++t) acc[t] = hn::Zero(df);
  for (size_t b = 0; b < nblocks; ++b, p += kPackedQ8BlockBytes) {
    for (size_t i = 0; i < kPackedQ8BlockBytes; i += 64) {
      hwy::Prefetch(p + kPackedPrefetchAhead + i);
    }
    hn::Vec<decltype(du8)> w[8];
    for (size_t k = 0; k < 8; ++k) {
      w[k] = Dots::PrepareSigned(du8, hn::LoadU(du8, p + kPackedScaleBytes + 32 * k));
    }
    const VF d = PromoteHalf(df, hn::LoadU(df16, reinterpret_cast<const hwy::float16_t*>(p)));
    // Chunk-major, each input with its own even and odd chains (as
    // PackedQ8_0Parts), so that all the inputs' chains run side by side
    // in registers.
    typename Dots::SignedAcc dot[T];
    for (size_t t = 0; t < T; ++t) dot[t] = Dots::SignedZero();
    for (size_t k = 0; k < 8; ++k) {
      for (size_t t = 0; t < T; ++t) {
        const int8_t* xb = x[t].quantized() + 32 * b + 4 * k;
        int32_t xw;
        std::memcpy(&xw, xb, 4);
        dot[t] = Dots::AddSigned(du8, dot[t], w[k], hn::BitCast(du8, hn::Set(di32, xw)));
      }
    }
    for (size_t t = 0; t < T; ++t) {
      const VF scale = hn::Mul(d, hn::Set(df, x[t].scales()[b]));
      acc[t] = hn::MulAdd(SignedDotToFloat<Dots>(df, dot[t], x[t].sums()[b]), scale, acc[t]);
    }
  }
  for (size_t t = 0; t < T; ++t) hn::StoreU(acc[t], df, y[t]);
}
#endif  // !HWY_HAVE_SCALABLE

#ifdef SPARROW_INT8_MMLA
// One packed Q4_0 group times two inputs with `smmla` (2 rows x 2 tokens x
// 8 columns per instruction): y0[0..7] for input 0, y1[0..7] for input 1.
// A chunk of 16 bytes holds 4 nibble bytes of each of 4 rows; zipping the
// 32-bit words of chunks k and k + 1 lines up 8 bytes of a row pair, the
// operand form of smmla, and the activations of the two tokens for the same
// 8 columns make the other operand. Integer sums are those of the other
// forms, and every float step (scale = d * sx, acc += dot * scale, off +=
// scale * sum, y = acc - 8 off, each fused) is the single-token kernel's,
// so results are bit for bit PackedGemv's.
HWY_INLINE void PackedQ4_0GroupMmla(const uint8_t* HWY_RESTRICT p, size_t nblocks,
                                    const int8_t* HWY_RESTRICT xq0,
                                    const float* HWY_RESTRICT sx0,
                                    const float* HWY_RESTRICT sum0,
                                    const int8_t* HWY_RESTRICT xq1,
                                    const float* HWY_RESTRICT sx1,
                                    const float* HWY_RESTRICT sum1, float* HWY_RESTRICT y0,
                                    float* HWY_RESTRICT y1) {
  // Tile j covers rows 2j, 2j + 1: lanes (row 2j, token 0), (2j, 1),
  // (2j + 1, 0), (2j + 1, 1).
  float32x4_t acc[4], off[4];
  for (size_t j = 0; j < 4; ++j) acc[j] = off[j] = vdupq_n_f32(0.0f);
  const uint8x16_t low4 = vdupq_n_u8(15);
  for (size_t b = 0; b < nblocks; ++b, p += kPackedBlockBytes) {
    __builtin_prefetch(p + kPackedPrefetchAhead);
    __builtin_prefetch(p + kPackedPrefetchAhead + 64);
    __builtin_prefetch(p + kPackedPrefetchAhead + 128);
    // Columns 8o..8o+7 of both tokens: o = 0, 1 pair with the low nibbles
    // of chunks (0, 1) and (2, 3); o = 2, 3 with their high nibbles.
    int8x16_t x[4];
    for (size_t o = 0; o < 4; ++o) {
      x[o] = vcombine_s8(vld1_s8(xq0 + 32 * b + 8 * o), vld1_s8(xq1 + 32 * b + 8 * o));
    }
    int32x4_t dot[4];
    for (size_t part = 0; part < 2; ++part) {
      const uint8_t* q = p + kPackedScaleBytes + 16 * part;
      const uint32x4_t c0 = vreinterpretq_u32_u8(vld1q_u8(q));
      const uint32x4_t c1 = vreinterpretq_u32_u8(vld1q_u8(q + 32));
      const uint32x4_t c2 = vreinterpretq_u32_u8(vld1q_u8(q + 64));
      const uint32x4_t c3 = vreinterpretq_u32_u8(vld1q_u8(q + 96));
      for (size_t h = 0; h < 2; ++h) {  // row pair (4 part + 2h, 4 part + 2h + 1)
        const uint8x16_t w01 = vreinterpretq_u8_u32(h ? vzip2q_u32(c0, c1) : vzip1q_u32(c0, c1));
        const uint8x16_t w23 = vreinterpretq_u8_u32(h ? vzip2q_u32(c2, c3) : vzip1q_u32(c2, c3));
        int32x4_t d = vdupq_n_s32(0);
        d = MatMulAddBytes(d, vreinterpretq_s8_u8(vandq_u8(w01, low4)), x[0]);
        d = MatMulAddBytes(d, vreinterpretq_s8_u8(vandq_u8(w23, low4)), x[1]);
        d = MatMulAddBytes(d, vreinterpretq_s8_u8(vshrq_n_u8(w01, 4)), x[2]);
        d = MatMulAddBytes(d, vreinterpretq_s8_u8(vshrq_n_u8(w23, 4)), x[3]);
        dot[2 * part + h] = d;
      }
    }
    uint16_t hbits[8];
    std::memcpy(hbits, p, sizeof(hbits));
    const float32x4_t d03 = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(hbits)));
    const float32x4_t d47 = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(hbits + 4)));
    const float32x2_t sx2 = {sx0[b], sx1[b]};
    const float32x2_t sum2 = {sum0[b], sum1[b]};
    const float32x4_t vsx = vcombine_f32(sx2, sx2);
    const float32x4_t vsum = vcombine_f32(sum2, sum2);
    for (size_t j = 0; j < 4; ++j) {
      const float32x4_t d4 = j < 2 ? d03 : d47;
      const float32x4_t rows = (j % 2 == 0) ? vzip1q_f32(d4, d4) : vzip2q_f32(d4, d4);
      const float32x4_t scale = vmulq_f32(rows, vsx);
      acc[j] = vfmaq_f32(acc[j], vcvtq_f32_s32(dot[j]), scale);
      off[j] = vfmaq_f32(off[j], scale, vsum);
    }
  }
  for (size_t j = 0; j < 4; ++j) {
    const float32x4_t r = vfmsq_f32(acc[j], vdupq_n_f32(8.0f), off[j]);
    y0[2 * j] = vgetq_lane_f32(r, 0);
    y1[2 * j] = vgetq_lane_f32(r, 1);
    y0[2 * j + 1] = vgetq_lane_f32(r, 2);
    y1[2 * j + 1] = vgetq_lane_f32(r, 3);
  }
}
#endif  // SPARROW_INT8_MMLA
#endif  // HWY_TARGET == HWY_SCALAR

// y[t * y_stride + 8 * g + r] for the n inputs (x[t]: quantized, scales,
// sums), each group multiplied with every input before the next.
template <class Dots, class Input>
HWY_INLINE void PackedGemvWith(TensorType type, const uint8_t* HWY_RESTRICT data, size_t cols,
                               const Input* x, size_t n, size_t group_begin, size_t group_end,
                               float* HWY_RESTRICT y, size_t y_stride) {
  const bool k_quant = type == TensorType::kQ4_K;
  const bool q8 = type == TensorType::kQ8_0;
  const size_t nblocks = k_quant ? cols / 256 : cols / 32;
  const size_t group_bytes =
      nblocks * (k_quant ? kPackedSuperBytes : q8 ? kPackedQ8BlockBytes : kPackedBlockBytes);
  // Groups gs[0..ngroups) (1, 2 or kPackedStreams of them) for every input.
  auto run = [&](const size_t* gs, size_t ngroups) HWY_ATTR {
    size_t t = 0;
#ifdef SPARROW_INT8_MMLA
    if (type == TensorType::kQ4_0 && n >= 2 && CpuHasArmI8mm()) {
      for (; t + 2 <= n; t += 2) {
        float* yt = y + t * y_stride;
        for (size_t i = 0; i < ngroups; ++i) {
          const size_t gi = gs[i];
          PackedQ4_0GroupMmla(data + gi * group_bytes, nblocks, x[t].quantized(), x[t].scales(),
                              x[t].sums(), x[t + 1].quantized(), x[t + 1].scales(),
                              x[t + 1].sums(), yt + 8 * gi, yt + y_stride + 8 * gi);
        }
      }
    }
#endif
#if HWY_TARGET != HWY_SCALAR && !HWY_HAVE_SCALABLE
    // Several inputs: each group's nibbles (and Q4_K's scales) unpacked
    // once for up to 8 of them. Measured on a Sapphire Rapids VM, one
    // thread, 125M-shaped synthetic files, `sparrow bench -p 64 -n 0 -r 3`,
    // alternating: Q4_0 on AVX3_DL 659-670 tok/s one input at a time,
    // 825-833 four at a time, 861-868 eight; on AVX2 (AVX-VNNI) 638-654,
    // 750-760, 783-786. Q4_K on AVX3_DL 513-521 one at a time, 741-744 four.
    if (n >= 2 && hn::Lanes(hn::CappedTag<uint8_t, 32>()) == 32) {
      // Q4_K keeps two int accumulators per input live: four inputs fit
      // AVX2's 16 registers (eight spilled there: 650 tok/s against 698).
      // Q8_0 keeps a block's eight weight chunks live: four inputs beside
      // them on AVX2, eight on AVX-512's 32 registers.
      const size_t most = k_quant || (q8 && HWY_MAX_BYTES < 64) ? 4 : 8;
      for (; t + 2 <= n;) {
        const size_t count = std::min(n - t, most);
        for (size_t i = 0; i < ngroups; ++i) {
          const size_t gi = gs[i];
          const uint8_t* pg = data + gi * group_bytes;
          float* out[8];
          for (size_t j = 0; j < count; ++j) out[j] = y + (t + j) * y_stride + 8 * gi;
          if (k_quant) {
            switch (count) {
              case 4: PackedQ4_KGroupTokens<Dots, 4>(pg, nblocks, x + t, out); break;
              case 3: PackedQ4_KGroupTokens<Dots, 3>(pg, nblocks, x + t, out); break;
              default: PackedQ4_KGroupTokens<Dots, 2>(pg, nblocks, x + t, out); break;
            }
            continue;
          }
          if (q8) {
            switch (count) {
              case 8: PackedQ8_0GroupTokens<Dots, 8>(pg, nblocks, x + t, out); break;
              case 7: PackedQ8_0GroupTokens<Dots, 7>(pg, nblocks, x + t, out); break;
              case 6: PackedQ8_0GroupTokens<Dots, 6>(pg, nblocks, x + t, out); break;
              case 5: PackedQ8_0GroupTokens<Dots, 5>(pg, nblocks, x + t, out); break;
              case 4: PackedQ8_0GroupTokens<Dots, 4>(pg, nblocks, x + t, out); break;
              case 3: PackedQ8_0GroupTokens<Dots, 3>(pg, nblocks, x + t, out); break;
              default: PackedQ8_0GroupTokens<Dots, 2>(pg, nblocks, x + t, out); break;
            }
            continue;
          }
          switch (count) {
            case 8: PackedQ4_0GroupTokens<Dots, 8>(pg, nblocks, x + t, out); break;
            case 7: PackedQ4_0GroupTokens<Dots, 7>(pg, nblocks, x + t, out); break;
            case 6: PackedQ4_0GroupTokens<Dots, 6>(pg, nblocks, x + t, out); break;
            case 5: PackedQ4_0GroupTokens<Dots, 5>(pg, nblocks, x + t, out); break;
            case 4: PackedQ4_0GroupTokens<Dots, 4>(pg, nblocks, x + t, out); break;
            case 3: PackedQ4_0GroupTokens<Dots, 3>(pg, nblocks, x + t, out); break;
            default: PackedQ4_0GroupTokens<Dots, 2>(pg, nblocks, x + t, out); break;
          }
        }
        t += count;
      }
    }
#endif
    for (; t < n; ++t) {
      const uint8_t* groups[kPackedStreams] = {};
      float* ys[kPackedStreams] = {};
      for (size_t i = 0; i < ngroups; ++i) {
        groups[i] = data + gs[i] * group_bytes;
        ys[i] = y + t * y_stride + 8 * gs[i];
      }
      const auto with = [&](auto kernel) HWY_ATTR {
        using Kernel = decltype(kernel);
        const int8_t* xq = x[t].quantized();
        const float* sx = x[t].scales();
        const float* sums = x[t].sums();
        if (ngroups == kPackedStreams) {
          PackedGroups<Kernel, Dots, kPackedStreams>(groups, nblocks, xq, sx, sums, ys);
        } else if (ngroups == 2) {
          PackedGroups<Kernel, Dots, 2>(groups, nblocks, xq, sx, sums, ys);
        } else {
          PackedGroups<Kernel, Dots, 1>(groups, nblocks, xq, sx, sums, ys);
        }
      };
      if (k_quant) {
        with(PackedQ4_KKernel());
      } else if (q8) {
        with(PackedQ8_0Kernel());
      } else {
        with(PackedQ4_0Kernel());
      }
    }
  };
  // Sets of kPackedStreams groups (g, g + part, g + 2 * part, ...): each
  // part of the range is then read front to back as one stream, and
  // prefetches run on across group boundaries (neighbours side by side
  // would leave every other group's start cold); what is left, in pairs,
  // then alone. Measured with gemv_bench on a Zen 3 VM, one thread,
  // 4096x4096 Q4_0: 75-77% of the four-stream probe one group at a time,
  // 81-89% in pairs (PackedGroups: fours).
  ForEachPackedStreamSet(group_begin, group_end - group_begin,
                         [&](size_t streams, size_t first, size_t part) HWY_ATTR {
                           for (size_t i = 0; i < part; ++i) {
                             size_t gs[kPackedStreams] = {};
                             for (size_t j = 0; j < streams; ++j) gs[j] = first + i + j * part;
                             run(gs, streams);
                           }
                         });
}

// PackedGemvWith in the best 8-bit dot-product form this CPU runs.
template <class Input>
HWY_INLINE void PackedGemvImpl(TensorType type, const uint8_t* HWY_RESTRICT data, size_t cols,
                               const Input* x, size_t n, size_t group_begin, size_t group_end,
                               float* HWY_RESTRICT y, size_t y_stride) {
#if HWY_TARGET == HWY_SCALAR
  PackedGemvWith<void>(type, data, cols, x, n, group_begin, group_end, y, y_stride);
#else
  WithBestByteDotSum(hn::CappedTag<uint8_t, 32>(), [&](auto dots) HWY_ATTR {
    PackedGemvWith<decltype(dots)>(type, data, cols, x, n, group_begin, group_end, y, y_stride);
  });
#endif
}

// Row r of a packed Q4_0 or Q8_0 group straight to bf16 (UnpackRowToBF16),
// where the CPU rounds to bf16 in one instruction; false where this target
// has no such path (the caller then unpacks the row and converts it). Each
// block's quant bytes are 4-byte pieces, one from each 32-byte chunk.
HWY_INLINE bool UnpackRowToBF16Impl(TensorType type, const uint8_t* HWY_RESTRICT group,
                                    size_t cols, size_t r, uint16_t* HWY_RESTRICT dst) {
#ifdef SPARROW_BF16_CONVERT_ASM
  if (type == TensorType::kQ4_0 && CpuHasX86Bf16()) {
    const auto word = [](const uint8_t* p) {
      int32_t w;
      std::memcpy(&w, p, 4);
      return w;
    };
    for (size_t b = 0; b < cols / 32; ++b) {
      const uint8_t* block = group + b * kPackedBlockBytes;
      hwy::Prefetch(block + 8 * kPackedBlockBytes);
      uint16_t d_bits;
      std::memcpy(&d_bits, block + 2 * r, 2);
      const uint8_t* q = block + 16 + 4 * r;
      Q4_0BlockToBF16(d_bits, _mm_setr_epi32(word(q), word(q + 32), word(q + 64), word(q + 96)),
                      dst + 32 * b);
    }
    return true;
  }
  if (type == TensorType::kQ8_0 && CpuHasX86Bf16()) {  // eight 4-byte pieces per block
    const auto word = [](const uint8_t* p) {
      int32_t w;
      std::memcpy(&w, p, 4);
      return w;
    };
    for (size_t b = 0; b < cols / 32; ++b) {
      const uint8_t* block = group + b * kPackedQ8BlockBytes;
      hwy::Prefetch(block + 8 * kPackedQ8BlockBytes);
      uint16_t d_bits;
      std::memcpy(&d_bits, block + 2 * r, 2);
      const uint8_t* q = block + 16 + 4 * r;
      Q8_0BlockToBF16(d_bits, _mm_setr_epi32(word(q), word(q + 32), word(q + 64), word(q + 96)),
                      _mm_setr_epi32(word(q + 128), word(q + 160), word(q + 192), word(q + 224)),
                      dst + 32 * b);
    }
    return true;
  }
#endif
  (void)type;
  (void)group;
  (void)cols;
  (void)r;
  (void)dst;
  return false;
}

// All 8 rows of a packed Q8_0 group to bf16 at dst + r * dst_stride
// (UnpackGroupToBF16): each block's eight 32-byte chunks transposed as an
// 8 x 8 matrix of 4-byte words gives each row's 32 quant bytes in order,
// three shuffles a row where UnpackRowToBF16Impl gathers eight words one
// by one. false where this target has no such path.
HWY_INLINE bool UnpackGroupToBF16Impl(TensorType type, const uint8_t* HWY_RESTRICT group,
                                      size_t cols, uint16_t* HWY_RESTRICT dst,
                                      size_t dst_stride) {
#ifdef SPARROW_BF16_CONVERT_ASM
  if (type == TensorType::kQ8_0 && CpuHasX86Bf16()) {
    for (size_t b = 0; b < cols / 32; ++b) {
      const uint8_t* block = group + b * kPackedQ8BlockBytes;
      for (size_t i = 0; i < kPackedQ8BlockBytes; i += 64) hwy::Prefetch(block + 1024 + i);
      uint16_t d_bits[8];
      std::memcpy(d_bits, block, sizeof(d_bits));
      __m256i c[8];
      for (size_t k = 0; k < 8; ++k) {
        c[k] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 16 + 32 * k));
      }
      __m256i u[8];  // u[h + 4 * q]: rows h (low half) and h + 4, chunks 4q..4q+3
      for (size_t q = 0; q < 2; ++q) {
        const __m256i* cq = c + 4 * q;
        const __m256i t0 = _mm256_unpacklo_epi32(cq[0], cq[1]);
        const __m256i t1 = _mm256_unpackhi_epi32(cq[0], cq[1]);
        const __m256i t2 = _mm256_unpacklo_epi32(cq[2], cq[3]);
        const __m256i t3 = _mm256_unpackhi_epi32(cq[2], cq[3]);
        u[4 * q + 0] = _mm256_unpacklo_epi64(t0, t2);
        u[4 * q + 1] = _mm256_unpackhi_epi64(t0, t2);
        u[4 * q + 2] = _mm256_unpacklo_epi64(t1, t3);
        u[4 * q + 3] = _mm256_unpackhi_epi64(t1, t3);
      }
      for (size_t h = 0; h < 4; ++h) {
        const __m256i lo_row = _mm256_permute2x128_si256(u[h], u[h + 4], 0x20);  // row h
        const __m256i hi_row = _mm256_permute2x128_si256(u[h], u[h + 4], 0x31);  // row h + 4
        Q8_0BlockToBF16(d_bits[h], _mm256_castsi256_si128(lo_row),
                        _mm256_extracti128_si256(lo_row, 1), dst + h * dst_stride + 32 * b);
        Q8_0BlockToBF16(d_bits[h + 4], _mm256_castsi256_si128(hi_row),
                        _mm256_extracti128_si256(hi_row, 1),
                        dst + (h + 4) * dst_stride + 32 * b);
      }
    }
    return true;
  }
#endif
  (void)type;
  (void)group;
  (void)cols;
  (void)dst;
  (void)dst_stride;
  return false;
}

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::simd
HWY_AFTER_NAMESPACE();

#endif  // include guard
