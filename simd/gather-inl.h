// Per-target gather kernels (gather.h): dot products with, and weighted sums
// of, rows addressed by pointer.
//
// DotRows runs GEMV's per-row machinery (gemv-inl.h: BlockScales through
// GroupScales, Q8_0Block, Q4_0Pair/Q4_0Single, LoadAsFloat, ReduceSum) with
// the same per-row accumulators and order as Gemv's Q8_0Rows, Q4_0Rows and
// FloatRows, so each result is bit-identical to Gemv's. Those functions
// address rows as base + r * row_bytes; the loops below are theirs with the
// rows taken from a pointer array instead (gather_test.cc checks the results
// against Gemv bit for bit, so the copies cannot drift apart unnoticed). For
// a batch, each group of four rows is multiplied with every token before the
// next group: the group is read from DRAM once, then from L1/L2.
//
// AxpyRows adds a_k * w_k to y one term at a time with a multiply-add whose
// weight operand is the exactly dequantized element (d * q, and the F16/BF16
// promotions, are exact in f32), in row order. With one token the rows are
// dequantized on the fly, four at a time, into the multiply-adds; with a
// batch, a column tile of up to eight rows is dequantized into an L1 buffer
// once and then applied to every token. Both paths perform the same
// operations on each y element, so a token's result does not depend on the
// batch size.

#if defined(SPARROW_SIMD_GATHER_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SPARROW_SIMD_GATHER_INL_H_
#undef SPARROW_SIMD_GATHER_INL_H_
#else
#define SPARROW_SIMD_GATHER_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <hwy/highway.h>

#include "formats/tensor_type.h"
#include "simd/gemv-inl.h"
#include "simd/gemv.h"
#include "simd/quant_blocks.h"
#include "simd/quantize-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sparrow::simd {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// ------------------------------------------------------------ dots

