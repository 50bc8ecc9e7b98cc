// Per-target GEMV kernels (gemv.h) and the activation quantizer behind
// GemvInput. Decoding is bound by how fast the weights stream from DRAM, so
// every kernel reads each weight byte once, keeps the per-element work to a
// handful of vector ops, and handles up to four rows per pass so that each
// activation load serves several rows.
//
// Quantized types: the weights' 4/6/8-bit integers are widened to int16 and
// multiplied with the int16 activations by ReorderWidenMulAccumulate (x86:
// vpmaddwd), summing exactly in int32 over a block (or a Q6_K group); one
// convert and one f32 multiply-add per block then apply the block's scale
// (weight scale times activation scale, computed for a chunk of blocks up
// front). Offsets that the formats apply to every element (Q4_0's -8, Q6_K's
// -32, Q4_K's mins) are not subtracted per element: they only need the sum
// of the block's activations, so they cost one multiply-add per block.
//
// The integer work uses at most 16 int16 lanes (256 bits): each step then
// covers whole sub-blocks of 16 elements on AVX2/AVX-512 (and halves or less
// of them on 128-bit or scalar targets), so a block's partial sums never mix
// with another block's. On AVX-512 the 256-bit forms also keep the third
// vector port busy, which 512-bit integer ops would not.

#if defined(SPARROW_SIMD_GEMV_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SPARROW_SIMD_GEMV_INL_H_
#undef SPARROW_SIMD_GEMV_INL_H_
#else
#define SPARROW_SIMD_GEMV_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include "base/tensor_type.h"
#include "simd/quant_blocks.h"
#include "simd/int8_dot-inl.h"  // QuantizeInt8Impl
#include "simd/quantize-inl.h"  // PromoteHalf
#include "simd/targets.h"       // CpuStreamsRowsItself

HWY_BEFORE_NAMESPACE();
namespace sparrow::simd {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// Blocks whose scales are computed in one pass before their dot products.
inline constexpr size_t kGemvChunkBlocks = 64;
// Kernels prefetch each row stream this far ahead. Hardware prefetchers
// alone leave the block-structured kernels (which also gather block scales
// ahead of the loads) waiting on DRAM: measured on Sapphire Rapids, this
// made Q8_0 ~45% and Q4_0 ~5-20% faster; 4 and 8 KiB were equally good.
inline constexpr size_t kPrefetchBytes = 4096;

// Slack after per-block arrays so that full vectors (up to 64 f32 lanes on
// 2048-bit SVE) may be loaded and stored past the last block.
inline constexpr size_t kGemvPad = 64;

HWY_INLINE uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

template <class D>
HWY_INLINE float ReduceSum(D d, hn::Vec<D> v) {
  return hn::GetLane(hn::SumOfLanes(d, v));
}

// ------------------------------------------------------------ activations

// Quantizes x (n a multiple of 32) to int16 per block of 32 and writes the
// per-block scale and exact integer sums; with `group_sums`, also per group
// of 16 (Q6_K). Round to nearest even; the block's largest magnitude maps to
// +-32767, so |x - q * scale| <= scale / 2 = max|x_block| / 65534.
//
// Layouts of q: natural order, or with `pair_layout` (Q4_0) each pair of
// blocks (A, B) stored as A[0..15] B[0..15] A[16..31] B[16..31], so that one
// 32-lane vector holds the activations of two blocks' low nibbles and the
// next one those of their high nibbles (Q4_0Rows). A missing B (odd block
// count) is left to the caller to zero.
HWY_INLINE size_t PairLayoutIndex(size_t block, size_t i) {
  return (block & ~size_t{1}) * 32 + (i / 16) * 32 + (block & 1) * 16 + i % 16;
}

#undef SPARROW_Q4_0_INT8  // per target (this file is included once per target)
#if HWY_ARCH_X86 && (HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX3) && \
    (defined(__GNUC__) || defined(__clang__))
// Q4_0 rows against 8-bit activations, two blocks per 512-bit vpdpbusd
// (Q4_0Rows). With int16 activations the kernel is bound by arithmetic at
// one thread where its rows are in cache: ~10 vector instructions per
// block pair and row on the two 512-bit ports; with int8, 6 (see
// Q4_0PairInt8). Measured on Sapphire Rapids (2 vCPU VM), one thread,
// alternating, `gather_bench --types q4_0 --shapes 2048x512 --parts 1
// --kernels dot --rotate-mib 1 --clock cpu`: 13.4-13.8 GB/s with int16,
// 16.6-18.1 with int8 (rows from DRAM: no change either way). Highway
// 1.0.3 has no 8-bit dot product nor a masked 128-bit broadcast, so both
// are raw (vpdpbusd is inline assembly for the reason given in
// int8_dot-inl.h). AVX3_DL's runtime check requires AVX512_VNNI; AVX3 asks
// the CPU (Cascade Lake has AVX512_VNNI but not VBMI, so Highway gives it
// AVX3). Measured on a 2 vCPU Cascade Lake VM, one thread, CPU clock,
// `gemv_bench --types q4_0 --shapes 2048x5632,4096x11008
// [--hide-cpu-extensions]`, three alternated rounds: 49-71% of the 4-stream
// probe with int16, 83-88% with int8 (README.md has the whole table).
#define SPARROW_Q4_0_INT8 1
#endif
// AVX2, SSE4, NEON with the dot-product extension and SVE take int8
// activations too, in one Highway kernel over the byte dot forms of
// int8_dot-inl.h (Q4_0QuadsInt8): vpdpbusd where an AVX2 CPU has AVX-VNNI
// (Alder Lake and later, Zen 5), else pmaddubsw + pmaddwd; `sdot` on Arm.
// With int16 activations DotRows on AVX2 and SSE4 was bound by its
// arithmetic even on rows from DRAM (README.md has the figures); on Arm the
// 8-bit form takes about half the instructions per block.
#undef SPARROW_Q4_0_INT8_QUADS
#if (HWY_ARCH_X86 &&                                                                  \
     (HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_SSE4 || HWY_TARGET == HWY_SSSE3) && \
     (defined(__GNUC__) || defined(__clang__))) ||                                    \
    defined(SPARROW_INT8_SDOT_NEON) || defined(SPARROW_INT8_SDOT_SVE)
#define SPARROW_Q4_0_INT8_QUADS 1
#endif
// Targets where every CPU takes Q4_0's int8 form, so that no int16 form is
// compiled: AVX3_DL (its runtime check requires AVX-512 VNNI), SVE (`sdot`)
// and the x86 targets of the quad kernel (pmaddubsw at least).
#undef SPARROW_Q4_0_ALWAYS_INT8
#if (defined(SPARROW_Q4_0_INT8) && HWY_TARGET == HWY_AVX3_DL) || defined(SPARROW_INT8_SDOT_SVE) || \
    (HWY_ARCH_X86 && defined(SPARROW_Q4_0_INT8_QUADS))
#define SPARROW_Q4_0_ALWAYS_INT8 1
#endif
// Whether Q4_0 rows take a quad form too (Q4_0InterleavedQuads), in Q4_0S's
// activation layout: where VBMI's byte permute gathers their nibbles
// (AVX3_DL; Cascade Lake, which Highway gives AVX3, has none and keeps the
// pair form).
#if defined(SPARROW_Q4_0_INT8) && HWY_TARGET == HWY_AVX3_DL
inline constexpr bool kQ4_0PlainQuads = true;
#else
inline constexpr bool kQ4_0PlainQuads = false;
#endif
// Whether Q8_0 rows take int8 activations (Q8_0InterleavedPairs), on the
// same targets and for the same reason.
inline constexpr bool kQ8_0Int8 = kQ4_0PlainQuads;
// Whether plain Q4_0's int8 activations are in the quad layout, as Q4_0S's
// (QuadLayoutIndex): for the quad forms.
#ifdef SPARROW_Q4_0_INT8_QUADS
inline constexpr bool kQ4_0QuadActivations = true;
#else
inline constexpr bool kQ4_0QuadActivations = kQ4_0PlainQuads;
#endif

// The activations Q4_0Rows takes on this target and CPU: int8
// (SPARROW_Q4_0_INT8 and SPARROW_Q4_0_INT8_QUADS, largest magnitude to
// +-127; natural order for Q4_0's pair form, the quad layout for the quad
// forms) or int16 in the pair layout. QuantizeActivationsImpl and Q4_0Rows
// both ask, so they agree.
HWY_INLINE bool Q4_0ActivationsAreInt8() {
#if defined(SPARROW_Q4_0_ALWAYS_INT8)
  return true;
#elif defined(SPARROW_Q4_0_INT8) && HWY_TARGET == HWY_AVX3
  return TargetHasVnni();
#elif defined(SPARROW_INT8_SDOT_NEON)
  // Without `sdot`, int16: NEON has no other byte dot product, and emulating
  // one would take more instructions than the int16 form.
  return CpuHasArmDotProd();
#else
  return false;
#endif
}

// Whether Q6_K's activations are int8 (Q6_KRowsInt8) on this target and
// CPU: where it has a native 8-bit dot product. QuantizeActivationsImpl
// and the kernel both ask, so they agree.
HWY_INLINE bool Q6_KActivationsAreInt8() { return HasFastByteDotSum(); }

// Q4_0S's int8 activations (Q4_0SplitQuads): each quad of blocks A, B, C, D
// (the last one may have fewer) stored in 128 bytes as A[0..15] B[0..15]
// C[0..15] D[0..15] A[16..31] B[16..31] C[16..31] D[16..31], so that one
// 64-byte vector holds what four blocks' low nibbles multiply and the next
// what their high ones do. The slots of a short last quad's missing blocks
// are zeroed. In place, from natural order; q has room for the last quad.
HWY_INLINE size_t QuadLayoutIndex(size_t block, size_t i) {
  return (block / 4) * 128 + (i / 16) * 64 + (block % 4) * 16 + i % 16;
}
HWY_INLINE void ToQuadLayout(int8_t* HWY_RESTRICT q, size_t nblocks) {
  for (size_t b0 = 0; b0 < nblocks; b0 += 4) {
    const size_t k = std::min<size_t>(4, nblocks - b0);
    int8_t tmp[128];
    std::memcpy(tmp, q + 32 * b0, 32 * k);
    std::memset(q + 32 * b0, 0, 128);
    for (size_t j = 0; j < k; ++j) {
      std::memcpy(q + QuadLayoutIndex(b0 + j, 0), tmp + 32 * j, 16);
      std::memcpy(q + QuadLayoutIndex(b0 + j, 16), tmp + 32 * j + 16, 16);
    }
  }
}

HWY_INLINE void QuantizeActivationsImpl(const float* HWY_RESTRICT x, size_t n, bool pair_layout,
                                        bool split_quads, bool q8_0, int16_t* HWY_RESTRICT q,
                                        float* HWY_RESTRICT scales, float* HWY_RESTRICT sums,
                                        float* HWY_RESTRICT group_sums,
                                        float* HWY_RESTRICT group_scales) {
#if defined(SPARROW_Q4_0_INT8) || defined(SPARROW_Q4_0_INT8_QUADS)
  // int8 in q's bytes: in the quad layout for Q4_0S and, where it takes a
  // quad form (kQ4_0QuadActivations), Q4_0; else in natural order.
  if (pair_layout && Q4_0ActivationsAreInt8()) {
    QuantizeInt8Impl(x, n, reinterpret_cast<int8_t*>(q), scales, sums);
    if (split_quads || kQ4_0QuadActivations) ToQuadLayout(reinterpret_cast<int8_t*>(q), n / 32);
    return;
  }
#endif
  // Q8_0 where it takes int8 (kQ8_0Int8): in natural order, in q's bytes.
  if (q8_0 && kQ8_0Int8) {
    QuantizeInt8Impl(x, n, reinterpret_cast<int8_t*>(q), scales, sums);
    return;
  }
  // Q6_K: int8 in natural order, in q's bytes, with the groups' sums of
  // the quantized values and each group's (its block's) scale.
  if (group_sums != nullptr && Q6_KActivationsAreInt8()) {
    int8_t* q8 = reinterpret_cast<int8_t*>(q);
    QuantizeInt8Impl(x, n, q8, scales, sums);
    for (size_t g = 0; g < n / 16; ++g) {
      int32_t sum = 0;
      for (size_t i = 0; i < 16; ++i) sum += q8[16 * g + i];
      group_sums[g] = static_cast<float>(sum);
      group_scales[g] = scales[g / 2];
    }
    return;
  }
  (void)split_quads;
  (void)q8_0;
  const hn::CappedTag<float, 16> df;
  const hn::Rebind<int32_t, decltype(df)> di32;
  const hn::Rebind<int16_t, decltype(df)> di16;
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
    const float amax = ReduceSum(df, poison) + hn::GetLane(hn::MaxOfLanes(df, vmax));
    if (!std::isfinite(amax)) {
      scales[b] = std::numeric_limits<float>::quiet_NaN();
      sums[b] = 0.0f;
      for (size_t i = 0; i < 32; ++i) q[pair_layout ? PairLayoutIndex(b, i) : 32 * b + i] = 0;
      if (group_sums != nullptr) {
        group_sums[2 * b] = group_sums[2 * b + 1] = 0.0f;
        group_scales[2 * b] = group_scales[2 * b + 1] = scales[b];
      }
      continue;
    }
    const float inv = amax > 0.0f ? 32767.0f / amax : 0.0f;
    scales[b] = amax / 32767.0f;
    const auto vinv = hn::Set(df, inv);
    int32_t half_sums[2] = {0, 0};
    for (size_t s = 0; s < 32; s += N) {
      const auto qi = hn::NearestInt(hn::Mul(hn::LoadU(df, xb + s), vinv));
      // s..s+N stays inside one half of the block (N <= 16).
      hn::StoreU(hn::DemoteTo(di16, qi), di16,
                 q + (pair_layout ? PairLayoutIndex(b, s) : 32 * b + s));
      half_sums[s / 16] += hn::GetLane(hn::SumOfLanes(di32, qi));
    }
    sums[b] = static_cast<float>(half_sums[0] + half_sums[1]);
    if (group_sums != nullptr) {
      group_sums[2 * b] = static_cast<float>(half_sums[0]);
      group_sums[2 * b + 1] = static_cast<float>(half_sums[1]);
      group_scales[2 * b] = group_scales[2 * b + 1] = scales[b];
    }
  }
}

// ------------------------------------------------------------ F32/F16/BF16

template <class DF>
HWY_INLINE hn::Vec<DF> LoadAsFloat(DF df, const float* p) {
  return hn::LoadU(df, p);
}
template <class DF>
HWY_INLINE hn::Vec<DF> LoadAsFloat(DF df, const hwy::float16_t* p) {
  return PromoteHalf(df, hn::LoadU(hn::Rebind<hwy::float16_t, DF>(), p));
}
template <class DF>
HWY_INLINE hn::Vec<DF> LoadAsFloat(DF df, const hwy::bfloat16_t* p) {
  return PromoteHalf(df, hn::LoadU(hn::Rebind<hwy::bfloat16_t, DF>(), p));
}

