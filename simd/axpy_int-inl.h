// Per-target code of the integer AxpyRows (axpy_int.h).
//
// Three forms of the same sums:
//  - natural (every target): for each row and block, the multiple m splits
//    into signed bytes m = 256 * hi + lo, and hi * (q - 8) and lo * (q - 8)
//    are added to two int32 arrays indexed by column;
//  - quads (AVX3_DL, x86 with AVX-512 VNNI): four rows at a time, their bytes
//    interleaved so that each 32-bit lane holds one column's byte of each
//    row, and vpdpbusd adds the four products of a lane's bytes with the
//    four rows' hi (or lo) bytes in one instruction. A byte holds two
//    nibbles of different columns, so one product takes the byte with its
//    high nibble masked off (the low column) and one the whole byte: the
//    high column's sum is (whole - low) / 16. The -8 of each nibble is
//    taken off at the end, from the sum of the rows' m for each block.
//    Q4_0 rows (blocks of 18 bytes) get four blocks' nibbles into one
//    vector with a byte permute and an insert, as Q4_0S keeps them;
//  - blocks (x86 targets below AVX3_DL whose CPU has vpdpbusd, and AVX2
//    with pmaddubsw where it has not): the quad form's steps in 256-bit
//    vectors, one block at a time (BlockForm).
// All are exact, so AxpyIntFinish gives the same bits from any.
//
// The quad form is raw AVX-512 code because Highway 1.0.3 has no 8-bit
// dot product (int8_dot-inl.h). Measured on a 2 vCPU Zen 4 VM (AVX3_DL),
// one thread, three rounds of `gather_bench --types q4_0s --shapes
// 2048x5632 --kernels axpy,axpy-int --clock cpu`: rows in order 10.5-14.0
// GB/s (AxpyRows' fp32 chain) against 15.4-22.8, a random quarter 8.3-10.0
// against 12.0-15.3, rows in L2 15.4-15.8 against 26.1-26.7; Q4_0 rows in
// order 9.6-11.3 against 12.6-14.0, in L2 6.4-11.3 against 15.6. The same
// form for Q8_0 rows (two blocks per vector, bytes made unsigned) was
// slower than AxpyRows from DRAM (10.5-15.1 against 13.7-18.7 GB/s) and
// was not kept.

#if defined(SPARROW_SIMD_AXPY_INT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SPARROW_SIMD_AXPY_INT_INL_H_
#undef SPARROW_SIMD_AXPY_INT_INL_H_
#else
#define SPARROW_SIMD_AXPY_INT_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <hwy/highway.h>

#include "base/tensor_type.h"
#include "simd/axpy_int.h"
#include "simd/gemv-inl.h"      // LoadHalves, kMaxFloatLanes
#include "simd/int8_dot-inl.h"  // SPARROW_INT8_VNNI
#include "simd/quant_blocks.h"
#include "simd/row_prefetch.h"

HWY_BEFORE_NAMESPACE();
namespace sparrow::simd {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// Blocks whose multiples one pass computes at a time (stack buffers of
// 32 bytes per block in the quad form): a wider window is a sweep's
// segments of this many blocks (AddPasses), each pass running through
// them all. One sweep per row is what streams well from DRAM: with the
// window in sweeps of 64 blocks each, rows 3072, 5632 and 11008 wide took
// two, three and six sweeps and ran at 17.2-18.3, 15.3-15.5 and 14.2-15.3
// GB/s, against 22.5-23.3, 20.2-20.9 and 19.5-20.3 with one (Zen 4 VM,
// `gather_bench --types q4_0s --kernels axpy-int --threads 1 --clock cpu`,
// rows in order, alternated); rows 2048 wide, one sweep either way, were
// unchanged.
inline constexpr size_t kAxpyIntSpanBlocks = 512;

// m[0..count) for one row's blocks whose f16 scales are `stride` bytes
// apart from `scales` on: the multiple of the step nearest to d * s
// (s = a * inv_step), clamped to +-kAxpyIntMaxMultiple, NaN as 0. Rounds by
// adding and subtracting 1.5 * 2^23, which is round-to-nearest-even on
// every target for values this small (Highway's NearestInt rounds
// differently on some targets).
HWY_INLINE void RowMultiples(const uint8_t* HWY_RESTRICT scales, size_t stride, size_t count,
                             float s, int32_t* HWY_RESTRICT m) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const size_t N = hn::Lanes(df);
  const auto vs = hn::Set(df, s);
  const auto limit = hn::Set(df, static_cast<float>(kAxpyIntMaxMultiple));
  const auto magic = hn::Set(df, 12582912.0f);
  for (size_t b = 0; b < count; b += N) {
    const size_t n = std::min(N, count - b);
    hn::Vec<decltype(df)> d;
    if (stride == 2) {
      d = LoadHalves(df, scales + 2 * b, n);
    } else {  // Q4_0's scales, one per 18-byte block
      HWY_ALIGN uint8_t halves[2 * kMaxFloatLanes];
      for (size_t j = 0; j < n; ++j) std::memcpy(halves + 2 * j, scales + (b + j) * stride, 2);
      d = LoadHalves(df, halves, n);
    }
    auto p = hn::Mul(d, vs);
    p = hn::IfThenElseZero(hn::Eq(p, p), p);
    p = hn::Min(hn::Max(p, hn::Neg(limit)), limit);
    const auto mi = hn::ConvertTo(di, hn::Sub(hn::Add(p, magic), magic));
    if (n == N) {
      hn::StoreU(mi, di, m + b);
    } else {
      HWY_ALIGN int32_t tail[kMaxFloatLanes];
      hn::Store(mi, di, tail);
      std::memcpy(m + b, tail, n * sizeof(int32_t));
    }
  }
}

// The signed bytes of m = 256 * hi + lo (lo in [-128, 127]).
HWY_INLINE int32_t MultipleHi(int32_t m) { return (m + 128) >> 8; }

// Natural form over blocks [b0, b0 + nblocks) of Q4_0S (split) or Q4_0
// rows with `row_blocks` blocks: hi[32 * j + i] and lo[...] gain the terms
// of block b0 + j's column i.
HWY_INLINE void AddNatural(const uint8_t* const* rows, size_t offset, bool split, size_t count,
                           size_t row_blocks, size_t b0, size_t nblocks, const float* a,
                           float inv_step, int32_t* HWY_RESTRICT hi, int32_t* HWY_RESTRICT lo) {
  const hn::CappedTag<int32_t, 16> di;
  const hn::Rebind<uint8_t, decltype(di)> du8;
  const size_t N = hn::Lanes(di);
  const auto mask = hn::Set(di, 15);
  const auto eight = hn::Set(di, 8);
  const Q4_0Layout layout = Q4_0Layout::For(split, row_blocks);
  int32_t m[kAxpyIntSpanBlocks];
  for (size_t k = 0; k < count; ++k) {
    if (a[k] == 0.0f) continue;
    const float s = a[k] * inv_step;
    const uint8_t* row = rows[k] + offset;
    for (size_t s0 = 0; s0 < nblocks; s0 += kAxpyIntSpanBlocks) {
      const size_t span = std::min(kAxpyIntSpanBlocks, nblocks - s0);
      RowMultiples(layout.Scale(row, b0 + s0), layout.scale_stride, span, s, m);
      for (size_t j = 0; j < span; ++j) {
        if (m[j] == 0) continue;
        const int32_t h = MultipleHi(m[j]);
        const auto vh = hn::Set(di, h);
        const auto vl = hn::Set(di, m[j] - 256 * h);
        const uint8_t* nibbles = layout.Nibbles(row, b0 + s0 + j);
        int32_t* oh = hi + 32 * (s0 + j);
        int32_t* ol = lo + 32 * (s0 + j);
        for (size_t i = 0; i < 16; i += N) {
          const auto bytes = hn::PromoteTo(di, hn::LoadU(du8, nibbles + i));
          const auto low = hn::Sub(hn::And(bytes, mask), eight);
          const auto high = hn::Sub(hn::ShiftRight<4>(bytes), eight);
          hn::StoreU(hn::Add(hn::LoadU(di, oh + i), hn::Mul(vh, low)), di, oh + i);
          hn::StoreU(hn::Add(hn::LoadU(di, ol + i), hn::Mul(vl, low)), di, ol + i);
          hn::StoreU(hn::Add(hn::LoadU(di, oh + 16 + i), hn::Mul(vh, high)), di, oh + 16 + i);
          hn::StoreU(hn::Add(hn::LoadU(di, ol + 16 + i), hn::Mul(vl, high)), di, ol + 16 + i);
        }
      }
    }
  }
}

// y[e] += step * (256 * hi[e] + lo[e]) for e < n.
HWY_INLINE void FinishNatural(size_t n, const int32_t* hi, const int32_t* lo, float step,
                              float* y) {
  for (size_t e = 0; e < n; ++e) {
    const int64_t total = int64_t{256} * hi[e] + lo[e];
    y[e] += static_cast<float>(static_cast<double>(step) * static_cast<double>(total));
  }
}

