// Products over row sets (compacted unit caches): dot products with each
// row (gate/up parts of neuron records) and weighted sums of rows (down
// parts, dip columns), through the gather kernels (simd/gather.h), which
// take the rows as a pointer list and read each row once for the whole
// batch of tokens. Large batches (kMinBatchForPanels tokens or more, unless
// --prompt-gemm f32: UsePanels) go
// through oneDNN instead, on panels of the rows (bf16 where MatMul's
// batches are, else f32), as MatMul does for whole matrices: the dot
// products as y = x * rows^T, the weighted sums as y += a * rows, which
// oneDNN adds into y. Measured on Sapphire Rapids (2 vCPU VM), `sparrow
// bench -p 64 -n 0`, alternating: a 125M-shaped synthetic Q4_0 bundle, one
// thread, 528-558 tok/s with the weighted sums on the gather kernels,
// 1213-1234 through oneDNN; 1.1B-shaped Q8_0, two threads, 117-129 and
// 193-201.
//
// Threads split the row list into fixed contiguous ranges (ParallelFor's
// split depends only on the sizes and the thread count) for the dot
// products, and the columns for the weighted sums of the gather types, so
// that neither depends on scheduling, on the thread count or on how a
// caller splits a set into calls. (Other types' weighted sums: thread 0
// adds into y directly and every other thread into its own zeroed buffer,
// added to y in thread order. The integer sums split the rows too, each
// range into its own sums: exact, so their total is the same bits however
// the rows were split, and each thread reads whole rows, which stream from
// DRAM better than a part of every row. Zen 4 VM, two threads, `gather_bench
// --types q4_0s --kernels axpy-int --threads 2 --clock cpu`, five alternated
// rounds: rows 2048 wide 12.2-28.5 -> 20.7-29.9 GB/s, 768 wide 8.0-21.7 ->
// 17.6-26.5.)
//
// Numerics: below kMinBatchForPanels tokens RowDots gives each token the
// same bits as MatVec (simd::Gemv) would for that row, whatever the batch,
// the row order or whether the rows are contiguous, and RowAxpys adds the
// terms of a thread's rows to y in row order with one multiply-add each
// (see simd/gather.h). Larger batches get oneDNN's products, as MatMul's:
// f32 ones agree with the former to the GEMV bound, bf16 ones to
// MatMul's bf16 tolerance (tests/ops_test.cc).
#include <algorithm>
#include <stdexcept>
#include <vector>

#include "base/aligned_buffer.h"
#include "simd/axpy_int.h"
#include "simd/gather.h"
#include "simd/gemv.h"
#include "simd/quantize.h"
#include "simd/vector_ops.h"
#include "sparrow_config.h"
#include "src/ops/ops.h"
#include "src/ops/panel.h"
#include "base/threads.h"