// Rows of plain floats or halves: one f32 multiply-add per element.
template <typename WT, size_t kRows, class Pf>
HWY_INLINE void FloatRows(const uint8_t* const* HWY_RESTRICT rows, size_t cols,
                          const float* HWY_RESTRICT x, float* HWY_RESTRICT y, size_t y_stride,
                          Pf& pf) {
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(df);
  const WT* r0 = reinterpret_cast<const WT*>(rows[0]);
  const WT* r1 = reinterpret_cast<const WT*>(rows[1 % kRows]);
  const WT* r2 = reinterpret_cast<const WT*>(rows[2 % kRows]);
  const WT* r3 = reinterpret_cast<const WT*>(rows[3 % kRows]);
  auto a0 = hn::Zero(df), a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
  size_t i = 0;
  for (; i + N <= cols; i += N) {
    pf.Upto(i * sizeof(WT));
    const auto xv = hn::LoadU(df, x + i);
    a0 = hn::MulAdd(LoadAsFloat(df, r0 + i), xv, a0);
    if constexpr (kRows > 1) a1 = hn::MulAdd(LoadAsFloat(df, r1 + i), xv, a1);
    if constexpr (kRows > 2) a2 = hn::MulAdd(LoadAsFloat(df, r2 + i), xv, a2);
    if constexpr (kRows > 3) a3 = hn::MulAdd(LoadAsFloat(df, r3 + i), xv, a3);
  }
  if (i < cols) {
    // The last partial vector through zeroed stack copies: never reads past
    // the end of a row (the last row may end the mapping).
    const size_t rest = cols - i;
    HWY_ALIGN float xt[HWY_MAX_BYTES / sizeof(float)] = {};
    HWY_ALIGN WT wt[HWY_MAX_BYTES / sizeof(float)] = {};
    std::memcpy(xt, x + i, rest * sizeof(float));
    const auto xv = hn::Load(df, xt);
    std::memcpy(wt, r0 + i, rest * sizeof(WT));
    a0 = hn::MulAdd(LoadAsFloat(df, wt), xv, a0);
    if constexpr (kRows > 1) {
      std::memcpy(wt, r1 + i, rest * sizeof(WT));
      a1 = hn::MulAdd(LoadAsFloat(df, wt), xv, a1);
    }
    if constexpr (kRows > 2) {
      std::memcpy(wt, r2 + i, rest * sizeof(WT));
      a2 = hn::MulAdd(LoadAsFloat(df, wt), xv, a2);
    }
    if constexpr (kRows > 3) {
      std::memcpy(wt, r3 + i, rest * sizeof(WT));
      a3 = hn::MulAdd(LoadAsFloat(df, wt), xv, a3);
    }
  }
  y[0] = ReduceSum(df, a0);
  if constexpr (kRows > 1) y[y_stride] = ReduceSum(df, a1);
  if constexpr (kRows > 2) y[2 * y_stride] = ReduceSum(df, a2);
  if constexpr (kRows > 3) y[3 * y_stride] = ReduceSum(df, a3);
}

// ------------------------------------------------------------ Q8_0 / Q4_0

// Tags for the integer work: up to 32 int16 lanes (512 bits), which hold a
// whole Q8_0 block, the low (or high) nibbles of two Q4_0 blocks, a Q4_K
// sub-block or two Q6_K groups.
struct Int32Tags {
  hn::CappedTag<int16_t, 32> d16;
  hn::RebindToUnsigned<hn::CappedTag<int16_t, 32>> du16;
  hn::Rebind<uint8_t, hn::CappedTag<int16_t, 32>> du8;
  hn::Rebind<int8_t, hn::CappedTag<int16_t, 32>> di8;
  hn::RepartitionToWide<hn::CappedTag<int16_t, 32>> d32;
  hn::Rebind<float, hn::RepartitionToWide<hn::CappedTag<int16_t, 32>>> df;
};

// Largest number of f32 lanes of any vector on this target.
inline constexpr size_t kMaxFloatLanes = HWY_MAX_BYTES / sizeof(float);

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
// The f16 scales of 8 consecutive blocks of `block_bytes`, each starting
// with its scale: Q4_0's 18 (block i's scale is word i of the 16 bytes at
// 16 * i, as 18 * i = 16 * i + 2 * i) or Q8_0's 34 (word i of the 16 bytes
// at 32 * i), picked from whole loads by word blends; every load stays
// inside the eight blocks. vpgatherdd, which AMD's cores microcode, and
// a copy of the scales one by one through a buffer both measured slower
// (WeightBlockScales and axpy_int-inl.h's RowHalves8 have the figures).
HWY_INLINE __m128i HalfScales8(const uint8_t* HWY_RESTRICT blocks, size_t block_bytes) {
  static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ8_0) == 34);
  if (block_bytes == sizeof(BlockQ4_0)) {  // low halves: words 0, 2, 4, 6; high: 1, 3, 5, 7
    const auto load = [&](size_t at) HWY_ATTR {
      return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blocks + at));
    };
    __m256i w = _mm256_blend_epi16(load(0), load(32), 0x0C);
    w = _mm256_blend_epi16(w, load(64), 0x30);
    w = _mm256_blend_epi16(w, load(96), 0xC0);
    return _mm_blend_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1), 0xAA);
  }
  const auto load = [&](size_t i) HWY_ATTR {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks + 32 * i));
  };
  __m128i w = _mm_blend_epi16(load(0), load(1), 0x02);
  w = _mm_blend_epi16(w, load(2), 0x04);
  w = _mm_blend_epi16(w, load(3), 0x08);
  w = _mm_blend_epi16(w, load(4), 0x10);
  w = _mm_blend_epi16(w, load(5), 0x20);
  w = _mm_blend_epi16(w, load(6), 0x40);
  return _mm_blend_epi16(w, load(7), 0x80);
}
#endif

// For `count` (<= Lanes(df)) blocks of `block_bytes` starting at `blocks`,
// each starting with its f16 scale: sw[b] = weight scale * activation scale
// sx[b] (zero for b >= count, up to Lanes(df)), and adds sw[b] * sums[b] to
// `offset` (the kernels' per-block offset terms). sx and sums are padded.
//
// In two steps, so that kernels multiplying the same rows with several
// inputs decode the weights' scales once (WeightBlockScales) and apply each
// input's (ApplyInputScales): the same operations, so the same results.
template <class DF>
HWY_INLINE hn::Vec<DF> WeightBlockScales(DF df, const uint8_t* HWY_RESTRICT blocks,
                                         size_t block_bytes, size_t count) {
  const hn::RebindToSigned<DF> di32;
  const hn::Rebind<uint16_t, DF> du16;
  const hn::Rebind<hwy::float16_t, DF> df16;
  const size_t N = hn::Lanes(df);
  // Each lane gathers 4 bytes at its block's start: the f16 scale and two
  // bytes that follow it inside the block. Lanes past `count` repeat the
  // last block (no reads past it) and are zeroed below.
  const auto offsets = hn::Min(
      hn::Mul(hn::Iota(di32, 0), hn::Set(di32, static_cast<int32_t>(block_bytes))),
      hn::Set(di32, static_cast<int32_t>((count - 1) * block_bytes)));
#if HWY_TARGET == HWY_AVX2
  // The scales one by one through a small buffer instead of vpgatherdd:
  // measured with gemv_bench on an AMD EPYC (Zen 3, AVX2) VM, one thread,
  // Q8_0 went from 15.3-15.6 to 19.8-20.0 GB/s and Q4_0 from 7.8-8.2 to
  // 11.2-12.0 (AMD's gathers are microcoded and slow). Building the vector
  // from registers (_mm_set_epi16) measured far slower. Eight Q4_0 or Q8_0
  // blocks' scales come from word blends (HalfScales8) instead: same VM,
  // three alternated rounds of `gather_bench --types q4_0,q8_0 --shapes
  // 2048x5632,768x3072 --kernels dot --threads 1 --clock cpu`, every row in
  // order: Q4_0 8.7-9.1 -> 9.6-10.4 GB/s (2048 wide) and 10.2-10.9 ->
  // 11.7-12.3 (768), Q8_0 13.0-15.9 -> 16.5-18.8 and 14.8-15.3 ->
  // 15.0-17.5; `sparrow bench -p 0 -n 32 -t 1` on the 1.1B-shaped neuron
  // bundle of Q4_0 records 17.2-17.9 -> 18.7-19.6 tok/s.
  (void)offsets;
  if (N == 8 && count == 8 &&
      (block_bytes == sizeof(BlockQ4_0) || block_bytes == sizeof(BlockQ8_0))) {
    return PromoteHalf(
        df, hn::BitCast(df16, hn::Vec<decltype(du16)>{HalfScales8(blocks, block_bytes)}));
  }
  HWY_ALIGN uint16_t h[16] = {};
  for (size_t i = 0; i < N; ++i) h[i] = LoadU16(blocks + std::min(i, count - 1) * block_bytes);
  const auto dw = PromoteHalf(df, hn::Load(df16, reinterpret_cast<const hwy::float16_t*>(h)));
#else
  const auto raw = hn::GatherOffset(di32, reinterpret_cast<const int32_t*>(blocks), offsets);
  const auto bits = hn::DemoteTo(du16, hn::And(raw, hn::Set(di32, 0xFFFF)));
  const auto dw = PromoteHalf(df, hn::BitCast(df16, bits));
#endif
  (void)N;
  return dw;
}

template <class DF>
HWY_INLINE void ApplyInputScales(DF df, hn::Vec<DF> dw, size_t count,
                                 const float* HWY_RESTRICT sx, const float* HWY_RESTRICT sums,
                                 float* HWY_RESTRICT sw, hn::Vec<DF>& offset) {
  auto s = hn::Mul(dw, hn::LoadU(df, sx));
  if (count < hn::Lanes(df)) s = hn::IfThenElseZero(hn::FirstN(df, count), s);
  hn::Store(s, df, sw);
  offset = hn::MulAdd(s, hn::LoadU(df, sums), offset);
}

template <class DF>
HWY_INLINE void BlockScales(DF df, const uint8_t* HWY_RESTRICT blocks,
                            size_t block_bytes, size_t count,
                            const float* HWY_RESTRICT sx,
                            const float* HWY_RESTRICT sums,
                            float* HWY_RESTRICT sw, hn::Vec<DF>& offset) {
  ApplyInputScales(df, WeightBlockScales(df, blocks, block_bytes, count), count, sx, sums, sw,
                   offset);
}

// Row kernels take their rows as an array of kRows pointers and a prefetch
// policy `pf`: they call pf.Upto(p) before using bytes at offset p of their
// rows. The GEMV's policy (rows of one matrix, each a long stream) is
// StreamAhead; the gather kernels (gather-inl.h) pass one that also runs on
// into the next rows of their list. The arithmetic is the same code, so a
// gathered row's result is bit-identical to the GEMV's.
template <size_t kRows>
struct StreamAhead {
  const uint8_t* const* rows;
  HWY_INLINE void Upto(size_t offset) const {
    for (size_t r = 0; r < kRows; ++r) hwy::Prefetch(rows[r] + offset + kPrefetchBytes);
  }
};

// The policy for rows the hardware prefetchers follow on their own
// (CpuStreamsRowsItself): plain float rows, read front to back, on CPUs
// where software prefetches hold them back. Measured on a Zen 4 VM, one
// thread, alternated: `gemv_bench --types f32,bf16,f16 --shapes
// 2048x5632,5632x2048` with StreamAhead F32 23.1-24.1 GB/s, BF16
// 20.1-21.8; without it 26.5-27.4 and 21.7-31.0; F16 768x32000 (a 125M
// model's output head) 24.1-24.4 -> 31.0-31.6; `sparrow bench` on a
// 125M-shaped F16 file, tg64 one thread, 80-83 -> 101-104 tok/s. The
// block-structured row kernels keep StreamAhead everywhere (without it
// Q8_0 rows fell from 15.1-16.3 to 10.2-11.6 GB/s there).
template <size_t kRows>
struct HardwarePrefetch {
  const uint8_t* const* rows;
  HWY_INLINE void Upto(size_t) const {}
};

// Prefetches the `bytes` (a K-quant super-block) at `offset` of the rows.
template <size_t kRows>
HWY_INLINE void PrefetchSpan(const uint8_t* r0, const uint8_t* r1, size_t offset,
                             size_t bytes) {
  for (size_t i = 0; i < bytes; i += 64) {
    hwy::Prefetch(r0 + offset + i);
    if constexpr (kRows > 1) hwy::Prefetch(r1 + offset + i);
  }
}

// Scales (BlockScales) of blocks g0.. (at most Lanes(dfull) of them) for
// each of the kRows rows. The kernels compute those of the next group of
// blocks before the dot products of the current one, so that the gathers
// overlap with integer work instead of stalling it.
template <size_t kRows, class DF>
HWY_INLINE void GroupScales(DF dfull, const uint8_t* const* rows,
                            size_t block_bytes, size_t nblocks, size_t g0,
                            const float* HWY_RESTRICT sx,
                            const float* HWY_RESTRICT sums,
                            float (*out)[kMaxFloatLanes], hn::Vec<DF>& o0,
                            hn::Vec<DF>& o1, hn::Vec<DF>& o2, hn::Vec<DF>& o3) {
  const size_t count = std::min(hn::Lanes(dfull), nblocks - g0);
  const size_t at = g0 * block_bytes;
  BlockScales(dfull, rows[0] + at, block_bytes, count, sx + g0, sums + g0, out[0], o0);
  if constexpr (kRows > 1)
    BlockScales(dfull, rows[1] + at, block_bytes, count, sx + g0, sums + g0, out[1 % kRows], o1);
  if constexpr (kRows > 2)
    BlockScales(dfull, rows[2] + at, block_bytes, count, sx + g0, sums + g0, out[2 % kRows], o2);
  if constexpr (kRows > 3)
    BlockScales(dfull, rows[3] + at, block_bytes, count, sx + g0, sums + g0, out[3 % kRows], o3);
}

#undef SPARROW_PERMUTED_SCALES  // per target (this file is included once per target)
#if HWY_TARGET != HWY_SCALAR && !HWY_HAVE_SCALABLE && HWY_MAX_BYTES == 64
#define SPARROW_PERMUTED_SCALES 1
// The f16 scales of 16 consecutive blocks of kBB bytes (Q4_0: 18, Q8_0:
// 34; all 16 * kBB bytes readable) as floats, from 64-byte loads and 32-bit
// lane permutes. BlockScales' 16-lane gather does the same job but costs
// more than the rest of the kernels' non-integer work: measured on Sapphire
// Rapids (L2-resident rows), a gather pass ahead of every 16 Q4_0 blocks
// took ~2.3 of the ~9 cycles per block pair and row, these loads and
// permutes ~1; on a Cascade Lake VM one 16-lane vpgatherdd takes ~31
// cycles. Block k's scale is at byte kBB * k, the low or high half of the
// 32-bit lane holding that byte; each load covers the blocks whose lane it
// holds (ScaleLoads), the last one ending at byte 16 * kBB.
// (Helper functions, not lambdas: GCC 12 did not inline the lambdas, and
// the calls cost more than the gather they replace.)
template <size_t kBB>
struct ScaleLoads {
  static constexpr size_t kSpan = 16 * kBB;
  // Where load c starts: every 64 bytes, the last one moved back so that it
  // ends at kSpan.
  static constexpr size_t Start(size_t c) { return c * 64 + 64 <= kSpan ? c * 64 : kSpan - 64; }
  // The load block k's lane is taken from: the first whose 64 bytes hold it.
  static constexpr size_t LoadOf(size_t k) {
    size_t c = 0;
    while (!(Start(c) <= kBB * k && kBB * k + 4 - (kBB * k) % 4 <= Start(c) + 64)) ++c;
    return c;
  }
  static constexpr size_t kLoads = LoadOf(15) + 1;
  struct Tables {
    alignas(64) int32_t lane[16];
    alignas(64) uint32_t shift[16];
    size_t first[kLoads];  // the first block each load provides
  };
  static constexpr Tables Make() {
    Tables t{};
    for (size_t k = 0; k < 16; ++k) {
      const size_t byte = kBB * k - Start(LoadOf(k));
      t.lane[k] = static_cast<int32_t>(byte / 4);
      t.shift[k] = static_cast<uint32_t>(8 * (byte % 4));
    }
    for (size_t c = 0, k = 0; c < kLoads; ++c) {
      while (LoadOf(k) < c) ++k;
      t.first[c] = k;
    }
    return t;
  }
  static constexpr Tables kTables = Make();
};

template <class DU, class Indices>
HWY_INLINE hn::Vec<DU> ScaleLanes(DU du, const uint8_t* HWY_RESTRICT p, Indices idx) {
  return hn::TableLookupLanes(hn::LoadU(du, reinterpret_cast<const uint32_t*>(p)), idx);
}

// Lane k from load LoadOf(k), for the lanes of loads c..: each load's
// lanes are the ones below the next load's first block.
template <size_t kBB, size_t c, class DU, class Indices>
HWY_INLINE hn::Vec<DU> ScaleLanesFrom(DU du, const uint8_t* HWY_RESTRICT blocks, Indices idx) {
  using L = ScaleLoads<kBB>;
  const auto here = ScaleLanes(du, blocks + L::Start(c), idx);
  if constexpr (c + 1 == L::kLoads) {
    return here;
  } else {
    return hn::IfThenElse(hn::FirstN(du, L::kTables.first[c + 1]), here,
                          ScaleLanesFrom<kBB, c + 1>(du, blocks, idx));
  }
}

