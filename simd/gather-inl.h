// Per-target gather kernels (gather.h): dot products with, and weighted sums
// of, rows addressed by pointer.
//
// DotRows runs GEMV's own row kernels (gemv-inl.h: FloatRows, Q8_0Rows,
// Q4_0Rows), which take their rows as a pointer array and a prefetch
// policy: the GEMV passes rows of one matrix, DotRows the rows of its list
// with the Prefetcher below. So each result is bit-identical to Gemv's
// (gather_test.cc checks it). For a batch, each group of four rows is
// multiplied with every token before the next group: the group is read from
// DRAM once, then from L1/L2.
//
// AxpyRows adds the terms to y one multiply-add at a time, in row order: for
// float rows a * w; for Q8_0 (a * d) * q with the product a * d rounded to
// f32 once per block and row, so that the per-element work is one convert
// and one multiply-add; for Q4_0 and Q4_0S the same with q the nibble
// minus 8 (exact in f32). With one token the
// rows are converted on the fly, four at a time; with a batch, a column
// tile of up to eight rows is converted into an L1 buffer once and applied
// to every token. Both paths perform the same operations on each y element,
// so a token's result does not depend on the batch it came in.
//
// Prefetching: the rows of a gathered list start at unrelated addresses, so
// the hardware prefetchers only pick a row up after a few misses in it, and
// the kernels' arithmetic then waits on memory instead of overlapping with
// it. Each kernel therefore prefetches kPrefetchAhead bytes ahead in each of
// its rows, running on near the end into the rows of a later group: the
// next one, or for short rows one further on (LeadGroups).

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
#include <utility>

#include <hwy/highway.h>

#include "base/aligned_buffer.h"
#include "base/tensor_type.h"
#include "simd/gemv-inl.h"
#include "simd/gemv.h"
#include "simd/quant_blocks.h"
#include "simd/quantize-inl.h"
#include "simd/row_prefetch.h"

HWY_BEFORE_NAMESPACE();
namespace sparrow::simd {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// ------------------------------------------------------------ prefetch

// The distance (kPrefetchAhead) and where lines go: row_prefetch.h.

// The rows that follow the current group: prefetching runs on into them.
struct NextRows {
  const uint8_t* const* rows = nullptr;
  size_t count = 0;  // at most 4
};

// Prefetches bytes [begin, end) of each of g's rows: the groups a kernel
// reads before its prefetches, LeadGroups ahead, reach them.
HWY_INLINE void PrefetchRows(const NextRows& g, size_t begin, size_t end, bool into_l2) {
  for (size_t r = 0; r < g.count; ++r) {
    for (size_t b = begin; b < end; b += 64) PrefetchLine(g.rows[r] + b, into_l2);
  }
}

// Prefetches, once per 64-byte step, each of the kRows rows a fixed
// distance ahead of the position the kernel reports; positions past a row's
// end map to the start of the rows it is given as next (the group
// LeadGroups ahead). Into L1, or into L2 where
// the rows have more bytes in flight than L1's miss buffers hold
// (row_prefetch.h).
enum class PrefetchFrom {
  kStart,    // nothing of these rows was prefetched yet
  kCovered,  // the previous group prefetched their first `ahead` bytes
  kNone,     // do not prefetch (the rows are in cache already)
};

// Whether a kernel's own rows are also prefetched into L1, kL1NearBytes
// ahead of where it reads, where the distance takes them into L2 only: the
// lines it is about to read then come from L1, not L2. DotRows does.
// Measured on a 2 vCPU Emerald Rapids VM (AVX3_DL), one thread, four
// alternated rounds of `gather_bench --types q4_0s,q8_0,f16 --shapes
// 2048x5632,4096x11008 --parts 1 --kernels dot,axpy --clock cpu` against
// the build before, % of the four-stream probe: DotRows over a quarter of
// the rows in order, Q4_0S 2048 wide 60-71 -> 69-76, 4096 wide 70-72 ->
// 81-84 (a round whose probe fell left out), Q8_0 58-66 -> 66-75 (and one
// round at 45) and 69-75 -> 80-82; over every row, Q4_0S 79-91 -> 89-93
// and 88-93 -> 92-95, F16 2048 wide 85-95 -> 96-98. The float AxpyRows
// gained over Q4_0S and F16 rows (Q4_0S 2048 wide, a quarter 50-55 ->
// 58-60) but lost over Q8_0 rows (4096 wide, a quarter in order 73-77 ->
// 64-73), so it keeps one level. Rows short enough to be prefetched into
// L1 (row_prefetch.h) have no second level: their distance is within L1's
// reach already.
enum class NearLines { kNo, kIntoL1 };

template <size_t kRows>
class Prefetcher {
 public:
  Prefetcher(const uint8_t* const* rows, NextRows next, size_t row_bytes, PrefetchFrom from,
             NearLines near = NearLines::kNo)
      : Prefetcher(rows, next, 0, row_bytes, from, near) {}
  // Only bytes [begin, end) of each row: the stream a kernel reads when it
  // covers part of the rows' columns (AxpyRowColumns).
  Prefetcher(const uint8_t* const* rows, NextRows next, size_t begin, size_t end, PrefetchFrom from,
             NearLines near = NearLines::kNo)
      : rows_(rows),
        next_(next),
        begin_(begin),
        end_(end),
        ahead_(std::min(kPrefetchAhead, end - begin)),
        into_l2_(PrefetchIntoL2(kRows, ahead_)),
        done_(from == PrefetchFrom::kStart     ? begin
              : from == PrefetchFrom::kCovered ? begin + ahead_
                                               : ~size_t{0} / 2),
        near_(from != PrefetchFrom::kNone && into_l2_ && near == NearLines::kIntoL1 ? begin : end) {
  }

  // Prefetches everything before offset `pos` + the distance (and with
  // NearLines::kIntoL1, the rows' lines before `pos` + kL1NearBytes into
  // L1).
  HWY_INLINE void Upto(size_t pos) {
    if (near_ < end_) {
      for (const size_t limit = std::min(pos + kL1NearBytes, end_); near_ < limit; near_ += 64) {
        for (size_t r = 0; r < kRows; ++r) hwy::Prefetch(rows_[r] + near_);
      }
    }
    for (const size_t limit = pos + ahead_; done_ < limit; done_ += 64) {
      if (done_ < end_) {
        for (size_t r = 0; r < kRows; ++r) PrefetchLine(rows_[r] + done_, into_l2_);
      } else if (done_ - end_ < end_ - begin_) {
        const size_t at = begin_ + (done_ - end_);
        for (size_t r = 0; r < next_.count; ++r) PrefetchLine(next_.rows[r] + at, into_l2_);
      }
    }
  }

  // Prefetches bytes [offset, offset + bytes) of the next group's rows.
  HWY_INLINE void NextRegion(size_t offset, size_t bytes) const {
    for (size_t b = 0; b < bytes; b += 64) {
      for (size_t r = 0; r < next_.count; ++r) {
        PrefetchLine(next_.rows[r] + offset + b, into_l2_);
      }
    }
  }