#if defined(SPARROW_INT8_VNNI) || defined(SPARROW_INT8_VNNI_RUNTIME)

// Quads of rows per pass over a span: sixteen rows side by side.
//
// Where the time goes (Zen 4 VM at 3.66 GHz, throwaway loops): vpdpbusd on
// 512 bits issues once a cycle (latency 4), so a quad's 16 per chunk take 16
// cycles, and a register-only loop of one quad's whole work (the 16, the 8
// unpacks, the 2 word permutes, the 4 masks) runs in those 16: the shuffles
// are free. Loading and storing the chunk's 16 vectors of sums once per pass
// makes it 23.2 cycles per quad at four quads a pass (20.6 at eight, 18.7 at
// sixteen). The kernel's own loop, with its rows in L1 and neither multiples
// nor prefetches, takes about 31; the multiples add about 15% to that. From
// DRAM, though, the reads are what bound it: a timing-only version that
// loads and prefetches the same bytes and multiplies none ran at 15.2-19.6
// GB/s where the kernel ran at 21.9-23.4 (rows 2048 wide, `gather_bench
// --types q4_0s --shapes 2048x5632 --kernels axpy-int`, six alternated
// rounds). More quads a pass cost more from DRAM than they save: eight ran
// 6% faster in L2 and at 16.1-18.1 GB/s against 15.0-23.9 from DRAM; two
// and three ran at 19.6-19.8 and 19.9-22.6 against 20.5-23.9.
//
// Reading sixteen rows side by side leans on software prefetches, which
// sustain less than the hardware prefetchers do on a few long streams: in a
// throwaway loop over rows 2048 wide, loads alone ran at 96-101% of a
// four-stream probe (29-31 GB/s) as four sequential streams and 91% as
// eight, but at 16-22 GB/s (60-78%) as sixteen rows a line at a time with
// the next rows prefetched (in their order or in address order, one to four
// passes ahead). Orders the hardware follows cost the sums more than they
// save: one quad at a time along whole rows, its four rows from the four
// quarters of the list (as DotRows reads), with the sums loaded and stored
// per chunk, ran at 17.0-18.9 GB/s from DRAM against 19.4-23.5 (rows 768
// and 2048 wide; eight quarters, two quads a pass: 14.9-18.1); in a loop that
// reads four streams and also loads and stores eight vectors per four
// lines, as such a form must, the reads fell from 96-101% of the probe to
// 56-85%. Adding the high-byte products into the low-byte sums (shifted by
// 8, the high ones started at zero in registers, lo folded into hi every 64
// quads) halved the sums' loads and stores and ran rows 768 wide at
// 21.0-24.2 GB/s against 20.5-22.4, but rows 2048 wide at 20.5-22.2 against
// 21.5-24.3 (both two passes ahead, eight alternated rounds): not kept.
//
// Halving the products (one byte per multiple) ran 40% faster in L2 in a
// timing-only version, and no faster from DRAM (rows 2048 wide 14.7-19.7
// GB/s against 21.4-23.7, 768 wide 19.5-20.3 against 18.5-20.3). A version
// that keeps the sums exact with one byte per multiple gave each row a
// tier, a power-of-two multiple of the step from the row's largest block
// scale (7 to 8 bits of each row instead of 15 of the token's largest
// term), sorted a call's rows by tier and summed each tier apart. By
// perf's samples, on rows 768 wide in L2, its summing took about 30% less
// time and finding the tiers about 25 cycles a row. From DRAM
// those rows ran at 10.8-10.9 GB/s against 18.3-20.5 (2048 wide: 18.8-19.2
// against 21.5-23.3), and still at 10.2-11.0 with each row's tier taken from
// one scale (timing only, as a largest scale stored with each record would
// cost). So finding the tiers is not what loses; the sort, which breaks the
// rows' order, and the read of each row's first line ahead of the passes
// remain, not measured apart.
inline constexpr size_t kQuadsPerPass = 4;

// One pass's rows: up to kQuadsPerPass quads, the last padded with rows of
// coefficient zero (which read the first row's bytes and add nothing).
struct QuadRows {
  const uint8_t* rows[4 * kQuadsPerPass];
  float s[4 * kQuadsPerPass];  // a * inv_step
  size_t quads = 0;
};

// Fills `out` with the next pass of `order` (rows whose coefficient is
// nonzero): a row of each of its parts, each part one stream.
static_assert(4 * kQuadsPerPass == AxpyIntPassOrder::kParts);
HWY_INLINE void NextQuadRows(const uint8_t* const* rows, const float* a, float inv_step,
                             AxpyIntPassOrder* order, QuadRows* out) {
  size_t index[4 * kQuadsPerPass];
  size_t n = order->Next(index, 4 * kQuadsPerPass);
  for (size_t r = 0; r < n; ++r) {
    out->rows[r] = rows[index[r]];
    out->s[r] = a[index[r]] * inv_step;
  }
  out->quads = (n + 3) / 4;
  for (; n < 4 * out->quads; ++n) {
    out->rows[n] = out->rows[0];
    out->s[n] = 0.0f;
  }
}

// Chunks of four blocks (128 columns): the unit of a pass's prefetches,
// and the quad form's.
inline constexpr size_t kQuadChunkBlocks = 4;

// Bytes from a chunk's first nibble byte to the next chunk's in a row
// (Q4_0: with the scales between the blocks).
template <bool kSplit>
inline constexpr size_t kQuadChunkBytes = kQuadChunkBlocks * (kSplit ? 16 : sizeof(BlockQ4_0));

// Where a span's bytes lie in each row, for the prefetches, which walk
// them as a stream of 64-byte steps (AxpyIntStreamBytes): Q4_0S rows' scales
// from `scale_at`, then the data from `data_at` (Q4_0S: the nibbles; Q4_0:
// the blocks, scales among them, and no scale part).
struct SpanStream {
  size_t scale_at, scale_bytes, scale_steps;  // scale_steps: the scales' stream bytes
  size_t data_at, data_bytes;
  size_t bytes;  // a row's stream bytes

  // Where stream byte `at` (a multiple of 64, below `bytes`) lies from a
  // row pointer, and where the last byte of the part it lies in does if
  // this is the part's last step (parts need not start on a line; else
  // kNoLine): the lines to prefetch for that step.
  static constexpr size_t kNoLine = ~size_t{0};
  struct Step {
    size_t at, last;
  };
  HWY_INLINE Step StepAt(size_t at) const {
    if (at < scale_steps) {
      return {scale_at + at, at + 64 >= scale_bytes ? scale_at + scale_bytes - 1 : kNoLine};
    }
    const size_t o = at - scale_steps;
    return {data_at + o, o + 64 >= data_bytes ? data_at + data_bytes - 1 : kNoLine};
  }
};

// One span of one part of the rows, as a sweep takes it: blocks
// [s0, s0 + span) of part `part`'s window, where their scales and nibbles
// lie from a row pointer, and where their stream starts in the sweep's
// stream of a row (each segment's SpanStream after the one before).
struct Segment {
  size_t part, s0, span, chunks;
  size_t nibbles_at;  // the scales' offset is stream.scale_at
  size_t stream_at;
  SpanStream stream;
};

// The most segments one sweep over the rows takes (a whole row of up to
// three parts of up to kAxpyIntSpanBlocks blocks each, or a one-part row
// of up to 8 * kAxpyIntSpanBlocks blocks); more take several sweeps.
inline constexpr size_t kMaxSweepSegments = 8;

// A sweep's segments as one stream per row.
struct SweepStream {
  const Segment* segments;
  size_t count;

  // The lines of stream byte `at` (SpanStream::StepAt).
  HWY_INLINE SpanStream::Step StepAt(size_t at) const {
    size_t k = 0;
    while (k + 1 < count && at >= segments[k + 1].stream_at) ++k;
    return segments[k].stream.StepAt(at - segments[k].stream_at);
  }
};

// Prefetches stream line `line` counted from the start of pass i's rows
// (ring[(i + j) % (ahead + 1)] holds pass i + j): that line of each row of
// the pass it falls in, if the ring holds it. (Subtracts rather than
// divides: `line` is at most a few passes' lines.) Where the line lies is
// worked out once for the pass's rows: worked out for each row, behind
// the lookup of its segment, AxpyIntAdd over 512 Q4_0S rows 2048 wide in
// L2 ran at 10.8-13.8 GB/s against 15.8-18.3 before segments (throwaway
// loop, three alternated rounds); once a line, 16.9-18.1.
HWY_INLINE void PrefetchStreamLine(const QuadRows* ring, size_t i, size_t ahead,
                                   const SweepStream& stream, size_t pass_lines, size_t line) {
  size_t j = i;
  for (; line >= pass_lines; line -= pass_lines) {
    if (++j > i + ahead) return;
  }
  const QuadRows& pass = ring[j % (ahead + 1)];
  const SpanStream::Step step = stream.StepAt(64 * line);
  for (size_t r = 0; r < 4 * pass.quads; ++r) {
    PrefetchLine(pass.rows[r] + step.at, /*into_l2=*/true);
  }
  if (step.last != SpanStream::kNoLine) {
    for (size_t r = 0; r < 4 * pass.quads; ++r) PrefetchLine(pass.rows[r] + step.last, true);
  }
}

