#include "src/ops/ops.h"

#include <algorithm>
#include <atomic>
#include <vector>

#include "simd/activation.h"
#include "simd/attention.h"
#include "simd/gemv.h"
#include "simd/norm.h"
#include "simd/packed_gemv.h"
#include "simd/quantize.h"
#include "simd/vector_ops.h"
#include "base/threads.h"

namespace sparrow::ops {
namespace {

std::atomic<KernelMode> g_mode{KernelMode::kFast};

bool Fast() { return g_mode.load(std::memory_order_relaxed) == KernelMode::kFast; }

// Rows per parallel chunk: enough work per thread to hide the fork/join cost
// (a few microseconds) while keeping chunks balanced.
size_t RowGrain(const MatrixView& w) {
  const size_t target_bytes = 64 * 1024;
  const size_t rows = target_bytes / (w.row_bytes == 0 ? 1 : w.row_bytes);
  return rows < 4 ? 4 : rows;
}

}  // namespace

void SetKernelMode(KernelMode mode) { g_mode.store(mode); }
KernelMode GetKernelMode() { return g_mode.load(); }

const uint8_t* PackedGroupOf(const MatrixView& w, size_t r) {
  const size_t groups = w.packed ? w.rows / simd::kPackedRows : 0;
  if (r >= groups * simd::kPackedRows) return nullptr;
  return w.data + r / simd::kPackedRows * (simd::kPackedRows * w.row_bytes);
}

const uint8_t* RowBlocks(const MatrixView& w, size_t r, uint8_t* scratch) {
  const uint8_t* group = PackedGroupOf(w, r);
  if (group == nullptr) return w.row(r);
  simd::UnpackRow(w.type, group, w.cols, r % simd::kPackedRows, scratch);
  return scratch;
}

bool WantsPacking(const MatrixView& w) {
  uint64_t plain_bytes = 0;
  return !w.packed && simd::PackedGemvSupports(w.type) && w.rows >= simd::kPackedRows &&
         TensorTypeBytes(w.type, w.cols, &plain_bytes) && plain_bytes == w.row_bytes &&
         simd::PackedGemvPreferred();
}

void PackForDecode(MatrixView& w, uint8_t* writable) {
  if (!WantsPacking(w)) return;
  simd::PackMatrix(w.type, writable, w.rows, w.cols);
  w.packed = true;
}

namespace {

// The inputs of a batch prepared once by the calling thread, read by every
// worker (through the pointer: naming a thread_local inside a lambda would
// give each worker its own, unprepared copy).
template <class Input, class... PrepareArgs>
const Input* PreparedInputs(std::vector<Input>& inputs, const float* x, size_t n, size_t cols,
                            PrepareArgs... args) {
  if (inputs.size() < n) inputs.resize(n);
  for (size_t t = 0; t < n; ++t) inputs[t].Prepare(args..., x + t * cols, cols);
  return inputs.data();
}

// MatVecs of a packed matrix: groups of 8 rows, then the plain tail rows.
void PackedMatVecs(const MatrixView& w, const float* x, size_t n, float* y) {
  const size_t groups = w.rows / simd::kPackedRows;
  const size_t tail_begin = groups * simd::kPackedRows;
  const size_t group_grain = std::max<size_t>(1, RowGrain(w) / simd::kPackedRows);
  thread_local std::vector<simd::PackedGemvInput> inputs;
  const simd::PackedGemvInput* prepared = PreparedInputs(inputs, x, n, w.cols);
  ParallelFor(groups, group_grain, [&](size_t begin, size_t end, int) {
    simd::PackedGemvBatch(w.type, w.data, w.cols, prepared, n, begin, end, y, w.rows);
  });
  // The few tail rows (fewer than 8) token by token, through one input.
  thread_local simd::GemvInput tail;
  for (size_t t = 0; t < n && tail_begin < w.rows; ++t) {
    tail.Prepare(w.type, x + t * w.cols, w.cols);
    simd::Gemv(w.type, w.data, w.row_bytes, w.cols, tail, tail_begin, w.rows, y + t * w.rows);
  }
}

void ReferenceMatVec(const MatrixView& w, const float* x, float* y) {
  if (w.packed) {
    const size_t groups = w.rows / simd::kPackedRows;
    const size_t tail_begin = groups * simd::kPackedRows;
    const size_t group_grain = std::max<size_t>(1, RowGrain(w) / simd::kPackedRows);
    ParallelFor(groups, group_grain, [&](size_t begin, size_t end, int) {
      simd::PackedGemvReference(w.type, w.data, w.cols, x, begin, end, y);
    });
    simd::GemvReference(w.type, w.data, w.row_bytes, w.cols, x, tail_begin, w.rows, y);
    return;
  }
  ParallelFor(w.rows, RowGrain(w), [&](size_t begin, size_t end, int) {
    simd::GemvReference(w.type, w.data, w.row_bytes, w.cols, x, begin, end, y);
  });
}

}  // namespace

void MatVecs(const MatrixView& w, const float* x, size_t n, float* y) {
  if (n == 0) return;
  if (!Fast()) {
    for (size_t t = 0; t < n; ++t) ReferenceMatVec(w, x + t * w.cols, y + t * w.rows);
    return;
  }
  if (w.packed) return PackedMatVecs(w, x, n, y);
  thread_local std::vector<simd::GemvInput> inputs;
  const simd::GemvInput* prepared = PreparedInputs(inputs, x, n, w.cols, w.type);
  ParallelFor(w.rows, RowGrain(w), [&](size_t begin, size_t end, int) {
    simd::GemvBatch(w.type, w.data, w.row_bytes, w.cols, prepared, n, begin, end, y, w.rows);
  });
}

void MatVec(const MatrixView& w, const float* x, float* y) { MatVecs(w, x, 1, y); }

void GetRow(const MatrixView& w, size_t r, float* out) {
  thread_local std::vector<uint8_t> scratch;
  if (w.packed && scratch.size() < w.row_bytes) scratch.resize(w.row_bytes);
  const uint8_t* blocks = RowBlocks(w, r, scratch.data());
  if (Fast()) {
    simd::DequantizeRow(w.type, blocks, w.cols, out);
  } else {
    simd::DequantizeRowReference(w.type, blocks, w.cols, out);
  }
}

void RmsNorm(const float* x, const float* weight, size_t n, float eps,
             float* out) {
  if (Fast()) {
    simd::RmsNorm(x, weight, n, eps, out);
  } else {
    simd::RmsNormReference(x, weight, n, eps, out);
  }
}

void ApplyRope(float* heads, size_t n_heads, size_t head_dim, size_t rope_dims,
               const float* cos, const float* sin, simd::RopeStyle style) {
  if (Fast()) {
    simd::ApplyRope(heads, n_heads, head_dim, rope_dims, cos, sin, style);
  } else {
    simd::ApplyRopeReference(heads, n_heads, head_dim, rope_dims, cos, sin,
                             style);
  }
}

void SiluMul(const float* gate, const float* up, size_t n, float* out) {
  if (Fast()) {
    simd::SiluMul(gate, up, n, out);
  } else {
    simd::SiluMulReference(gate, up, n, out);
  }
}

void AttentionGroup(const simd::AttentionQueries& a) {
  if (Fast()) {
    simd::AttentionGroup(a);
  } else {
    simd::AttentionGroupReference(a);
  }
}

void AddInPlace(const float* x, float* y, size_t n) {
  if (Fast()) {
    simd::AddInPlace(x, y, n);
  } else {
    simd::AddInPlaceReference(x, y, n);
  }
}

}  // namespace sparrow::ops