 private:
  const uint8_t* const* rows_;
  NextRows next_;
  size_t begin_;
  size_t end_;
  size_t ahead_;
  bool into_l2_;  // row_prefetch.h
  size_t done_;
  size_t near_;  // the rows' bytes prefetched into L1 (end_: none to do)
};

// ------------------------------------------------------------ dots

// kHardwareStreams: whether rows read in order are left to the hardware
// prefetchers where CpuStreamsRowsItself (DotRowGroups). Zen 4 VM, one
// thread, `gather_bench --kernels dot --shapes 2048x5632`, rows in order,
// alternated: Q4_0S 20.2-20.8 -> 27.8-28.0 GB/s, F16 22.5-23.0 -> 30.1;
// Q8_0's kernel fell 16.0-17.0 -> 11.5-11.6 without its prefetches, and
// plain Q4_0's 13.8-14.1 -> 12.4, so they keep them.
template <typename WT>
struct FloatDot {
  static constexpr bool kHardwareStreams = true;
  static constexpr size_t kTokens = 1;
  static size_t RowBytes(size_t cols) { return cols * sizeof(WT); }
  template <size_t kRows, class Input>
  static HWY_INLINE void Run(const uint8_t* const* rows, size_t cols, const Input& in,
                             float* y, size_t y_stride, Prefetcher<kRows>& pf) {
    FloatRows<WT, kRows>(rows, cols, in.x(), y, y_stride, pf);
  }
};
struct Q8_0Dot {
  // The int16 kernel fell 16.0-17.0 -> 11.5-11.6 GB/s without its
  // prefetches; the int8 one reads whole consecutive 64-byte loads.
  static constexpr bool kHardwareStreams = kQ8_0Int8;
  static size_t RowBytes(size_t cols) { return cols / 32 * sizeof(BlockQ8_0); }
  // Several tokens per widened block, as the GEMV's (Q8_0Kernel).
  static constexpr size_t kTokens = Q8_0Kernel::kTokens;
#if !HWY_HAVE_SCALABLE
  template <size_t kRows, class Input>
  static HWY_INLINE void RunTokens(const uint8_t* const* rows, size_t cols, const Input* in,
                                   float* y, size_t token_stride, size_t y_stride,
                                   Prefetcher<kRows>& pf) {
    float* out[kTokens];
    for (size_t i = 0; i < kTokens; ++i) out[i] = y + i * token_stride;
    Q8_0RowsTokens<kRows, kTokens>(rows, cols / 32, in, out, y_stride, pf);
  }
#endif
  template <size_t kRows, class Input>
  static HWY_INLINE void Run(const uint8_t* const* rows, size_t cols, const Input& in,
                             float* y, size_t y_stride, Prefetcher<kRows>& pf) {
    Q8_0Rows<kRows>(rows, cols / 32, in.quantized(), in.scales(), in.sums(), y, y_stride, pf);
  }
};
template <bool kSplit>  // Q4_0S rows
struct Q4_0Dot {
  // The pair form of plain Q4_0 fell 13.8-14.1 -> 12.4 without its
  // prefetches; the quad forms read whole consecutive 64-byte loads.
  static constexpr bool kHardwareStreams = kSplit || kQ4_0PlainQuads;
  static constexpr size_t kTokens = 1;
  static size_t RowBytes(size_t cols) { return cols / 32 * sizeof(BlockQ4_0); }
  template <size_t kRows, class Input>
  static HWY_INLINE void Run(const uint8_t* const* rows, size_t cols, const Input& in,
                             float* y, size_t y_stride, Prefetcher<kRows>& pf) {
    Q4_0Rows<kRows, kSplit>(rows, cols / 32, in.quantized(), in.scales(), in.sums(), y,
                            y_stride, pf);
  }
};

// Groups of four rows, each multiplied with all n tokens before the next
// group is touched (prefetching only during the first token's pass, when
// the rows come from memory); the remaining rows one at a time. Group i
// takes the list's entries i, i + q, i + 2q and i + 3q (q = count / 4), as
// the GEMV takes its rows (ForRowGroups): a list in ascending address
// order is then four streams that each run on through consecutive
// groups, which the hardware prefetchers follow (like the stream probe's
// four streams), instead of four short rows that end together.
template <class K, class Input>
HWY_INLINE void DotRowGroups(const uint8_t* const* rows, size_t count, size_t cols,
                             const Input* x, size_t n, float* out, size_t out_stride) {
  const size_t row_bytes = K::RowBytes(cols);
  auto From = [](size_t t, size_t i) {
    return t > 0 ? PrefetchFrom::kNone : i > 0 ? PrefetchFrom::kCovered : PrefetchFrom::kStart;
  };
  const size_t q = count / 4;
  const size_t rest = count - 4 * q;  // rows [4q, count), one at a time
  // Where the hardware follows plain streams itself (CpuStreamsRowsItself),
  // a group whose four streams run on into the next group's rows with no
  // gap (a cache read in order) is not prefetched in software.
  const bool streams_itself = K::kHardwareStreams && CpuStreamsRowsItself();
  const auto continues = [&](const uint8_t* const* cur, const NextRows& next) {
    if (!streams_itself || next.count != 4) return false;
    for (size_t r = 0; r < 4; ++r) {
      if (next.rows[r] != cur[r] + row_bytes) return false;
    }
    return true;
  };
  // Group j's rows (j <= q; group q is the rest), kept in ring[j % kRing]
  // while the prefetches run `lead` groups ahead of the one being read.
  const size_t lead = LeadGroups(row_bytes);
  constexpr size_t kRing = kMaxLeadGroups + 1;
  const uint8_t* ring[kRing][4];
  const auto group = [&](size_t j) {
    NextRows g;
    if (j < q) {
      for (size_t r = 0; r < 4; ++r) ring[j % kRing][r] = rows[j + r * q];
      g.rows = ring[j % kRing];
      g.count = 4;
    } else if (j == q) {
      g.rows = rows + 4 * q;
      g.count = std::min<size_t>(4, rest);
    }
    return g;
  };
  // The groups between the first and the one its prefetches run into.
  if (q > 0 && n > 0) {
    for (size_t j = 1; j < lead && j <= q; ++j) {
      PrefetchRows(group(j), 0, row_bytes, PrefetchIntoL2(4, row_bytes));
    }
  }
  for (size_t i = 0; i < q; ++i) {
    const uint8_t* const* cur = group(i).rows;
    const NextRows ahead = group(i + lead);
    const bool hardware = continues(cur, group(i + 1));
    size_t t = 0;
    if constexpr (K::kTokens > 1) {
      for (; t + K::kTokens <= n; t += K::kTokens) {
        Prefetcher<4> pf(cur, ahead, row_bytes, hardware ? PrefetchFrom::kNone : From(t, i),
                         NearLines::kIntoL1);
        K::template RunTokens<4>(cur, cols, x + t, out + t * out_stride + i, out_stride, q, pf);
      }
    }
    for (; t < n; ++t) {
      Prefetcher<4> pf(cur, ahead, row_bytes, hardware ? PrefetchFrom::kNone : From(t, i),
                       NearLines::kIntoL1);
      K::template Run<4>(cur, cols, x[t], out + t * out_stride + i, q, pf);
    }
  }
  for (size_t k = 4 * q; k < count; ++k) {
    NextRows next;
    next.rows = rows + k + 1;
    next.count = k + 1 < count ? 1 : 0;
    for (size_t t = 0; t < n; ++t) {
      Prefetcher<1> pf(rows + k, next, row_bytes, From(t, k), NearLines::kIntoL1);
      K::template Run<1>(rows + k, cols, x[t], out + t * out_stride + k, 1, pf);
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
      return DotRowGroups<Q4_0Dot<false>>(rows, count, cols, x, n, out, out_stride);
    case TensorType::kQ4_0S:
      return DotRowGroups<Q4_0Dot<true>>(rows, count, cols, x, n, out, out_stride);
    default:
      return;
  }
}

// ------------------------------------------------------------ axpys

// out[i] = coeff * (the f16 scale of block i) for the `count` (1..Lanes(df))
// consecutive blocks of `block_bytes` starting at `blocks` (2: a Q4_0S
// row's array of scales); lanes past `count` repeat the last block, so
// nothing past it is read.
template <class DF>
HWY_INLINE void ScaledHalfScales(DF df, const uint8_t* HWY_RESTRICT blocks,
                                 size_t block_bytes, size_t count, float coeff,
                                 float* HWY_RESTRICT out) {
  if (block_bytes == 2) {  // Q4_0S: the scales are one f16 array
    hn::StoreU(hn::Mul(LoadHalves(df, blocks, count), hn::Set(df, coeff)), df, out);
    return;
  }
#ifdef SPARROW_PERMUTED_SCALES
  // Loads and permutes instead of the 16-lane gather (gemv-inl.h says
  // why). Measured on a 2 vCPU Cascade Lake VM, one thread, three
  // alternated rounds, `gather_bench --types q4_0,q8_0 --shapes 2048x512
  // --parts 1 --kernels axpy --rotate-mib 1 --clock cpu` (rows in L2):
  // Q4_0 5.8-6.1 -> 6.6-8.7 GB/s, Q8_0 9.6-9.8 -> 11.9-12.6.
  hn::Vec<DF> d;
  if (count == 16 && HalfScales16For(df, blocks, block_bytes, d)) {
    hn::StoreU(hn::Mul(d, hn::Set(df, coeff)), df, out);
    return;
  }
#endif
  // As the GEMV's kernels take them (WeightBlockScales): on AVX2 from word
  // blends, not vpgatherdd (microcoded on AMD's cores). Zen 3 VM, one
  // thread, three alternated rounds of `gather_bench --types q8_0 --kernels
  // axpy --threads 1 --clock cpu`, every row in order: 2048x5632 6.6-8.2 ->
  // 8.1-10.4 GB/s, 768x3072 5.2-6.6 -> 6.4-7.6; in L2 (`--shapes
  // 2048x512,768x1024 --parts 1 --rotate-mib 2`) 8.5-11.5 -> 9.7-16.5.
  hn::StoreU(hn::Mul(WeightBlockScales(df, blocks, block_bytes, count), hn::Set(df, coeff)), df,
             out);
}

// s[r][b] = a[r] * (scale of block g0 + b of row r) for the blocks g0..
// (at most Lanes(dfull)) of each of the kRows rows, whose block 0's scale is
// at byte `base` and whose blocks' scales are `block_bytes` apart.
template <size_t kRows, class DF>
HWY_INLINE void CoeffScales(DF dfull, const uint8_t* const* rows, const float* a,
                            size_t block_bytes, size_t base, size_t nblocks, size_t g0,
                            float (*s)[kMaxFloatLanes]) {
  const size_t count = std::min(hn::Lanes(dfull), nblocks - g0);
  const size_t at = base + g0 * block_bytes;
  for (size_t r = 0; r < kRows; ++r) {
    ScaledHalfScales(dfull, rows[r] + at, block_bytes, count, a[r], s[r]);
  }
}

// The columns an axpy kernel covers: [first, first + width) of rows that
// hold row_cols elements (first and width whole blocks of the type) and
// start `offset` bytes after the row pointers (a record's later part).
struct ColumnWindow {
  size_t first;
  size_t width;
  size_t row_cols;
  size_t offset = 0;
};

// y[0..width) += a[r] * rows[r][first..] for r < kRows, in that order.
template <typename WT, size_t kRows>
HWY_INLINE void FloatAxpys(const uint8_t* const* HWY_RESTRICT rows, const float* HWY_RESTRICT a,
                           ColumnWindow window, float* HWY_RESTRICT y, Prefetcher<kRows>& pf) {
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(df);
  const size_t cols = window.width;
  const size_t first = window.first;
  const size_t offset = window.offset;
  const WT* r0 = reinterpret_cast<const WT*>(rows[0] + offset) + first;
  const WT* r1 = reinterpret_cast<const WT*>(rows[1 % kRows] + offset) + first;
  const WT* r2 = reinterpret_cast<const WT*>(rows[2 % kRows] + offset) + first;
  const WT* r3 = reinterpret_cast<const WT*>(rows[3 % kRows] + offset) + first;
  const auto c0 = hn::Set(df, a[0]);
  const auto c1 = hn::Set(df, a[1 % kRows]);
  const auto c2 = hn::Set(df, a[2 % kRows]);
  const auto c3 = hn::Set(df, a[3 % kRows]);
  size_t i = 0;
  for (; i + N <= cols; i += N) {
    pf.Upto(offset + (first + i) * sizeof(WT));
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

// Q8_0: y += (a * d) * q, one convert and one multiply-add per element and
// row. The next group of blocks' scales are gathered before the current
// group's arithmetic, as in the GEMV kernels.
template <size_t kRows>
HWY_INLINE void Q8_0Axpys(const uint8_t* const* HWY_RESTRICT rows, const float* HWY_RESTRICT a,
                          ColumnWindow window, float* HWY_RESTRICT y, Prefetcher<kRows>& pf) {
  const size_t nblocks = window.width / 32;
  const hn::ScalableTag<float> dfull;
  const size_t G = hn::Lanes(dfull);
  const hn::CappedTag<float, 32> df;  // at most one block per vector
  const hn::Rebind<int32_t, decltype(df)> di32;
  const hn::Rebind<int8_t, decltype(df)> di8;
  const size_t N = hn::Lanes(df);
  constexpr size_t kBB = sizeof(BlockQ8_0);
  const int8_t* const r0 = reinterpret_cast<const int8_t*>(rows[0]);
  const int8_t* const r1 = reinterpret_cast<const int8_t*>(rows[1 % kRows]);
  const int8_t* const r2 = reinterpret_cast<const int8_t*>(rows[2 % kRows]);
  const int8_t* const r3 = reinterpret_cast<const int8_t*>(rows[3 % kRows]);
  auto q = [&](const int8_t* p) HWY_ATTR {
    return hn::ConvertTo(df, hn::PromoteTo(di32, hn::LoadU(di8, p)));
  };
  const size_t base = window.offset + window.first / 32 * kBB;  // the window's first block
  HWY_ALIGN float sw[2][kRows][kMaxFloatLanes];
  CoeffScales<kRows>(dfull, rows, a, kBB, base, nblocks, 0, sw[0]);
  size_t cur = 0;
  for (size_t g0 = 0; g0 < nblocks; g0 += G, cur ^= 1) {
    if (g0 + G < nblocks) {
      CoeffScales<kRows>(dfull, rows, a, kBB, base, nblocks, g0 + G, sw[cur ^ 1]);
    }
    const size_t count = std::min(G, nblocks - g0);
    const float(*s)[kMaxFloatLanes] = sw[cur];
    for (size_t b = 0; b < count; ++b) {
      const size_t at = base + (g0 + b) * kBB + 2;
      pf.Upto(at);
      float* yb = y + (g0 + b) * 32;
      for (size_t e = 0; e < 32; e += N) {
        auto acc = hn::LoadU(df, yb + e);
        acc = hn::MulAdd(hn::Set(df, s[0][b]), q(r0 + at + e), acc);
        if constexpr (kRows > 1) acc = hn::MulAdd(hn::Set(df, s[1 % kRows][b]), q(r1 + at + e), acc);
        if constexpr (kRows > 2) acc = hn::MulAdd(hn::Set(df, s[2 % kRows][b]), q(r2 + at + e), acc);
        if constexpr (kRows > 3) acc = hn::MulAdd(hn::Set(df, s[3 % kRows][b]), q(r3 + at + e), acc);
        hn::StoreU(acc, df, yb + e);
      }
    }
  }
}

// Q4_0S chunks (Q4_0SChunkAxpys, on targets with SPARROW_Q4_0_NIBBLE_TABLE).
inline constexpr size_t kChunkBlocks = 4;
inline constexpr size_t kChunkElems = kChunkBlocks * 32;

// Q4_0: byte i of a block holds nibbles for elements i (low) and i + 16
// (high); y += (a * d) * (nibble - 8), one multiply-add per row as for the
// other types. (Applying the -8 once per block at the end, from the sum of
// the rows' a * d, saved two integer subtractions per 16 elements but made
// the result depend on how a set was split into calls.)
#undef SPARROW_Q4_0_NIBBLE_TABLE  // per target (this file is included once per target)
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
#define SPARROW_Q4_0_NIBBLE_TABLE 1
// The 16 values of (nibble - 8) as floats, picked by vpermps, which reads
// only the low four bits of each index lane: the low nibble of a byte
// needs no mask, and one permute replaces the mask, subtraction and
// conversion (Highway 1.0.3's TableLookupLanes asks for indices below the
// lane count, so the raw instruction). Same values, so the same sums.
// Measured on Sapphire Rapids (2 vCPU VM), one thread, alternating,
// `gather_bench --types q4_0 --shapes 2048x512 --parts 1 --kernels axpy
// --rotate-mib 1 --clock cpu` (rows in L2): 8.4-8.6 -> 11.0 GB/s, and
// 768-element rows 8.0-8.4 -> 10.0-10.8.
HWY_INLINE __m512 Q4_0NibbleTable() {
  return _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
}
// Bytes (zero-extended to 32-bit lanes) -> (low nibble - 8), (high - 8).
HWY_INLINE __m512 Q4_0LowMinus8(__m512i bytes, __m512 table) {
  return _mm512_permutexvar_ps(bytes, table);
}
HWY_INLINE __m512 Q4_0HighMinus8(__m512i bytes, __m512 table) {
  return _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), table);
}
HWY_INLINE __m512i Q4_0Bytes16(const uint8_t* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Q4_0S rows in chunks of four blocks (128 elements, 64 nibble bytes per
// row), added into a copy of y in another order. Loaded as sixteen 32-bit
// lanes, lane i of a chunk holds bytes 4(i % 4).. of block i / 4; shifted
// right by 4n, its low four bits are nibble n of those bytes, which is all
// vpermps reads. So vector n of a chunk, lane i, is element
// 32 (i / 4) + 4 (i % 4) + n / 2 + 16 (n % 2) of the chunk ("chunk order"),
// and a chunk takes one load, seven shifts and eight
// permutes per row instead of four widening loads, four shifts and eight
// permutes. Every element gets the same multiply-adds in the same order,
// so the same bits. y is put into this order once per call and back after
// (PermuteChunk), which pays from a few rows on (kMinPermutedRows).
// Measured on a 2 vCPU Zen 4 VM (AVX3_DL), one thread, alternating:
// `gather_bench --types q4_0s --shapes 2048x512 --parts 1 --kernels axpy
// --rotate-mib 1 --clock cpu` (rows in L2) 12.6 -> 16.1 GB/s; 2048x5632, a
// random quarter of the rows from DRAM, 8.0-8.1 -> 9.0; all rows in order
// from DRAM 11 either way (bound by the misses in flight, not the kernel).
// 125M-shaped synthetic Q4_0 bundles, `bench -p 0 -n 64 -t 1`: neuron
// layout 176-191 -> 196-204 tok/s, dip layout (dense policy) 136-145 ->
// 159-163.

// The eight vectors of a chunk, natural order -> chunk order
// (kToChunk) or back. For h = n % 2 and m = n / 2, vector n's lanes 4l..4l+3
// are lanes m, m + 4, m + 8, m + 12 of natural vector 2l + h: a 4x4
// transpose inside each vector (vpermps) and one of the 128-bit lane groups
// across four vectors (vshuff32x4), both their own inverses.
template <bool kToChunk>
HWY_INLINE void PermuteChunk(const float* HWY_RESTRICT from, float* HWY_RESTRICT to) {
  const __m512i transpose = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  auto lane_groups = [](const __m512 in[4], __m512 out[4]) HWY_ATTR {
    const __m512 x0 = _mm512_shuffle_f32x4(in[0], in[1], 0x44);
    const __m512 x1 = _mm512_shuffle_f32x4(in[0], in[1], 0xEE);
    const __m512 x2 = _mm512_shuffle_f32x4(in[2], in[3], 0x44);
    const __m512 x3 = _mm512_shuffle_f32x4(in[2], in[3], 0xEE);
    out[0] = _mm512_shuffle_f32x4(x0, x2, 0x88);
    out[1] = _mm512_shuffle_f32x4(x0, x2, 0xDD);
    out[2] = _mm512_shuffle_f32x4(x1, x3, 0x88);
    out[3] = _mm512_shuffle_f32x4(x1, x3, 0xDD);
  };
  for (size_t h = 0; h < 2; ++h) {
    __m512 in[4], out[4];
    for (size_t k = 0; k < 4; ++k) in[k] = _mm512_loadu_ps(from + 16 * (2 * k + h));
    if constexpr (kToChunk) {
      for (size_t k = 0; k < 4; ++k) in[k] = _mm512_permutexvar_ps(transpose, in[k]);
      lane_groups(in, out);
    } else {
      lane_groups(in, out);
      for (size_t k = 0; k < 4; ++k) out[k] = _mm512_permutexvar_ps(transpose, out[k]);
    }
    for (size_t k = 0; k < 4; ++k) _mm512_storeu_ps(to + 16 * (2 * k + h), out[k]);
  }
}

// Chunk c of the window: the kRows rows' blocks 4c..4c+3 (window blocks,
// b0 the window's first) added into the chunk's vectors at `chunk`; s[r]
// holds the rows' a * d for the sixteen blocks from 16 (c / 4).
template <size_t kRows>
HWY_INLINE void Q4_0SChunkAxpys(const uint8_t* const* HWY_RESTRICT rows,
                                const float (*HWY_RESTRICT s)[kMaxFloatLanes],
                                const Q4_0Layout& layout, size_t b0, size_t c,
                                float* HWY_RESTRICT chunk) {
  const __m512 table = Q4_0NibbleTable();
  // Lane i takes the scale of block i / 4 of the chunk.
  const __m512i scale_at = _mm512_add_epi32(
      _mm512_set1_epi32(static_cast<int>(4 * (c % 4))),
      _mm512_srli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                        2));
  __m512 acc[8];
  for (size_t n = 0; n < 8; ++n) acc[n] = _mm512_loadu_ps(chunk + 16 * n);
  const size_t at = layout.nibbles_at + (b0 + kChunkBlocks * c) * layout.nibble_stride;
  for (size_t r = 0; r < kRows; ++r) {
    const __m512i x = _mm512_loadu_si512(rows[r] + at);
    const __m512 sv = _mm512_permutexvar_ps(scale_at, _mm512_load_ps(s[r]));
    acc[0] = _mm512_fmadd_ps(sv, _mm512_permutexvar_ps(x, table), acc[0]);
    acc[1] = _mm512_fmadd_ps(sv, _mm512_permutexvar_ps(_mm512_srli_epi32(x, 4), table), acc[1]);
    acc[2] = _mm512_fmadd_ps(sv, _mm512_permutexvar_ps(_mm512_srli_epi32(x, 8), table), acc[2]);
    acc[3] = _mm512_fmadd_ps(sv, _mm512_permutexvar_ps(_mm512_srli_epi32(x, 12), table), acc[3]);
    acc[4] = _mm512_fmadd_ps(sv, _mm512_permutexvar_ps(_mm512_srli_epi32(x, 16), table), acc[4]);
    acc[5] = _mm512_fmadd_ps(sv, _mm512_permutexvar_ps(_mm512_srli_epi32(x, 20), table), acc[5]);
    acc[6] = _mm512_fmadd_ps(sv, _mm512_permutexvar_ps(_mm512_srli_epi32(x, 24), table), acc[6]);
    acc[7] = _mm512_fmadd_ps(sv, _mm512_permutexvar_ps(_mm512_srli_epi32(x, 28), table), acc[7]);
  }
  for (size_t n = 0; n < 8; ++n) _mm512_storeu_ps(chunk + 16 * n, acc[n]);
}
#endif

// Rows with a nonzero coefficient from which a call's reorderings of y pay.
inline constexpr size_t kMinPermutedRows = 16;

// kSplit: Q4_0S rows.
// chunks: null, or the window's whole chunks of four blocks in
// chunk order (Q4_0S on AVX-512: Q4_0SChunkAxpys); the blocks past
// them are added to y.
template <size_t kRows, bool kSplit>
HWY_INLINE void Q4_0Axpys(const uint8_t* const* HWY_RESTRICT rows, const float* HWY_RESTRICT a,
                          ColumnWindow window, float* HWY_RESTRICT y, float* HWY_RESTRICT chunks,
                          Prefetcher<kRows>& pf) {
  const size_t nblocks = window.width / 32;
  const hn::ScalableTag<float> dfull;
  const size_t G = hn::Lanes(dfull);
  const hn::CappedTag<float, 16> df;  // at most one block's 16 bytes
  const hn::Rebind<int32_t, decltype(df)> di32;
  const hn::Rebind<uint32_t, decltype(df)> du32;
  const hn::Rebind<uint8_t, decltype(df)> du8;
  const size_t N = hn::Lanes(df);
  // Offsets from the rows' own starts (window.offset bytes in).
  Q4_0Layout layout = Q4_0Layout::For(kSplit, window.row_cols / 32);
  layout.nibbles_at += window.offset;
  const size_t b0 = window.first / 32;  // the window's first block
  const uint8_t* const r0 = rows[0];
  const uint8_t* const r1 = rows[1 % kRows];
  const uint8_t* const r2 = rows[2 % kRows];
  const uint8_t* const r3 = rows[3 % kRows];
  const auto mask = hn::Set(di32, 15);
  const auto eight = hn::Set(di32, 8);
  // Adds s * (this row's low and high nibbles, minus 8) to lo and hi.
#ifdef SPARROW_Q4_0_NIBBLE_TABLE
  const __m512 table = Q4_0NibbleTable();
  (void)mask;
  (void)eight;
  auto step = [&](const uint8_t* p, float s, hn::Vec<decltype(df)>& lo,
                  hn::Vec<decltype(df)>& hi) HWY_ATTR {
    const __m512i bytes = Q4_0Bytes16(p);
    const __m512 sv = _mm512_set1_ps(s);
    lo.raw = _mm512_fmadd_ps(sv, Q4_0LowMinus8(bytes, table), lo.raw);
    hi.raw = _mm512_fmadd_ps(sv, Q4_0HighMinus8(bytes, table), hi.raw);
  };
#else
  auto step = [&](const uint8_t* p, float s, hn::Vec<decltype(df)>& lo,
                  hn::Vec<decltype(df)>& hi) HWY_ATTR {
    const auto bytes = hn::BitCast(di32, hn::PromoteTo(du32, hn::LoadU(du8, p)));
    const auto sv = hn::Set(df, s);
    lo = hn::MulAdd(sv, hn::ConvertTo(df, hn::Sub(hn::And(bytes, mask), eight)), lo);
    hi = hn::MulAdd(sv, hn::ConvertTo(df, hn::Sub(hn::ShiftRight<4>(bytes), eight)), hi);
  };
#endif
  // A Q4_0S window's scales lie apart from its nibbles (the prefetched
  // stream, Q4_0Axpy::Stream): those of the group the prefetches run into
  // (LeadGroups ahead) are prefetched now.
  const size_t base = window.offset + b0 * layout.scale_stride;
  if (kSplit && window.width != window.row_cols) {
    pf.NextRegion(base, nblocks * layout.scale_stride);
  }
  HWY_ALIGN float sw[2][kRows][kMaxFloatLanes];
  CoeffScales<kRows>(dfull, rows, a, layout.scale_stride, base, nblocks, 0, sw[0]);
  size_t cur = 0;
  for (size_t g0 = 0; g0 < nblocks; g0 += G, cur ^= 1) {
    if (g0 + G < nblocks) {
      CoeffScales<kRows>(dfull, rows, a, layout.scale_stride, base, nblocks, g0 + G, sw[cur ^ 1]);
    }
    const size_t count = std::min(G, nblocks - g0);
    const float(*s)[kMaxFloatLanes] = sw[cur];
    size_t b = 0;
#ifdef SPARROW_Q4_0_NIBBLE_TABLE
    if (chunks != nullptr) {  // G (16) is whole chunks
      for (; b + kChunkBlocks <= count; b += kChunkBlocks) {
        pf.Upto(layout.nibbles_at + (b0 + g0 + b) * layout.nibble_stride);
        const size_t c = (g0 + b) / kChunkBlocks;
        Q4_0SChunkAxpys<kRows>(rows, s, layout, b0, c, chunks + kChunkElems * c);
      }
    }
#else
    (void)chunks;
#endif
    for (; b < count; ++b) {
      const size_t at = layout.nibbles_at + (b0 + g0 + b) * layout.nibble_stride;
      pf.Upto(at);
      float* yb = y + (g0 + b) * 32;
      for (size_t e = 0; e < 16; e += N) {
        auto lo = hn::LoadU(df, yb + e);
        auto hi = hn::LoadU(df, yb + 16 + e);
        step(r0 + at + e, s[0][b], lo, hi);
        if constexpr (kRows > 1) step(r1 + at + e, s[1 % kRows][b], lo, hi);
        if constexpr (kRows > 2) step(r2 + at + e, s[2 % kRows][b], lo, hi);
        if constexpr (kRows > 3) step(r3 + at + e, s[3 % kRows][b], lo, hi);
        hn::StoreU(lo, df, yb + e);
        hn::StoreU(hi, df, yb + 16 + e);
      }
    }
  }
}

// Each kernel's Stream(window) is the span of a row's bytes it reads in
// order, which the prefetcher runs along (and on into the next group's).
template <typename WT>
struct FloatAxpy {
  static constexpr bool kQuantized = false;
  static std::pair<size_t, size_t> Stream(ColumnWindow w) {
    return {w.offset + w.first * sizeof(WT), w.offset + (w.first + w.width) * sizeof(WT)};
  }
  template <size_t kRows>
  static HWY_INLINE void Run(const uint8_t* const* rows, const float* a, ColumnWindow window,
                             float* y, float* /*chunks*/, Prefetcher<kRows>& pf) {
    FloatAxpys<WT, kRows>(rows, a, window, y, pf);
  }
};
struct Q8_0Axpy {
  static constexpr bool kQuantized = true;
  static std::pair<size_t, size_t> Stream(ColumnWindow w) {
    return {w.offset + w.first / 32 * sizeof(BlockQ8_0),
            w.offset + (w.first + w.width) / 32 * sizeof(BlockQ8_0)};
  }
  template <size_t kRows>
  static HWY_INLINE void Run(const uint8_t* const* rows, const float* a, ColumnWindow window,
                             float* y, float* /*chunks*/, Prefetcher<kRows>& pf) {
    Q8_0Axpys<kRows>(rows, a, window, y, pf);
  }
};
template <bool kSplit>  // Q4_0S rows
struct Q4_0Axpy {
  static constexpr bool kQuantized = true;
  // Q4_0S: the whole row when the window is (its scales lead the stream),
  // else the window's nibbles (its scales are prefetched apart).
  static std::pair<size_t, size_t> Stream(ColumnWindow w) {
    const size_t row_blocks = w.row_cols / 32;
    const Q4_0Layout layout = Q4_0Layout::For(kSplit, row_blocks);
    const size_t b0 = w.first / 32, b1 = (w.first + w.width) / 32;
    const size_t o = w.offset;
    if (!kSplit) return {o + b0 * sizeof(BlockQ4_0), o + b1 * sizeof(BlockQ4_0)};
    if (w.width == w.row_cols) return {o, o + row_blocks * sizeof(BlockQ4_0)};
    return {o + layout.nibbles_at + b0 * layout.nibble_stride,
            o + layout.nibbles_at + b1 * layout.nibble_stride};
  }
  // Whole chunks of four blocks in the window, added in chunk order
  // (0 where the target has no chunk kernel).
  static size_t PermutedChunks(ColumnWindow w) {
#ifdef SPARROW_Q4_0_NIBBLE_TABLE
    return kSplit ? w.width / kChunkElems : 0;
#else
    (void)w;
    return 0;
#endif
  }
  template <size_t kRows>
  static HWY_INLINE void Run(const uint8_t* const* rows, const float* a, ColumnWindow window,
                             float* y, float* chunks, Prefetcher<kRows>& pf) {
    Q4_0Axpys<kRows, kSplit>(rows, a, window, y, chunks, pf);
  }
};

// Up to four rows with a nonzero coefficient, taken in list order.
struct AxpyGroup {
  const uint8_t* rows[4];
  float coeff[4];
  size_t m = 0;
};

// Fills `g` from rows[*k..] (advancing *k past what it looked at).
HWY_INLINE void NextAxpyGroup(const uint8_t* const* rows, const float* a, size_t count,
                              size_t* k, AxpyGroup* g) {
  g->m = 0;
  for (; *k < count && g->m < 4; ++*k) {
    if (a[*k] == 0.0f) continue;
    g->rows[g->m] = rows[*k];
    g->coeff[g->m++] = a[*k];
  }
}

// Not inlined: inside the one function each target's AxpyRows becomes, the
// compiler kept the four row pointers on the stack and reloaded them for
// every block (six stack loads per block of the Q4_0S loop; two here, one
// of them the loop bound). Measured on a 2 vCPU Cascade Lake VM, one
// thread, twelve alternated runs of `gather_bench --types q4_0s,q8_0
// --shapes 2048x512 --parts 1 --kernels axpy --rotate-mib 0 --clock cpu`
// (rows in L2), median of the best figures: Q4_0S 5.78 -> 6.33 GB/s,
// Q8_0 6.75 -> 7.51.
template <class K, size_t kRows>
HWY_NOINLINE void RunAxpyGroup(const AxpyGroup& g, const AxpyGroup& next, ColumnWindow window,
                               PrefetchFrom prefetched, float* y, float* chunks) {
  const auto [begin, end] = K::Stream(window);
  Prefetcher<kRows> pf(g.rows, NextRows{next.rows, next.m}, begin, end, prefetched);
  K::template Run<kRows>(g.rows, g.coeff, window, y, chunks, pf);
}

// The rows with a nonzero coefficient, four at a time, in order (chunks: as
// Q4_0Axpys takes them).
template <class K>
HWY_INLINE void AxpyGroups(const uint8_t* const* rows, size_t count, ColumnWindow window,
                           const float* a, float* y, float* chunks) {
  // Groups i .. i + lead in ring[(i ..) % (lead + 1)]: the prefetches run
  // `lead` groups ahead of group i.
  const auto [begin, end] = K::Stream(window);
  const size_t lead = LeadGroups(end - begin);
  AxpyGroup ring[kMaxLeadGroups + 1];
  size_t k = 0;
  for (size_t j = 0; j <= lead; ++j) NextAxpyGroup(rows, a, count, &k, &ring[j]);
  if (ring[0].m == 0) return;
  for (size_t j = 1; j < lead; ++j) {
    PrefetchRows(NextRows{ring[j].rows, ring[j].m}, begin, end,
                 PrefetchIntoL2(4, std::min(kPrefetchAhead, end - begin)));
  }
  PrefetchFrom prefetched = PrefetchFrom::kStart;
  for (size_t i = 0;; ++i) {
    AxpyGroup& cur = ring[i % (lead + 1)];
    if (cur.m == 0) break;
    const AxpyGroup& ahead = ring[(i + lead) % (lead + 1)];
    switch (cur.m) {
      case 4:
        RunAxpyGroup<K, 4>(cur, ahead, window, prefetched, y, chunks);
        break;
      case 3:
        RunAxpyGroup<K, 3>(cur, ahead, window, prefetched, y, chunks);
        break;
      case 2:
        RunAxpyGroup<K, 2>(cur, ahead, window, prefetched, y, chunks);
        break;
      default:
        RunAxpyGroup<K, 1>(cur, ahead, window, prefetched, y, chunks);
        break;
    }
    prefetched = PrefetchFrom::kCovered;
    NextAxpyGroup(rows, a, count, &k, &cur);  // group i + lead + 1
  }
}

// The window's whole chunks in chunk order (K::PermutedChunks),
// where the set has enough rows to pay for the two reorderings.
template <class K>
HWY_INLINE size_t ChunksToPermute(size_t count, ColumnWindow window, const float* a) {
  if constexpr (requires { K::PermutedChunks(window); }) {
    const size_t chunks = K::PermutedChunks(window);
    if (chunks == 0) return 0;
    size_t used = 0;
    for (size_t k = 0; k < count && used < kMinPermutedRows; ++k) used += a[k] != 0.0f;
    return used < kMinPermutedRows ? 0 : chunks;
  } else {
    return 0;
  }
}

// One token: the rows with a nonzero coefficient, four at a time, in order.
template <class K>
HWY_INLINE void AxpyOneToken(const uint8_t* const* rows, size_t count, ColumnWindow window,
                             const float* a, float* y) {
  float* chunks = nullptr;
  [[maybe_unused]] const size_t permuted = ChunksToPermute<K>(count, window, a);
#ifdef SPARROW_Q4_0_NIBBLE_TABLE
  thread_local AlignedBuffer<float> reordered;  // AxpyRowsScratchBytes
  if (permuted != 0) {
    if (reordered.size() < permuted * kChunkElems) reordered.Reset(permuted * kChunkElems);
    chunks = reordered.data();
    for (size_t c = 0; c < permuted; ++c) {
      PermuteChunk<true>(y + kChunkElems * c, chunks + kChunkElems * c);
    }
  }
#endif
  AxpyGroups<K>(rows, count, window, a, y, chunks);
#ifdef SPARROW_Q4_0_NIBBLE_TABLE
  for (size_t c = 0; c < permuted; ++c) {
    PermuteChunk<false>(chunks + kChunkElems * c, y + kChunkElems * c);
  }
#endif
}

// ------------------------------------------------------------ batched axpys

// Rows per group and columns per tile of the converted buffer (8 x 512 f32
// = 16 KiB, which stays in L1 while it is applied to every token).
// kTileCols is a whole number of blocks and of vectors on any target.
inline constexpr size_t kAxpyGroupRows = 8;
inline constexpr size_t kTileCols = 512;
inline constexpr size_t kTileBlocks = kTileCols / 32;

// Elements [c0, c0 + len) of a row of `cols` into `out` as f32: the weights
// for float types; for Q8_0 the integers q and for Q4_0 (and Q4_0S) the
// nibbles minus 8, with the block scales (kTileBlocks + slack of them) in
// `scales`. c0 and len are whole blocks for the quantized types.
HWY_INLINE void ConvertSpan(TensorType type, const uint8_t* row, size_t cols, size_t c0,
                            size_t len, float* HWY_RESTRICT out, float* HWY_RESTRICT scales) {
  const hn::ScalableTag<float> dfull;
  const size_t G = hn::Lanes(dfull);
  switch (type) {
    case TensorType::kF32:
      std::memcpy(out, row + c0 * sizeof(float), len * sizeof(float));
      return;
    case TensorType::kF16:
      return DequantizeHalfRow<hwy::float16_t>(row + c0 * 2, len, out);
    case TensorType::kBF16:
      return DequantizeHalfRow<hwy::bfloat16_t>(row + c0 * 2, len, out);
    case TensorType::kQ8_0: {
      const hn::CappedTag<float, 32> df;
      const hn::Rebind<int32_t, decltype(df)> di32;
      const hn::Rebind<int8_t, decltype(df)> di8;
      const size_t N = hn::Lanes(df);
      const uint8_t* blocks = row + c0 / 32 * sizeof(BlockQ8_0);
      const size_t nb = len / 32;
      for (size_t b = 0; b < nb; b += G) {
        ScaledHalfScales(dfull, blocks + b * sizeof(BlockQ8_0), sizeof(BlockQ8_0),
                         std::min(G, nb - b), 1.0f, scales + b);
      }
      for (size_t b = 0; b < nb; ++b) {
        const int8_t* qs = reinterpret_cast<const int8_t*>(blocks + b * sizeof(BlockQ8_0) + 2);
        for (size_t e = 0; e < 32; e += N) {
          hn::Store(hn::ConvertTo(df, hn::PromoteTo(di32, hn::LoadU(di8, qs + e))), df,
                    out + 32 * b + e);
        }
      }
      return;
    }
    case TensorType::kQ4_0:
    case TensorType::kQ4_0S: {
      const hn::CappedTag<float, 16> df;
      const hn::Rebind<int32_t, decltype(df)> di32;
      const hn::Rebind<uint32_t, decltype(df)> du32;
      const hn::Rebind<uint8_t, decltype(df)> du8;
      const size_t N = hn::Lanes(df);
      const Q4_0Layout layout = Q4_0Layout::For(type == TensorType::kQ4_0S, cols / 32);
      const size_t b0 = c0 / 32;  // the span's first block
      const size_t nb = len / 32;
      for (size_t b = 0; b < nb; b += G) {
        ScaledHalfScales(dfull, layout.Scale(row, b0 + b), layout.scale_stride,
                         std::min(G, nb - b), 1.0f, scales + b);
      }
#ifdef SPARROW_Q4_0_NIBBLE_TABLE
      const __m512 table = Q4_0NibbleTable();
      for (size_t b = 0; b < nb; ++b) {
        const __m512i bytes = Q4_0Bytes16(layout.Nibbles(row, b0 + b));
        _mm512_storeu_ps(out + 32 * b, Q4_0LowMinus8(bytes, table));
        _mm512_storeu_ps(out + 32 * b + 16, Q4_0HighMinus8(bytes, table));
      }
      (void)N;
      return;
#endif
      for (size_t b = 0; b < nb; ++b) {
        const uint8_t* qs = layout.Nibbles(row, b0 + b);
        for (size_t e = 0; e < 16; e += N) {
          const auto bytes = hn::BitCast(di32, hn::PromoteTo(du32, hn::LoadU(du8, qs + e)));
          const auto eight = hn::Set(di32, 8);
          hn::Store(hn::ConvertTo(df, hn::Sub(hn::And(bytes, hn::Set(di32, 15)), eight)), df,
                    out + 32 * b + e);
          hn::Store(hn::ConvertTo(df, hn::Sub(hn::ShiftRight<4>(bytes), eight)), df,
                    out + 32 * b + 16 + e);
        }
      }
      return;
    }
    default:
      return;
  }
}

// Float rows: y[0..len) += c[j] * w[j][0..len) for j < kM, in order. The w
// rows are tile rows (padded to kTileCols, so whole vectors may be loaded).
template <size_t kM>
HWY_INLINE void TileFloatAxpys(const float* const* HWY_RESTRICT w,
                               const float* HWY_RESTRICT c, size_t len,
                               float* HWY_RESTRICT y) {
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

// Quantized rows: y[32 b + e] += s[j][b] * q[j][32 b + e] for the `nb`
// blocks of the tile and j < kM, in order.
template <size_t kM>
HWY_INLINE void TileQuantAxpys(const float* const* HWY_RESTRICT q,
                               const float (*HWY_RESTRICT s)[kTileBlocks], size_t nb,
                               float* HWY_RESTRICT y) {
  const hn::CappedTag<float, 32> df;
  const size_t N = hn::Lanes(df);
  for (size_t b = 0; b < nb; ++b) {
    for (size_t e = 0; e < 32; e += N) {
      float* yp = y + 32 * b + e;
      auto acc = hn::LoadU(df, yp);
      for (size_t j = 0; j < kM; ++j) {
        acc = hn::MulAdd(hn::Set(df, s[j][b]), hn::Load(df, q[j] + 32 * b + e), acc);
      }
      hn::StoreU(acc, df, yp);
    }
  }
}

template <bool kQuantized, size_t kM>
HWY_INLINE void TileAxpysFor(const float* const* q, const float* c,
                             const float (*s)[kTileBlocks], size_t len, float* y) {
  if constexpr (kQuantized) {
    TileQuantAxpys<kM>(q, s, len / 32, y);
  } else {
    TileFloatAxpys<kM>(q, c, len, y);
  }
}

template <bool kQuantized>
HWY_INLINE void TileAxpys(size_t m, const float* const* q, const float* c,
                          const float (*s)[kTileBlocks], size_t len, float* y) {
  static_assert(kAxpyGroupRows == 8);
  switch (m) {
    case 1: return TileAxpysFor<kQuantized, 1>(q, c, s, len, y);
    case 2: return TileAxpysFor<kQuantized, 2>(q, c, s, len, y);
    case 3: return TileAxpysFor<kQuantized, 3>(q, c, s, len, y);
    case 4: return TileAxpysFor<kQuantized, 4>(q, c, s, len, y);
    case 5: return TileAxpysFor<kQuantized, 5>(q, c, s, len, y);
    case 6: return TileAxpysFor<kQuantized, 6>(q, c, s, len, y);
    case 7: return TileAxpysFor<kQuantized, 7>(q, c, s, len, y);
    case 8: return TileAxpysFor<kQuantized, 8>(q, c, s, len, y);
    default: return;
  }
}

// n tokens: groups of up to kAxpyGroupRows rows that some token needs; per
// column tile, the group is converted once and applied to every token
// (skipping the rows whose coefficient is zero for that token), with the
// same per-element operations as AxpyOneToken.
template <bool kQuantized>
HWY_INLINE void AxpyBatch(TensorType type, const uint8_t* const* rows, size_t count,
                          ColumnWindow window, const float* a, size_t a_stride, size_t n, float* y,
                          size_t y_stride) {
  const size_t cols = window.width;
  const hn::ScalableTag<float> dfull;
  [[maybe_unused]] const size_t G = hn::Lanes(dfull);
  HWY_ALIGN float tile[kAxpyGroupRows][kTileCols];
  HWY_ALIGN float scales[kAxpyGroupRows][kTileBlocks + kGemvPad];
  HWY_ALIGN float s[kAxpyGroupRows][kTileBlocks];
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
      const size_t nb = len / 32;
      for (size_t r = 0; r < m; ++r) {
        ConvertSpan(type, rows[picked[r]] + window.offset, window.row_cols, window.first + c0, len,
                    tile[r], scales[r]);
      }
      for (size_t t = 0; t < n; ++t) {
        const float* q[kAxpyGroupRows];
        float c[kAxpyGroupRows];
        size_t used = 0;
        for (size_t r = 0; r < m; ++r) {
          const float coeff = a[t * a_stride + picked[r]];
          if (coeff == 0.0f) continue;
          q[used] = tile[r];
          c[used] = coeff;
          if constexpr (kQuantized) {
            // s = coeff * d per block, as the one-token kernels compute it.
            for (size_t b = 0; b < nb; b += G) {
              const auto sv = hn::Mul(hn::LoadU(dfull, scales[r] + b), hn::Set(dfull, coeff));
              if (nb - b >= G) {
                hn::StoreU(sv, dfull, s[used] + b);
              } else {
                HWY_ALIGN float part[kMaxFloatLanes];
                hn::Store(sv, dfull, part);
                std::memcpy(s[used] + b, part, (nb - b) * sizeof(float));
              }
            }
          }
          ++used;
        }
        if (used != 0) TileAxpys<kQuantized>(used, q, c, s, len, y + t * y_stride + c0);
      }
    }
  }
}

// Bytes AxpyRowsImpl keeps on each calling thread for rows of `cols`
// elements of `type` (the reordered chunks of AxpyOneToken).
HWY_INLINE size_t AxpyRowsScratchBytesImpl(TensorType type, size_t cols) {
  if (type != TensorType::kQ4_0S) return 0;
  const size_t chunks = Q4_0Axpy<true>::PermutedChunks(ColumnWindow{0, cols, cols});
  return chunks * kChunkElems * sizeof(float);
}

// The caller has checked the type and the window.
HWY_INLINE void AxpyRowsImpl(TensorType type, const uint8_t* const* rows, size_t count,
                             ColumnWindow window, const float* a, size_t a_stride, size_t n,
                             float* y, size_t y_stride) {
  if (n > 1) {
    // Every gather type with blocks is quantized (Q8_0, Q4_0, Q4_0S).
    const bool quantized = GetTensorTypeInfo(type).block_elems > 1;
    if (quantized) {
      return AxpyBatch<true>(type, rows, count, window, a, a_stride, n, y, y_stride);
    }
    return AxpyBatch<false>(type, rows, count, window, a, a_stride, n, y, y_stride);
  }
  switch (type) {
    case TensorType::kF32:
      return AxpyOneToken<FloatAxpy<float>>(rows, count, window, a, y);
    case TensorType::kF16:
      return AxpyOneToken<FloatAxpy<hwy::float16_t>>(rows, count, window, a, y);
    case TensorType::kBF16:
      return AxpyOneToken<FloatAxpy<hwy::bfloat16_t>>(rows, count, window, a, y);
    case TensorType::kQ8_0:
      return AxpyOneToken<Q8_0Axpy>(rows, count, window, a, y);
    case TensorType::kQ4_0:
      return AxpyOneToken<Q4_0Axpy<false>>(rows, count, window, a, y);
    case TensorType::kQ4_0S:
      return AxpyOneToken<Q4_0Axpy<true>>(rows, count, window, a, y);
    default:
      return;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::simd
HWY_AFTER_NAMESPACE();

#endif  // SPARROW_SIMD_GATHER_INL_H_ toggle