// Passes of sixteen rows (the nonzero-coefficient ones, in
// AxpyIntPassOrder's order: a row of each of the list's sixteen parts) over
// blocks [b0, b0 + nblocks) of each of the `parts` parts of the rows (part
// p `part_bytes` after part 0, each with row_blocks blocks in the layout of
// a row of its own; its sums `sums_stride` int32 after part 0's), for the
// quad and the block forms (Form: QuadForm, BlockForm). Each pass runs
// through the segments of a sweep (Segment: each part's spans of
// kAxpyIntSpanBlocks blocks, in the order they lie in a row): for each,
// Form::Coefficients gives every quad's hi and lo words for the segment's
// blocks (msum gains their m), then Form::Chunk<quads> adds the pass's rows
// to the sums of each chunk of the segment (the last may be short in the
// block form). So each row is read front to back once, as one stream.
//
// A row of several parts (a dip input record: a gate and an up column) was
// read in one sweep per part, each sweep skipping the other parts of every
// row. Against that (2 vCPU Emerald Rapids VM, AVX3_DL, one thread, Q4_0S
// records of two parts, four alternated rounds of `gather_bench --parts 2
// --kernels axpy-int --clock cpu` and of a throwaway build that summed the
// parts apart, % of the probe): every record in order, 5632 columns a part
// (the 1.1B shape's 2048 records) 60-78 -> 80-88, 3072 (the 125M shape's
// 768) 68-78 -> 85-91; a quarter of them in order 72-78 -> 81-83 and
// 74-78 -> 77-79. `sparrow bench -p 0 -n 32 -t 1` on the 1.1B-shaped Q4_0S
// dip bundle: four rounds 17.5-20.7 -> 21.1-21.7 tok/s; with `--sparsity
// dip --mlp-density 0.5` three rounds 30.8-31.8 -> 32.4-33.1.
//
// The prefetches follow each of a pass's sixteen streams (a row of each
// sixteenth of the list, below) a fixed distance ahead of where the kernel
// reads, counted in the bytes of a row's stream (SpanStream):
// AxpyIntPrefetchDistance, kAxpyIntPrefetchLeadBytes past what a pass
// needs of a row when it starts (Q4_0S: the scales; Q4_0: the whole row,
// whose scales lie among its blocks), each chunk prefetching its share of a
// pass's lines. Before, each pass prefetched a later pass whole, a chunk
// at a time (the same chunk of the rows of as many passes ahead as covered
// 12 KB: one for rows 2048 wide, two for 768, which on a Zen 4 VM had beaten
// one pass ahead everywhere). Against that, with the rows already in
// sixteenths (2 vCPU Emerald Rapids VM, AVX3_DL, one thread, `gather_bench
// --types q4_0s,q4_0 --shapes 2048x5632,768x3072,4096x11008 --kernels
// axpy-int --clock cpu`, three alternated rounds, % of the probe): a
// quarter of the rows in order, Q4_0S 2048 wide 57-63 -> 64-73, 4096 wide
// 49-63 -> 58-67, 768 wide 49-52 -> 52-58, Q4_0 768 wide 40-46 -> 45-47
// (2048 wide, four rounds, 42-54 -> 53-58); the same quarter in random
// order, Q4_0S 2048 wide 55-60 -> 61-72; every row, Q4_0S 4096 wide 71-76 ->
// 82-90, 2048 and 768 wide unchanged within the noise. Two threads, Q4_0S
// 2048 wide: a quarter 54-55 -> 64-66, every row 73-79 -> 77-83. Lead
// distances of 256 to 512 bytes measured alike; a whole row ahead (1152
// bytes from the scales, as before) read the quarter of rows 2048 wide at
// 64-66%. Dispatch forced to AVX2 (the block form, bound by its
// arithmetic), plain Q4_0 rows 2048 wide read a little less (four rounds,
// every row 61-70 -> 57-68). With the rows in L2, where no prefetch is
// needed, the new prefetching costs about 8% (`--shapes 768x1024,2048x512
// --parts 1 --rotate-mib 1`, three rounds, GB/s): Q4_0S 768 wide
// 18.5-18.6 -> 16.8-17.3, 2048 wide 21.6-22.9 -> 19.7-20.5, Q4_0 2048 wide
// 15.0-15.7 -> 13.6-14.2, 768 wide unchanged. Not from its distance (leads
// of 256 to 2048 bytes ran alike there), nor its divisions or the parts'
// last lines (versions without either ran alike); not found.
//
// Which rows make a pass (AxpyIntPassOrder): one of each sixteenth of the
// list, so that each row of a pass continues a stream of its own, instead
// of sixteen consecutive rows (2 vCPU Emerald Rapids VM, AVX3_DL, one
// thread, `gather_bench --types q4_0s,q4_0 --shapes
// 2048x5632,768x3072,4096x11008 --kernels axpy-int --clock cpu`, three
// alternated rounds, % of the probe): every row in order, Q4_0S 2048 wide
// 64-72 -> 84-89, 768 wide 68-75 -> 85, 4096 wide 64-67 -> 74-90; Q4_0 2048
// wide 58-68 -> 71-81, 768 wide 57-66 -> 83-86; a quarter of the rows in
// order, Q4_0S 2048 wide 52-58 -> 61-76; in random order, unchanged. Fewer
// streams of more rows each read less: eight parts giving two consecutive
// rows a pass 76-79%, four giving four 71-73%, against 84-86% (Q4_0S 2048
// wide, every row); 32 parts with eight quads a pass no more (76-85%
// against 84-86%). The prefetch distance still counts: with none, 69-70%.
template <bool kSplit, class Form>
HWY_INLINE void AddPasses(const uint8_t* const* rows, size_t offset, size_t count,
                          size_t row_blocks, size_t b0, size_t nblocks, size_t parts,
                          size_t part_bytes, size_t sums_stride, const float* a, float inv_step,
                          int32_t* HWY_RESTRICT msum, const Form& form) {
  const Q4_0Layout layout = Q4_0Layout::For(kSplit, row_blocks);
  alignas(64) uint32_t whi[kQuadsPerPass][kAxpyIntSpanBlocks];
  alignas(64) uint32_t wlo[kQuadsPerPass][kAxpyIntSpanBlocks];
  const size_t spans = (nblocks + kAxpyIntSpanBlocks - 1) / kAxpyIntSpanBlocks;
  for (size_t first = 0; first < parts * spans; first += kMaxSweepSegments) {
    Segment segments[kMaxSweepSegments];
    size_t nseg = 0, stream_bytes = 0, sweep_chunks = 0;
    for (size_t k = first; k < std::min(parts * spans, first + kMaxSweepSegments); ++k) {
      Segment& g = segments[nseg++];
      g.part = k / spans;
      g.s0 = k % spans * kAxpyIntSpanBlocks;
      g.span = std::min(kAxpyIntSpanBlocks, nblocks - g.s0);
      g.chunks = (g.span + kQuadChunkBlocks - 1) / kQuadChunkBlocks;
      const size_t at = offset + g.part * part_bytes;
      const size_t sb = b0 + g.s0;  // the segment's first block in its part
      const size_t scale_at = at + layout.scale_stride * sb;
      g.nibbles_at = at + layout.nibbles_at + layout.nibble_stride * sb;
      g.stream = SpanStream{scale_at,
                            kSplit ? 2 * g.span : 0,
                            AxpyIntScaleStreamBytes(kSplit, g.span),
                            kSplit ? g.nibbles_at : scale_at,
                            (kSplit ? 16 : sizeof(BlockQ4_0)) * g.span,
                            AxpyIntStreamBytes(kSplit, g.span)};
      g.stream_at = stream_bytes;
      stream_bytes += g.stream.bytes;
      sweep_chunks += g.chunks;
    }
    const SweepStream stream{segments, nseg};
    // In lines of a row's stream: the prefetch distance (from what a pass
    // needs of a row when it starts: its first segment's scales), and a
    // pass's lines.
    const size_t distance = AxpyIntPrefetchDistance(kSplit, segments[0].span) / 64;
    const size_t pass_lines = stream_bytes / 64;
    // Passes i .. i + ahead in ring[(i .. i + ahead) % (ahead + 1)]: as
    // many as the distance reaches into.
    const size_t ahead = std::min(kAxpyIntMaxPassesAhead, (distance + pass_lines - 1) / pass_lines);
    QuadRows ring[kAxpyIntMaxPassesAhead + 1];
    AxpyIntPassOrder order(count, a, rows);
    for (size_t j = 0; j <= ahead; ++j) NextQuadRows(rows, a, inv_step, &order, &ring[j]);
    // The lines no pass prefetches.
    for (size_t line = 0; line < distance; ++line) {
      PrefetchStreamLine(ring, 0, ahead, stream, pass_lines, line);
    }
    for (size_t i = 0; ring[i % (ahead + 1)].quads > 0; ++i) {
      QuadRows& pass = ring[i % (ahead + 1)];
      // Each chunk prefetches its share of a pass's lines, `distance` ahead.
      size_t line = distance, done = 0;
      for (size_t k = 0; k < nseg; ++k) {
        const Segment& g = segments[k];
        const Form part = form.Shifted(g.part * sums_stride);
        for (size_t q = 0; q < pass.quads; ++q) {
          Form::Coefficients(pass.rows + 4 * q, pass.s + 4 * q, g.stream.scale_at,
                             layout.scale_stride, g.span, whi[q], wlo[q],
                             msum + g.part * sums_stride + g.s0);
        }
        for (size_t c = 0; c < g.chunks; ++c) {
          ++done;
          for (const size_t end = done * pass_lines / sweep_chunks + distance; line < end; ++line) {
            PrefetchStreamLine(ring, i, ahead, stream, pass_lines, line);
          }
          switch (pass.quads) {
            case 1:
              part.template Chunk<1>(pass, whi, wlo, layout, g.nibbles_at, g.s0, g.span, c);
              break;
            case 2:
              part.template Chunk<2>(pass, whi, wlo, layout, g.nibbles_at, g.s0, g.span, c);
              break;
            case 3:
              part.template Chunk<3>(pass, whi, wlo, layout, g.nibbles_at, g.s0, g.span, c);
              break;
            default:
              part.template Chunk<4>(pass, whi, wlo, layout, g.nibbles_at, g.s0, g.span, c);
              break;
          }
        }
      }
      NextQuadRows(rows, a, inv_step, &order, &pass);  // pass i + ahead + 1
    }
  }
}

