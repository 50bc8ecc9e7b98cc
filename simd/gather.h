// Products over a set of stored rows picked by pointer: the compacted unit
// caches of a streamed model, where each cached record holds several parts
// (gate, up, down rows; or dip columns) back to back and a token needs an
// arbitrary subset of the records. Two shapes of work:
//  - DotRows: one dot product per row (neuron layout's gate and up parts),
//  - AxpyRows: a weighted sum of rows (down parts, dip columns).
// Both take a batch of n tokens and read every row from memory once for the
// whole batch (the row is then reused from cache for the other tokens).
//
// Rows may start at any byte address (records are packed, so a Q8_0 row
// can start at an odd offset), come in any order and repeat. Kernels never
// read past the last byte of a row. Threads are the caller's business: split
// the row list and give each part its own output (see src/ops/row_ops.cc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/tensor_type.h"
#include "simd/gemv.h"

namespace sparrow::simd {

// Types the gather kernels take (TypeAbility::kGather in
// base/tensor_type.cc: F32, F16, BF16, Q8_0, Q4_0, Q4_0S).
bool GatherSupports(TensorType type);

// out[t * out_stride + k] = dot(rows[k], x[t]) for k < count, t < n.
// Each row holds `cols` elements of `type`; x[0..n) were prepared for `type`
// and `cols` (std::invalid_argument otherwise). Numerics: every result is
// bit-for-bit what Gemv gives for that row and x[t] on the same SIMD target
// (the same per-row operations in the same order; gather_test.cc checks it),
// so a token's results do not depend on the batch it came in, on which other
// rows were in the list, or on how a caller split the list.
void DotRows(TensorType type, const uint8_t* const* rows, size_t count,
             size_t cols, const GemvInput* x, size_t n, float* out,
             size_t out_stride);

// y[t * y_stride + i] += sum_k a[t * a_stride + k] * rows[k][i] for i < cols,
// t < n. Rows whose coefficient is zero for a token contribute nothing to it
// (a row whose coefficients are all zero is not read at all, so NaNs in it do
// not spread). Numerics: each y element is updated by one multiply-add per
// nonzero term, in row order (fused on targets that have it, else a multiply
// and an add):
//   F32/F16/BF16: y = y + a * w           (w exact: the promotions are)
//   Q8_0:         y = y + s * q           s = a * d rounded to f32 once
//   Q4_0:         y = y + s * (nibble - 8)
// So each term carries at most one more rounding than a * w itself, and the
// result is the same for every n and batch composition, and a split of the
// rows into calls adds them in the same order (gather_test.cc
// checks both bit for bit against a scalar model of these chains).
void AxpyRows(TensorType type, const uint8_t* const* rows, size_t count,
              size_t cols, const float* a, size_t a_stride, size_t n, float* y,
              size_t y_stride);

// Bytes AxpyRows and AxpyRowColumns keep on each thread that calls them
// for rows of `cols` elements (for the budget; the SIMD target decides).
size_t AxpyRowsScratchBytes(TensorType type, size_t cols);

// AxpyRows over columns [first, first + width) of rows that hold `cols`
// elements each: y[t * y_stride + i] gains the terms of column first + i.
// first and width are whole blocks (std::invalid_argument otherwise). The
// rows are still given by their starts: a Q4_0S row keeps its scales apart
// from its nibbles, so no pointer into it starts a window. Each element gets
// the same operations as from AxpyRows over the whole rows, so threads that
// split the columns between them get the one-thread result.
// parts > 1: each row is that many rows of cols / parts elements back to
// back (a record's parts, summed as one row); for Q4_0S, whose layout spans
// a row, each part keeps its own scales in front.
void AxpyRowColumns(TensorType type, const uint8_t* const* rows, size_t count, size_t cols,
                    size_t first, size_t width, const float* a, size_t a_stride, size_t n, float* y,
                    size_t y_stride, size_t parts = 1);

// Scalar references: rows dequantized to f32 (DequantizeRowReference), sums
// in double, rounded to f32 once. x is n x cols (row-major) for DotRows.
// AxpyRowsReference skips zero coefficients like AxpyRows.
void DotRowsReference(TensorType type, const uint8_t* const* rows, size_t count,
                      size_t cols, const float* x, size_t n, float* out,
                      size_t out_stride);
void AxpyRowsReference(TensorType type, const uint8_t* const* rows,
                       size_t count, size_t cols, const float* a,
                       size_t a_stride, size_t n, float* y, size_t y_stride);
void AxpyRowColumnsReference(TensorType type, const uint8_t* const* rows, size_t count, size_t cols,
                             size_t first, size_t width, const float* a, size_t a_stride, size_t n,
                             float* y, size_t y_stride, size_t parts = 1);

}  // namespace sparrow::simd