template <size_t kBB, class DF>
HWY_INLINE hn::Vec<DF> HalfScales16(DF df, const uint8_t* HWY_RESTRICT blocks) {
  const hn::RebindToUnsigned<DF> du;
  const hn::Rebind<uint16_t, DF> du16;
  const hn::Rebind<hwy::float16_t, DF> df16;
  static_assert(hn::MaxLanes(DF()) == 16, "needs 16 f32 lanes");
  using L = ScaleLoads<kBB>;
  const auto idx = hn::SetTableIndices(du, L::kTables.lane);
  auto bits = ScaleLanesFrom<kBB, 0>(du, blocks, idx);
  bits = hn::Shr(bits, hn::Load(du, L::kTables.shift));
  return PromoteHalf(df, hn::BitCast(df16, hn::TruncateTo(du16, bits)));
}

// HalfScales16 where there are tables for `block_bytes` (Q4_0, Q8_0):
// false for other block sizes.
template <class DF>
HWY_INLINE bool HalfScales16For(DF df, const uint8_t* HWY_RESTRICT blocks, size_t block_bytes,
                                hn::Vec<DF>& out) {
  if (block_bytes == sizeof(BlockQ4_0)) {
    out = HalfScales16<sizeof(BlockQ4_0)>(df, blocks);
    return true;
  }
  if (block_bytes == sizeof(BlockQ8_0)) {
    out = HalfScales16<sizeof(BlockQ8_0)>(df, blocks);
    return true;
  }
  return false;
}

// One row's part of PermutedGroupScales (BlockScales' results for 16 blocks).
template <size_t kBB, class DF>
HWY_INLINE void RowScales16(DF df, const uint8_t* HWY_RESTRICT blocks, hn::Vec<DF> vsx,
                            hn::Vec<DF> vsums, float* HWY_RESTRICT out, hn::Vec<DF>& offset) {
  const auto s = hn::Mul(HalfScales16<kBB>(df, blocks), vsx);
  hn::Store(s, df, out);
  offset = hn::MulAdd(s, vsums, offset);
}
#endif

// GroupScales for blocks of kBB bytes: the same results, through
// HalfScales16 where a whole group of 16 blocks is there.
template <size_t kRows, size_t kBB, class DF>
HWY_INLINE void PermutedGroupScales(DF dfull, const uint8_t* const* rows, size_t nblocks,
                                    size_t g0, const float* HWY_RESTRICT sx,
                                    const float* HWY_RESTRICT sums,
                                    float (*out)[kMaxFloatLanes], hn::Vec<DF>& o0,
                                    hn::Vec<DF>& o1, hn::Vec<DF>& o2, hn::Vec<DF>& o3) {
#ifdef SPARROW_PERMUTED_SCALES
  if (g0 + 16 <= nblocks) {
    const auto vsx = hn::LoadU(dfull, sx + g0);
    const auto vsums = hn::LoadU(dfull, sums + g0);
    const size_t at = g0 * kBB;
    RowScales16<kBB>(dfull, rows[0] + at, vsx, vsums, out[0], o0);
    if constexpr (kRows > 1) RowScales16<kBB>(dfull, rows[1] + at, vsx, vsums, out[1 % kRows], o1);
    if constexpr (kRows > 2) RowScales16<kBB>(dfull, rows[2] + at, vsx, vsums, out[2 % kRows], o2);
    if constexpr (kRows > 3) RowScales16<kBB>(dfull, rows[3] + at, vsx, vsums, out[3 % kRows], o3);
    return;
  }
#endif
  GroupScales<kRows>(dfull, rows, kBB, nblocks, g0, sx, sums, out, o0, o1, o2, o3);
}

// `count` (1..Lanes(df)) consecutive f16 values at `p` as floats, lanes
// past `count` zero; nothing past them is read.
template <class DF>
HWY_INLINE hn::Vec<DF> LoadHalves(DF df, const uint8_t* HWY_RESTRICT p, size_t count) {
  const hn::Rebind<hwy::float16_t, DF> df16;
  if (count == hn::Lanes(df)) {
    return PromoteHalf(df, hn::LoadU(df16, reinterpret_cast<const hwy::float16_t*>(p)));
  }
#if HWY_TARGET <= HWY_AVX3
  // AVX-512's masked loads read nothing past `count`. The copy below cost
  // a row with a partial group of scales (768 columns: 16 + 8 blocks) its
  // speed: DotRows over Q4_0S rows in L2 ran at about half the bytes per
  // second of 512- or 1024-wide rows (README).
  const hn::RebindToUnsigned<decltype(df16)> du16;
  return PromoteHalf(df, hn::BitCast(df16, hn::MaskedLoad(hn::FirstN(du16, count), du16,
                                                           reinterpret_cast<const uint16_t*>(p))));
#else
  HWY_ALIGN hwy::float16_t h[kMaxFloatLanes] = {};
  std::memcpy(h, p, count * 2);
  return PromoteHalf(df, hn::Load(df16, h));
#endif
}

// GroupScales for Q4_0S rows, whose scales are one f16 array at the row's
// start: one load per row (the same values and operations, so the same
// results as the other forms).
template <class DF>
HWY_INLINE void SplitRowScales(DF df, const uint8_t* HWY_RESTRICT row, size_t count,
                               const float* HWY_RESTRICT sx, const float* HWY_RESTRICT sums,
                               float* HWY_RESTRICT out, hn::Vec<DF>& offset) {
  ApplyInputScales(df, LoadHalves(df, row, count), count, sx, sums, out, offset);
}
template <size_t kRows, class DF>
HWY_INLINE void SplitGroupScales(DF dfull, const uint8_t* const* rows, size_t nblocks,
                                 size_t g0, const float* HWY_RESTRICT sx,
                                 const float* HWY_RESTRICT sums,
                                 float (*out)[kMaxFloatLanes], hn::Vec<DF>& o0,
                                 hn::Vec<DF>& o1, hn::Vec<DF>& o2, hn::Vec<DF>& o3) {
  const size_t count = std::min(hn::Lanes(dfull), nblocks - g0);
  const size_t at = 2 * g0;
  SplitRowScales(dfull, rows[0] + at, count, sx + g0, sums + g0, out[0], o0);
  if constexpr (kRows > 1)
    SplitRowScales(dfull, rows[1] + at, count, sx + g0, sums + g0, out[1 % kRows], o1);
  if constexpr (kRows > 2)
    SplitRowScales(dfull, rows[2] + at, count, sx + g0, sums + g0, out[2 % kRows], o2);
  if constexpr (kRows > 3)
    SplitRowScales(dfull, rows[3] + at, count, sx + g0, sums + g0, out[3 % kRows], o3);
}

// The scales of blocks g0.. of Q4_0 (interleaved) or Q4_0S (split) rows.
template <size_t kRows, bool kSplit, class DF>
HWY_INLINE void Q4_0GroupScales(DF dfull, const uint8_t* const* rows, size_t nblocks,
                                size_t g0, const float* HWY_RESTRICT sx,
                                const float* HWY_RESTRICT sums, float (*out)[kMaxFloatLanes],
                                hn::Vec<DF>& o0, hn::Vec<DF>& o1, hn::Vec<DF>& o2,
                                hn::Vec<DF>& o3) {
  if constexpr (kSplit) {
    SplitGroupScales<kRows>(dfull, rows, nblocks, g0, sx, sums, out, o0, o1, o2, o3);
  } else {
    PermutedGroupScales<kRows, sizeof(BlockQ4_0)>(dfull, rows, nblocks, g0, sx, sums, out, o0,
                                                  o1, o2, o3);
  }
}

// One Q4_0 block, or the part of it a vector of at most 16 int16 lanes
// holds (nibbles from `qs`), times the activations of its low nibbles at
// `xlo` and its high ones at `xhi`, added to `f` with scale `scale`.
template <class VF>
HWY_INLINE void Q4_0Single(const Int32Tags& t, const uint8_t* HWY_RESTRICT qs,
                           const int16_t* HWY_RESTRICT xlo,
                           const int16_t* HWY_RESTRICT xhi, float scale, VF& f) {
  const size_t N = hn::Lanes(t.d16);
  auto sum0 = hn::Zero(t.d32), sum1 = hn::Zero(t.d32);
  for (size_t s = 0; s < 16; s += N) {
    const auto v = hn::BitCast(t.d16, hn::PromoteTo(t.du16, hn::LoadU(t.du8, qs + s)));
    sum0 = hn::ReorderWidenMulAccumulate(t.d32, hn::And(v, hn::Set(t.d16, 15)),
                                         hn::Load(t.d16, xlo + s), sum0, sum1);
    sum0 = hn::ReorderWidenMulAccumulate(t.d32, hn::ShiftRight<4>(v),
                                         hn::Load(t.d16, xhi + s), sum0, sum1);
  }
  f = hn::MulAdd(hn::ConvertTo(t.df, hn::Add(sum0, sum1)), hn::Set(t.df, scale), f);
}

#if HWY_TARGET != HWY_SCALAR  // no Combine there, and never 32 lanes
// Two Q4_0 blocks A, B, 16 nibble bytes each (bytes_b zero when there is no
// B), against pair-layout activations: int16 lanes 0..15 hold A, 16..31 B,
// and after the widening multiply-add int32 lanes 0..7 belong to A and 8..15
// to B (adjacent lanes are summed in pairs, on x86 and SVE alike), so the
// scale vector is sa in the first half and sb in the second.
template <class V8, class V16, class M, class VF>
HWY_INLINE void Q4_0Pair(const Int32Tags& t, V8 bytes_a, V8 bytes_b, V16 xlo,
                         V16 xhi, M first_half, const float* HWY_RESTRICT sab, VF& f) {
  const auto v = hn::BitCast(t.d16, hn::PromoteTo(t.du16, hn::Combine(t.du8, bytes_b, bytes_a)));
  auto sum1 = hn::Zero(t.d32);
  auto sum0 = hn::ReorderWidenMulAccumulate(t.d32, hn::And(v, hn::Set(t.d16, 15)), xlo,
                                            hn::Zero(t.d32), sum1);
  sum0 = hn::ReorderWidenMulAccumulate(t.d32, hn::ShiftRight<4>(v), xhi, sum0, sum1);
  const auto scale = hn::IfThenElse(first_half, hn::Set(t.df, sab[0]), hn::Set(t.df, sab[1]));
  f = hn::MulAdd(hn::ConvertTo(t.df, hn::Add(sum0, sum1)), scale, f);
}
#endif

#ifdef SPARROW_Q4_0_INT8
// Two Q4_0 blocks A, B (B absent: kHasB false) of the row at `p` (A's
// nibble bytes; B's are 18 bytes on) against int8 activations `x` (64
// bytes: A's 32 then B's, natural order). The vector holds A's 16 nibble
// bytes in 128-bit chunks 0 and 1 and B's in 2 and 3; `mask` keeps the low
// nibbles in chunks 0 and 2 and the high ones, unshifted (16 times the
// nibble), in chunks 1 and 3, which line up with elements 0..15 and 16..31
// of each block. So int32 lanes 4..7 and 12..15 carry 16 times their true
// products, and the caller multiplies them by 1/16 at the end (exact: a
// power of two). Lanes 0..7 belong to A, 8..15 to B: the scale vector is
// sa in the first half and sb in the second. Per pair and row: a masked
// broadcast, an AND, vpdpbusd, a conversion, a blend and a multiply-add
// (the other broadcasts are loads).
// kHasB is a template argument so that the loop over whole pairs has no
// branch and its broadcasts read memory directly: with a runtime flag, gcc
// loaded A into a register for both forms and computed both, two extra
// shuffles per pair and row on the one 512-bit shuffle port. Measured on
// this project's 2 vCPU Xeon VM (AVX-512 VNNI, no AMX), one thread,
// alternating, best repetition of `gemv_bench --types q4_0 --shapes
// 2048x512 --rotate-mib 1 --clock cpu` (rows in cache): 15.9-16.7 GB/s
// before, 18.8-19.4 after. From DRAM, no change.
template <bool kHasB, class VF>
HWY_INLINE void Q4_0PairInt8(const uint8_t* HWY_RESTRICT p, __m512i x, __m512i mask,
                             const float* HWY_RESTRICT sab, VF& f) {
  const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  __m512i w;
  if constexpr (kHasB) {
    w = _mm512_mask_broadcast_i32x4(
        _mm512_broadcast_i32x4(a), 0xFF00,
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + sizeof(BlockQ4_0))));
  } else {
    w = _mm512_maskz_broadcast_i32x4(0x00FF, a);
  }
  w = _mm512_and_si512(w, mask);
  __m512i acc = _mm512_setzero_si512();
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(w), "v"(x));
  const __m512 scale = _mm512_mask_broadcastss_ps(_mm512_set1_ps(sab[0]), 0xFF00,
                                                  _mm_load_ss(sab + 1));
  f.raw = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), scale, f.raw);
}
#endif