#endif

#ifdef SPARROW_INT8_VNNI

// The quad form's sums: within a chunk's 128 int32 of each array, vector
// v = 2 * i + w (i < 4, w = 0 low columns, 1 whole bytes) holds in lane
// 4 * kb + t the sum for byte 4 * i + t of the chunk's block kb.
inline constexpr size_t kQuadChunkCols = 128;
// Word j of two tables of 64 words (vpermt2w) that holds the scale of
// Q4_0 block j % 8 of the eight whose 144 bytes start the tables.
struct Q4_0ScaleIndex {
  alignas(64) uint16_t at[32];
  constexpr Q4_0ScaleIndex() : at() {
    for (size_t j = 0; j < 32; ++j) at[j] = static_cast<uint16_t>(sizeof(BlockQ4_0) / 2 * (j % 8));
  }
};
static_assert(sizeof(BlockQ4_0) == 18);

// Multiples of 16 (or the first n < 16) blocks' scales of one row, `stride`
// bytes apart, as RowMultiples computes them (clamped, rounded to nearest
// even by the conversion in the default rounding mode, NaN as 0), in four
// operations after the load: a multiply, vrangeps for the clamp, a compare
// for NaN and a masked conversion. Against the six of a max, a min and a
// masked move, hot AxpyIntAdd over 512 Q4_0S rows 2048 wide (in L2) went
// from 25.1 to 26.5 GB/s (Zen 4 VM, best of six alternated runs).
HWY_INLINE __m512i RowMultiples16(const uint8_t* scales, size_t stride, size_t n, float s) {
  const __mmask16 valid = static_cast<__mmask16>((1u << n) - 1);
  __m256i halves;
  if (stride == 2) {
    halves = _mm256_maskz_loadu_epi16(valid, scales);
  } else {
    // Q4_0 (stride 18): block j's scale is word 9j from `scales` on, so
    // blocks 0-7 lie in the first 128 bytes and blocks 8-15 in the 128
    // from byte 144 on; one word permute of each pair of loads picks them.
    // The loads are masked at the last block's scale. A gather of the 16
    // scales instead (vpgatherdd) left plain Q4_0 rows in L2 at 15.0-15.5
    // GB/s against 17.6-19.2 (Zen 4 VM, `gather_bench --types q4_0
    // --shapes 2048x512 --parts 1 --rotate-mib 1 --kernels axpy-int`).
    const size_t end = sizeof(BlockQ4_0) * (n - 1) + 2;
    const auto load = [&](size_t at) HWY_ATTR {
      const __mmask64 keep = at >= end        ? 0
                             : end - at >= 64 ? ~__mmask64{0}
                                              : (__mmask64{1} << (end - at)) - 1;
      return _mm512_maskz_loadu_epi8(keep, scales + at);
    };
    static constexpr Q4_0ScaleIndex kIndex;
    const __m512i index = _mm512_load_si512(kIndex.at);
    const __m512i first = _mm512_permutex2var_epi16(load(0), index, load(64));
    const __m512i second = _mm512_permutex2var_epi16(load(144), index, load(208));
    halves = _mm512_castsi512_si256(_mm512_mask_blend_epi16(0xFF00, first, second));
  }
  const __m512 p = _mm512_mul_ps(_mm512_cvtph_ps(halves), _mm512_set1_ps(s));
  // vrangeps with imm 2: the smaller magnitude of p and the limit, with p's
  // sign (the clamp in one operation); a NaN p is masked to 0.
  const __m512 clamped =
      _mm512_range_ps(p, _mm512_set1_ps(static_cast<float>(kAxpyIntMaxMultiple)), 2);
  return _mm512_maskz_cvtps_epi32(_mm512_cmp_ps_mask(p, p, _CMP_ORD_Q), clamped);
}

// Byte 4 * b + r (b < 16, r < 4) picks row r's int16 multiple for block b
// out of _mm512_packs_epi32(m0, m1) (rows 0 and 1, indices below 64) and
// _mm512_packs_epi32(m2, m3): in each 128-bit lane, the first row's four
// blocks then the second's. Its low byte; +1 for the high byte.
struct QuadByteIndex {
  alignas(64) uint8_t at[64];
  constexpr QuadByteIndex() : at() {
    for (size_t b = 0; b < 16; ++b) {
      for (size_t r = 0; r < 4; ++r) {
        at[4 * b + r] =
            static_cast<uint8_t>((r >= 2 ? 64 : 0) + 16 * (b / 4) + 2 * (b % 4) + 8 * (r % 2));
      }
    }
  }
};

// The hi and lo bytes (m = 256 * hi + lo) of one quad's multiples for
// blocks [0, nblocks) of a span, each block's four rows in one 32-bit word,
// row r in byte r; msum[j] gains the rows' m. lo is m's low byte, hi the
// high byte of m + 128.
HWY_INLINE void QuadCoefficients(const uint8_t* const* rows, const float* s, size_t scale_at,
                                 size_t stride, size_t nblocks, uint32_t* HWY_RESTRICT hi,
                                 uint32_t* HWY_RESTRICT lo, int32_t* HWY_RESTRICT msum) {
  static constexpr QuadByteIndex kIndex;
  const __m512i low_index = _mm512_load_si512(kIndex.at);
  const __m512i high_index = _mm512_add_epi8(low_index, _mm512_set1_epi8(1));
  const __m512i bias = _mm512_set1_epi16(128);
  for (size_t b = 0; b < nblocks; b += 16) {
    const size_t n = std::min<size_t>(16, nblocks - b);
    const size_t at = scale_at + stride * b;
    const __m512i m0 = RowMultiples16(rows[0] + at, stride, n, s[0]);
    const __m512i m1 = RowMultiples16(rows[1] + at, stride, n, s[1]);
    const __m512i m2 = RowMultiples16(rows[2] + at, stride, n, s[2]);
    const __m512i m3 = RowMultiples16(rows[3] + at, stride, n, s[3]);
    const __mmask16 valid = static_cast<__mmask16>((1u << n) - 1);
    const __m512i sum = _mm512_add_epi32(_mm512_add_epi32(m0, m1), _mm512_add_epi32(m2, m3));
    _mm512_mask_storeu_epi32(msum + b, valid,
                             _mm512_add_epi32(_mm512_maskz_loadu_epi32(valid, msum + b), sum));
    const __m512i m01 = _mm512_packs_epi32(m0, m1), m23 = _mm512_packs_epi32(m2, m3);
    _mm512_mask_storeu_epi32(lo + b, valid, _mm512_permutex2var_epi8(m01, low_index, m23));
    _mm512_mask_storeu_epi32(hi + b, valid,
                             _mm512_permutex2var_epi8(_mm512_add_epi16(m01, bias), high_index,
                                                      _mm512_add_epi16(m23, bias)));
  }
}

