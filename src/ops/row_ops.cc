// Products over row sets (compacted unit caches): dot products with each
// row (gate/up parts of neuron records) and weighted sums of rows (down
// parts, dip columns), through the gather kernels (simd/gather.h), which
// take the rows as a pointer list and read each row once for the whole
// batch of tokens.
//
// Threads split the row list into fixed contiguous ranges (ParallelFor's
// split depends only on the sizes and the thread count). For the weighted
// sums, thread 0 adds into y directly and every other thread into its own
// zeroed buffer; the buffers are then added to y in thread order, so the
// result does not depend on scheduling.
//
// Numerics: RowDots gives each token the same bits as MatVec (simd::Gemv)
// would for that row, whatever the batch, the row order or whether the rows
// are contiguous; RowAxpys adds the terms of a thread's rows to y in row
// order with one multiply-add each (see simd/gather.h).
#include <algorithm>
#include <vector>

#include "base/aligned_buffer.h"
#include "simd/gather.h"
#include "simd/gemv.h"
#include "simd/quantize.h"
#include "simd/vector_ops.h"
#include "src/ops/ops.h"
#include "src/threads.h"

namespace sparrow::ops {
namespace {

// Bytes of one row of the set (the part, not the whole cache record).
size_t RowBytes(const RowSet& rows) {
  uint64_t bytes = 0;
  if (!TensorTypeBytes(rows.type, rows.cols, &bytes)) return std::max<size_t>(rows.stride, 1);
  return std::max<size_t>(static_cast<size_t>(bytes), 1);
}

// Rows per parallel chunk, so each chunk streams at least ~64 KiB.
size_t Grain(const RowSet& rows) {
  return std::max<size_t>(4, (64 * 1024) / RowBytes(rows));
}

// The set's row addresses, in a per-thread buffer reused across calls.
const uint8_t* const* RowPointers(const RowSet& rows) {
  thread_local std::vector<const uint8_t*> pointers;
  pointers.resize(rows.count);
  for (size_t k = 0; k < rows.count; ++k) pointers[k] = rows.row(k);
  return pointers.data();
}

// Types without a gather kernel (the K-quants): one GEMV per row and token,
// and dequantize-then-axpy per row.
void RowDotsByGemv(const RowSet& rows, const float* x, size_t n, float* out, bool fast) {
  for (size_t t = 0; t < n; ++t) {
    const float* xt = x + t * rows.cols;
    float* ot = out + t * rows.count;
    thread_local simd::GemvInput input;
    const simd::GemvInput* prepared = &input;
    if (fast) input.Prepare(rows.type, xt, rows.cols);
    ParallelFor(rows.count, Grain(rows), [&](size_t begin, size_t end, int) {
      for (size_t k = begin; k < end; ++k) {
        if (fast) {
          simd::Gemv(rows.type, rows.row(k), RowBytes(rows), rows.cols, *prepared, 0, 1,
                     ot + k);
        } else {
          simd::GemvReference(rows.type, rows.row(k), RowBytes(rows), rows.cols, xt, 0, 1,
                              ot + k);
        }
      }
    });
  }
}

void AxpyRangeByRow(const RowSet& rows, const float* a, size_t n, size_t begin, size_t end,
                    float* acc, bool fast) {
  const size_t cols = rows.cols;
  thread_local AlignedBuffer<float> row;
  if (row.size() < cols) row.Reset(cols);
  for (size_t k = begin; k < end; ++k) {
    bool needed = false;
    for (size_t t = 0; t < n && !needed; ++t) needed = a[t * rows.count + k] != 0.0f;
    if (!needed) continue;
    if (fast) {
      simd::DequantizeRow(rows.type, rows.row(k), cols, row.data());
    } else {
      simd::DequantizeRowReference(rows.type, rows.row(k), cols, row.data());
    }
    for (size_t t = 0; t < n; ++t) {
      const float coeff = a[t * rows.count + k];
      if (coeff == 0.0f) continue;
      if (fast) {
        simd::Axpy(coeff, row.data(), acc + t * cols, cols);
      } else {
        simd::AxpyReference(coeff, row.data(), acc + t * cols, cols);
      }
    }
  }
}

}  // namespace

void RowDots(const RowSet& rows, const float* x, size_t n, float* out) {
  if (rows.count == 0 || n == 0) return;
  const bool fast = GetKernelMode() == KernelMode::kFast;
  if (!simd::GatherSupports(rows.type)) return RowDotsByGemv(rows, x, n, out, fast);
  const uint8_t* const* pointers = RowPointers(rows);
  const size_t count = rows.count;
  const size_t cols = rows.cols;
  if (!fast) {
    ParallelFor(count, Grain(rows), [&](size_t begin, size_t end, int) {
      simd::DotRowsReference(rows.type, pointers + begin, end - begin, cols, x, n, out + begin,
                             count);
    });
    return;
  }
  thread_local std::vector<simd::GemvInput> inputs;
  if (inputs.size() < n) inputs.resize(n);
  for (size_t t = 0; t < n; ++t) inputs[t].Prepare(rows.type, x + t * cols, cols);
  const simd::GemvInput* prepared = inputs.data();
  ParallelFor(count, Grain(rows), [&](size_t begin, size_t end, int) {
    simd::DotRows(rows.type, pointers + begin, end - begin, cols, prepared, n, out + begin,
                  count);
  });
}

void RowAxpys(const RowSet& rows, const float* a, size_t n, float* y) {
  if (rows.count == 0 || n == 0) return;
  const bool fast = GetKernelMode() == KernelMode::kFast;
  const bool gather = simd::GatherSupports(rows.type);
  const uint8_t* const* pointers = gather ? RowPointers(rows) : nullptr;
  const size_t count = rows.count;
  const size_t cols = rows.cols;
  const size_t span = n * cols;  // one thread's accumulator
  const int threads = ThreadCount();
  thread_local AlignedBuffer<float> partial;
  if (threads > 1 && partial.size() < static_cast<size_t>(threads - 1) * span) {
    partial.Reset(static_cast<size_t>(threads - 1) * span);
  }
  float* partial_data = partial.data();
  std::vector<char> used(threads, 0);  // not vector<bool>: written concurrently
  ParallelFor(count, Grain(rows), [&](size_t begin, size_t end, int thread) {
    float* acc = y;
    if (thread != 0) {
      acc = partial_data + static_cast<size_t>(thread - 1) * span;
      std::fill(acc, acc + span, 0.0f);
      used[thread] = 1;
    }
    if (!gather) return AxpyRangeByRow(rows, a, n, begin, end, acc, fast);
    if (fast) {
      simd::AxpyRows(rows.type, pointers + begin, end - begin, cols, a + begin, count, n, acc,
                     cols);
    } else {
      simd::AxpyRowsReference(rows.type, pointers + begin, end - begin, cols, a + begin, count,
                              n, acc, cols);
    }
  });
  for (int thread = 1; thread < threads; ++thread) {
    if (!used[thread]) continue;
    const float* acc = partial_data + static_cast<size_t>(thread - 1) * span;
    if (fast) {
      simd::AddInPlace(acc, y, span);
    } else {
      simd::AddInPlaceReference(acc, y, span);
    }
  }
}

}  // namespace sparrow::ops