// Q4_0 stores nibbles q with value (q - 8) * d: the kernel sums q * x and
// subtracts 8 * d * sum(x) per block through BlockScales' offset term.
// Activations are int8 (kInt8) or int16 in the pair layout
// (QuantizeActivationsImpl); Q4_0Rows below picks the form. kSplit: Q4_0S
// rows (quant_blocks.h), whose int8 form is Q4_0SplitQuads instead.
template <size_t kRows, bool kInt8, bool kSplit, class Pf>
HWY_INLINE void Q4_0RowsForm(const uint8_t* const* HWY_RESTRICT rows, size_t nblocks,
                             const int16_t* HWY_RESTRICT xq, const float* HWY_RESTRICT sx,
                             const float* HWY_RESTRICT sums, float* HWY_RESTRICT y,
                             size_t y_stride, Pf& pf) {
  const Int32Tags t;
  const hn::ScalableTag<float> dfull;
  const size_t G = hn::Lanes(dfull);
  // Where block b's nibbles start, and the next block's after them.
  const Q4_0Layout layout = Q4_0Layout::For(kSplit, nblocks);
  const size_t next = layout.nibble_stride;
  auto f0 = hn::Zero(t.df), f1 = hn::Zero(t.df), f2 = hn::Zero(t.df), f3 = hn::Zero(t.df);
  auto o0 = hn::Zero(dfull), o1 = hn::Zero(dfull), o2 = hn::Zero(dfull), o3 = hn::Zero(dfull);
  HWY_ALIGN float sw[2][kRows][kMaxFloatLanes];
  Q4_0GroupScales<kRows, kSplit>(dfull, rows, nblocks, 0, sx, sums, sw[0], o0, o1, o2, o3);
  size_t cur = 0;
  for (size_t g0 = 0; g0 < nblocks; g0 += G, cur ^= 1) {
    if (g0 + G < nblocks) {
      Q4_0GroupScales<kRows, kSplit>(dfull, rows, nblocks, g0 + G, sx, sums, sw[cur ^ 1], o0,
                                     o1, o2, o3);
    }
    const size_t count = std::min(G, nblocks - g0);
    const float(*scales)[kMaxFloatLanes] = sw[cur];
#ifdef SPARROW_Q4_0_INT8
    static_assert(!(kInt8 && kSplit), "Q4_0S's int8 form is Q4_0SplitQuads");
    if constexpr (kInt8) {
      const int8_t* x8 = reinterpret_cast<const int8_t*>(xq);
      const __m512i mask = _mm512_set_epi64(
          int64_t(0xF0F0F0F0F0F0F0F0ull), int64_t(0xF0F0F0F0F0F0F0F0ull), 0x0F0F0F0F0F0F0F0FLL,
          0x0F0F0F0F0F0F0F0FLL, int64_t(0xF0F0F0F0F0F0F0F0ull), int64_t(0xF0F0F0F0F0F0F0F0ull),
          0x0F0F0F0F0F0F0F0FLL, 0x0F0F0F0F0F0F0F0FLL);
      auto pair = [&](size_t b, auto has_b) HWY_ATTR {
        constexpr bool kHasB = decltype(has_b)::value;
        // B's activations past the last block are whatever the buffer
        // holds: an absent B's weights are zero.
        const __m512i xv = _mm512_loadu_si512(x8 + (g0 + b) * 32);
        const size_t a = layout.nibbles_at + (g0 + b) * next;
        pf.Upto(a);
        Q4_0PairInt8<kHasB>(rows[0] + a, xv, mask, scales[0] + b, f0);
        if constexpr (kRows > 1) Q4_0PairInt8<kHasB>(rows[1] + a, xv, mask, scales[1 % kRows] + b, f1);
        if constexpr (kRows > 2) Q4_0PairInt8<kHasB>(rows[2] + a, xv, mask, scales[2 % kRows] + b, f2);
        if constexpr (kRows > 3) Q4_0PairInt8<kHasB>(rows[3] + a, xv, mask, scales[3 % kRows] + b, f3);
      };
      size_t b = 0;
      for (; b + 2 <= count; b += 2) pair(b, std::true_type());
      if (b < count) pair(b, std::false_type());
      continue;
    }
#endif
#if HWY_TARGET != HWY_SCALAR
    if (hn::MaxLanes(t.d16) == 32 && hn::Lanes(t.d16) == 32) {
      // Two blocks per vector. G is even here, so pairs never straddle groups.
      const hn::Half<decltype(t.du8)> du8h;
      const auto first_half = hn::FirstN(t.df, hn::Lanes(t.df) / 2);
      size_t b = 0;
      for (; b + 2 <= count; b += 2) {
        const int16_t* xb = xq + (g0 + b) * 32;
        const auto xlo = hn::Load(t.d16, xb);
        const auto xhi = hn::Load(t.d16, xb + 32);
        const size_t a = layout.nibbles_at + (g0 + b) * next;
        pf.Upto(a);
        Q4_0Pair(t, hn::LoadU(du8h, rows[0] + a), hn::LoadU(du8h, rows[0] + a + next), xlo, xhi,
                 first_half, scales[0] + b, f0);
        if constexpr (kRows > 1)
          Q4_0Pair(t, hn::LoadU(du8h, rows[1] + a), hn::LoadU(du8h, rows[1] + a + next), xlo,
                   xhi, first_half, scales[1 % kRows] + b, f1);
        if constexpr (kRows > 2)
          Q4_0Pair(t, hn::LoadU(du8h, rows[2] + a), hn::LoadU(du8h, rows[2] + a + next), xlo,
                   xhi, first_half, scales[2 % kRows] + b, f2);
        if constexpr (kRows > 3)
          Q4_0Pair(t, hn::LoadU(du8h, rows[3] + a), hn::LoadU(du8h, rows[3] + a + next), xlo,
                   xhi, first_half, scales[3 % kRows] + b, f3);
      }
      if (b < count) {  // the odd last block of the row: B is absent
        const int16_t* xb = xq + (g0 + b) * 32;
        const auto xlo = hn::Load(t.d16, xb);
        const auto xhi = hn::Load(t.d16, xb + 32);
        const size_t a = layout.nibbles_at + (g0 + b) * next;
        const auto none = hn::Zero(du8h);
        Q4_0Pair(t, hn::LoadU(du8h, rows[0] + a), none, xlo, xhi, first_half, scales[0] + b, f0);
        if constexpr (kRows > 1)
          Q4_0Pair(t, hn::LoadU(du8h, rows[1] + a), none, xlo, xhi, first_half,
                   scales[1 % kRows] + b, f1);
        if constexpr (kRows > 2)
          Q4_0Pair(t, hn::LoadU(du8h, rows[2] + a), none, xlo, xhi, first_half,
                   scales[2 % kRows] + b, f2);
        if constexpr (kRows > 3)
          Q4_0Pair(t, hn::LoadU(du8h, rows[3] + a), none, xlo, xhi, first_half,
                   scales[3 % kRows] + b, f3);
      }
      continue;
    }
#endif
    // One block (or part of one) per vector: at most 16 int16 lanes here.
    for (size_t b = 0; b < count; ++b) {
      const size_t block = g0 + b;
      const int16_t* xlo = xq + PairLayoutIndex(block, 0);
      const int16_t* xhi = xq + PairLayoutIndex(block, 16);
      const size_t a = layout.nibbles_at + block * next;
      pf.Upto(a);
      Q4_0Single(t, rows[0] + a, xlo, xhi, scales[0][b], f0);
      if constexpr (kRows > 1) Q4_0Single(t, rows[1] + a, xlo, xhi, scales[1 % kRows][b], f1);
      if constexpr (kRows > 2) Q4_0Single(t, rows[2] + a, xlo, xhi, scales[2 % kRows][b], f2);
      if constexpr (kRows > 3) Q4_0Single(t, rows[3] + a, xlo, xhi, scales[3 % kRows][b], f3);
    }
  }
#ifdef SPARROW_Q4_0_INT8
  if constexpr (kInt8) {
    // Lanes 4..7 and 12..15 hold 16 times their sums (Q4_0PairInt8).
    const __m512 sixteenth = _mm512_mask_blend_ps(0xF0F0, _mm512_set1_ps(1.0f),
                                                  _mm512_set1_ps(0.0625f));
    f0.raw = _mm512_mul_ps(f0.raw, sixteenth);
    if constexpr (kRows > 1) f1.raw = _mm512_mul_ps(f1.raw, sixteenth);
    if constexpr (kRows > 2) f2.raw = _mm512_mul_ps(f2.raw, sixteenth);
    if constexpr (kRows > 3) f3.raw = _mm512_mul_ps(f3.raw, sixteenth);
  }
#endif
  y[0] = ReduceSum(t.df, f0) - 8.0f * ReduceSum(dfull, o0);
  if constexpr (kRows > 1) y[y_stride] = ReduceSum(t.df, f1) - 8.0f * ReduceSum(dfull, o1);
  if constexpr (kRows > 2) y[2 * y_stride] = ReduceSum(t.df, f2) - 8.0f * ReduceSum(dfull, o2);
  if constexpr (kRows > 3) y[3 * y_stride] = ReduceSum(t.df, f3) - 8.0f * ReduceSum(dfull, o3);
}

#ifdef SPARROW_Q4_0_INT8
// y[r * y_stride] = the sum of t[r]'s sixteen lanes for r < kRows (at most
// 4), the four sums together: each row's halves added, then two levels of
// vhaddps and one add (about fifteen operations) where one reduction per
// row took about forty for the four. Fewer rows fill the others with row
// 0: each lane's sum takes its own row's lanes in the same order whatever
// the other rows, so a row's result does not depend on the group it came
// in. For rows 768 wide a group of four rows is six quads of work each, and
// the reductions were about an eighth of DotRows' samples. Hot DotRows
// (rows in L2, Zen 4 VM, one thread, six alternated rounds): Q4_0S 768 wide
// 29.9-30.1 -> 31.7-32.2 GB/s; 2048 wide within the noise (28.3-35.8
// against 28.5-36.9, four rounds). From DRAM, `gather_bench --types q4_0s
// --shapes 768x3072 --kernels dot --clock cpu`, four rounds: 26.1-26.8 ->
// 27.3-28.4. The sums are added in another order than before (the last
// bits change; DotRows and Gemv still agree).
template <size_t kRows>
HWY_INLINE void StoreLaneSums(const __m512* t, float* HWY_RESTRICT y, size_t y_stride) {
  static_assert(kRows >= 1 && kRows <= 4);
  __m256 h[4];
  for (size_t r = 0; r < 4; ++r) {
    const __m512 v = t[r < kRows ? r : 0];
    h[r] = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  }
  // Lanes of c: rows 0-3 over the low 128-bit halves, then over the high.
  const __m256 c = _mm256_hadd_ps(_mm256_hadd_ps(h[0], h[1]), _mm256_hadd_ps(h[2], h[3]));
  const __m128 sums = _mm_add_ps(_mm256_castps256_ps128(c), _mm256_extractf128_ps(c, 1));
  alignas(16) float out[4];
  _mm_store_ps(out, sums);
  for (size_t r = 0; r < kRows; ++r) y[r * y_stride] = out[r];
}

// Q4_0S rows against int8 activations in the quad layout (QuadLayoutIndex):
// four blocks per 64-byte load of nibbles, which are contiguous in a Q4_0S
// row. The low nibbles (AND) and the high ones (shift, AND) each go through
// one vpdpbusd with the matching 64 activation bytes, so int32 lane 4j..4j+3
// holds block j's sum; the scale vector repeats each block's scale four
// times (one permute). Per four blocks and row: a load, three logic ops,
// two vpdpbusd, a conversion, a permute and a multiply-add: about half the
// work of the pair form per block, where rows interleave scales and
// nibbles. Measured on the 2 vCPU Cascade Lake VM, one thread, standalone
// loops over 512 rows of 2048 in L2 with the scales of each 16 blocks
// loaded ahead: 12.1-12.3 GB/s for the pair form on Q4_0 rows, 22.2-23.0
// for this one on the same rows as Q4_0S.
template <size_t kRows, class Pf>
HWY_INLINE void Q4_0SplitQuads(const uint8_t* const* HWY_RESTRICT rows, size_t nblocks,
                               const int8_t* HWY_RESTRICT xq, const float* HWY_RESTRICT sx,
                               const float* HWY_RESTRICT sums, float* HWY_RESTRICT y,
                               size_t y_stride, Pf& pf) {
  const hn::ScalableTag<float> dfull;  // 16 lanes here
  constexpr size_t G = 16;
  const size_t nib = 2 * nblocks;  // the nibbles start after the scales
  __m512 f[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                 _mm512_setzero_ps()};
  auto o0 = hn::Zero(dfull), o1 = hn::Zero(dfull), o2 = hn::Zero(dfull), o3 = hn::Zero(dfull);
  HWY_ALIGN float sw[2][kRows][kMaxFloatLanes];
  SplitGroupScales<kRows>(dfull, rows, nblocks, 0, sx, sums, sw[0], o0, o1, o2, o3);
  const __m512i low = _mm512_set1_epi8(0x0F);
  const __m512i quad_of_lane = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  size_t cur = 0;
  for (size_t g0 = 0; g0 < nblocks; g0 += G, cur ^= 1) {
    if (g0 + G < nblocks) {
      SplitGroupScales<kRows>(dfull, rows, nblocks, g0 + G, sx, sums, sw[cur ^ 1], o0, o1, o2,
                              o3);
    }
    const size_t count = std::min(G, nblocks - g0);
    for (size_t q = 0; q < count; q += 4) {
      const size_t blocks = std::min<size_t>(4, count - q);
      const size_t at = nib + (g0 + q) * 16;
      pf.Upto(at);
      const int8_t* xb = xq + (g0 + q) * 32;  // the quad's 128 bytes
      const __m512i xlo = _mm512_loadu_si512(xb);
      const __m512i xhi = _mm512_loadu_si512(xb + 64);
      const __m512i idx = _mm512_add_epi32(quad_of_lane, _mm512_set1_epi32(static_cast<int>(q)));
      // A short last quad: load only its blocks' bytes (the rest zero).
      const __mmask64 keep = blocks == 4 ? ~__mmask64{0} : (__mmask64{1} << (16 * blocks)) - 1;
      for (size_t r = 0; r < kRows; ++r) {
        const __m512i w = _mm512_maskz_loadu_epi8(keep, rows[r] + at);
        const __m512i lo = _mm512_and_si512(w, low);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(w, 4), low);
        __m512i acc = _mm512_setzero_si512();
        asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(lo), "v"(xlo));
        asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(hi), "v"(xhi));
        const __m512 scale = _mm512_permutexvar_ps(idx, _mm512_load_ps(sw[cur][r]));
        f[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), scale, f[r]);
      }
    }
  }
  const hn::Vec<decltype(dfull)> o[4] = {o0, o1, o2, o3};
  __m512 t[kRows];  // each row's lanes less 8 times its offsets, summed at once
  for (size_t r = 0; r < kRows; ++r) t[r] = _mm512_fnmadd_ps(_mm512_set1_ps(8.0f), o[r].raw, f[r]);
  StoreLaneSums<kRows>(t, y, y_stride);
}
#endif

#ifdef SPARROW_Q4_0_INT8_QUADS
// The bytes of one step of Q4_0QuadsInt8: 256-bit vectors on AVX2, 128-bit
// on SSE4 and Arm (SVE too: capped, so that the same quad layout serves
// every vector length; most of its phone cores are 128-bit anyway).
using QuadStepBytes = hn::CappedTag<uint8_t, HWY_TARGET == HWY_AVX2 ? 32 : 16>;
// Blocks a step takes: one vector of their nibble bytes (16 each).
inline constexpr size_t kQuadStepBlocks = hn::MaxLanes(QuadStepBytes()) / 16;
static_assert(kQuadStepBlocks == 1 || kQuadStepBlocks == 2);

// The nibble bytes of the step's `n` blocks (n <= kQuadStepBlocks) from
// `block` on, a missing block's zero; nothing past them is read. Q4_0S
// rows hold them together, Q4_0 rows 18 bytes apart.
template <bool kSplit, class DU8>
HWY_INLINE hn::Vec<DU8> StepNibbles(DU8 du8, const uint8_t* HWY_RESTRICT row,
                                    const Q4_0Layout& layout, size_t block, size_t n) {
  const uint8_t* p = layout.Nibbles(row, block);
  if constexpr (kQuadStepBlocks == 1) {
    (void)n;
    return hn::LoadU(du8, p);
  } else {
    const hn::Half<DU8> dh;
    if constexpr (kSplit) {
      if (n == kQuadStepBlocks) return hn::LoadU(du8, p);
      return hn::ZeroExtendVector(du8, hn::LoadU(dh, p));
    } else {
      const auto first = hn::LoadU(dh, p);
      return hn::Combine(
          du8, n == kQuadStepBlocks ? hn::LoadU(dh, p + layout.nibble_stride) : hn::Zero(dh),
          first);
    }
  }
}

// The scales of the step's blocks b.. of the group (`scales`, zero past
// its last block: ApplyInputScales), each repeated for the four int32 lanes
// that hold its sums (one permute).
//
// On AVX2 that permute crosses the 128-bit halves (vpermps), which Zen 3
// issues about once every 1.6 cycles. Tried: each row's group of scales
// stored as its even blocks then its odd ones (one vpermps per row and
// group), so that a step's two scales lie at the same place in both halves
// and an in-lane byte shuffle (vpshufb) repeats them. In a throwaway copy
// of the step loop (4 rows, 256 rows of 2048 in L2, scales ready in memory)
// that ran at a median of 23.5 GB/s against 21.5 with vpermps (26 with no
// permute at all); with each group's scales made from the rows as here,
// 18.3 against 17.5. In the kernel, six alternated rounds of `gather_bench
// --types q4_0s,q4_0 --shapes 2048x512,768x1024 --parts 1 --rotate-mib 1
// --kernels dot --reps 301 --probe-mib 16 --threads 1 --clock cpu` (rows
// in L2), best rounds, every row: Q4_0S 2048 wide 15.1 -> 15.1 GB/s, 768
// wide 14.3 -> 14.1; Q4_0 13.5 -> 14.0, 12.8 -> 13.1. Not kept (2 vCPU AMD
// EPYC (Zen 3) VM, one thread).
template <class DF>
HWY_INLINE hn::Vec<DF> StepScales(DF df, const float* HWY_RESTRICT scales, size_t b) {
  if constexpr (kQuadStepBlocks == 1) {
    return hn::Set(df, scales[b]);
  } else {
    const hn::RebindToSigned<DF> di32;
    const auto block_of_lane = hn::ShiftRight<2>(hn::Iota(di32, 0));
    return hn::TableLookupLanes(
        hn::LoadU(df, scales),
        hn::IndicesFromVec(df, hn::Add(block_of_lane, hn::Set(di32, static_cast<int32_t>(b)))));
  }
}

// One row's part of a step of Q4_0QuadsInt8 (below): f += the products of
// the `n` blocks from `block` on with the activations xlo, xhi, times their
// scales (`scales` from block b of the group on).
template <bool kSplit, class Dots, class DU8, class VF>
HWY_INLINE void Q4_0QuadStepRow(DU8 du8, const uint8_t* HWY_RESTRICT row, const Q4_0Layout& layout,
                                size_t block, size_t n, hn::Vec<DU8> xlo, hn::Vec<DU8> xhi,
                                const float* HWY_RESTRICT scales, size_t b, VF& f) {
  const hn::Repartition<uint16_t, DU8> du16;
  const hn::Repartition<float, DU8> df;
  const auto low = hn::Set(du8, uint8_t{0x0F});
  const auto w = StepNibbles<kSplit>(du8, row, layout, block, n);
  const auto lo = hn::And(w, low);
  const auto hi = hn::And(hn::BitCast(du8, hn::ShiftRight<4>(hn::BitCast(du16, w))), low);
  const auto acc = Dots::Add(du8, Dots::Add(du8, Dots::Zero(), lo, xlo), hi, xhi);
  f = hn::MulAdd(hn::ConvertTo(df, Dots::Total(acc)), StepScales(df, scales, b), f);
}