// Each 128-bit lane kb of the result holds block 4 * c + kb's word of `w`.
// Two permutes a quad and chunk beat a broadcast operand per block: with
// vpdpbusd's {1to16} (which a row layout of one block per vector would
// allow) a timing-only version ran at 22.3-22.8 GB/s against 26.2-26.8
// (Zen 4 VM, hot AxpyIntAdd over 512 Q4_0S rows 2048 wide in L2, best of
// six alternated runs).
HWY_INLINE __m512i ChunkWords(const uint32_t* w, size_t c) {
  const __m512i spread = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
  return _mm512_permutexvar_epi32(
      spread, _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 4 * c))));
}

// acc + the four u8 x i8 products of each 32-bit lane (vpdpbusd). Takes
// and returns the sums by value: bound to an array element by reference,
// GCC kept the whole array on the stack.
HWY_INLINE __m512i DotBytes(__m512i acc, __m512i u8, __m512i s8) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u8), "v"(s8));
  return acc;
}

// Four blocks' 16 nibble bytes of a Q4_0 row, 18 bytes apart from p on,
// in the 128-bit lanes of one vector (as Q4_0S keeps them): the first
// three picked out of one load, the fourth loaded into lane 3.
struct InterleavedIndex {
  alignas(64) uint8_t at[64];
  constexpr InterleavedIndex() : at() {
    for (size_t k = 0; k < 3; ++k) {
      for (size_t j = 0; j < 16; ++j) at[16 * k + j] = static_cast<uint8_t>(18 * k + j);
    }
  }
};
HWY_INLINE __m512i FourBlocksNibbles(const uint8_t* p) {
  static constexpr InterleavedIndex kIndex;
  const __m512i three =
      _mm512_permutexvar_epi8(_mm512_load_si512(kIndex.at), _mm512_loadu_si512(p));
  return _mm512_inserti32x4(three, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 54)), 3);
}

// One chunk of one pass: the pass's kQuads quads of rows added to the
// chunk's 16 vectors of sums (h and l: 128 int32 each), which stay in
// registers for the whole pass (a fixed count, so the loops unroll).
template <size_t kQuads, bool kSplit>
HWY_INLINE void QuadsChunk(const QuadRows& pass, const uint32_t (*chi)[kAxpyIntSpanBlocks],
                           const uint32_t (*clo)[kAxpyIntSpanBlocks], size_t at, size_t c,
                           int32_t* HWY_RESTRICT h, int32_t* HWY_RESTRICT l) {
  const __m512i low_nibbles = _mm512_set1_epi8(0x0f);
  const auto load = [&](const uint8_t* row) HWY_ATTR {
    return kSplit ? _mm512_loadu_si512(row + at) : FourBlocksNibbles(row + at);
  };
  __m512i ah[8], al[8];
  HWY_UNROLL(8)
  for (size_t v = 0; v < 8; ++v) {
    ah[v] = _mm512_loadu_si512(h + 16 * v);
    al[v] = _mm512_loadu_si512(l + 16 * v);
  }
  HWY_UNROLL(1)  // unrolled, the quads' loads ran out of registers
  for (size_t q = 0; q < kQuads; ++q) {
    const uint8_t* const* r4 = pass.rows + 4 * q;
    const __m512i r0 = load(r4[0]), r1 = load(r4[1]), r2 = load(r4[2]), r3 = load(r4[3]);
    const __m512i p01l = _mm512_unpacklo_epi8(r0, r1), p01h = _mm512_unpackhi_epi8(r0, r1);
    const __m512i p23l = _mm512_unpacklo_epi8(r2, r3), p23h = _mm512_unpackhi_epi8(r2, r3);
    // Byte i of each row's block, for i in [0, 4), [4, 8), [8, 12), [12, 16).
    const __m512i words[4] = {_mm512_unpacklo_epi16(p01l, p23l), _mm512_unpackhi_epi16(p01l, p23l),
                              _mm512_unpacklo_epi16(p01h, p23h), _mm512_unpackhi_epi16(p01h, p23h)};
    const __m512i wh = ChunkWords(chi[q], c), wl = ChunkWords(clo[q], c);
    HWY_UNROLL(4)
    for (size_t i = 0; i < 4; ++i) {
      const __m512i low = _mm512_and_si512(words[i], low_nibbles);
      ah[2 * i] = DotBytes(ah[2 * i], low, wh);
      al[2 * i] = DotBytes(al[2 * i], low, wl);
      ah[2 * i + 1] = DotBytes(ah[2 * i + 1], words[i], wh);
      al[2 * i + 1] = DotBytes(al[2 * i + 1], words[i], wl);
    }
  }
  HWY_UNROLL(8)
  for (size_t v = 0; v < 8; ++v) {
    _mm512_storeu_si512(h + 16 * v, ah[v]);
    _mm512_storeu_si512(l + 16 * v, al[v]);
  }
}

// The quad form for AddPasses: hi and lo hold 128 int32 per chunk
// (whole chunks only).
template <bool kSplit>
struct QuadForm {
  int32_t* hi;
  int32_t* lo;
  // The form for the sums `ints` int32 further on (another part's window).
  QuadForm Shifted(size_t ints) const { return {hi + ints, lo + ints}; }
  static HWY_INLINE void Coefficients(const uint8_t* const* rows, const float* s, size_t scale_at,
                                      size_t stride, size_t nblocks, uint32_t* HWY_RESTRICT whi,
                                      uint32_t* HWY_RESTRICT wlo, int32_t* HWY_RESTRICT msum) {
    QuadCoefficients(rows, s, scale_at, stride, nblocks, whi, wlo, msum);
  }
  template <size_t kQuads>
  HWY_INLINE void Chunk(const QuadRows& pass, const uint32_t (*whi)[kAxpyIntSpanBlocks],
                        const uint32_t (*wlo)[kAxpyIntSpanBlocks], const Q4_0Layout& /*layout*/,
                        size_t nibbles_at, size_t s0, size_t /*span*/, size_t c) const {
    const size_t chunk = s0 / kQuadChunkBlocks + c;  // in the window
    QuadsChunk<kQuads, kSplit>(pass, whi, wlo, nibbles_at + kQuadChunkBytes<kSplit> * c, c,
                               hi + kQuadChunkCols * chunk, lo + kQuadChunkCols * chunk);
  }
};

// y for whole chunks [0, nchunks) from the quad form's sums. For each
// chunk and group i of four bytes, lane 4 * kb + t of the low and whole
// sums' vectors is byte 4 * i + t of block kb: in int64, 256 * hi + lo,
// less the nibbles' -8 (8 times the block's sum of m), times the step in
// double, rounded to float and added to y, eight lanes at a time. These
// are the operations of the scalar loop this replaced (every conversion
// exact or rounded to nearest, one rounding to float per element), so
// the bits are the same. Against that loop, with the rows in cache (Zen 4
// VM, six alternated rounds of `gather_bench --types q4_0s --shapes
// 6144x384,768x768 --parts 1 --kernels axpy-int --rotate-mib 1 --threads
// 1 --clock cpu`): rows 6144 wide (the 125M shape's dip-input records)
// 21.6-26.0 -> 27.4-27.9 GB/s, a quarter of them 18.8-19.0 -> 22.4-23.2;
// a quarter of rows 768 wide 14.1-15.3 -> 14.5-15.8.
HWY_INLINE void FinishQuads(size_t nchunks, const int32_t* hi, const int32_t* lo,
                            const int32_t* msum, float step, float* y) {
  const __m512d dstep = _mm512_set1_pd(static_cast<double>(step));
  // Eight lanes' blocks: lanes 0..3 block 2h, lanes 4..7 block 2h + 1.
  const __m256i block_of_lane[2] = {_mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1),
                                    _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3)};
  // Eight sums (int32) at p as int64.
  const auto wide = [](const int32_t* p) HWY_ATTR {
    return _mm512_cvtepi32_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  };
  // float(step * v) for eight int64.
  const auto scaled = [&](__m512i v) HWY_ATTR {
    return _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_cvtepi64_pd(v), dstep));
  };
  // y[0..4) += the four floats of v's 128-bit half `upper`.
  const auto add4 = [](float* p, __m256 v, bool upper) HWY_ATTR {
    const __m128 part = upper ? _mm256_extractf128_ps(v, 1) : _mm256_castps256_ps128(v);
    _mm_storeu_ps(p, _mm_add_ps(_mm_loadu_ps(p), part));
  };
  for (size_t c = 0; c < nchunks; ++c) {
    const __m256i eights32 = _mm256_slli_epi32(
        _mm256_castsi128_si256(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(msum + kQuadChunkBlocks * c))),
        3);
    for (size_t h = 0; h < 2; ++h) {
      const __m512i eights =
          _mm512_cvtepi32_epi64(_mm256_permutevar8x32_epi32(eights32, block_of_lane[h]));
      for (size_t i = 0; i < 4; ++i) {
        const size_t at = kQuadChunkCols * c + 32 * i + 8 * h;  // lanes 8h..8h+7
        const __m512i low = _mm512_add_epi64(_mm512_slli_epi64(wide(hi + at), 8), wide(lo + at));
        const __m512i whole =
            _mm512_add_epi64(_mm512_slli_epi64(wide(hi + at + 16), 8), wide(lo + at + 16));
        // whole - low is 16 times the high nibbles' sum: the shift is exact.
        const __m256 yl = scaled(_mm512_sub_epi64(low, eights));
        const __m256 yh =
            scaled(_mm512_sub_epi64(_mm512_srai_epi64(_mm512_sub_epi64(whole, low), 4), eights));
        for (size_t j = 0; j < 2; ++j) {  // block 2h + j
          float* yb = y + 32 * (kQuadChunkBlocks * c + 2 * h + j) + 4 * i;
          add4(yb, yl, j == 1);
          add4(yb + 16, yh, j == 1);
        }
      }
    }
  }
}

