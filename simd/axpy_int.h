// AxpyRows in integers: one token's weighted sum of Q4_0S or Q4_0 rows,
//   y[i] += sum_k a[k] * rows[k][i],
// with the products kept as exact integer sums instead of one fp32
// multiply-add per term (simd/gather.h: AxpyRows).
//
// Each row's coefficient times each of its blocks' scales, a[k] * d[k][b],
// is rounded to a whole multiple m[k][b] of one step S that the caller picks
// for the whole token (|m| <= kAxpyIntMaxMultiple: S at least
// max |a * d| / kAxpyIntMaxMultiple, so m keeps 15 bits of the largest
// term). The sums of m * (q - 8) are integers, added up over any number of
// calls, and AxpyIntFinish adds S times them to y. Integer sums are exact, so
// the result does not depend on the order of the rows, on how they were
// split into calls or between threads, or on the SIMD target: it is the
// same bits everywhere (axpy_int_test.cc checks it against the scalar
// reference). What it gives up against AxpyRows is the rounding of each
// a * d to 1/65278 of the largest one (a relative error of 2^-16 for the
// largest terms, more for small ones).
//
// Why: AxpyRows' fp32 chain costs a conversion and a multiply-add per
// element and row, which bounds it below the memory's speed with the rows
// in cache (gather_bench). Here the target's 8-bit dot product
// (vpdpbusd on x86 with AVX-512 VNNI or AVX-VNNI; pmaddubsw on other AVX2
// CPUs) multiplies four rows' bytes at once.
//
// The sums live in a buffer of AxpyIntSumsInts(width) int32 that the
// caller zeroes before a token's first call; its layout belongs to the SIMD
// target, so one token's calls and its Finish run on the same target (as
// every call in a process does), over the same column window.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "base/tensor_type.h"

namespace sparrow::simd {

// The largest |m|: 127 * 256 + 127, so that m splits into two signed bytes
// (m = 256 * hi + lo, |hi|, |lo| <= 127) for 8-bit dot products.
inline constexpr int32_t kAxpyIntMaxMultiple = 32639;
// The most rows one token's sums may take over all its calls: the int32
// sums hold 65536 rows' terms of up to 127 * 255 each.
inline constexpr size_t kAxpyIntMaxRows = 65536;

// Where the sums read sixteen rows side by side (the quad and block forms),
// each row of a pass is the next step of one of sixteen streams
// (AxpyIntPassOrder), and the kernel prefetches each stream (into L2) a
// fixed distance ahead of where it reads: kAxpyIntPrefetchLeadBytes past
// what it must have of a row when the row's pass starts, which is a Q4_0S
// row's scales (its nibbles are then read in order) and a plain Q4_0 row
// whole (its scales lie among its nibbles). The distance is counted in the
// bytes of a row's stream (AxpyIntStreamBytes) and reaches at most
// kAxpyIntMaxPassesAhead passes ahead. simd/axpy_int-inl.h, AddPasses, has
// the measurements.
inline constexpr size_t kAxpyIntPrefetchLeadBytes = 256;
inline constexpr size_t kAxpyIntMaxPassesAhead = 4;

inline size_t AxpyIntWholeLines(size_t bytes) { return (bytes + 63) / 64 * 64; }
// The stream of a row over `blocks` blocks of a sweep, in whole 64-byte
// lines: Q4_0S (split) rows' scales then their nibbles, each part from a
// line's start; plain Q4_0 rows' blocks.
inline size_t AxpyIntScaleStreamBytes(bool split, size_t blocks) {
  return split ? AxpyIntWholeLines(2 * blocks) : 0;
}
inline size_t AxpyIntStreamBytes(bool split, size_t blocks) {
  return split ? AxpyIntScaleStreamBytes(true, blocks) + AxpyIntWholeLines(16 * blocks)
               : AxpyIntWholeLines(18 * blocks);
}
// The prefetch distance in bytes of that stream (a multiple of 64).
inline size_t AxpyIntPrefetchDistance(bool split, size_t blocks) {
  return (split ? AxpyIntScaleStreamBytes(true, blocks) : AxpyIntStreamBytes(false, blocks)) +
         kAxpyIntPrefetchLeadBytes;
}

// The order in which the sixteen-row forms (the quad and block forms of
// simd/axpy_int-inl.h) take a call's rows, and gather_bench's `read-int`
// pattern with them: the list is cut into kParts parts of about equal
// length (staggered, below), and each pass takes the next row of each part
// in turn (skipping rows whose coefficient is zero; when parts run out,
// the rest give more than one row to a pass, so every pass but the last
// has sixteen rows). Each part is read in its own order, so rows that lie
// in order in memory (a unit cache's rows) are read as sixteen sequential
// streams, which the hardware prefetchers follow, instead of sixteen
// consecutive rows side by side, whose lines they do not. Measured on a
// 2 vCPU Emerald Rapids VM (AVX3_DL), one thread, `gather_bench --types
// q4_0s --kernels axpy-int,read-int --clock cpu`, alternated: see
// simd/axpy_int-inl.h, AddPasses. The sums are exact, so the order changes
// no bit of them.
//
// A pass reads its sixteen rows side by side, so where the rows lie at a
// fixed stride the sixteen streams stay the same distance apart, and where
// that distance is a multiple of 4 KiB every pass's lines fall in the same
// set of the L1 cache (64 sets of 64-byte lines on x86; 8 ways on Zen 3
// and Zen 4): rows 2048 wide (1152 bytes as Q4_0S) in a list of 5632, the
// 1.1B shape's FFN, are 352 rows = 99 x 4 KiB a part apart. So part j
// starts j * shift rows after the even cut, with the shift (0 to
// MaxShift) that puts the parts' first rows in the most sets. 2 vCPU AMD
// EPYC (Zen 3) VM, AVX2 (the block form with pmaddubsw), one thread,
// `gather_bench --types q4_0s --shapes 2048x5632,2048x5648,2048x5616
// --kernels axpy-int,read-int --clock cpu`, every row in order, before:
// 5.0 GB/s for 5632 rows against 7.5-8.0 for 5648 and 7.7-7.8 for 5616
// (read-int 85-90% of the four-stream probe against 104-122%).
class AxpyIntPassOrder {
 public:
  static constexpr size_t kParts = 16;
  static constexpr size_t kMaxShift = 3;