// One step of Q4_0QuadsInt8 (below) for its kRows rows: the `n` blocks from
// `block` on against the activations at xq (the low nibbles') and xq + 64
// (the high ones'), scales from block b of the group on. Always inlined, so
// a constant n takes the branch out of StepNibbles: with n a variable GCC
// 12 put the whole step's load out of line, two taken jumps per row and
// step. 2 vCPU AMD EPYC (Zen 3) VM, AVX2 with pmaddubsw, one thread, four
// alternated rounds of `gather_bench --types q4_0s,q4_0 --shapes
// 2048x512,768x1024 --parts 1 --rotate-mib 1 --kernels dot --reps 301
// --probe-mib 16 --clock cpu` (rows in L2), rounds in the VM's slow mode
// left out, every row: Q4_0S 2048 wide 13.1-13.9 -> 14.0-14.5 GB/s, 768
// wide 13.5 -> 13.5-13.6; Q4_0 11.6-12.0 -> 12.3-12.6 and 11.1-11.5 ->
// 11.9-12.0; a random quarter, Q4_0S 2048 wide 9.3-10.6 -> 10.9-11.5.
template <size_t kRows, bool kSplit, class Dots, class DU8, class VF>
HWY_INLINE void Q4_0QuadStep(DU8 du8, const uint8_t* const* HWY_RESTRICT rows,
                             const Q4_0Layout& layout, size_t block, size_t n,
                             const uint8_t* HWY_RESTRICT xq,
                             const float (*HWY_RESTRICT scales)[kMaxFloatLanes], size_t b, VF& f0,
                             VF& f1, VF& f2, VF& f3) {
  const auto xlo = hn::LoadU(du8, xq);
  const auto xhi = hn::LoadU(du8, xq + 64);
  Q4_0QuadStepRow<kSplit, Dots>(du8, rows[0], layout, block, n, xlo, xhi, scales[0], b, f0);
  if constexpr (kRows > 1)
    Q4_0QuadStepRow<kSplit, Dots>(du8, rows[1], layout, block, n, xlo, xhi, scales[1 % kRows], b,
                                  f1);
  if constexpr (kRows > 2)
    Q4_0QuadStepRow<kSplit, Dots>(du8, rows[2], layout, block, n, xlo, xhi, scales[2 % kRows], b,
                                  f2);
  if constexpr (kRows > 3)
    Q4_0QuadStepRow<kSplit, Dots>(du8, rows[3], layout, block, n, xlo, xhi, scales[3 % kRows], b,
                                  f3);
}

// Q4_0S (kSplit) or Q4_0 rows against int8 activations in the quad layout
// (QuadLayoutIndex), in the byte dot form Dots (int8_dot-inl.h): each step
// takes kQuadStepBlocks blocks, whose low nibbles (AND) multiply the
// activations of their first 16 elements, which the quad layout holds
// together, and whose high ones (shift, AND) those 64 bytes on, so that
// int32 lanes 4j..4j+3 hold block j's sum. Per step and row: one load of
// nibbles (two for Q4_0 on AVX2), three logic ops, two byte dot products
// (vpdpbusd or `sdot`: one instruction each; pmaddubsw: two, and an add
// for both), a conversion and a multiply-add by the blocks' scales. The
// 512-bit forms (Q4_0SplitQuads, Q4_0InterleavedQuads) do the same four
// blocks a step with AVX-512's permutes. Rows are read front to back.
template <size_t kRows, bool kSplit, class Dots, class Pf>
HWY_INLINE void Q4_0QuadsInt8(const uint8_t* const* HWY_RESTRICT rows, size_t nblocks,
                              const int8_t* HWY_RESTRICT xq, const float* HWY_RESTRICT sx,
                              const float* HWY_RESTRICT sums, float* HWY_RESTRICT y,
                              size_t y_stride, Pf& pf) {
  constexpr size_t S = kQuadStepBlocks;
  const QuadStepBytes du8;
  const hn::Repartition<float, decltype(du8)> df;  // four lanes per block of a step
  const hn::ScalableTag<float> dfull;              // a group of scales
  // A multiple of four, so that groups start at quads and steps never
  // straddle groups.
  const size_t G = hn::Lanes(dfull);
  const Q4_0Layout layout = Q4_0Layout::For(kSplit, nblocks);
  const uint8_t* x8 = reinterpret_cast<const uint8_t*>(xq);
  auto f0 = hn::Zero(df), f1 = hn::Zero(df), f2 = hn::Zero(df), f3 = hn::Zero(df);
  auto o0 = hn::Zero(dfull), o1 = hn::Zero(dfull), o2 = hn::Zero(dfull), o3 = hn::Zero(dfull);
  HWY_ALIGN float sw[2][kRows][kMaxFloatLanes];
  Q4_0GroupScales<kRows, kSplit>(dfull, rows, nblocks, 0, sx, sums, sw[0], o0, o1, o2, o3);
  size_t cur = 0;
  for (size_t g0 = 0; g0 < nblocks; g0 += G, cur ^= 1) {
    if (g0 + G < nblocks) {
      Q4_0GroupScales<kRows, kSplit>(dfull, rows, nblocks, g0 + G, sx, sums, sw[cur ^ 1], o0, o1,
                                     o2, o3);
    }
    const size_t count = std::min(G, nblocks - g0);
    for (size_t q = 0; q < count; q += 4) {  // a quad of blocks (the last may be short)
      pf.Upto(layout.nibbles_at + (g0 + q) * layout.nibble_stride);
      const uint8_t* xq4 = x8 + QuadLayoutIndex(g0 + q, 0);
      const size_t blocks = std::min<size_t>(4, count - q);
      const float(*scales)[kMaxFloatLanes] = sw[cur];
      if (blocks == 4) {  // every step whole: n a constant, so no branch per row
        for (size_t k = 0; k < 4; k += S) {
          Q4_0QuadStep<kRows, kSplit, Dots>(du8, rows, layout, g0 + q + k, S, xq4 + 16 * k, scales,
                                            q + k, f0, f1, f2, f3);
        }
      } else {
        for (size_t k = 0; k < blocks; k += S) {
          Q4_0QuadStep<kRows, kSplit, Dots>(du8, rows, layout, g0 + q + k, std::min(S, blocks - k),
                                            xq4 + 16 * k, scales, q + k, f0, f1, f2, f3);
        }
      }
    }
  }
  y[0] = ReduceSum(df, f0) - 8.0f * ReduceSum(dfull, o0);
  if constexpr (kRows > 1) y[y_stride] = ReduceSum(df, f1) - 8.0f * ReduceSum(dfull, o1);
  if constexpr (kRows > 2) y[2 * y_stride] = ReduceSum(df, f2) - 8.0f * ReduceSum(dfull, o2);
  if constexpr (kRows > 3) y[3 * y_stride] = ReduceSum(df, f3) - 8.0f * ReduceSum(dfull, o3);
}
#endif

#if defined(SPARROW_Q4_0_INT8) && HWY_TARGET == HWY_AVX3_DL
// Tables for reading rows of blocks (an f16 scale, then values) front to
// back in 64-byte loads, kBlocks blocks per step: step p is the row's bytes
// [kStep * p, kStep * p + kStep), the end of load k = p + p / kStarts and
// all of load k + 1, starting (kStep - 64) * (p % kStarts) bytes into load
// k. For each start, the byte index (VBMI's two-table byte permute) that
// puts block j's values at (kBlockBytes - 2) * j, and the word index that
// puts its scale in lanes 16 / kBlocks * j onwards, once per lane.
template <size_t kBlockBytes, size_t kBlocks>
struct BlockGatherTables {
  static constexpr size_t kStep = kBlocks * kBlockBytes;
  static_assert(kStep > 64 && kStep <= 128 && 64 % (kStep - 64) == 0);
  static constexpr size_t kStarts = 64 / (kStep - 64);
  alignas(64) uint8_t values[kStarts][64];
  alignas(64) uint16_t scales[kStarts][32];
};
template <size_t kBlockBytes, size_t kBlocks>
inline constexpr BlockGatherTables<kBlockBytes, kBlocks> kBlockGatherTables = [] {
  using Tables = BlockGatherTables<kBlockBytes, kBlocks>;
  constexpr size_t kValues = kBlockBytes - 2;
  constexpr size_t kLanes = 16 / kBlocks;
  Tables t{};
  for (size_t start = 0; start < Tables::kStarts; ++start) {
    const size_t at = (Tables::kStep - 64) * start;  // the step's first byte in its first load
    for (size_t j = 0; j < kBlocks; ++j) {
      for (size_t i = 0; i < kValues; ++i) {
        t.values[start][kValues * j + i] = static_cast<uint8_t>(at + kBlockBytes * j + 2 + i);
      }
      for (size_t l = 0; l < kLanes; ++l) {
        t.scales[start][kLanes * j + l] = static_cast<uint16_t>((at + kBlockBytes * j) / 2);
      }
    }
  }
  return t;
}();

// Load k (64 bytes) of a row of `row_bytes`; bytes past its end read as
// zero and are not read.
HWY_INLINE __m512i LoadRowPart(const uint8_t* HWY_RESTRICT row, size_t k, size_t row_bytes) {
  const size_t at = 64 * k;
  if (at + 64 <= row_bytes) return _mm512_loadu_si512(row + at);
  if (at >= row_bytes) return _mm512_setzero_si512();
  return _mm512_maskz_loadu_epi8((__mmask64{1} << (row_bytes - at)) - 1, row + at);
}

// Step (start, load k)'s two loads of a row into `first` and `second`: the
// first is the previous step's second (`last`, updated) unless the step
// starts a group. kWhole: both inside the row.
template <bool kWhole>
HWY_INLINE void StepLoads(const uint8_t* HWY_RESTRICT row, size_t k, size_t start, size_t row_bytes,
                          __m512i& last, __m512i& first, __m512i& second) {
  if constexpr (kWhole) {
    first = start == 0 ? _mm512_loadu_si512(row + 64 * k) : last;
    second = _mm512_loadu_si512(row + 64 * (k + 1));
  } else {
    first = start == 0 ? LoadRowPart(row, k, row_bytes) : last;
    second = LoadRowPart(row, k + 1, row_bytes);
  }
  last = second;
}

// Calls step(p, start, whole) for each step of kBlocks blocks over
// `nblocks` blocks (the last may be short): whole groups of kStarts steps (32 blocks, both
// loads of each inside the row) unrolled, so each step's tables and loads
// are known at compile time (whole: std::true_type), then the rest.
template <size_t kBlockBytes, size_t kBlocks, class Step>
HWY_INLINE void ForEachGatherStep(size_t nblocks, const Step& step) {
  constexpr size_t kStarts = BlockGatherTables<kBlockBytes, kBlocks>::kStarts;
  static_assert(kStarts * kBlocks == 32);
  const size_t steps = (nblocks + kBlocks - 1) / kBlocks;
  size_t p = 0;
  for (; p + kStarts <= nblocks / 32 * kStarts; p += kStarts) {
#pragma GCC unroll 16
    for (size_t start = 0; start < kStarts; ++start) step(p + start, start, std::true_type());
  }
  for (; p < steps; ++p) step(p, p % kStarts, std::false_type());
}

// Q4_0 rows (18-byte blocks: f16 scale, 16 nibble bytes) in Q4_0SplitQuads'
// form, reading each row front to back in 64-byte loads, each byte once, as
// a Q4_0S row is read. Quad q (blocks 4q..4q+3) is the row's bytes
// [72q, 72q + 72): the end of load k = q + q / 8 and all of load k + 1,
// starting 8 * (q % 8) bytes into load k, so eight quads take nine loads.
// VBMI's two-table byte permute gathers the quad's nibbles into Q4_0S order
// and the word permute its four scales, each repeated for its four lanes.
//
// Why: the pair form (Q4_0RowsForm) is bound by arithmetic, and a quad form
// that loads each quad's 72 bytes on their own (two overlapping loads, the
// scales through HalfScales16 a group ahead) went from 14 to 23 GB/s with
// its rows in L2 but stayed at 14 from DRAM, where Q4_0S rows, read in
// whole consecutive 64-byte loads that the hardware prefetchers follow, run
// at 28. This one: 20-21, and 23-25 with the integer offset below (one
// multiply-add less per row and quad). Zen 4 VM, one thread, `gather_bench
// --types q4_0,q4_0s --shapes 2048x5632 --kernels dot --clock cpu`, rows in
// order (README has the alternated figures).
template <size_t kRows, class Pf>
HWY_INLINE void Q4_0InterleavedQuads(const uint8_t* const* HWY_RESTRICT rows, size_t nblocks,
                                     const int8_t* HWY_RESTRICT xq, const float* HWY_RESTRICT sx,
                                     float* HWY_RESTRICT y, size_t y_stride, Pf& pf) {
  using Tables = BlockGatherTables<sizeof(BlockQ4_0), 4>;
  const auto& tables = kBlockGatherTables<sizeof(BlockQ4_0), 4>;
  // Bytes past the row's end load as zero, so a short last quad's missing
  // blocks have zero nibbles and scales.
  const size_t row_bytes = nblocks * sizeof(BlockQ4_0);
  __m512 f[4];
  __m512i last[4];  // the previous quad's second load
  for (size_t r = 0; r < 4; ++r) {
    f[r] = _mm512_setzero_ps();
    last[r] = _mm512_setzero_si512();
  }
  const __m512i low = _mm512_set1_epi8(0x0F);
  const __m512i eight = _mm512_set1_epi8(8);
  const __m512i quad_of_lane = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  // Quad q, the `start`-th of its group of eight; kWhole: both its loads
  // lie inside the rows (no bounds to check).
  const auto quad = [&](size_t q, size_t start, auto whole) HWY_ATTR {
    constexpr bool kWhole = decltype(whole)::value;
    const size_t k = q + q / Tables::kStarts;
    pf.Upto(Tables::kStep * q);
    const int8_t* xb = xq + 128 * q;  // the quad's activations (QuadLayoutIndex)
    const __m512i xlo = _mm512_loadu_si512(xb);
    const __m512i xhi = _mm512_loadu_si512(xb + 64);
    // Each block's activation scale, four times (GemvInput pads it with
    // zeros past the last block).
    const __m512 sxq = _mm512_permutexvar_ps(quad_of_lane, _mm512_loadu_ps(sx + 4 * q));
    // The nibbles are q + 8: every row's sums start from -8 times the
    // activations each lane multiplies, exact in int32 (one pair of byte
    // dots per quad, for all the rows).
    __m512i offset = _mm512_setzero_si512();
    asm("vpdpbusd %2, %1, %0" : "+v"(offset) : "v"(eight), "v"(xlo));
    asm("vpdpbusd %2, %1, %0" : "+v"(offset) : "v"(eight), "v"(xhi));
    offset = _mm512_sub_epi32(_mm512_setzero_si512(), offset);
    const __m512i nibble_index = _mm512_load_si512(tables.values[start]);
    const __m512i scale_index = _mm512_load_si512(tables.scales[start]);
    for (size_t r = 0; r < kRows; ++r) {
      __m512i first, second;
      StepLoads<kWhole>(rows[r], k, start, row_bytes, last[r], first, second);
      const __m512i w = _mm512_permutex2var_epi8(first, nibble_index, second);
      const __m512i d16 = _mm512_permutex2var_epi16(first, scale_index, second);
      const __m512 s = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(d16)), sxq);
      const __m512i lo = _mm512_and_si512(w, low);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(w, 4), low);
      __m512i acc = offset;
      asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(lo), "v"(xlo));
      asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(hi), "v"(xhi));
      f[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), s, f[r]);
    }
  };
  ForEachGatherStep<sizeof(BlockQ4_0), 4>(nblocks, quad);
  StoreLaneSums<kRows>(f, y, y_stride);
}
#endif