#endif  // SPARROW_INT8_VNNI

#ifdef SPARROW_INT8_VNNI_RUNTIME
// The block form: the quad form's sums in 256-bit vectors, for x86 targets
// below AVX3_DL on CPUs with an 8-bit dot product (AVX-VNNI's VEX vpdpbusd
// on AVX2, AVX-512 VNNI's on AVX3; TargetHasVnni), and with pmaddubsw on
// AVX2 CPUs without (QuadsBlockPairs). One block (32 columns)
// a step: each of a quad's four rows' 16 nibble bytes is loaded into both
// 128-bit halves of a vector, so that byte and word unpacks interleave the
// rows as in the quad form and a blend of two of their results puts bytes
// 4j..4j+3 of every row in half 0 and 4j+4..4j+7 in half 1. The VEX form
// reaches only ymm0-15, which is why a step is one block: its eight vectors
// of sums (below) stay in registers for a pass's quads. Both Q4_0S and Q4_0
// rows: a block's nibbles are 16 bytes either way.
//
// Measured on the 2 vCPU Intel Xeon (Emerald Rapids) VM with dispatch
// forced to a target (SPARROW_SIMD_TARGET), one thread, `gather_bench
// --types q4_0s,q4_0 --kernels axpy,axpy-int --clock cpu`, three rounds,
// GB/s of AxpyRows' fp32 chain against the block form. AVX2 (AVX-VNNI): in
// L2 (`--shapes 2048x512,768x1024 --parts 1 --rotate-mib 1`) Q4_0S 7.3
// against 14.9-16.4, Q4_0 5.8-5.9 against 13.2-13.7; from DRAM (`--shapes
// 2048x5632,768x3072`) Q4_0S rows 2048 wide 6.1-7.0 against 8.7-9.6, 768
// wide 6.9-7.1 against 10.7-11.8, a random quarter 3.7-6.8 against 8.0-8.4
// and 5.2-5.8 against 7.0-8.7; Q4_0 4.3-5.5 against 7.2-8.2 and 5.7-5.8
// against 8.6-8.8. AVX3 (AVX-512 VNNI), whose AxpyRows takes 512 bits and
// a table for the nibbles: in L2 faster (Q4_0S 8.5-13.1 against
// 11.0-18.2), from DRAM not (rows 2048 wide 9.8-10.6 against 9.0-9.9, a
// random quarter 8.3-9.1 against 7.6-8.5; 768 wide 7.0-8.7 against
// 9.2-11.9), and `sparrow bench` on 1.1B-shaped Q4_0S dip bundle the same
// on both (17.5-18.5 tok/s): AxpyIntFast stays false there.
//
// The sums of block j are the 64 int32 at 64 * j: vector 4p + 2w + h
// (p < 2, w = 0 low nibbles, 1 whole bytes, h = 0 for hi, 1 for lo), half
// g, lane t, holds the sum for byte 4 * (2p + g) + t; msum as in the quad
// form.
inline constexpr size_t kBlockSums = 64;

// acc + the four u8 x i8 products of each 32-bit lane (int8_dot-inl.h's
// vpdpbusd, VEX on AVX2).
HWY_INLINE __m256i DotBytes256(__m256i acc, __m256i u8, __m256i s8) {
  using D = hn::CappedTag<uint8_t, 32>;
  using Dots = VnniByteDotSum<D>;
  return Dots::Add(D(), Dots::Acc{acc}, hn::Vec<D>{u8}, hn::Vec<D>{s8}).raw;
}

// Multiples of eight blocks' f16 scales (in `halves`) of one row, as
// RowMultiples computes them: clamped, rounded to nearest even by the
// conversion in the default rounding mode, NaN as 0.
HWY_INLINE __m256i RowMultiples8(__m128i halves, float s) {
  const __m256 p = _mm256_mul_ps(_mm256_cvtph_ps(halves), _mm256_set1_ps(s));
  const __m256 limit = _mm256_set1_ps(static_cast<float>(kAxpyIntMaxMultiple));
  const __m256 finite = _mm256_and_ps(p, _mm256_cmp_ps(p, p, _CMP_ORD_Q));
  return _mm256_cvtps_epi32(
      _mm256_min_ps(_mm256_max_ps(finite, _mm256_sub_ps(_mm256_setzero_ps(), limit)), limit));
}

// The f16 scales of blocks [0, n) (n <= 8; the rest zero) of one row:
// Q4_0S's 2 bytes apart, of which a 16-byte load stays inside the row (its
// nibbles come after them), Q4_0's 18 apart: eight from word blends
// (HalfScales8), a last group of fewer copied word by word. Both replace
// vpgatherdd, which AMD's cores microcode: 2 vCPU AMD EPYC (Zen 3) VM,
// AVX2 without AVX-VNNI (the pmaddubsw block form), one thread, four
// alternated rounds of `gather_bench --types q4_0,q4_0s --shapes
// 2048x5632,768x3072 --kernels axpy-int --clock cpu`, every row in order,
// rounds in the VM's slow mode left out: Q4_0 7.2-7.6 -> 8.3-8.9 GB/s
// (both widths), Q4_0S (no gather) unchanged; `sparrow bench -p 0 -t 1` on
// dip bundles of Q4_0 records (`convert --type q4_0`), three alternated
// rounds: 125M-shaped `-n 64` 99.5-105.0 -> 104.3-120.5 tok/s, 1.1B-shaped
// `-n 32` 15.2-15.6 -> 17.8-18.7. Not measured on Intel CPUs, whose
// gathers are not microcoded.
HWY_INLINE __m128i RowHalves8(const uint8_t* scales, size_t stride, size_t n) {
  if (stride == 2) return _mm_loadu_si128(reinterpret_cast<const __m128i*>(scales));
  if (n == 8) return HalfScales8(scales, stride);
  alignas(16) uint16_t halves[8] = {};
  for (size_t i = 0; i < n; ++i) std::memcpy(&halves[i], scales + stride * i, 2);
  return _mm_load_si128(reinterpret_cast<const __m128i*>(halves));
}

// Bytes 2i (the low byte of int16 i, a row's block i in the first of a
// pair of packed rows) and 2i + 8 (the second row's) to bytes 2i, 2i + 1,
// for i < 4 in each 128-bit half; +1 for the high bytes.
HWY_INLINE __m256i PairBytes(bool high) {
  const int h = high ? 1 : 0;
  return _mm256_setr_epi8(0 + h, 8 + h, 2 + h, 10 + h, 4 + h, 12 + h, 6 + h, 14 + h, -1, -1, -1, -1,
                          -1, -1, -1, -1, 0 + h, 8 + h, 2 + h, 10 + h, 4 + h, 12 + h, 6 + h, 14 + h,
                          -1, -1, -1, -1, -1, -1, -1, -1);
}