// FloatRows (gemv-inl.h) over rows[0..kRows).
template <typename WT, size_t kRows>
HWY_INLINE void FloatDots(const uint8_t* const* HWY_RESTRICT rows, size_t cols,
                          const float* HWY_RESTRICT x, float* HWY_RESTRICT y) {
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(df);
  const WT* r0 = reinterpret_cast<const WT*>(rows[0]);
  const WT* r1 = kRows > 1 ? reinterpret_cast<const WT*>(rows[1 % kRows]) : r0;
  const WT* r2 = kRows > 2 ? reinterpret_cast<const WT*>(rows[2 % kRows]) : r0;
  const WT* r3 = kRows > 3 ? reinterpret_cast<const WT*>(rows[3 % kRows]) : r0;
  auto a0 = hn::Zero(df), a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
  size_t i = 0;
  for (; i + N <= cols; i += N) {
    const auto xv = hn::LoadU(df, x + i);
    a0 = hn::MulAdd(LoadAsFloat(df, r0 + i), xv, a0);
    if constexpr (kRows > 1) a1 = hn::MulAdd(LoadAsFloat(df, r1 + i), xv, a1);
    if constexpr (kRows > 2) a2 = hn::MulAdd(LoadAsFloat(df, r2 + i), xv, a2);
    if constexpr (kRows > 3) a3 = hn::MulAdd(LoadAsFloat(df, r3 + i), xv, a3);
  }
  if (i < cols) {
    // Through zeroed stack copies: never reads past the end of a row.
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
  if constexpr (kRows > 1) y[1] = ReduceSum(df, a1);
  if constexpr (kRows > 2) y[2] = ReduceSum(df, a2);
  if constexpr (kRows > 3) y[3] = ReduceSum(df, a3);
}

// Q8_0Rows (gemv-inl.h) over rows[0..kRows).
template <size_t kRows>
HWY_INLINE void Q8_0Dots(const uint8_t* const* HWY_RESTRICT rows, size_t nblocks,
                         const int16_t* HWY_RESTRICT xq,
                         const float* HWY_RESTRICT sx,
                         const float* HWY_RESTRICT sums, float* HWY_RESTRICT y) {
  const Int32Tags t;
  const hn::ScalableTag<float> dfull;
  const size_t G = hn::Lanes(dfull);
  constexpr size_t kBB = sizeof(BlockQ8_0);
  auto f0 = hn::Zero(t.df), f1 = hn::Zero(t.df), f2 = hn::Zero(t.df), f3 = hn::Zero(t.df);
  auto unused = hn::Zero(dfull);  // Q8_0 is symmetric: no offset term
  HWY_ALIGN float sw[2][kRows][kMaxFloatLanes];
  GroupScales<kRows>(dfull, rows, kBB, nblocks, 0, sx, sums, sw[0], unused, unused, unused,
                     unused);
  size_t cur = 0;
  for (size_t g0 = 0; g0 < nblocks; g0 += G, cur ^= 1) {
    if (g0 + G < nblocks) {
      GroupScales<kRows>(dfull, rows, kBB, nblocks, g0 + G, sx, sums, sw[cur ^ 1], unused,
                         unused, unused, unused);
    }
    const size_t count = std::min(G, nblocks - g0);
    const float(*scales)[kMaxFloatLanes] = sw[cur];
    for (size_t b = 0; b < count; ++b) {
      const int16_t* xb = xq + (g0 + b) * 32;
      const size_t a = (g0 + b) * kBB + 2;
      Q8_0Block(t, rows[0] + a, xb, scales[0][b], f0);
      if constexpr (kRows > 1) Q8_0Block(t, rows[1 % kRows] + a, xb, scales[1 % kRows][b], f1);
      if constexpr (kRows > 2) Q8_0Block(t, rows[2 % kRows] + a, xb, scales[2 % kRows][b], f2);
      if constexpr (kRows > 3) Q8_0Block(t, rows[3 % kRows] + a, xb, scales[3 % kRows][b], f3);
    }
  }
  y[0] = ReduceSum(t.df, f0);
  if constexpr (kRows > 1) y[1] = ReduceSum(t.df, f1);
  if constexpr (kRows > 2) y[2] = ReduceSum(t.df, f2);
  if constexpr (kRows > 3) y[3] = ReduceSum(t.df, f3);
}

// Q4_0Rows (gemv-inl.h) over rows[0..kRows); activations in the pair layout.
template <size_t kRows>
HWY_INLINE void Q4_0Dots(const uint8_t* const* HWY_RESTRICT rows, size_t nblocks,
                         const int16_t* HWY_RESTRICT xq,
                         const float* HWY_RESTRICT sx,
                         const float* HWY_RESTRICT sums, float* HWY_RESTRICT y) {
  const Int32Tags t;
  const hn::ScalableTag<float> dfull;
  const size_t G = hn::Lanes(dfull);
  constexpr size_t kBB = sizeof(BlockQ4_0);
  const uint8_t* const r0 = rows[0];
  const uint8_t* const r1 = rows[1 % kRows];
  const uint8_t* const r2 = rows[2 % kRows];
  const uint8_t* const r3 = rows[3 % kRows];
  auto f0 = hn::Zero(t.df), f1 = hn::Zero(t.df), f2 = hn::Zero(t.df), f3 = hn::Zero(t.df);
  auto o0 = hn::Zero(dfull), o1 = hn::Zero(dfull), o2 = hn::Zero(dfull), o3 = hn::Zero(dfull);
  HWY_ALIGN float sw[2][kRows][kMaxFloatLanes];
  GroupScales<kRows>(dfull, rows, kBB, nblocks, 0, sx, sums, sw[0], o0, o1, o2, o3);
  size_t cur = 0;
  for (size_t g0 = 0; g0 < nblocks; g0 += G, cur ^= 1) {
    if (g0 + G < nblocks) {
      GroupScales<kRows>(dfull, rows, kBB, nblocks, g0 + G, sx, sums, sw[cur ^ 1], o0, o1,
                         o2, o3);
    }
    const size_t count = std::min(G, nblocks - g0);
    const float(*scales)[kMaxFloatLanes] = sw[cur];
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
        const size_t a = (g0 + b) * kBB + 2;
        Q4_0Pair(t, hn::LoadU(du8h, r0 + a), hn::LoadU(du8h, r0 + a + kBB), xlo, xhi,
                 first_half, scales[0] + b, f0);
        if constexpr (kRows > 1)
          Q4_0Pair(t, hn::LoadU(du8h, r1 + a), hn::LoadU(du8h, r1 + a + kBB), xlo, xhi,
                   first_half, scales[1 % kRows] + b, f1);
        if constexpr (kRows > 2)
          Q4_0Pair(t, hn::LoadU(du8h, r2 + a), hn::LoadU(du8h, r2 + a + kBB), xlo, xhi,
                   first_half, scales[2 % kRows] + b, f2);
        if constexpr (kRows > 3)
          Q4_0Pair(t, hn::LoadU(du8h, r3 + a), hn::LoadU(du8h, r3 + a + kBB), xlo, xhi,
                   first_half, scales[3 % kRows] + b, f3);
      }
      if (b < count) {  // the odd last block of the row: B is absent
        const int16_t* xb = xq + (g0 + b) * 32;
        const auto xlo = hn::Load(t.d16, xb);
        const auto xhi = hn::Load(t.d16, xb + 32);
        const size_t a = (g0 + b) * kBB + 2;
        const auto none = hn::Zero(du8h);
        Q4_0Pair(t, hn::LoadU(du8h, r0 + a), none, xlo, xhi, first_half, scales[0] + b, f0);
        if constexpr (kRows > 1)
          Q4_0Pair(t, hn::LoadU(du8h, r1 + a), none, xlo, xhi, first_half,
                   scales[1 % kRows] + b, f1);
        if constexpr (kRows > 2)
          Q4_0Pair(t, hn::LoadU(du8h, r2 + a), none, xlo, xhi, first_half,
                   scales[2 % kRows] + b, f2);
        if constexpr (kRows > 3)
          Q4_0Pair(t, hn::LoadU(du8h, r3 + a), none, xlo, xhi, first_half,
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
      const size_t a = block * kBB + 2;
      Q4_0Single(t, r0 + a, xlo, xhi, scales[0][b], f0);
      if constexpr (kRows > 1) Q4_0Single(t, r1 + a, xlo, xhi, scales[1 % kRows][b], f1);
      if constexpr (kRows > 2) Q4_0Single(t, r2 + a, xlo, xhi, scales[2 % kRows][b], f2);
      if constexpr (kRows > 3) Q4_0Single(t, r3 + a, xlo, xhi, scales[3 % kRows][b], f3);
    }
  }
  y[0] = ReduceSum(t.df, f0) - 8.0f * ReduceSum(dfull, o0);
  if constexpr (kRows > 1) y[1] = ReduceSum(t.df, f1) - 8.0f * ReduceSum(dfull, o1);
  if constexpr (kRows > 2) y[2] = ReduceSum(t.df, f2) - 8.0f * ReduceSum(dfull, o2);
  if constexpr (kRows > 3) y[3] = ReduceSum(t.df, f3) - 8.0f * ReduceSum(dfull, o3);
}

template <typename WT>
struct FloatDot {
  template <size_t kRows, class Input>
  static HWY_INLINE void Run(const uint8_t* const* rows, size_t cols, const Input& in,
                             float* y) {
    FloatDots<WT, kRows>(rows, cols, in.x(), y);
  }
};
struct Q8_0Dot {
  template <size_t kRows, class Input>
  static HWY_INLINE void Run(const uint8_t* const* rows, size_t cols, const Input& in,
                             float* y) {
    Q8_0Dots<kRows>(rows, cols / 32, in.quantized(), in.scales(), in.sums(), y);
  }
};
struct Q4_0Dot {
  template <size_t kRows, class Input>
  static HWY_INLINE void Run(const uint8_t* const* rows, size_t cols, const Input& in,
                             float* y) {
    Q4_0Dots<kRows>(rows, cols / 32, in.quantized(), in.scales(), in.sums(), y);
  }
};

// Groups of four rows, each multiplied with all n tokens before the next
// group is touched; the remaining rows one at a time.
template <class K, class Input>
HWY_INLINE void DotRowGroups(const uint8_t* const* rows, size_t count, size_t cols,
                             const Input* x, size_t n, float* out, size_t out_stride) {
  size_t k = 0;
  for (; k + 4 <= count; k += 4) {
    for (size_t t = 0; t < n; ++t) {
      K::template Run<4>(rows + k, cols, x[t], out + t * out_stride + k);
    }
  }
  for (; k < count; ++k) {
    for (size_t t = 0; t < n; ++t) {
      K::template Run<1>(rows + k, cols, x[t], out + t * out_stride + k);
    }
  }
}

// The caller has checked the type, cols and that every x[t] was prepared
// for them.
template <class Input>
HWY_INLINE void DotRowsImpl(TensorType type, const uint8_t* const* rows, size_t count,
                            size_t cols, const Input* x, size_t n, float* out,
                            size_t out_stride) {
  switch (type) {
    case TensorType::kF32:
      return DotRowGroups<FloatDot<float>>(rows, count, cols, x, n, out, out_stride);
    case TensorType::kF16:
      return DotRowGroups<FloatDot<hwy::float16_t>>(rows, count, cols, x, n, out, out_stride);
    case TensorType::kBF16:
      return DotRowGroups<FloatDot<hwy::bfloat16_t>>(rows, count, cols, x, n, out,
                                                     out_stride);
    case TensorType::kQ8_0:
      return DotRowGroups<Q8_0Dot>(rows, count, cols, x, n, out, out_stride);
    case TensorType::kQ4_0:
      return DotRowGroups<Q4_0Dot>(rows, count, cols, x, n, out, out_stride);
    default:
      return;
  }
}

// ------------------------------------------------------------ axpys

// The f16 scales of `count` (1..Lanes(df)) consecutive blocks of
// `block_bytes` starting at `blocks`, as f32 in out[0..count). Each lane
// gathers the 4 bytes at its block's start (the scale and two bytes of the
// block after it); lanes past `count` repeat the last block, so nothing past
// it is read.
template <class DF>
HWY_INLINE void HalfScales(DF df, const uint8_t* HWY_RESTRICT blocks, size_t block_bytes,
                           size_t count, float* HWY_RESTRICT out) {
  const hn::RebindToSigned<DF> di32;
  const hn::Rebind<uint16_t, DF> du16;
  const hn::Rebind<hwy::float16_t, DF> df16;
  const auto offsets = hn::Min(
      hn::Mul(hn::Iota(di32, 0), hn::Set(di32, static_cast<int32_t>(block_bytes))),
      hn::Set(di32, static_cast<int32_t>((count - 1) * block_bytes)));
  const auto raw = hn::GatherOffset(di32, reinterpret_cast<const int32_t*>(blocks), offsets);
  const auto bits = hn::DemoteTo(du16, hn::And(raw, hn::Set(di32, 0xFFFF)));
  hn::Store(PromoteHalf(df, hn::BitCast(df16, bits)), df, out);
}

// Scales of blocks g0.. (at most Lanes(dfull)) of each of the kRows rows.
template <size_t kRows, class DF>
HWY_INLINE void RowsHalfScales(DF dfull, const uint8_t* const* rows, size_t block_bytes,
                               size_t nblocks, size_t g0, float (*out)[kMaxFloatLanes]) {
  const size_t count = std::min(hn::Lanes(dfull), nblocks - g0);
  const size_t at = g0 * block_bytes;
  for (size_t r = 0; r < kRows; ++r) HalfScales(dfull, rows[r] + at, block_bytes, count, out[r]);
}

// y[0..cols) += a[r] * rows[r][..] for r < kRows, in that order.
template <typename WT, size_t kRows>
HWY_INLINE void FloatAxpys(const uint8_t* const* HWY_RESTRICT rows,
                           const float* HWY_RESTRICT a, size_t cols,
                           float* HWY_RESTRICT y) {
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(df);
  const WT* r0 = reinterpret_cast<const WT*>(rows[0]);
  const WT* r1 = reinterpret_cast<const WT*>(rows[1 % kRows]);
  const WT* r2 = reinterpret_cast<const WT*>(rows[2 % kRows]);
  const WT* r3 = reinterpret_cast<const WT*>(rows[3 % kRows]);
  const auto c0 = hn::Set(df, a[0]);
  const auto c1 = hn::Set(df, a[1 % kRows]);
  const auto c2 = hn::Set(df, a[2 % kRows]);
  const auto c3 = hn::Set(df, a[3 % kRows]);
  size_t i = 0;
  for (; i + N <= cols; i += N) {
    auto acc = hn::LoadU(df, y + i);
    acc = hn::MulAdd(c0, LoadAsFloat(df, r0 + i), acc);
    if constexpr (kRows > 1) acc = hn::MulAdd(c1, LoadAsFloat(df, r1 + i), acc);
    if constexpr (kRows > 2) acc = hn::MulAdd(c2, LoadAsFloat(df, r2 + i), acc);
    if constexpr (kRows > 3) acc = hn::MulAdd(c3, LoadAsFloat(df, r3 + i), acc);
    hn::StoreU(acc, df, y + i);
  }
  if (i < cols) {
    // Through stack copies: never touches memory past the rows or y.
    const size_t rest = cols - i;
    HWY_ALIGN float yt[HWY_MAX_BYTES / sizeof(float)] = {};
    HWY_ALIGN WT wt[HWY_MAX_BYTES / sizeof(float)] = {};
    std::memcpy(yt, y + i, rest * sizeof(float));
    auto acc = hn::Load(df, yt);
    std::memcpy(wt, r0 + i, rest * sizeof(WT));
    acc = hn::MulAdd(c0, LoadAsFloat(df, wt), acc);
    if constexpr (kRows > 1) {
      std::memcpy(wt, r1 + i, rest * sizeof(WT));
      acc = hn::MulAdd(c1, LoadAsFloat(df, wt), acc);
    }
    if constexpr (kRows > 2) {
      std::memcpy(wt, r2 + i, rest * sizeof(WT));
      acc = hn::MulAdd(c2, LoadAsFloat(df, wt), acc);
    }
    if constexpr (kRows > 3) {
      std::memcpy(wt, r3 + i, rest * sizeof(WT));
      acc = hn::MulAdd(c3, LoadAsFloat(df, wt), acc);
    }
    hn::Store(acc, df, yt);
    std::memcpy(y + i, yt, rest * sizeof(float));
  }
}

// Q8_0: the element is d * q (exact in f32), then one multiply-add. Block
// scales for the next group of blocks are gathered before the current
// group's arithmetic, as in the GEMV kernels.
template <size_t kRows>
HWY_INLINE void Q8_0Axpys(const uint8_t* const* HWY_RESTRICT rows,
                          const float* HWY_RESTRICT a, size_t nblocks,
                          float* HWY_RESTRICT y) {
  const hn::ScalableTag<float> dfull;
  const size_t G = hn::Lanes(dfull);
  const hn::CappedTag<float, 32> df;  // at most one block per vector
  const hn::Rebind<int32_t, decltype(df)> di32;
  const hn::Rebind<int8_t, decltype(df)> di8;
  const size_t N = hn::Lanes(df);
  constexpr size_t kBB = sizeof(BlockQ8_0);
  const uint8_t* const r0 = rows[0];
  const uint8_t* const r1 = rows[1 % kRows];
  const uint8_t* const r2 = rows[2 % kRows];
  const uint8_t* const r3 = rows[3 % kRows];
  const auto c0 = hn::Set(df, a[0]);
  const auto c1 = hn::Set(df, a[1 % kRows]);
  const auto c2 = hn::Set(df, a[2 % kRows]);
  const auto c3 = hn::Set(df, a[3 % kRows]);
  auto weight = [&](const uint8_t* p, float d) HWY_ATTR {
    const auto q = hn::ConvertTo(df, hn::PromoteTo(di32, hn::LoadU(di8, reinterpret_cast<const int8_t*>(p))));
    return hn::Mul(q, hn::Set(df, d));
  };
  HWY_ALIGN float sw[2][kRows][kMaxFloatLanes];
  RowsHalfScales<kRows>(dfull, rows, kBB, nblocks, 0, sw[0]);
  size_t cur = 0;
  for (size_t g0 = 0; g0 < nblocks; g0 += G, cur ^= 1) {
    if (g0 + G < nblocks) RowsHalfScales<kRows>(dfull, rows, kBB, nblocks, g0 + G, sw[cur ^ 1]);
    const size_t count = std::min(G, nblocks - g0);
    const float(*d)[kMaxFloatLanes] = sw[cur];
    for (size_t b = 0; b < count; ++b) {
      const size_t at = (g0 + b) * kBB + 2;
      float* yb = y + (g0 + b) * 32;
      for (size_t s = 0; s < 32; s += N) {
        auto acc = hn::LoadU(df, yb + s);
        acc = hn::MulAdd(c0, weight(r0 + at + s, d[0][b]), acc);
        if constexpr (kRows > 1) acc = hn::MulAdd(c1, weight(r1 + at + s, d[1 % kRows][b]), acc);
        if constexpr (kRows > 2) acc = hn::MulAdd(c2, weight(r2 + at + s, d[2 % kRows][b]), acc);
        if constexpr (kRows > 3) acc = hn::MulAdd(c3, weight(r3 + at + s, d[3 % kRows][b]), acc);
        hn::StoreU(acc, df, yb + s);
      }
    }
  }
}

// Q4_0: byte i of a block holds element i (low nibble) and i + 16 (high);
// the element is d * (q - 8), exact in f32.
template <size_t kRows>
HWY_INLINE void Q4_0Axpys(const uint8_t* const* HWY_RESTRICT rows,
                          const float* HWY_RESTRICT a, size_t nblocks,
                          float* HWY_RESTRICT y) {
  const hn::ScalableTag<float> dfull;
  const size_t G = hn::Lanes(dfull);
  const hn::CappedTag<float, 16> df;  // at most one block's 16 bytes
  const hn::Rebind<int32_t, decltype(df)> di32;
  const hn::Rebind<uint32_t, decltype(df)> du32;
  const hn::Rebind<uint8_t, decltype(df)> du8;
  const size_t N = hn::Lanes(df);
  constexpr size_t kBB = sizeof(BlockQ4_0);
  const uint8_t* const r0 = rows[0];
  const uint8_t* const r1 = rows[1 % kRows];
  const uint8_t* const r2 = rows[2 % kRows];
  const uint8_t* const r3 = rows[3 % kRows];
  const auto c0 = hn::Set(df, a[0]);
  const auto c1 = hn::Set(df, a[1 % kRows]);
  const auto c2 = hn::Set(df, a[2 % kRows]);
  const auto c3 = hn::Set(df, a[3 % kRows]);
  const auto mask = hn::Set(di32, 15);
  const auto eight = hn::Set(di32, 8);
  // Adds c * (this row's low and high elements) to lo and hi.
  auto step = [&](const uint8_t* p, float d, hn::Vec<decltype(df)> c,
                  hn::Vec<decltype(df)>& lo, hn::Vec<decltype(df)>& hi) HWY_ATTR {
    const auto bytes = hn::BitCast(di32, hn::PromoteTo(du32, hn::LoadU(du8, p)));
    const auto dv = hn::Set(df, d);
    const auto wlo = hn::Mul(hn::ConvertTo(df, hn::Sub(hn::And(bytes, mask), eight)), dv);
    const auto whi = hn::Mul(hn::ConvertTo(df, hn::Sub(hn::ShiftRight<4>(bytes), eight)), dv);
    lo = hn::MulAdd(c, wlo, lo);
    hi = hn::MulAdd(c, whi, hi);
  };
  HWY_ALIGN float sw[2][kRows][kMaxFloatLanes];
  RowsHalfScales<kRows>(dfull, rows, kBB, nblocks, 0, sw[0]);
  size_t cur = 0;
  for (size_t g0 = 0; g0 < nblocks; g0 += G, cur ^= 1) {
    if (g0 + G < nblocks) RowsHalfScales<kRows>(dfull, rows, kBB, nblocks, g0 + G, sw[cur ^ 1]);
    const size_t count = std::min(G, nblocks - g0);
    const float(*d)[kMaxFloatLanes] = sw[cur];
    for (size_t b = 0; b < count; ++b) {
      const size_t at = (g0 + b) * kBB + 2;
      float* yb = y + (g0 + b) * 32;
      for (size_t s = 0; s < 16; s += N) {
        auto lo = hn::LoadU(df, yb + s);
        auto hi = hn::LoadU(df, yb + 16 + s);
        step(r0 + at + s, d[0][b], c0, lo, hi);
        if constexpr (kRows > 1) step(r1 + at + s, d[1 % kRows][b], c1, lo, hi);
        if constexpr (kRows > 2) step(r2 + at + s, d[2 % kRows][b], c2, lo, hi);
        if constexpr (kRows > 3) step(r3 + at + s, d[3 % kRows][b], c3, lo, hi);
        hn::StoreU(lo, df, yb + s);
        hn::StoreU(hi, df, yb + 16 + s);
      }
    }
  }
}

template <typename WT>
struct FloatAxpy {
  template <size_t kRows>
  static HWY_INLINE void Run(const uint8_t* const* rows, const float* a, size_t cols,
                             float* y) {
    FloatAxpys<WT, kRows>(rows, a, cols, y);
  }
};
struct Q8_0Axpy {
  template <size_t kRows>
  static HWY_INLINE void Run(const uint8_t* const* rows, const float* a, size_t cols,
                             float* y) {
    Q8_0Axpys<kRows>(rows, a, cols / 32, y);
  }
};
struct Q4_0Axpy {
  template <size_t kRows>
  static HWY_INLINE void Run(const uint8_t* const* rows, const float* a, size_t cols,
                             float* y) {
    Q4_0Axpys<kRows>(rows, a, cols / 32, y);
  }
};

// One token: the rows with a nonzero coefficient, four at a time, in order.
template <class K>
HWY_INLINE void AxpyOneToken(const uint8_t* const* rows, size_t count, size_t cols,
                             const float* a, float* y) {
  const uint8_t* picked[4];
  float coeff[4];
  size_t m = 0;
  for (size_t k = 0; k < count; ++k) {
    if (a[k] == 0.0f) continue;
    picked[m] = rows[k];
    coeff[m] = a[k];
    if (++m == 4) {
      K::template Run<4>(picked, coeff, cols, y);
      m = 0;
    }
  }
  switch (m) {
    case 3:
      return K::template Run<3>(picked, coeff, cols, y);
    case 2:
      return K::template Run<2>(picked, coeff, cols, y);
    case 1:
      return K::template Run<1>(picked, coeff, cols, y);
    default:
      return;
  }
}

// Batches: rows per group and columns per tile of the dequantized buffer
// (8 x 512 f32 = 16 KiB, which stays in L1 while it is applied to every
// token). kTileCols is a whole number of blocks and of vectors on any target.
inline constexpr size_t kAxpyGroupRows = 8;
inline constexpr size_t kTileCols = 512;

// Elements [c0, c0 + len) of a row, dequantized exactly (the same values
// the one-token kernels compute on the fly). c0 and len are whole blocks.
HWY_INLINE void DequantizeSpan(TensorType type, const uint8_t* row, size_t c0, size_t len,
                               float* HWY_RESTRICT out) {
  switch (type) {
    case TensorType::kF32:
      std::memcpy(out, row + c0 * sizeof(float), len * sizeof(float));
      return;
    case TensorType::kF16:
      return DequantizeHalfRow<hwy::float16_t>(row + c0 * 2, len, out);
    case TensorType::kBF16:
      return DequantizeHalfRow<hwy::bfloat16_t>(row + c0 * 2, len, out);
    case TensorType::kQ8_0:
      return DequantizeQ8_0Row(row + c0 / 32 * sizeof(BlockQ8_0), len, out);
    case TensorType::kQ4_0:
      return DequantizeQ4_0Row(row + c0 / 32 * sizeof(BlockQ4_0), len, out);
    default:
      return;
  }
}

// y[0..len) += c[j] * w[j][0..len) for j < kM, in order. The w rows are
// tile rows (padded to kTileCols, so whole vectors may be loaded).
template <size_t kM>
HWY_INLINE void TileAxpys(const float* const* HWY_RESTRICT w, const float* HWY_RESTRICT c,
                          size_t len, float* HWY_RESTRICT y) {
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(df);
  size_t i = 0;
  for (; i + N <= len; i += N) {
    auto acc = hn::LoadU(df, y + i);
    for (size_t j = 0; j < kM; ++j) acc = hn::MulAdd(hn::Set(df, c[j]), hn::Load(df, w[j] + i), acc);
    hn::StoreU(acc, df, y + i);
  }
  if (i < len) {
    const size_t rest = len - i;
    HWY_ALIGN float yt[HWY_MAX_BYTES / sizeof(float)] = {};
    std::memcpy(yt, y + i, rest * sizeof(float));
    auto acc = hn::Load(df, yt);
    for (size_t j = 0; j < kM; ++j) acc = hn::MulAdd(hn::Set(df, c[j]), hn::Load(df, w[j] + i), acc);
    hn::Store(acc, df, yt);
    std::memcpy(y + i, yt, rest * sizeof(float));
  }
}

HWY_INLINE void TileAxpysN(size_t m, const float* const* w, const float* c, size_t len,
                           float* y) {
  static_assert(kAxpyGroupRows == 8);
  switch (m) {
    case 1: return TileAxpys<1>(w, c, len, y);
    case 2: return TileAxpys<2>(w, c, len, y);
    case 3: return TileAxpys<3>(w, c, len, y);
    case 4: return TileAxpys<4>(w, c, len, y);
    case 5: return TileAxpys<5>(w, c, len, y);
    case 6: return TileAxpys<6>(w, c, len, y);
    case 7: return TileAxpys<7>(w, c, len, y);
    case 8: return TileAxpys<8>(w, c, len, y);
    default: return;
  }
}

// n tokens: groups of up to kAxpyGroupRows rows that some token needs; per
// column tile, the group is dequantized once and applied to every token
// (skipping the rows whose coefficient is zero for that token).
HWY_INLINE void AxpyBatch(TensorType type, const uint8_t* const* rows, size_t count,
                          size_t cols, const float* a, size_t a_stride, size_t n,
                          float* y, size_t y_stride) {
  HWY_ALIGN float tile[kAxpyGroupRows][kTileCols];
  // Lanes past a short last tile are loaded but never stored; zero them
  // once so no uninitialised value is ever read.
  std::memset(tile, 0, sizeof(tile));
  size_t picked[kAxpyGroupRows];
  size_t k = 0;
  while (k < count) {
    size_t m = 0;
    for (; k < count && m < kAxpyGroupRows; ++k) {
      for (size_t t = 0; t < n; ++t) {
        if (a[t * a_stride + k] != 0.0f) {
          picked[m++] = k;
          break;
        }
      }
    }
    if (m == 0) break;
    for (size_t c0 = 0; c0 < cols; c0 += kTileCols) {
      const size_t len = std::min(kTileCols, cols - c0);
      for (size_t r = 0; r < m; ++r) DequantizeSpan(type, rows[picked[r]], c0, len, tile[r]);
      for (size_t t = 0; t < n; ++t) {
        const float* w[kAxpyGroupRows];
        float c[kAxpyGroupRows];
        size_t used = 0;
        for (size_t r = 0; r < m; ++r) {
          const float coeff = a[t * a_stride + picked[r]];
          if (coeff == 0.0f) continue;
          w[used] = tile[r];
          c[used++] = coeff;
        }
        if (used != 0) TileAxpysN(used, w, c, len, y + t * y_stride + c0);
      }
    }
  }
}

// The caller has checked the type and cols.
HWY_INLINE void AxpyRowsImpl(TensorType type, const uint8_t* const* rows, size_t count,
                             size_t cols, const float* a, size_t a_stride, size_t n,
                             float* y, size_t y_stride) {
  if (n > 1) return AxpyBatch(type, rows, count, cols, a, a_stride, n, y, y_stride);
  switch (type) {
    case TensorType::kF32:
      return AxpyOneToken<FloatAxpy<float>>(rows, count, cols, a, y);
    case TensorType::kF16:
      return AxpyOneToken<FloatAxpy<hwy::float16_t>>(rows, count, cols, a, y);
    case TensorType::kBF16:
      return AxpyOneToken<FloatAxpy<hwy::bfloat16_t>>(rows, count, cols, a, y);
    case TensorType::kQ8_0:
      return AxpyOneToken<Q8_0Axpy>(rows, count, cols, a, y);
    case TensorType::kQ4_0:
      return AxpyOneToken<Q4_0Axpy>(rows, count, cols, a, y);
    default:
      return;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::simd
HWY_AFTER_NAMESPACE();

#endif  // SPARROW_SIMD_GATHER_INL_H_ toggle