// Where the CPU decides the form (AVX3, AVX2, NEON): one branch per call of
// four rows, outside the loops (a branch, not WithBestByteDotSum's lambda,
// which could cost the kernels their prefetches: row_prefetch.h). kSplit:
// Q4_0S rows.
template <size_t kRows, bool kSplit, class Pf>
HWY_INLINE void Q4_0Rows(const uint8_t* const* HWY_RESTRICT rows, size_t nblocks,
                         const int16_t* HWY_RESTRICT xq, const float* HWY_RESTRICT sx,
                         const float* HWY_RESTRICT sums, float* HWY_RESTRICT y,
                         size_t y_stride, Pf& pf) {
#ifdef SPARROW_Q4_0_INT8_QUADS
  if (Q4_0ActivationsAreInt8()) {
    const int8_t* x8 = reinterpret_cast<const int8_t*>(xq);
#if defined(SPARROW_INT8_VNNI_RUNTIME)
    if (TargetHasVnni()) {
      return Q4_0QuadsInt8<kRows, kSplit, VnniByteDotSum<QuadStepBytes>>(rows, nblocks, x8, sx,
                                                                         sums, y, y_stride, pf);
    }
#elif defined(SPARROW_INT8_SDOT_NEON)
    return Q4_0QuadsInt8<kRows, kSplit, NeonSdotByteDotSum<QuadStepBytes>>(rows, nblocks, x8, sx,
                                                                           sums, y, y_stride, pf);
#endif
    return Q4_0QuadsInt8<kRows, kSplit, ByteDotSum<QuadStepBytes>>(rows, nblocks, x8, sx, sums, y,
                                                                   y_stride, pf);
  }
#endif
#ifdef SPARROW_Q4_0_INT8
  if (Q4_0ActivationsAreInt8()) {
    if constexpr (kSplit) {
      return Q4_0SplitQuads<kRows>(rows, nblocks, reinterpret_cast<const int8_t*>(xq), sx, sums, y,
                                   y_stride, pf);
    } else {
#if HWY_TARGET == HWY_AVX3_DL
      // (No activation sums: the offset is summed exactly in int32.)
      return Q4_0InterleavedQuads<kRows>(rows, nblocks, reinterpret_cast<const int8_t*>(xq), sx, y,
                                         y_stride, pf);
#else
      return Q4_0RowsForm<kRows, true, false>(rows, nblocks, xq, sx, sums, y, y_stride, pf);
#endif
    }
  }
#endif
  // The int16 form, where some CPU of the target lacks a fast 8-bit one.
#ifndef SPARROW_Q4_0_ALWAYS_INT8
  Q4_0RowsForm<kRows, false, kSplit>(rows, nblocks, xq, sx, sums, y, y_stride, pf);
#endif
}

#if defined(SPARROW_Q4_0_INT8) && HWY_TARGET == HWY_AVX3_DL
// Q8_0 rows (34-byte blocks: f16 scale, 32 int8 weights) against int8
// activations in natural order, two blocks per vpdpbusd, each row read front
// to back in 64-byte loads as Q4_0InterleavedQuads reads Q4_0 rows: pair p
// (blocks 2p, 2p + 1) is the row's bytes [68p, 68p + 68), the end of load
// k = p + p / 16 and all of load k + 1, starting 4 * (p % 16) bytes into
// load k, so sixteen pairs take seventeen loads. VBMI's two-table byte
// permute gathers the pair's 64 weights and the word permute its two
// scales, each repeated for its eight lanes. vpdpbusd multiplies unsigned
// bytes by signed ones: the weights go in as w + 128 (an XOR), and every
// sum starts from -128 times its activations (one byte dot per pair for all
// rows), exact in int32.
//
// Why: the int16 kernel widens every weight and activation and, with its
// per-block loads software-prefetched, read rows in order at 16-17 GB/s;
// this one at 25-28 (Zen 4 VM, one thread, `gather_bench --types q8_0
// --shapes 2048x5632 --kernels dot` and `gemv_bench --types q8_0`; README).
//
// T inputs at once (the weights gathered once for all): input i's
// activations at xq[i], scales at sx[i], results at y[i][r * y_stride];
// each input's steps are those it gets alone, so the same bits.
template <size_t kRows, size_t T, class Pf>
HWY_INLINE void Q8_0InterleavedPairs(const uint8_t* const* HWY_RESTRICT rows, size_t nblocks,
                                     const int8_t* const* xq, const float* const* sx,
                                     float* const* y, size_t y_stride, Pf& pf) {
  using Tables = BlockGatherTables<sizeof(BlockQ8_0), 2>;
  const auto& tables = kBlockGatherTables<sizeof(BlockQ8_0), 2>;
  // Bytes past the row's end load as zero: an absent second block then has
  // weights 0 - 128 against the offset's +128, and a zero scale.
  const size_t row_bytes = nblocks * sizeof(BlockQ8_0);
  __m512 f[T][4];
  __m512i last[4];  // the previous pair's second load
  for (size_t r = 0; r < 4; ++r) {
    for (size_t i = 0; i < T; ++i) f[i][r] = _mm512_setzero_ps();
    last[r] = _mm512_setzero_si512();
  }
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i pair_of_lane = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  // Pair p, the `start`-th of its group of sixteen; kWhole: both its loads
  // lie inside the rows.
  const auto pair = [&](size_t p, size_t start, auto whole) HWY_ATTR {
    constexpr bool kWhole = decltype(whole)::value;
    const size_t k = p + p / Tables::kStarts;
    pf.Upto(Tables::kStep * p);
    // Each input's offset (-128 times the activations each lane multiplies)
    // and each block's activation scale, eight times (the buffers are
    // padded with zeros past the last block).
    __m512i offset[T];
    __m512 sxp[T];
    for (size_t i = 0; i < T; ++i) {
      __m512i o = _mm512_setzero_si512();
      asm("vpdpbusd %2, %1, %0" : "+v"(o) : "v"(bias), "v"(_mm512_loadu_si512(xq[i] + 64 * p)));
      offset[i] = _mm512_sub_epi32(_mm512_setzero_si512(), o);
      sxp[i] = _mm512_permutexvar_ps(pair_of_lane, _mm512_loadu_ps(sx[i] + 2 * p));
    }
    const __m512i weight_index = _mm512_load_si512(tables.values[start]);
    const __m512i scale_index = _mm512_load_si512(tables.scales[start]);
    for (size_t r = 0; r < kRows; ++r) {
      __m512i first, second;
      StepLoads<kWhole>(rows[r], k, start, row_bytes, last[r], first, second);
      const __m512i w =
          _mm512_xor_si512(_mm512_permutex2var_epi8(first, weight_index, second), bias);
      const __m512 d = _mm512_cvtph_ps(
          _mm512_castsi512_si256(_mm512_permutex2var_epi16(first, scale_index, second)));
      for (size_t i = 0; i < T; ++i) {
        __m512i acc = offset[i];
        asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(w), "v"(_mm512_loadu_si512(xq[i] + 64 * p)));
        f[i][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(d, sxp[i]), f[i][r]);
      }
    }
  };
  ForEachGatherStep<sizeof(BlockQ8_0), 2>(nblocks, pair);
  for (size_t i = 0; i < T; ++i) {
    for (size_t r = 0; r < kRows; ++r) y[i][r * y_stride] = _mm512_reduce_add_ps(f[i][r]);
  }
}
#endif

// One Q8_0 block: 32 int8 weights at `qs` times 32 activations at `xb`.
template <class VF>
HWY_INLINE void Q8_0Block(const Int32Tags& t, const uint8_t* HWY_RESTRICT qs,
                          const int16_t* HWY_RESTRICT xb, float scale, VF& f) {
  const size_t N = hn::Lanes(t.d16);
  auto sum0 = hn::Zero(t.d32), sum1 = hn::Zero(t.d32);
  for (size_t s = 0; s < 32; s += N) {
    const auto v = hn::PromoteTo(t.d16, hn::LoadU(t.di8, reinterpret_cast<const int8_t*>(qs + s)));
    sum0 = hn::ReorderWidenMulAccumulate(t.d32, v, hn::Load(t.d16, xb + s), sum0, sum1);
  }
  f = hn::MulAdd(hn::ConvertTo(t.df, hn::Add(sum0, sum1)), hn::Set(t.df, scale), f);
}

template <size_t kRows, class Pf>
HWY_INLINE void Q8_0Rows(const uint8_t* const* HWY_RESTRICT rows, size_t nblocks, const int16_t* HWY_RESTRICT xq,
                         const float* HWY_RESTRICT sx,
                         const float* HWY_RESTRICT sums, float* HWY_RESTRICT y,
                         size_t y_stride, Pf& pf) {
#if defined(SPARROW_Q4_0_INT8) && HWY_TARGET == HWY_AVX3_DL
  if constexpr (kQ8_0Int8) {
    const int8_t* x8 = reinterpret_cast<const int8_t*>(xq);
    const float* scales = sx;
    float* out = y;
    return Q8_0InterleavedPairs<kRows, 1>(rows, nblocks, &x8, &scales, &out, y_stride, pf);
  }
#endif
  const Int32Tags t;
  const hn::ScalableTag<float> dfull;
  const size_t G = hn::Lanes(dfull);
  constexpr size_t kBB = sizeof(BlockQ8_0);
  auto f0 = hn::Zero(t.df), f1 = hn::Zero(t.df), f2 = hn::Zero(t.df), f3 = hn::Zero(t.df);
  auto unused = hn::Zero(dfull);  // Q8_0 is symmetric: no offset term
  HWY_ALIGN float sw[2][kRows][kMaxFloatLanes];
  PermutedGroupScales<kRows, kBB>(dfull, rows, nblocks, 0, sx, sums, sw[0], unused, unused,
                                  unused, unused);
  size_t cur = 0;
  for (size_t g0 = 0; g0 < nblocks; g0 += G, cur ^= 1) {
    if (g0 + G < nblocks) {
      PermutedGroupScales<kRows, kBB>(dfull, rows, nblocks, g0 + G, sx, sums, sw[cur ^ 1],
                                      unused, unused, unused, unused);
    }
    const size_t count = std::min(G, nblocks - g0);
    const float(*scales)[kMaxFloatLanes] = sw[cur];
    for (size_t b = 0; b < count; ++b) {
      const int16_t* xb = xq + (g0 + b) * 32;
      const size_t a = (g0 + b) * kBB + 2;
      pf.Upto(a);
      Q8_0Block(t, rows[0] + a, xb, scales[0][b], f0);
      if constexpr (kRows > 1) Q8_0Block(t, rows[1] + a, xb, scales[1 % kRows][b], f1);
      if constexpr (kRows > 2) Q8_0Block(t, rows[2] + a, xb, scales[2 % kRows][b], f2);
      if constexpr (kRows > 3) Q8_0Block(t, rows[3] + a, xb, scales[3 % kRows][b], f3);
    }
  }
  y[0] = ReduceSum(t.df, f0);
  if constexpr (kRows > 1) y[y_stride] = ReduceSum(t.df, f1);
  if constexpr (kRows > 2) y[2 * y_stride] = ReduceSum(t.df, f2);
  if constexpr (kRows > 3) y[3 * y_stride] = ReduceSum(t.df, f3);
}

#if !HWY_HAVE_SCALABLE  // arrays of vectors; SVE's are sizeless
// Q8_0Rows for T inputs at once: each block's weights are widened once and
// serve all T (the single-input kernel widens them per input). Per input,
// every step is Q8_0Rows's in its order (scales d * sx from BlockScales,
// Q8_0Block's sums), so each input's results are bit for bit its own
// Q8_0Rows ones. y[t][r * y_stride] for input in[t] and row r.
template <size_t kRows, size_t T, class Input, class Pf>
HWY_INLINE void Q8_0RowsTokens(const uint8_t* const* HWY_RESTRICT rows, size_t nblocks,
                               const Input* in, float* const* y, size_t y_stride, Pf& pf) {
#if defined(SPARROW_Q4_0_INT8) && HWY_TARGET == HWY_AVX3_DL
  if constexpr (kQ8_0Int8) {
    const int8_t* x8[T];
    const float* sx[T];
    for (size_t i = 0; i < T; ++i) {
      x8[i] = reinterpret_cast<const int8_t*>(in[i].quantized());
      sx[i] = in[i].scales();
    }
    return Q8_0InterleavedPairs<kRows, T>(rows, nblocks, x8, sx, y, y_stride, pf);
  }
#endif
  const Int32Tags t;
  const hn::ScalableTag<float> dfull;
  const size_t G = hn::Lanes(dfull);
  const size_t N = hn::Lanes(t.d16);
  constexpr size_t kBB = sizeof(BlockQ8_0);
  using VF = hn::Vec<decltype(t.df)>;
  VF f[T][kRows];
  for (size_t i = 0; i < T; ++i) {
    for (size_t r = 0; r < kRows; ++r) f[i][r] = hn::Zero(t.df);
  }
  HWY_ALIGN float sw[T][kRows][kMaxFloatLanes];
  auto unused = hn::Zero(dfull);  // Q8_0 is symmetric: no offset term
  for (size_t g0 = 0; g0 < nblocks; g0 += G) {
    // Each row's weight scales decoded once for all T inputs.
    for (size_t r = 0; r < kRows; ++r) {
      const size_t count = std::min(G, nblocks - g0);
      const auto dw = WeightBlockScales(dfull, rows[r] + g0 * kBB, kBB, count);
      for (size_t i = 0; i < T; ++i) {
        ApplyInputScales(dfull, dw, count, in[i].scales() + g0, in[i].sums() + g0, sw[i][r],
                         unused);
      }
    }
    const size_t count = std::min(G, nblocks - g0);
    for (size_t b = 0; b < count; ++b) {
      const size_t a = (g0 + b) * kBB + 2;
      pf.Upto(a);
      for (size_t r = 0; r < kRows; ++r) {
        const int8_t* qs = reinterpret_cast<const int8_t*>(rows[r] + a);
        hn::Vec<decltype(t.d32)> sum0[T], sum1[T];
        for (size_t i = 0; i < T; ++i) sum0[i] = sum1[i] = hn::Zero(t.d32);
        for (size_t c = 0; c < 32; c += N) {
          const auto v = hn::PromoteTo(t.d16, hn::LoadU(t.di8, qs + c));
          for (size_t i = 0; i < T; ++i) {
            const int16_t* xb = in[i].quantized() + (g0 + b) * 32;
            sum0[i] = hn::ReorderWidenMulAccumulate(t.d32, v, hn::Load(t.d16, xb + c), sum0[i],
                                                    sum1[i]);
          }
        }
        for (size_t i = 0; i < T; ++i) {
          f[i][r] = hn::MulAdd(hn::ConvertTo(t.df, hn::Add(sum0[i], sum1[i])),
                               hn::Set(t.df, sw[i][r][b]), f[i][r]);
        }
      }
    }
  }
  for (size_t i = 0; i < T; ++i) {
    for (size_t r = 0; r < kRows; ++r) y[i][r * y_stride] = ReduceSum(t.df, f[i][r]);
  }
}
#endif  // !HWY_HAVE_SCALABLE

// ------------------------------------------------------------ Q4_K