// The hi and lo words (row r's byte in byte r) of one quad's multiples for
// `n` blocks from `scale_at` on; msum[j] gains the rows' m.
HWY_INLINE void BlockCoefficients(const uint8_t* const* rows, const float* s, size_t scale_at,
                                  size_t stride, size_t n, uint32_t* HWY_RESTRICT hi,
                                  uint32_t* HWY_RESTRICT lo, int32_t* HWY_RESTRICT msum) {
  const __m256i lo_pairs = PairBytes(false), hi_pairs = PairBytes(true);
  const __m256i bias = _mm256_set1_epi16(128);
  for (size_t j = 0; j < n; j += 8) {
    const size_t k = std::min<size_t>(8, n - j);
    __m256i m[4];
    for (size_t r = 0; r < 4; ++r) {
      m[r] = RowMultiples8(RowHalves8(rows[r] + scale_at + stride * j, stride, k), s[r]);
    }
    // Half g: blocks 4g..4g+3 of rows 0, 1 (and 2, 3) as int16.
    const __m256i m01 = _mm256_packs_epi32(m[0], m[1]), m23 = _mm256_packs_epi32(m[2], m[3]);
    const __m256i word_lo = _mm256_unpacklo_epi16(_mm256_shuffle_epi8(m01, lo_pairs),
                                                  _mm256_shuffle_epi8(m23, lo_pairs));
    const __m256i word_hi =
        _mm256_unpacklo_epi16(_mm256_shuffle_epi8(_mm256_add_epi16(m01, bias), hi_pairs),
                              _mm256_shuffle_epi8(_mm256_add_epi16(m23, bias), hi_pairs));
    const __m256i sum =
        _mm256_add_epi32(_mm256_add_epi32(m[0], m[1]), _mm256_add_epi32(m[2], m[3]));
    if (j + 8 <= n) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo + j), word_lo);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi + j), word_hi);
      __m256i* ms = reinterpret_cast<__m256i*>(msum + j);
      _mm256_storeu_si256(ms, _mm256_add_epi32(_mm256_loadu_si256(ms), sum));
    } else {  // the last blocks: their lanes only
      alignas(32) uint32_t wl[8], wh[8];
      alignas(32) int32_t sm[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(wl), word_lo);
      _mm256_store_si256(reinterpret_cast<__m256i*>(wh), word_hi);
      _mm256_store_si256(reinterpret_cast<__m256i*>(sm), sum);
      for (size_t i = 0; j + i < n; ++i) {
        lo[j + i] = wl[i];
        hi[j + i] = wh[i];
        msum[j + i] += sm[i];
      }
    }
  }
}

// One block's 16 nibble bytes of a quad's four rows (r4, `at` bytes in),
// each broadcast into both 128-bit halves and interleaved by byte and word
// unpacks and a blend: w[0] holds bytes 0-3 | 4-7 of the four rows, w[1]
// bytes 8-11 | 12-15, each 32-bit lane one byte of every row.
struct QuadBlockWords {
  __m256i w[2];
};
HWY_INLINE QuadBlockWords InterleaveQuadBlock(const uint8_t* const* r4, size_t at) {
  const auto load = [&](size_t r) HWY_ATTR {
    return _mm256_broadcastsi128_si256(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(r4[r] + at)));
  };
  const __m256i x0 = load(0), x1 = load(1), x2 = load(2), x3 = load(3);
  const __m256i p01l = _mm256_unpacklo_epi8(x0, x1), p01h = _mm256_unpackhi_epi8(x0, x1);
  const __m256i p23l = _mm256_unpacklo_epi8(x2, x3), p23h = _mm256_unpackhi_epi8(x2, x3);
  return {{_mm256_blend_epi32(_mm256_unpacklo_epi16(p01l, p23l), _mm256_unpackhi_epi16(p01l, p23l),
                              0xF0),
           _mm256_blend_epi32(_mm256_unpacklo_epi16(p01h, p23h), _mm256_unpackhi_epi16(p01h, p23h),
                              0xF0)}};
}

// Block j (of the span) of one pass: its kQuads quads added to the
// block's eight vectors of sums at `sums`.
template <size_t kQuads>
HWY_INLINE void QuadsBlock(const QuadRows& pass, const uint32_t (*bhi)[kAxpyIntSpanBlocks],
                           const uint32_t (*blo)[kAxpyIntSpanBlocks], size_t at, size_t j,
                           int32_t* HWY_RESTRICT sums) {
  const __m256i low_nibbles = _mm256_set1_epi8(0x0f);
  __m256i acc[8];
  for (size_t v = 0; v < 8; ++v) {
    acc[v] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sums + 8 * v));
  }
  for (size_t q = 0; q < kQuads; ++q) {
    const QuadBlockWords words = InterleaveQuadBlock(pass.rows + 4 * q, at);
    const __m256i* w = words.w;
    const __m256i wh = _mm256_set1_epi32(static_cast<int>(bhi[q][j]));
    const __m256i wl = _mm256_set1_epi32(static_cast<int>(blo[q][j]));
    for (size_t p = 0; p < 2; ++p) {
      const __m256i low = _mm256_and_si256(w[p], low_nibbles);
      acc[4 * p + 0] = DotBytes256(acc[4 * p + 0], low, wh);
      acc[4 * p + 1] = DotBytes256(acc[4 * p + 1], low, wl);
      acc[4 * p + 2] = DotBytes256(acc[4 * p + 2], w[p], wh);
      acc[4 * p + 3] = DotBytes256(acc[4 * p + 3], w[p], wl);
    }
  }
  for (size_t v = 0; v < 8; ++v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(sums + 8 * v), acc[v]);
  }
}

// QuadsBlock where the CPU has no 8-bit dot product into int32 (AVX2
// without AVX-VNNI): pmaddubsw multiplies the nibbles, low and high apart
// (a whole byte times a multiple's byte would saturate its int16 pairs),
// into int16 sums that a pass's quads add up (at most 4 * 2 * 15 * 128 in
// magnitude), and pmaddwd then folds each pair into the block's int32 sums:
// the low columns' as they are, the whole bytes' as 16 times the high
// nibbles' plus the low ones'. The same sums, so the same bits, as the
// vpdpbusd form. Against AxpyRows' fp32 chain, on the Emerald Rapids VM with
// dispatch forced to AVX2 and AVX-VNNI hidden (`gather_bench --types
// q4_0s,q4_0 --kernels axpy,axpy-int --threads 1 --clock cpu
// --hide-cpu-extensions`, three rounds): in L2 (`--shapes 2048x512,768x1024
// --parts 1 --rotate-mib 1`) Q4_0S 4.6-7.1 -> 7.5-10.4 GB/s (2048 wide) and
// 4.7-6.6 -> 7.7-11.3 (768), Q4_0 4.0-5.8 -> 6.4-8.9; from DRAM, every row
// in order, Q4_0S 4.8-6.7 -> 6.4-8.0 (2048) and 5.7-6.6 -> 9.1-9.2 (768,
// two rounds; the third ran in a slow spell), Q4_0 4.1-5.5 -> 6.4-8.0
// (2048); a random quarter of rows 2048 wide, Q4_0S 4.5-6.6 -> 5.9-7.4 and
// Q4_0 3.6-5.5 -> 6.3-7.7. `sparrow
// bench -p 0 -t 1` (extensions hidden through HideCpuExtensionsForTest in a
// throwaway build): 125M-shaped Q4_0S dip bundle `-n 64` 92.8-98.0 ->
// 109.9-134.7 tok/s (four rounds), 1.1B-shaped `-n 32` 9.9-11.5 ->
// 13.5-15.5 (three).
template <size_t kQuads>
HWY_INLINE void QuadsBlockPairs(const QuadRows& pass, const uint32_t (*bhi)[kAxpyIntSpanBlocks],
                                const uint32_t (*blo)[kAxpyIntSpanBlocks], size_t at, size_t j,
                                int32_t* HWY_RESTRICT sums) {
  static_assert(kQuads <= kQuadsPerPass && kQuadsPerPass * 2 * 15 * 128 <= 32767);
  const __m256i low_nibbles = _mm256_set1_epi8(0x0f);
  __m256i acc[8];  // as QuadsBlock's, the whole bytes' replaced by the high nibbles'
  for (size_t v = 0; v < 8; ++v) acc[v] = _mm256_setzero_si256();
  for (size_t q = 0; q < kQuads; ++q) {
    const QuadBlockWords words = InterleaveQuadBlock(pass.rows + 4 * q, at);
    const __m256i* w = words.w;
    const __m256i wh = _mm256_set1_epi32(static_cast<int>(bhi[q][j]));
    const __m256i wl = _mm256_set1_epi32(static_cast<int>(blo[q][j]));
    for (size_t p = 0; p < 2; ++p) {
      const __m256i low = _mm256_and_si256(w[p], low_nibbles);
      const __m256i high = _mm256_and_si256(_mm256_srli_epi16(w[p], 4), low_nibbles);
      acc[4 * p + 0] = _mm256_add_epi16(acc[4 * p + 0], _mm256_maddubs_epi16(low, wh));
      acc[4 * p + 1] = _mm256_add_epi16(acc[4 * p + 1], _mm256_maddubs_epi16(low, wl));
      acc[4 * p + 2] = _mm256_add_epi16(acc[4 * p + 2], _mm256_maddubs_epi16(high, wh));
      acc[4 * p + 3] = _mm256_add_epi16(acc[4 * p + 3], _mm256_maddubs_epi16(high, wl));
    }
  }
  const __m256i ones = _mm256_set1_epi16(1), sixteen = _mm256_set1_epi16(16);
  const auto add = [&](size_t v, __m256i x) HWY_ATTR {
    __m256i* at_v = reinterpret_cast<__m256i*>(sums + 8 * v);
    _mm256_storeu_si256(at_v, _mm256_add_epi32(_mm256_loadu_si256(at_v), x));
  };
  for (size_t p = 0; p < 2; ++p) {
    for (size_t b = 0; b < 2; ++b) {  // the multiples' high, then low byte
      const __m256i low = _mm256_madd_epi16(acc[4 * p + b], ones);
      add(4 * p + b, low);
      add(4 * p + 2 + b, _mm256_add_epi32(_mm256_madd_epi16(acc[4 * p + 2 + b], sixteen), low));
    }
  }
}