  // Rows [0, count) of a list whose coefficients are `a` (null: all
  // nonzero), at `rows` (null: the parts are the even cut).
  AxpyIntPassOrder(size_t count, const float* a, const uint8_t* const* rows) : a_(a) {
    const size_t shift = rows == nullptr ? 0 : Shift(count, rows);
    for (size_t j = 0; j < kParts; ++j) {
      end_[j] = j + 1 == kParts ? count : Start(count, j + 1, shift);
      next_[j] = Skip(j == 0 ? 0 : end_[j - 1], end_[j]);
      if (next_[j] < end_[j]) ++live_;
    }
  }

  // Where part j starts: the even cut moved j * shift rows on. Shifts
  // are at most MaxShift(count), so that every part keeps rows.
  static size_t Start(size_t count, size_t j, size_t shift) {
    return count * j / kParts + j * shift;
  }
  // The largest shift for a list of `count` rows: kMaxShift, less for
  // lists under kParts * kParts * kMaxShift rows, 0 under kParts * kParts.
  // The last part, count - Start(count, kParts - 1, shift), then keeps at
  // least count / (kParts * kParts) rows. Lists under 1024 rows were once
  // never staggered, yet they are common: each thread's share of a token's
  // rows (ops::RowAxpysInt splits them), over rows at one stride (a unit
  // cache's, or records staged back to back as read from flash). 512 rows
  // 2048 wide (Q4_0S or Q4_0: 1152 bytes, 32 rows = 36 KiB = 9 x 4 KiB a
  // part apart) ran at 4.6-6.1 GB/s (Q4_0S) and 4.9 (Q4_0), where 520 rows
  // ran at 7.8-8.7; staggered, 8.2-10.2 and 8.9-9.0 (2 vCPU AMD EPYC (Zen
  // 3) VM, AVX2, one thread, two alternated rounds of `gather_bench --types
  // q4_0s,q4_0 --shapes 2048x512,768x1024 --parts 1 --rotate-mib 1
  // --kernels axpy-int --reps 201 --probe-mib 16 --clock cpu`, rows in L2).
  static size_t MaxShift(size_t count) { return std::min(kMaxShift, count / (kParts * kParts)); }
  // The shift whose parts' first rows fall in the most L1 sets (the
  // smallest of those tied); 0 for a list shorter than kParts * kParts.
  static size_t Shift(size_t count, const uint8_t* const* rows) {
    size_t best = 0, best_sets = 0;
    for (size_t shift = 0; shift <= MaxShift(count); ++shift) {
      const size_t n = StartSets(count, rows, shift);
      if (n > best_sets) best = shift, best_sets = n;
    }
    return best;
  }
  // How many L1 sets (64 of 64-byte lines) the parts' first rows fall in
  // at `shift`.
  static size_t StartSets(size_t count, const uint8_t* const* rows, size_t shift) {
    uint64_t sets = 0;
    for (size_t j = 0; j < kParts; ++j) {
      sets |=
          uint64_t{1} << ((reinterpret_cast<uintptr_t>(rows[Start(count, j, shift)]) >> 6) & 63);
    }
    return static_cast<size_t>(std::popcount(sets));
  }