// Per super-block and row: sw[s] = d * sc[s] * sx[s] for the 8 sub-blocks,
// and adds dmin * m[s] * sx[s] * sums[s] (the mins' share) to `mins`.
template <class D8>
HWY_INLINE void Q4_KScales(D8 d8, const uint8_t* HWY_RESTRICT block,
                           const float* HWY_RESTRICT sx,
                           const float* HWY_RESTRICT sums,
                           float* HWY_RESTRICT sw, hn::Vec<D8>& mins) {
  const hn::Rebind<int32_t, D8> di32;
  const hn::Rebind<uint8_t, D8> du8;
  const size_t N = hn::Lanes(d8);
  const float d = HalfBitsToFloat(LoadU16(block));
  const float dmin = HalfBitsToFloat(LoadU16(block + 2));
  // UnpackQ4KScales on four bytes at a time (little-endian words): bytes
  // 0..7 of `unpacked` are the scales, 8..15 the mins.
  uint32_t a, b, c;
  std::memcpy(&a, block + 4, 4);
  std::memcpy(&b, block + 8, 4);
  std::memcpy(&c, block + 12, 4);
  const uint32_t words[4] = {
      a & 0x3f3f3f3fu, (c & 0x0f0f0f0fu) | ((a >> 2) & 0x30303030u),
      b & 0x3f3f3f3fu, ((c >> 4) & 0x0f0f0f0fu) | ((b >> 2) & 0x30303030u)};
  HWY_ALIGN uint8_t unpacked[16];
  std::memcpy(unpacked, words, 16);
  const auto vd = hn::Set(d8, d);
  const auto vdmin = hn::Set(d8, dmin);
  for (size_t i = 0; i < 8; i += N) {
    const auto sc = hn::ConvertTo(d8, hn::PromoteTo(di32, hn::LoadU(du8, unpacked + i)));
    const auto m = hn::ConvertTo(d8, hn::PromoteTo(di32, hn::LoadU(du8, unpacked + 8 + i)));
    const auto xs = hn::LoadU(d8, sx + i);
    hn::StoreU(hn::Mul(hn::Mul(sc, vd), xs), d8, sw + i);
    mins = hn::MulAdd(hn::Mul(m, vdmin), hn::Mul(xs, hn::LoadU(d8, sums + i)), mins);
  }
}

// One step over 32-byte group g's bytes s..: low nibbles belong to sub-block
// 2g (activations xa), high nibbles to 2g + 1 (xb).
template <class V16, class V32>
HWY_INLINE void Q4_KStep(const Int32Tags& t, const uint8_t* HWY_RESTRICT qs,
                         V16 xa, V16 xb, V32& a0, V32& a1, V32& b0, V32& b1) {
  const auto v = hn::BitCast(t.d16, hn::PromoteTo(t.du16, hn::LoadU(t.du8, qs)));
  a0 = hn::ReorderWidenMulAccumulate(t.d32, hn::And(v, hn::Set(t.d16, 15)), xa, a0, a1);
  b0 = hn::ReorderWidenMulAccumulate(t.d32, hn::ShiftRight<4>(v), xb, b0, b1);
}

template <class DF, class V32>
HWY_INLINE void ApplyScale(DF df, V32 sum0, V32 sum1, hn::Vec<DF> scale,
                           hn::Vec<DF>& acc) {
  acc = hn::MulAdd(hn::ConvertTo(df, hn::Add(sum0, sum1)), scale, acc);
}
template <class DF, class V32>
HWY_INLINE void ApplyScale(DF df, V32 sum0, V32 sum1, float scale,
                           hn::Vec<DF>& acc) {
  ApplyScale(df, sum0, sum1, hn::Set(df, scale), acc);
}

template <size_t kRows>
HWY_INLINE void Q4_KRows(const uint8_t* HWY_RESTRICT w, size_t row_stride,
                         size_t nblocks, const int16_t* HWY_RESTRICT xq,
                         const float* HWY_RESTRICT sx,
                         const float* HWY_RESTRICT sums, float* HWY_RESTRICT y,
                         size_t y_stride) {
  const Int32Tags t;
  const hn::CappedTag<float, 8> d8;
  const size_t N16 = hn::Lanes(t.d16);
  constexpr size_t kBB = sizeof(BlockQ4_K);
  constexpr size_t kQs = offsetof(BlockQ4_K, qs);
  const uint8_t* r0 = w;
  const uint8_t* r1 = kRows > 1 ? w + row_stride : w;
  auto f0 = hn::Zero(t.df), f1 = hn::Zero(t.df), e0 = hn::Zero(t.df), e1 = hn::Zero(t.df);
  auto m0 = hn::Zero(d8), m1 = hn::Zero(d8);
  // Scales of super-block sb + 1 are computed before the dot products of sb
  // (they overlap), into the other half of a ping-pong buffer, which also
  // makes the compiler broadcast them from memory (free) instead of
  // shuffling them out of registers.
  HWY_ALIGN float scales[2][kRows][8 + kGemvPad];
  Q4_KScales(d8, r0, sx, sums, scales[0][0], m0);
  if constexpr (kRows > 1) Q4_KScales(d8, r1, sx, sums, scales[0][1 % kRows], m1);
  for (size_t sb = 0; sb < nblocks; ++sb) {
    const int16_t* xb = xq + sb * 256;
    if (sb + 1 < nblocks) {
      const size_t n = sb + 1;
      Q4_KScales(d8, r0 + n * kBB, sx + 8 * n, sums + 8 * n, scales[n & 1][0], m0);
      if constexpr (kRows > 1)
        Q4_KScales(d8, r1 + n * kBB, sx + 8 * n, sums + 8 * n, scales[n & 1][1 % kRows], m1);
    }
    const float(*sw)[8 + kGemvPad] = scales[sb & 1];
    PrefetchSpan<kRows>(r0, r1, sb * kBB + kPrefetchBytes, kBB);
    for (size_t g = 0; g < 4; ++g) {
      const size_t off = sb * kBB + kQs + 32 * g;
      auto a00 = hn::Zero(t.d32), a01 = hn::Zero(t.d32), b00 = hn::Zero(t.d32),
           b01 = hn::Zero(t.d32);
      auto a10 = hn::Zero(t.d32), a11 = hn::Zero(t.d32), b10 = hn::Zero(t.d32),
           b11 = hn::Zero(t.d32);
      for (size_t s = 0; s < 32; s += N16) {
        const auto xa = hn::Load(t.d16, xb + 64 * g + s);
        const auto xbv = hn::Load(t.d16, xb + 64 * g + 32 + s);
        Q4_KStep(t, r0 + off + s, xa, xbv, a00, a01, b00, b01);
        if constexpr (kRows > 1) Q4_KStep(t, r1 + off + s, xa, xbv, a10, a11, b10, b11);
      }
      // Two accumulators per row: shorter multiply-add dependency chains.
      ApplyScale(t.df, a00, a01, sw[0][2 * g], f0);
      ApplyScale(t.df, b00, b01, sw[0][2 * g + 1], e0);
      if constexpr (kRows > 1) {
        ApplyScale(t.df, a10, a11, sw[1 % kRows][2 * g], f1);
        ApplyScale(t.df, b10, b11, sw[1 % kRows][2 * g + 1], e1);
      }
    }
  }
  y[0] = ReduceSum(t.df, hn::Add(f0, e0)) - ReduceSum(d8, m0);
  if constexpr (kRows > 1) y[y_stride] = ReduceSum(t.df, hn::Add(f1, e1)) - ReduceSum(d8, m1);
}

// ------------------------------------------------------------ Q6_K

// Per super-block and row: sw[g] = d * sc[g] * sx[g] for the 16 groups, and
// adds sw[g] * sums[g] to `offset` (for the -32 of every element).
template <class D8>
HWY_INLINE void Q6_KScales(D8 d8, const uint8_t* HWY_RESTRICT block,
                           const float* HWY_RESTRICT sx,
                           const float* HWY_RESTRICT sums,
                           float* HWY_RESTRICT sw, hn::Vec<D8>& offset) {
  const hn::Rebind<int32_t, D8> di32;
  const hn::Rebind<int8_t, D8> di8;
  const size_t N = hn::Lanes(d8);
  const auto vd = hn::Set(d8, HalfBitsToFloat(LoadU16(block + offsetof(BlockQ6_K, d))));
  const int8_t* sc = reinterpret_cast<const int8_t*>(block + offsetof(BlockQ6_K, scales));
  for (size_t i = 0; i < 16; i += N) {
    const auto s = hn::ConvertTo(d8, hn::PromoteTo(di32, hn::LoadU(di8, sc + i)));
    const auto v = hn::Mul(hn::Mul(s, vd), hn::LoadU(d8, sx + i));
    hn::StoreU(v, d8, sw + i);
    offset = hn::MulAdd(v, hn::LoadU(d8, sums + i), offset);
  }
}

// One step: N16 elements of each of the four element rows of a half that
// share the bytes ql[s..], ql[32 + s..] and qh[s..].
template <class V16, class V32>
HWY_INLINE void Q6_KStep(const Int32Tags& t, const uint8_t* HWY_RESTRICT ql,
                         const uint8_t* HWY_RESTRICT qh, V16 x0, V16 x1, V16 x2,
                         V16 x3, V32& a0, V32& a1, V32& b0, V32& b1, V32& c0,
                         V32& c1, V32& e0, V32& e1) {
  const auto low = hn::BitCast(t.d16, hn::PromoteTo(t.du16, hn::LoadU(t.du8, ql)));
  const auto low2 = hn::BitCast(t.d16, hn::PromoteTo(t.du16, hn::LoadU(t.du8, ql + 32)));
  const auto high = hn::BitCast(t.d16, hn::PromoteTo(t.du16, hn::LoadU(t.du8, qh)));
  const auto m4 = hn::Set(t.d16, 15);
  const auto m2 = hn::Set(t.d16, 0x30);
  const auto q0 = hn::OrAnd(hn::And(low, m4), hn::ShiftLeft<4>(high), m2);
  const auto q1 = hn::OrAnd(hn::And(low2, m4), hn::ShiftLeft<2>(high), m2);
  const auto q2 = hn::OrAnd(hn::ShiftRight<4>(low), high, m2);
  const auto q3 = hn::OrAnd(hn::ShiftRight<4>(low2), hn::ShiftRight<2>(high), m2);
  a0 = hn::ReorderWidenMulAccumulate(t.d32, q0, x0, a0, a1);
  b0 = hn::ReorderWidenMulAccumulate(t.d32, q1, x1, b0, b1);
  c0 = hn::ReorderWidenMulAccumulate(t.d32, q2, x2, c0, c1);
  e0 = hn::ReorderWidenMulAccumulate(t.d32, q3, x3, e0, e1);
}

template <size_t kRows>
HWY_INLINE void Q6_KRows(const uint8_t* HWY_RESTRICT w, size_t row_stride,
                         size_t nblocks, const int16_t* HWY_RESTRICT xq,
                         const float* HWY_RESTRICT group_sx,
                         const float* HWY_RESTRICT group_sums,
                         float* HWY_RESTRICT y,
                         size_t y_stride) {
  const Int32Tags t;
  const hn::CappedTag<float, 8> d8;
  const size_t N16 = hn::Lanes(t.d16);
  // Elements per scale application: a 32-lane vector spans two groups of
  // 16 (int32 lanes 0..7 the first, 8..15 the second); narrower ones need
  // one or more steps per group.
  const size_t span = std::max<size_t>(N16, 16);
  const auto first_half = hn::FirstN(t.df, hn::Lanes(t.df) / 2);
  constexpr size_t kBB = sizeof(BlockQ6_K);
  constexpr size_t kQh = offsetof(BlockQ6_K, qh);
  const uint8_t* r0 = w;
  const uint8_t* r1 = kRows > 1 ? w + row_stride : w;
  auto f0 = hn::Zero(t.df), f1 = hn::Zero(t.df), g0 = hn::Zero(t.df), g1 = hn::Zero(t.df);
  auto o0 = hn::Zero(d8), o1 = hn::Zero(d8);
  // Ping-pong scale buffer as in Q4_KRows.
  HWY_ALIGN float scales[2][kRows][16 + kGemvPad];
  Q6_KScales(d8, r0, group_sx, group_sums, scales[0][0], o0);
  if constexpr (kRows > 1) Q6_KScales(d8, r1, group_sx, group_sums, scales[0][1 % kRows], o1);
  for (size_t sb = 0; sb < nblocks; ++sb) {
    const int16_t* xb = xq + sb * 256;
    if (sb + 1 < nblocks) {
      const size_t n = sb + 1;
      Q6_KScales(d8, r0 + n * kBB, group_sx + 16 * n, group_sums + 16 * n,
                 scales[n & 1][0], o0);
      if constexpr (kRows > 1)
        Q6_KScales(d8, r1 + n * kBB, group_sx + 16 * n, group_sums + 16 * n,
                   scales[n & 1][1 % kRows], o1);
    }
    const float(*sw)[16 + kGemvPad] = scales[sb & 1];
    PrefetchSpan<kRows>(r0, r1, sb * kBB + kPrefetchBytes, kBB);
    for (size_t h = 0; h < 2; ++h) {
      for (size_t l0 = 0; l0 < 32; l0 += span) {
        auto a00 = hn::Zero(t.d32), a01 = hn::Zero(t.d32), b00 = hn::Zero(t.d32),
             b01 = hn::Zero(t.d32), c00 = hn::Zero(t.d32), c01 = hn::Zero(t.d32),
             e00 = hn::Zero(t.d32), e01 = hn::Zero(t.d32);
        auto a10 = hn::Zero(t.d32), a11 = hn::Zero(t.d32), b10 = hn::Zero(t.d32),
             b11 = hn::Zero(t.d32), c10 = hn::Zero(t.d32), c11 = hn::Zero(t.d32),
             e10 = hn::Zero(t.d32), e11 = hn::Zero(t.d32);
        for (size_t s = l0; s < l0 + span; s += N16) {
          const int16_t* xh = xb + 128 * h + s;
          const auto x0 = hn::Load(t.d16, xh);
          const auto x1 = hn::Load(t.d16, xh + 32);
          const auto x2 = hn::Load(t.d16, xh + 64);
          const auto x3 = hn::Load(t.d16, xh + 96);
          const size_t ql = sb * kBB + 64 * h + s;
          const size_t qh = sb * kBB + kQh + 32 * h + s;
          Q6_KStep(t, r0 + ql, r0 + qh, x0, x1, x2, x3, a00, a01, b00, b01, c00,
                   c01, e00, e01);
          if constexpr (kRows > 1)
            Q6_KStep(t, r1 + ql, r1 + qh, x0, x1, x2, x3, a10, a11, b10, b11,
                     c10, c11, e10, e11);
        }
        // Element row k (elements 128h + 32k + l) uses group 8h + 2k + l/16.
        const size_t g = 8 * h + l0 / 16;
        auto scale = [&](size_t r, size_t k) HWY_ATTR {
          const float* sr = sw[r % kRows] + g + 2 * k;
          return span == 32
                     ? hn::IfThenElse(first_half, hn::Set(t.df, sr[0]), hn::Set(t.df, sr[1]))
                     : hn::Set(t.df, sr[0]);
        };
        // Two accumulators per row: shorter multiply-add dependency chains.
        ApplyScale(t.df, a00, a01, scale(0, 0), f0);
        ApplyScale(t.df, b00, b01, scale(0, 1), g0);
        ApplyScale(t.df, c00, c01, scale(0, 2), f0);
        ApplyScale(t.df, e00, e01, scale(0, 3), g0);
        if constexpr (kRows > 1) {
          ApplyScale(t.df, a10, a11, scale(1, 0), f1);
          ApplyScale(t.df, b10, b11, scale(1, 1), g1);
          ApplyScale(t.df, c10, c11, scale(1, 2), f1);
          ApplyScale(t.df, e10, e11, scale(1, 3), g1);
        }
      }
    }
  }
  y[0] = ReduceSum(t.df, hn::Add(f0, g0)) - 32.0f * ReduceSum(d8, o0);
  if constexpr (kRows > 1) y[y_stride] = ReduceSum(t.df, hn::Add(f1, g1)) - 32.0f * ReduceSum(d8, o1);
}

