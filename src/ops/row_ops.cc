// Products over row sets (compacted unit caches): dot products with each
// row (gate/up parts of neuron records) and weighted sums of rows (down
// parts, dip columns). Threads split rows; for the weighted sums each
// thread accumulates into its own copy of y, summed at the end, so the
// result does not depend on scheduling.
#include <algorithm>
#include <vector>

#include "base/aligned_buffer.h"
#include "simd/gemv.h"
#include "simd/quantize.h"
#include "simd/vector_ops.h"
#include "src/ops/ops.h"
#include "src/threads.h"

namespace sparrow::ops {
namespace {

// Rows per parallel chunk, so each chunk streams at least ~64 KiB.
size_t Grain(const RowSet& rows) {
  const size_t bytes = std::max<size_t>(rows.stride, 1);
  return std::max<size_t>(4, (64 * 1024) / bytes);
}

}  // namespace

void RowDots(const RowSet& rows, const float* x, size_t n, float* out) {
  if (rows.count == 0 || n == 0) return;
  if (rows.index == nullptr) {
    // Contiguous rows are an ordinary strided matrix.
    MatrixView w;
    w.type = rows.type;
    w.data = rows.base + rows.offset;
    w.rows = rows.count;
    w.cols = rows.cols;
    w.row_bytes = rows.stride;
    MatMul(w, x, n, out);
    return;
  }
  const bool fast = GetKernelMode() == KernelMode::kFast;
  for (size_t t = 0; t < n; ++t) {
    const float* xt = x + t * rows.cols;
    float* ot = out + t * rows.count;
    thread_local simd::GemvInput input;
    const simd::GemvInput* prepared = &input;
    if (fast) input.Prepare(rows.type, xt, rows.cols);
    ParallelFor(rows.count, Grain(rows), [&](size_t begin, size_t end, int) {
      for (size_t k = begin; k < end; ++k) {
        if (fast) {
          simd::Gemv(rows.type, rows.row(k), 0, rows.cols, *prepared, 0, 1, ot + k);
        } else {
          simd::GemvReference(rows.type, rows.row(k), 0, rows.cols, xt, 0, 1, ot + k);
        }
      }
    });
  }
}

void RowAxpys(const RowSet& rows, const float* a, size_t n, float* y) {
  if (rows.count == 0 || n == 0) return;
  const bool fast = GetKernelMode() == KernelMode::kFast;
  const size_t cols = rows.cols;
  const int threads = ThreadCount();
  thread_local AlignedBuffer<float> partial;
  if (partial.size() < static_cast<size_t>(threads) * (n * cols + cols)) {
    partial.Reset(static_cast<size_t>(threads) * (n * cols + cols));
  }
  float* partial_data = partial.data();
  std::vector<char> used(threads, 0);  // not vector<bool>: written concurrently
  ParallelFor(rows.count, Grain(rows), [&](size_t begin, size_t end, int thread) {
    float* acc = partial_data + static_cast<size_t>(thread) * (n * cols + cols);
    float* row = acc + n * cols;
    std::fill(acc, acc + n * cols, 0.0f);
    used[thread] = 1;
    for (size_t k = begin; k < end; ++k) {
      if (fast) {
        simd::DequantizeRow(rows.type, rows.row(k), cols, row);
      } else {
        simd::DequantizeRowReference(rows.type, rows.row(k), cols, row);
      }
      for (size_t t = 0; t < n; ++t) {
        const float coeff = a[t * rows.count + k];
        if (coeff == 0.0f) continue;
        if (fast) {
          simd::Axpy(coeff, row, acc + t * cols, cols);
        } else {
          simd::AxpyReference(coeff, row, acc + t * cols, cols);
        }
      }
    }
  });
  for (int thread = 0; thread < threads; ++thread) {
    if (!used[thread]) continue;
    const float* acc = partial_data + static_cast<size_t>(thread) * (n * cols + cols);
    if (fast) {
      simd::AddInPlace(acc, y, n * cols);
    } else {
      simd::AddInPlaceReference(acc, y, n * cols);
    }
  }
}

}  // namespace sparrow::ops