  // Writes the indices of the next pass's rows (at most `most`) to `index`
  // and returns how many; 0 once every row has been taken.
  size_t Next(size_t* index, size_t most) {
    size_t n = 0;
    while (n < most && live_ > 0) {
      if (next_[part_] < end_[part_]) {
        index[n++] = next_[part_];
        next_[part_] = Skip(next_[part_] + 1, end_[part_]);
        if (next_[part_] == end_[part_]) --live_;
      }
      part_ = (part_ + 1) % kParts;
    }
    return n;
  }

 private:
  // The first row at or after k (and before end) whose coefficient is
  // nonzero; end if none.
  size_t Skip(size_t k, size_t end) const {
    while (a_ != nullptr && k < end && a_[k] == 0.0f) ++k;
    return k;
  }

  const float* a_;
  size_t next_[kParts] = {}, end_[kParts] = {};
  size_t live_ = 0;  // parts with rows left
  size_t part_ = 0;  // the part the next row is taken from
};

// Types AxpyIntAdd takes (Q4_0S, Q4_0).
bool AxpyIntSupports(TensorType type);
// Whether the current target sums in integers faster than AxpyRows (x86:
// AVX3_DL with vpdpbusd, and AVX2 with vpdpbusd or pmaddubsw); elsewhere
// the other forms are for tests and for a token whose calls must agree
// with such a target's bits.
bool AxpyIntFast();

// The step of a token whose largest |coefficient| is `largest_coefficient`
// over rows whose largest |block scale| is `largest_scale`: the smallest
// that keeps every multiple within kAxpyIntMaxMultiple.
inline float AxpyIntStep(float largest_coefficient, float largest_scale) {
  return largest_coefficient * largest_scale / kAxpyIntMaxMultiple;
}

// int32 elements of the sums of a window `width` columns wide (a whole
// number of blocks): hi and lo sums per column, and one per block.
inline size_t AxpyIntSumsInts(size_t width) { return 2 * width + width / 32; }

// Adds the terms of rows[0..count) over columns [first, first + width) of
// rows that hold `cols` elements and start `offset` bytes after the
// pointers (a record's later part) to `sums`: m[k][b] = the multiple of S
// nearest to a[k] * d[k][b], found as NearestInt(d * (a[k] * inv_step))
// clamped to +-kAxpyIntMaxMultiple (NaN counts as 0). Rows whose a[k] is
// zero are not read. first and width are whole blocks (std::invalid_argument
// otherwise).
//
// With `parts` > 1 each row is that many rows of `cols` elements back to
// back (a record of several parts, each in the layout of a row of its own,
// TensorTypeBytes(cols) bytes apart), and each part's window goes to its
// own sums, part p's at sums + p * AxpyIntSumsInts(width): the same sums as
// one call per part, but the rows are read front to back in one sweep
// instead of once per part, each sweep skipping the other parts.
void AxpyIntAdd(TensorType type, const uint8_t* const* rows, size_t count, size_t cols,
                size_t first, size_t width, const float* a, float inv_step, int32_t* sums,
                size_t offset = 0, size_t parts = 1);

// y[i] += float(step * total[i]) for i < width, where total is the exact
// integer sum of m * (q - 8) that `sums` holds for the window (step times
// the total in double, then rounded to float once).
void AxpyIntFinish(size_t width, const int32_t* sums, float step, float* y);

// Scalar reference of one token's whole sum: the multiples as above, the
// totals in int64, and y[i] += float(double(step) * total[i]).
void AxpyIntReference(TensorType type, const uint8_t* const* rows, size_t count, size_t cols,
                      size_t first, size_t width, const float* a, float inv_step, float step,
                      float* y);

}  // namespace sparrow::simd