#if HWY_TARGET != HWY_SCALAR
// Q6_K against 8-bit activations where the target has a native 8-bit dot
// product (int8_dot-inl.h: vpdpbusd, pmaddubsw or sdot). The 6-bit weights
// (0..63, the -32 applied through the group sums as above) go into the
// unsigned operand, the int8 activations into the signed one. With int16
// activations (Q6_KRows) each 32 elements took about 12 vector ops per row
// and the kernel was bound by arithmetic at one thread (15 GB/s on an AMD
// EPYC Zen 4 VM, against 30 for Q8_0); here they take 7 with VNNI: build the
// bytes (3), one dot step, convert, pick the lanes' group scales (one table
// lookup) and one multiply-add. Figures in the README.
//
// One step covers N8 (16 or 32) consecutive elements of each of the four
// element rows of a half super-block; its int32 lanes each sum 4 elements,
// so lane i belongs to group 8h + 2k + (j * N8 + 4i) / 16 of element row
// k, step j. The group scales of a half (8 floats) are looked up by lane.
template <size_t kRows, class Dots>
HWY_INLINE void Q6_KRowsInt8(Dots, const uint8_t* HWY_RESTRICT w, size_t row_stride, size_t nblocks,
                             const int8_t* HWY_RESTRICT xq, const float* HWY_RESTRICT group_sx,
                             const float* HWY_RESTRICT group_sums, float* HWY_RESTRICT y,
                             size_t y_stride) {
  const hn::CappedTag<uint8_t, 32> du8;
  const hn::Repartition<float, decltype(du8)> df;
  const hn::CappedTag<float, 8> d8;
  const size_t N8 = hn::Lanes(du8);
  const size_t NF = hn::Lanes(df);
  const size_t steps = 32 / N8;  // per element row of a half
  constexpr size_t kBB = sizeof(BlockQ6_K);
  constexpr size_t kQh = offsetof(BlockQ6_K, qh);
  // For step (k, j): which NF-float vector of the half's 8 group scales
  // its lanes read, and each lane's index in it.
  HWY_ALIGN int32_t lane_index[8][8] = {};
  size_t vector_of[8] = {};
  for (size_t k = 0; k < 4; ++k) {
    for (size_t j = 0; j < steps; ++j) {
      for (size_t i = 0; i < NF; ++i) {
        const size_t g = 2 * k + (j * N8 + 4 * i) / 16;
        lane_index[k * steps + j][i] = static_cast<int32_t>(g % NF);
        vector_of[k * steps + j] = g / NF;
      }
    }
  }
  const auto m0f = hn::Set(du8, uint8_t{0x0F});
  const auto m30 = hn::Set(du8, uint8_t{0x30});
  const hn::Repartition<uint16_t, decltype(du8)> du16;
  const uint8_t* r0 = w;
  const uint8_t* r1 = kRows > 1 ? w + row_stride : w;
  auto f0 = hn::Zero(df), f1 = hn::Zero(df), g0 = hn::Zero(df), g1 = hn::Zero(df);
  auto o0 = hn::Zero(d8), o1 = hn::Zero(d8);
  HWY_ALIGN float sw[kRows][16 + kGemvPad];
  // The four element rows' bytes of one step of one weight row.
  auto six_bit = [&](const uint8_t* r, size_t lo, size_t hi, hn::Vec<decltype(du8)>& q0,
                     hn::Vec<decltype(du8)>& q1, hn::Vec<decltype(du8)>& q2,
                     hn::Vec<decltype(du8)>& q3) HWY_ATTR {
    const auto la = hn::LoadU(du8, r + lo);
    const auto lb = hn::LoadU(du8, r + lo + 32);
    const auto hb = hn::BitCast(du16, hn::LoadU(du8, r + hi));
    // 16-bit shifts: the masks drop what crosses into the next byte.
    q0 = hn::OrAnd(hn::And(la, m0f), hn::BitCast(du8, hn::ShiftLeft<4>(hb)), m30);
    q1 = hn::OrAnd(hn::And(lb, m0f), hn::BitCast(du8, hn::ShiftLeft<2>(hb)), m30);
    q2 = hn::OrAnd(hn::And(hn::BitCast(du8, hn::ShiftRight<4>(hn::BitCast(du16, la))), m0f),
                   hn::BitCast(du8, hb), m30);
    q3 = hn::OrAnd(hn::And(hn::BitCast(du8, hn::ShiftRight<4>(hn::BitCast(du16, lb))), m0f),
                   hn::BitCast(du8, hn::ShiftRight<2>(hb)), m30);
  };
  auto apply = [&](const float* swh, size_t step, hn::Vec<decltype(du8)> q,
                   hn::Vec<decltype(du8)> x, hn::Vec<decltype(df)>& acc) HWY_ATTR {
    const auto dot = Dots::Total(Dots::Add(du8, Dots::Zero(), q, x));
    const auto scale = hn::TableLookupLanes(hn::Load(df, swh + NF * vector_of[step]),
                                            hn::SetTableIndices(df, lane_index[step]));
    acc = hn::MulAdd(hn::ConvertTo(df, dot), scale, acc);
  };
  for (size_t sb = 0; sb < nblocks; ++sb) {
    Q6_KScales(d8, r0 + sb * kBB, group_sx + 16 * sb, group_sums + 16 * sb, sw[0], o0);
    if constexpr (kRows > 1) {
      Q6_KScales(d8, r1 + sb * kBB, group_sx + 16 * sb, group_sums + 16 * sb, sw[1], o1);
    }
    PrefetchSpan<kRows>(r0, r1, sb * kBB + kPrefetchBytes, kBB);
    for (size_t h = 0; h < 2; ++h) {
      for (size_t j = 0; j < steps; ++j) {
        const uint8_t* xh = reinterpret_cast<const uint8_t*>(xq + sb * 256 + 128 * h + j * N8);
        const auto x0 = hn::LoadU(du8, xh);
        const auto x1 = hn::LoadU(du8, xh + 32);
        const auto x2 = hn::LoadU(du8, xh + 64);
        const auto x3 = hn::LoadU(du8, xh + 96);
        const size_t lo = sb * kBB + 64 * h + j * N8;
        const size_t hi = sb * kBB + kQh + 32 * h + j * N8;
        hn::Vec<decltype(du8)> q0, q1, q2, q3;
        six_bit(r0, lo, hi, q0, q1, q2, q3);
        apply(sw[0] + 8 * h, 0 * steps + j, q0, x0, f0);
        apply(sw[0] + 8 * h, 1 * steps + j, q1, x1, g0);
        apply(sw[0] + 8 * h, 2 * steps + j, q2, x2, f0);
        apply(sw[0] + 8 * h, 3 * steps + j, q3, x3, g0);
        if constexpr (kRows > 1) {
          six_bit(r1, lo, hi, q0, q1, q2, q3);
          apply(sw[1] + 8 * h, 0 * steps + j, q0, x0, f1);
          apply(sw[1] + 8 * h, 1 * steps + j, q1, x1, g1);
          apply(sw[1] + 8 * h, 2 * steps + j, q2, x2, f1);
          apply(sw[1] + 8 * h, 3 * steps + j, q3, x3, g1);
        }
      }
    }
  }
  y[0] = ReduceSum(df, hn::Add(f0, g0)) - 32.0f * ReduceSum(d8, o0);
  if constexpr (kRows > 1) {
    y[y_stride] = ReduceSum(df, hn::Add(f1, g1)) - 32.0f * ReduceSum(d8, o1);
  }
}
#endif  // HWY_TARGET != HWY_SCALAR

// ------------------------------------------------------------ dispatch

// Runs K::Run<kGroup> on groups of kGroup rows taken from kGroup equal
// parts of [row_begin, row_end), one row from each part at a time, then
// K::Run<1> on the few rows left over. Each part is then read as one long
// sequential stream, so hardware prefetchers keep kGroup streams going;
// groups of adjacent rows would read kGroup interleaved short streams (a
// row is a few KiB), which prefetch poorly. With n inputs, each group is
// multiplied with every input before the next: it is read from memory once
// (then from L1), and each input's results are those it gets alone.
template <size_t kGroup, class K, class Input>
HWY_INLINE void ForRowGroups(const uint8_t* base, size_t row_bytes, size_t row_begin,
                             size_t row_end, size_t cols, const Input* in, size_t n, float* y,
                             size_t y_stride) {
  const size_t part = (row_end - row_begin) / kGroup;
  for (size_t i = 0; i < part; ++i) {
    const size_t r = row_begin + i;
    size_t t = 0;
    if constexpr (K::kTokens > 1) {  // a kernel that takes several inputs at once
      for (; t + K::kTokens <= n; t += K::kTokens) {
        K::template RunTokens<kGroup>(base + r * row_bytes, part * row_bytes, cols, in + t,
                                      y + t * y_stride + r, y_stride, part);
      }
    }
    for (; t < n; ++t) {
      K::template Run<kGroup>(base + r * row_bytes, part * row_bytes, cols, in[t],
                              y + t * y_stride + r, part);
    }
  }
  for (size_t r = row_begin + kGroup * part; r < row_end; ++r) {
    for (size_t t = 0; t < n; ++t) {
      K::template Run<1>(base + r * row_bytes, row_bytes, cols, in[t], y + t * y_stride + r,
                         size_t{1});
    }
  }
}

// kRows rows `stride` bytes apart, as the row-array kernels take them,
// with the prefetch policy Pf.
template <size_t kRows, template <size_t> class Pf = StreamAhead>
struct StridedRows {
  StridedRows(const uint8_t* w, size_t stride) {
    for (size_t r = 0; r < kRows; ++r) rows[r] = w + r * stride;
  }
  StridedRows(const StridedRows&) = delete;  // pf points into this object
  const uint8_t* rows[kRows];
  Pf<kRows> pf{rows};
};

// Calls body(rows, pf) on kRows rows `stride` bytes apart, with the rows
// left to the hardware prefetchers (`hardware`) or prefetched in software.
template <size_t kRows, class Body>
HWY_INLINE void WithStridedRows(bool hardware, const uint8_t* w, size_t stride, const Body& body) {
  if (hardware) {
    StridedRows<kRows, HardwarePrefetch> s(w, stride);
    body(s.rows, s.pf);
  } else {
    StridedRows<kRows> s(w, stride);
    body(s.rows, s.pf);
  }
}

// The kernels of each type, on kRows rows `stride` bytes apart and one
// prepared input.
template <typename WT>
struct FloatKernel {
  static constexpr size_t kTokens = 1;
  template <size_t kRows, class Input>
  static HWY_INLINE void Run(const uint8_t* w, size_t stride, size_t cols, const Input& in,
                             float* y, size_t y_stride) {
    WithStridedRows<kRows>(CpuStreamsRowsItself(), w, stride,
                           [&](const uint8_t** rows, auto& pf) HWY_ATTR {
                             FloatRows<WT, kRows>(rows, cols, in.x(), y, y_stride, pf);
                           });
  }
};
struct Q8_0Kernel {
  // Inputs per RunTokens: as many accumulators (4 rows each) as the
  // registers hold. Measured on a Sapphire Rapids VM, 125M-shaped synthetic
  // Q8_0, `sparrow bench -p 16 -n 0 -t 1`: AVX3_DL 217-237 tok/s one input
  // at a time, 249-269 four; AVX2 238, 315 with two. 1.1B-shaped, `sparrow
  // batch --block 16 -t 2` (benchmarks/batch_bench.sh): 48.4-48.7, 57.8-58.3.
#if HWY_HAVE_SCALABLE
  static constexpr size_t kTokens = 1;
#else
  // The int8 form (kQ8_0Int8) two at a time: with four, its sixteen
  // accumulators and per-input offsets spill, and pp16 on the 125M-shaped
  // Q8_0 bundle fell from 294-305 to 269-277 tok/s.
  static constexpr size_t kTokens = kQ8_0Int8 ? 2 : HWY_MAX_BYTES >= 64 ? 4 : 2;
  // kTokens inputs from `in`; input t's results at y + t * token_stride.
  template <size_t kRows, class Input>
  static HWY_INLINE void RunTokens(const uint8_t* w, size_t stride, size_t cols, const Input* in,
                                   float* y, size_t token_stride, size_t y_stride) {
    StridedRows<kRows> s(w, stride);
    float* out[kTokens];
    for (size_t i = 0; i < kTokens; ++i) out[i] = y + i * token_stride;
    Q8_0RowsTokens<kRows, kTokens>(s.rows, cols / 32, in, out, y_stride, s.pf);
  }
#endif
  template <size_t kRows, class Input>
  static HWY_INLINE void Run(const uint8_t* w, size_t stride, size_t cols, const Input& in,
                             float* y, size_t y_stride) {
    // The int8 form reads whole consecutive 64-byte loads, which the
    // hardware prefetchers follow (as FloatKernel's rows).
    WithStridedRows<kRows>(kQ8_0Int8 && CpuStreamsRowsItself(), w, stride,
                           [&](const uint8_t** rows, auto& pf) HWY_ATTR {
                             Q8_0Rows<kRows>(rows, cols / 32, in.quantized(), in.scales(),
                                             in.sums(), y, y_stride, pf);
                           });
  }
};
template <bool kSplit>
struct Q4_0Kernel {
  static constexpr size_t kTokens = 1;
  template <size_t kRows, class Input>
  static HWY_INLINE void Run(const uint8_t* w, size_t stride, size_t cols, const Input& in,
                             float* y, size_t y_stride) {
    // The quad forms read each row front to back in whole 64-byte loads,
    // which the hardware prefetchers follow (as FloatKernel's rows).
    const bool hardware =
        (kSplit || kQ4_0PlainQuads) && Q4_0ActivationsAreInt8() && CpuStreamsRowsItself();
    WithStridedRows<kRows>(hardware, w, stride, [&](const uint8_t** rows, auto& pf) HWY_ATTR {
      Q4_0Rows<kRows, kSplit>(rows, cols / 32, in.quantized(), in.scales(), in.sums(), y, y_stride,
                              pf);
    });
  }
};
struct Q4_KKernel {
  static constexpr size_t kTokens = 1;
  template <size_t kRows, class Input>
  static HWY_INLINE void Run(const uint8_t* w, size_t stride, size_t cols, const Input& in,
                             float* y, size_t y_stride) {
    Q4_KRows<kRows>(w, stride, cols / 256, in.quantized(), in.scales(), in.sums(), y, y_stride);
  }
};
struct Q6_KKernel {
  static constexpr size_t kTokens = 1;
  template <size_t kRows, class Input>
  static HWY_INLINE void Run(const uint8_t* w, size_t stride, size_t cols, const Input& in,
                             float* y, size_t y_stride) {
#if HWY_TARGET != HWY_SCALAR
    if (Q6_KActivationsAreInt8()) {
      WithBestByteDotSum(hn::CappedTag<uint8_t, 32>(), [&](auto dots) HWY_ATTR {
        Q6_KRowsInt8<kRows>(dots, w, stride, cols / 256,
                            reinterpret_cast<const int8_t*>(in.quantized()), in.group_scales(),
                            in.group_sums(), y, y_stride);
      });
      return;
    }
#endif
    Q6_KRows<kRows>(w, stride, cols / 256, in.quantized(), in.group_scales(), in.group_sums(),
                    y, y_stride);
  }
};

// y[t * y_stride + r] = dot(row r, in[t]) for t < n. The caller has checked
// the type, that `cols` is a whole number of blocks and that every input
// was prepared for this type and size.
template <class Input>
HWY_INLINE void GemvImpl(TensorType type, const void* weights, size_t row_bytes, size_t cols,
                         const Input* in, size_t n, size_t row_begin, size_t row_end, float* y,
                         size_t y_stride) {
  const uint8_t* w = static_cast<const uint8_t*>(weights);
  switch (type) {
    case TensorType::kF32:
      return ForRowGroups<4, FloatKernel<float>>(w, row_bytes, row_begin, row_end, cols, in, n,
                                                 y, y_stride);
    case TensorType::kF16:
      return ForRowGroups<4, FloatKernel<hwy::float16_t>>(w, row_bytes, row_begin, row_end,
                                                          cols, in, n, y, y_stride);
    case TensorType::kBF16:
      return ForRowGroups<4, FloatKernel<hwy::bfloat16_t>>(w, row_bytes, row_begin, row_end,
                                                           cols, in, n, y, y_stride);
    case TensorType::kQ8_0:
      return ForRowGroups<4, Q8_0Kernel>(w, row_bytes, row_begin, row_end, cols, in, n, y,
                                         y_stride);
    case TensorType::kQ4_0:
      return ForRowGroups<4, Q4_0Kernel<false>>(w, row_bytes, row_begin, row_end, cols, in, n,
                                                y, y_stride);
    case TensorType::kQ4_0S:
      return ForRowGroups<4, Q4_0Kernel<true>>(w, row_bytes, row_begin, row_end, cols, in, n,
                                               y, y_stride);
    case TensorType::kQ4_K:
      return ForRowGroups<2, Q4_KKernel>(w, row_bytes, row_begin, row_end, cols, in, n, y,
                                         y_stride);
    case TensorType::kQ6_K:
      return ForRowGroups<2, Q6_KKernel>(w, row_bytes, row_begin, row_end, cols, in, n, y,
                                         y_stride);
    default:
      return;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::simd
HWY_AFTER_NAMESPACE();

#endif  // SPARROW_SIMD_GEMV_INL_H_ toggle