// The block form for AddPasses: 64 int32 a block at `sums`; a span's last
// chunk may be short.
template <bool kVnni>
struct BlockForm {
  int32_t* sums;
  // The form for the sums `ints` int32 further on (another part's window).
  BlockForm Shifted(size_t ints) const { return {sums + ints}; }
  static HWY_INLINE void Coefficients(const uint8_t* const* rows, const float* s, size_t scale_at,
                                      size_t stride, size_t nblocks, uint32_t* HWY_RESTRICT whi,
                                      uint32_t* HWY_RESTRICT wlo, int32_t* HWY_RESTRICT msum) {
    BlockCoefficients(rows, s, scale_at, stride, nblocks, whi, wlo, msum);
  }
  template <size_t kQuads>
  HWY_INLINE void Chunk(const QuadRows& pass, const uint32_t (*whi)[kAxpyIntSpanBlocks],
                        const uint32_t (*wlo)[kAxpyIntSpanBlocks], const Q4_0Layout& layout,
                        size_t nibbles_at, size_t s0, size_t span, size_t c) const {
    const size_t end = std::min(span, kQuadChunkBlocks * (c + 1));
    for (size_t j = kQuadChunkBlocks * c; j < end; ++j) {
      if constexpr (kVnni) {
        QuadsBlock<kQuads>(pass, whi, wlo, nibbles_at + layout.nibble_stride * j, j,
                           sums + kBlockSums * (s0 + j));
      } else {
        QuadsBlockPairs<kQuads>(pass, whi, wlo, nibbles_at + layout.nibble_stride * j, j,
                                sums + kBlockSums * (s0 + j));
      }
    }
  }
};

// y for blocks [0, nblocks) from the block form's sums, as FinishQuads:
// in int64, 256 * hi + lo less 8 times the block's sum of m, times the step
// in double, rounded to float once.
HWY_INLINE void FinishBlockQuads(size_t nblocks, const int32_t* sums, const int32_t* msum,
                                 float step, float* y) {
  const double d = static_cast<double>(step);
  for (size_t j = 0; j < nblocks; ++j) {
    const int32_t* b = sums + kBlockSums * j;
    const int64_t eights = int64_t{8} * msum[j];
    for (size_t p = 0; p < 2; ++p) {
      for (size_t g = 0; g < 2; ++g) {
        for (size_t t = 0; t < 4; ++t) {
          const size_t lane = 4 * g + t, i = 4 * (2 * p + g) + t;
          const int64_t low = int64_t{256} * b[8 * (4 * p + 0) + lane] + b[8 * (4 * p + 1) + lane];
          const int64_t whole =
              int64_t{256} * b[8 * (4 * p + 2) + lane] + b[8 * (4 * p + 3) + lane];
          y[32 * j + i] += static_cast<float>(d * static_cast<double>(low - eights));
          y[32 * j + i + 16] +=
              static_cast<float>(d * static_cast<double>((whole - low) / 16 - eights));
        }
      }
    }
  }
}
#endif  // SPARROW_INT8_VNNI_RUNTIME

// Where a window's sums keep what: hi and lo `width` int32 each (the
// natural and quad forms; the block form's 64 int32 a block in their
// place), then one per block (the quad and block forms' sums of m). The
// quad form takes the window's whole chunks and the natural form the blocks
// after them; the block form takes every block.
struct SumsLayout {
  size_t quad_chunks;  // 0 where the target has no quad form
  size_t width;
  bool blocks = false;  // the block form
  template <class T>  // int32_t or const int32_t
  T* hi(T* sums) const {
    return sums;
  }
  template <class T>
  T* lo(T* sums) const {
    return sums + width;
  }
  template <class T>
  T* msum(T* sums) const {
    return sums + 2 * width;
  }
  size_t natural_at() const { return blocks ? width : 128 * quad_chunks; }
  size_t ints() const { return AxpyIntSumsInts(width); }
};

HWY_INLINE SumsLayout LayoutFor(size_t width) {
#if defined(SPARROW_INT8_VNNI)
  return {width / kQuadChunkCols, width};
#elif defined(SPARROW_INT8_VNNI_RUNTIME)
  return {0, width, TargetHasVnni() || HWY_TARGET == HWY_AVX2};
#else
  return {0, width};
#endif
}

// Sums of the window [first, first + width) of each of the `parts` parts of
// the rows (axpy_int.h: AxpyIntAdd), in one sweep over the rows where the
// quad or block form takes them.
HWY_INLINE void AxpyIntAddImpl(TensorType type, const uint8_t* const* rows, size_t count,
                               size_t cols, size_t first, size_t width, const float* a,
                               float inv_step, int32_t* sums, size_t offset, size_t parts) {
  const SumsLayout s = LayoutFor(width);
  const size_t row_blocks = cols / 32, b0 = first / 32;
  const size_t part_bytes = sizeof(BlockQ4_0) * row_blocks;  // Q4_0 and Q4_0S alike
  const size_t stride = s.ints();                            // one part's sums
  const bool split = type == TensorType::kQ4_0S;
#ifdef SPARROW_INT8_VNNI
  if (s.quad_chunks > 0) {
    const size_t nblocks = kQuadChunkBlocks * s.quad_chunks;
    if (split) {
      AddPasses<true>(rows, offset, count, row_blocks, b0, nblocks, parts, part_bytes, stride, a,
                      inv_step, s.msum(sums), QuadForm<true>{s.hi(sums), s.lo(sums)});
    } else {
      AddPasses<false>(rows, offset, count, row_blocks, b0, nblocks, parts, part_bytes, stride, a,
                       inv_step, s.msum(sums), QuadForm<false>{s.hi(sums), s.lo(sums)});
    }
  }
#endif
#ifdef SPARROW_INT8_VNNI_RUNTIME
  if (s.blocks) {
    const size_t nblocks = width / 32;
    int32_t* msum = s.msum(sums);
    const auto add = [&](auto split_tag, auto form) HWY_ATTR {
      AddPasses<decltype(split_tag)::value>(rows, offset, count, row_blocks, b0, nblocks, parts,
                                            part_bytes, stride, a, inv_step, msum, form);
    };
    if (TargetHasVnni()) {
      if (split) {
        add(std::true_type(), BlockForm<true>{sums});
      } else {
        add(std::false_type(), BlockForm<true>{sums});
      }
    } else if (split) {
      add(std::true_type(), BlockForm<false>{sums});
    } else {
      add(std::false_type(), BlockForm<false>{sums});
    }
  }
#endif
  const size_t done = s.natural_at();
  if (done < width) {
    for (size_t p = 0; p < parts; ++p) {
      int32_t* part = sums + p * stride;
      AddNatural(rows, offset + p * part_bytes, split, count, row_blocks, b0 + done / 32,
                 (width - done) / 32, a, inv_step, s.hi(part) + done, s.lo(part) + done);
    }
  }
}

HWY_INLINE void AxpyIntFinishImpl(size_t width, const int32_t* sums, float step, float* y) {
  const SumsLayout s = LayoutFor(width);
#ifdef SPARROW_INT8_VNNI
  FinishQuads(s.quad_chunks, s.hi(sums), s.lo(sums), s.msum(sums), step, y);
#endif
#ifdef SPARROW_INT8_VNNI_RUNTIME
  if (s.blocks) FinishBlockQuads(width / 32, sums, s.msum(sums), step, y);
#endif
  const size_t done = s.natural_at();
  FinishNatural(width - done, s.hi(sums) + done, s.lo(sums) + done, step, y + done);
}

HWY_INLINE bool AxpyIntFastImpl() {
#if defined(SPARROW_INT8_VNNI)
  return true;
#elif defined(SPARROW_INT8_VNNI_RUNTIME)
  // AVX3's AxpyRows (512-bit, Q4_0NibbleTable) kept up with the block form
  // from DRAM (the block form's comment has the figures).
  // AVX2 takes the block form with vpdpbusd where the CPU has AVX-VNNI and
  // with pmaddubsw elsewhere (QuadsBlockPairs has the figures, from a CPU
  // with AVX-VNNI hidden). On one without it, a 2 vCPU AMD EPYC (Zen 3)
  // VM, one thread, 125M-shaped synthetic Q4_0S bundles, `sparrow bench -p
  // 0 -n 64 -t 1 -r 3` against a throwaway build that answered false here,
  // three alternated rounds: neuron layout 137.2-137.4 tok/s with the fp32
  // chain against 142.2-150.3, dip layout 104.8-106.5 against 124.1-126.1.
  return HWY_TARGET == HWY_AVX2;
#else
  return false;
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::simd
HWY_AFTER_NAMESPACE();

#endif  // SPARROW_SIMD_AXPY_INT_INL_H_