namespace sparrow::ops {
namespace {

// Bytes of one row of the set (the part, not the whole cache record).
size_t RowBytes(const RowSet& rows) {
  uint64_t bytes = 0;
  if (!TensorTypeBytes(rows.type, rows.cols, &bytes)) return std::max<size_t>(rows.stride, 1);
  return std::max<size_t>(static_cast<size_t>(bytes), 1);
}

#if SPARROW_HAVE_ONEDNN
// Measured with one thread on AVX-512 (2048-element Q8_0 and F16 rows, 5632
// of them): the gather kernels beat dequantized panels + oneDNN by 3x at 4
// tokens and 1.3x at 16, oneDNN wins by 1.6x at 64.
constexpr size_t kMinBatchForPanels = 32;

// Whether a batch of n tokens goes to oneDNN's panels: from
// kMinBatchForPanels tokens, unless --prompt-gemm f32 (sparrow batch's
// default) asks for each token's own results. Then a block's prompt pass
// gives every sequence the bits of its own run, which the 8-bit activations
// of the packed kernels downstream need: their rounding turns oneDNN's
// 1e-6 differences into steps of 1/254 of a block's largest value. 1.1B-
// shaped Q8_0 bundle at half its size under memcap, 32 prompts x 8 tokens,
// two threads (with RowAxpys' column split): --block 16 gave 16 of 32 texts
// of --block 1 with panels for its 160-token prompt passes, at 20.6 tok/s;
// 32 of 32 without, at 13.4-14.3 (--block 1: 2.86).
bool UsePanels(size_t n) {
  return n >= kMinBatchForPanels && GetPromptGemm() != PromptGemm::kF32;
}
#endif

// Rows per parallel chunk, so each chunk streams at least ~64 KiB.
size_t Grain(const RowSet& rows) {
  return std::max<size_t>(4, (64 * 1024) / RowBytes(rows));
}

// The set's row addresses, in a per-thread buffer reused across calls.
const uint8_t* const* RowPointers(const RowSet& rows) {
  thread_local std::vector<const uint8_t*> pointers;
  pointers.resize(rows.count);
  const size_t records = rows.count / rows.parts;
  for (size_t r = 0, k = 0; r < records; ++r) {
    const uint8_t* first = rows.record(r);
    for (size_t p = 0; p < rows.parts; ++p) pointers[k++] = first + p * rows.part_stride;
  }
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

// Row k of the set as f32 (or bf16 where `bf16`) into `out`, part by part
// where its parts are rows of their own (RowSet::row_parts).
void DequantizeSetRow(const RowSet& rows, size_t k, bool fast, bool bf16, void* out) {
  const bool apart = TensorTypeCan(rows.type, TypeAbility::kWholeRowLayout);
  const size_t parts = apart ? rows.row_parts : 1;
  const size_t cols = rows.cols / parts;
  const TensorTypeInfo& info = GetTensorTypeInfo(rows.type);
  const size_t part_bytes = cols / info.block_elems * info.block_bytes;
  for (size_t p = 0; p < parts; ++p) {
    const uint8_t* src = rows.row(k) + p * part_bytes;
    if (bf16) {
      simd::DequantizeRowToBF16(rows.type, src, cols, static_cast<uint16_t*>(out) + p * cols);
    } else if (fast) {
      simd::DequantizeRow(rows.type, src, cols, static_cast<float*>(out) + p * cols);
    } else {
      simd::DequantizeRowReference(rows.type, src, cols, static_cast<float*>(out) + p * cols);
    }
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
    DequantizeSetRow(rows, k, fast, /*bf16=*/false, row.data());
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

#if SPARROW_HAVE_ONEDNN
// Calls body(panel, r0) for consecutive slices of the set's rows, each
// slice dequantized into `buffer` and seen as a matrix (rows r0.. of the
// set): in bf16 where MatMul's batches run in bf16 (MatMul multiplies BF16
// matrices as they are), else in f32; F32 rows stay f32, as F32 matrices do
// in MatMul. The buffer holds the f32 panel's rows either way (bf16 ones
// fill half its bytes), which is what the scratch charges count.
template <class Body>
void ForEachPanel(const RowSet& rows, AlignedBuffer<float>& buffer, const Body& body) {
  const size_t cols = rows.cols;
  const bool bf16 = PromptGemmUsesBf16() && rows.type != TensorType::kF32;
  const Panel shape = F32Panel(cols, rows.count);
  if (buffer.size() * sizeof(float) < shape.bytes) buffer.Reset(shape.bytes / sizeof(float));
  float* panel_f32 = buffer.data();
  uint16_t* panel_bf16 = reinterpret_cast<uint16_t*>(panel_f32);
  MatrixView w;
  w.type = bf16 ? TensorType::kBF16 : TensorType::kF32;
  w.data = reinterpret_cast<const uint8_t*>(panel_f32);
  w.cols = cols;
  w.row_bytes = cols * (bf16 ? sizeof(uint16_t) : sizeof(float));
  for (size_t r0 = 0; r0 < rows.count; r0 += shape.rows) {
    const size_t count = std::min(shape.rows, rows.count - r0);
    ParallelFor(count, 4, [&](size_t begin, size_t end, int) {
      for (size_t r = begin; r < end; ++r) {
        if (bf16) {
          DequantizeSetRow(rows, r0 + r, /*fast=*/true, /*bf16=*/true, panel_bf16 + r * cols);
        } else {
          DequantizeSetRow(rows, r0 + r, /*fast=*/true, /*bf16=*/false, panel_f32 + r * cols);
        }
      }
    });
    w.rows = count;
    body(static_cast<const MatrixView&>(w), r0);
  }
}

// Large batches: panels of the rows (ForEachPanel) through MatMul (oneDNN).
// Contiguous rows are a plain strided matrix, which MatMul converts itself
// (F32 ones it hands to oneDNN as they are, so they must be whole floats
// apart).
void RowDotsByPanels(const RowSet& rows, const float* x, size_t n, float* out) {
  MatrixView w;
  w.cols = rows.cols;
  const uint8_t* first = rows.base + rows.offset;
  const bool float_aligned = rows.stride % sizeof(float) == 0 &&
                             reinterpret_cast<uintptr_t>(first) % alignof(float) == 0;
  if (rows.index == nullptr && rows.parts == 1 &&
      (rows.type != TensorType::kF32 || float_aligned)) {
    w.type = rows.type;
    w.data = rows.base + rows.offset;
    w.rows = rows.count;
    w.row_bytes = rows.stride;
    MatMul(w, x, n, out);
    return;
  }
  const Panel shape = F32Panel(rows.cols, rows.count);
  thread_local AlignedBuffer<float> panel, result;  // RowDotsScratchBytes
  if (result.size() < n * shape.rows) result.Reset(n * shape.rows);
  ForEachPanel(rows, panel, [&](const MatrixView& slice, size_t r0) {
    MatMul(slice, x, n, result.data());
    for (size_t t = 0; t < n; ++t) {
      std::copy(result.data() + t * slice.rows, result.data() + (t + 1) * slice.rows,
                out + t * rows.count + r0);
    }
  });
}

// Large batches of weighted sums: y += a * (the rows), panel by panel,
// which oneDNN multiplies and adds into y.
void RowAxpysByPanels(const RowSet& rows, const float* a, size_t n, float* y) {
  thread_local AlignedBuffer<float> panel;  // RowAxpysScratchBytes
  ForEachPanel(rows, panel, [&](const MatrixView& slice, size_t r0) {
    MatMulRowsAdd(slice, a + r0, rows.count, n, y);
  });
}
#endif  // SPARROW_HAVE_ONEDNN

// RowAxpys' split of the columns between threads: one range of whole
// 64-column units each (whole blocks of every gather type), fn(c0, c1).
// The ranges depend only on cols and the thread count.
constexpr size_t kAxpyColumnUnit = 64;
template <class Fn>
void ForColumnRanges(size_t cols, const Fn& fn) {
  const size_t units = (cols + kAxpyColumnUnit - 1) / kAxpyColumnUnit;
  ParallelFor(units, std::max<size_t>(1, 512 / kAxpyColumnUnit),
              [&](size_t begin, size_t end, int) {
                fn(begin * kAxpyColumnUnit, std::min(cols, end * kAxpyColumnUnit));
              });
}

}  // namespace

bool RowProductsUsePanels(size_t n) {
#if SPARROW_HAVE_ONEDNN
  return UsePanels(n);
#else
  (void)n;
  return false;
#endif
}

uint64_t RowDotsScratchBytes(TensorType type, size_t cols, size_t max_rows, size_t n) {
  if (cols == 0 || n == 0) return 0;
  const uint64_t input = simd::GemvInput::Bytes(type, cols);
  // Types without a gather kernel: RowDotsByGemv's one prepared input.
  if (!simd::GatherSupports(type)) return input;
  // The gather kernels' prepared inputs, one per token, and the set's row
  // pointers (RowDots' and RowPointers' thread_locals; RowAxpys on the
  // same thread reuses the pointers).
  const uint64_t gather = n * input + uint64_t{max_rows} * sizeof(const uint8_t*);
#if SPARROW_HAVE_ONEDNN
  // RowDotsByPanels' panel and result, sized as it sizes them. MatMul's own
  // panel (contiguous rows of a quantized type go to MatMul as they are) is
  // one buffer of the calling thread, charged once with the session's
  // scratch (Session::MemoryBytes), not again here. Under --prompt-gemm f32
  // every batch takes the gather kernels.
  if (n >= kMinBatchForPanels) {
    const Panel panel = F32Panel(cols, max_rows);
    return gather + panel.bytes + uint64_t{n} * panel.rows * sizeof(float);
  }
#endif
  return gather;
}

void RowDots(const RowSet& rows, const float* x, size_t n, float* out) {
  if (rows.count == 0 || n == 0) return;
  const bool fast = GetKernelMode() == KernelMode::kFast;
  if (!simd::GatherSupports(rows.type)) return RowDotsByGemv(rows, x, n, out, fast);
#if SPARROW_HAVE_ONEDNN
  if (fast && UsePanels(n)) return RowDotsByPanels(rows, x, n, out);
#endif
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

uint64_t RowAxpysScratchBytes(TensorType type, size_t cols, size_t max_rows, size_t n) {
  if (cols == 0 || n == 0) return 0;
  const uint64_t threads = static_cast<uint64_t>(ThreadCount());
  // The gather types share RowDots' row pointers (RowDotsScratchBytes);
  // their kernels keep some per thread. The types without a gather kernel:
  // each thread's dequantized row (AxpyRangeByRow) and every thread's but
  // the caller's sums (`partial`).
  uint64_t bytes = threads * simd::AxpyRowsScratchBytes(type, cols);
  if (!simd::GatherSupports(type)) {
    bytes += (threads * cols + (threads - 1) * uint64_t{n} * cols) * sizeof(float);
  }
#if SPARROW_HAVE_ONEDNN
  if (n < kMinBatchForPanels) return bytes;
  // RowAxpysByPanels' panel, and MatMulRowsAdd's bf16 coefficients.
  const Panel panel = F32Panel(cols, max_rows);
  const uint64_t coefficients =
      PromptGemmUsesBf16() ? uint64_t{n} * panel.rows * sizeof(uint16_t) : 0;
  return bytes + panel.bytes + coefficients;
#else
  return bytes;
#endif
}

void RowAxpys(const RowSet& rows, const float* a, size_t n, float* y) {
  if (rows.count == 0 || n == 0) return;
  const bool fast = GetKernelMode() == KernelMode::kFast;
#if SPARROW_HAVE_ONEDNN
  if (fast && UsePanels(n)) return RowAxpysByPanels(rows, a, n, y);
#endif
  const bool gather = simd::GatherSupports(rows.type);
  const uint8_t* const* pointers = gather ? RowPointers(rows) : nullptr;
  const size_t count = rows.count;
  const size_t cols = rows.cols;
  if (gather) {
    // Threads split the columns: each adds every row's terms to its part
    // of y in row order, so every element gets the one-thread chain of
    // multiply-adds, whatever the thread count and however a caller splits
    // a set into calls (the streamed FFN computes cached rows while misses
    // load, in chunks that depend on what was cached). Summing row ranges
    // into per-thread buffers instead made the sums depend on those splits,
    // and the 8-bit activations downstream (packed matrices) turn such
    // last-bit differences into steps of 1/254: a 1.1B-shaped Q8_0 bundle
    // at two threads gave --block 2 the text of --block 1 for 15 of 16
    // prompts (16 of 16 at one thread).
    // Each thread takes a window of every row's columns (AxpyRowColumns:
    // a Q4_0S row's window is not a pointer into it).
    ForColumnRanges(cols, [&](size_t c0, size_t c1) {
      const size_t width = c1 - c0;
      if (fast) {
        simd::AxpyRowColumns(rows.type, pointers, count, cols, c0, width, a, count, n, y + c0, cols,
                             rows.row_parts);
      } else {
        simd::AxpyRowColumnsReference(rows.type, pointers, count, cols, c0, width, a, count, n,
                                      y + c0, cols, rows.row_parts);
      }
    });
    return;
  }
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
    AxpyRangeByRow(rows, a, n, begin, end, acc, fast);
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

bool RowAxpyIntSums::Usable(TensorType type) {
  return GetKernelMode() == KernelMode::kFast && simd::AxpyIntSupports(type) && simd::AxpyIntFast();
}

size_t RowAxpyIntSums::Sets() { return static_cast<size_t>(std::max(1, ThreadCount())); }

uint64_t RowAxpyIntSums::Bytes(size_t cols, size_t n) {
  return uint64_t{Sets()} * n * simd::AxpyIntSumsInts(cols) * sizeof(int32_t);
}

size_t RowAxpyIntSums::MaxRows() { return simd::kAxpyIntMaxRows; }

float RowAxpyIntSums::Step(float largest_coefficient, float largest_scale) {
  return simd::AxpyIntStep(largest_coefficient, largest_scale);
}

void RowAxpyIntSums::Begin(size_t cols, size_t row_parts, size_t n, const float* steps) {
  cols_ = cols;
  parts_ = row_parts;
  n_ = n;
  per_token_ = simd::AxpyIntSumsInts(cols);
  sets_ = Sets();
  sums_.assign(sets_ * n * per_token_, 0);
  steps_.assign(steps, steps + n);
}

void RowAxpysInt(const RowSet& rows, const float* a, size_t n, RowAxpyIntSums& sums) {
  if (rows.count == 0 || n == 0) return;
  if (rows.cols != sums.cols_ || rows.row_parts != sums.parts_ || n != sums.n_) {
    throw std::logic_error("RowAxpysInt: rows or tokens other than Begin's");
  }
  const uint8_t* const* pointers = RowPointers(rows);
  const size_t count = rows.count, part_cols = rows.cols / rows.row_parts;
  uint64_t part_bytes = 0;  // only checked: a part is whole blocks of the type
  if (!TensorTypeBytes(rows.type, part_cols, &part_bytes)) {
    throw std::logic_error("RowAxpysInt: rows of no byte size");
  }
  // Rows [begin, end) into the sums of range `range`: every part whole, in
  // one sweep over the rows (part p's sums at AxpyIntSumsInts(p *
  // part_cols), as Finish takes them).
  const auto add = [&](size_t begin, size_t end, size_t range) {
    for (size_t t = 0; t < n; ++t) {
      const float step = sums.steps_[t];
      simd::AxpyIntAdd(rows.type, pointers + begin, end - begin, part_cols, 0, part_cols,
                       a + t * count + begin, step > 0.0f ? 1.0f / step : 0.0f, sums.sums(range, t),
                       0, rows.row_parts);
    }
  };
  if (RowAxpyIntSums::Sets() != sums.sets_) {
    add(0, count, 0);  // a thread count other than Begin's: no room for its ranges
    return;
  }
  // Whole passes of the quad form (sixteen rows) per range, and no split of
  // a set too small to pay for waking a thread.
  const size_t grain = (Grain(rows) + 15) / 16 * 16;
  ParallelFor(count, grain, [&](size_t begin, size_t end, int range) {
    add(begin, end, static_cast<size_t>(range));
  });
}

void RowAxpyIntSums::Finish(float* y) {
  // The other ranges' sums join range 0's: exact, so the order does not
  // matter.
  for (size_t range = 1; range < sets_; ++range) {
    int32_t* into = sums(0, 0);
    const int32_t* from = sums(range, 0);
    for (size_t i = 0; i < n_ * per_token_; ++i) into[i] += from[i];
  }
  ParallelFor(n_ * parts_, 1, [&](size_t begin, size_t end, int) {
    const size_t part_cols = cols_ / parts_;
    for (size_t k = begin; k < end; ++k) {
      const size_t t = k / parts_, c = (k % parts_) * part_cols;
      simd::AxpyIntFinish(part_cols, sums(0, t) + simd::AxpyIntSumsInts(c), steps_[t],
                          y + t * cols_ + c);
    }
  });
}

}  // namespace sparrow::ops
