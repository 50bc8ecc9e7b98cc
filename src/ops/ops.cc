#include "src/ops/ops.h"

#include <atomic>
#include <vector>

#include "simd/activation.h"
#include "simd/attention.h"
#include "simd/gemv.h"
#include "simd/norm.h"
#include "simd/quantize.h"
#include "simd/vector_ops.h"
#include "src/threads.h"

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

void MatVec(const MatrixView& w, const float* x, float* y) {
  if (Fast()) {
    // Prepared once, read by every thread.
    // Prepared once by the calling thread, read by every worker (through
    // the pointer: naming a thread_local inside the lambda would give each
    // worker its own, unprepared copy).
    thread_local simd::GemvInput input;
    input.Prepare(w.type, x, w.cols);
    const simd::GemvInput* prepared = &input;
    ParallelFor(w.rows, RowGrain(w), [&](size_t begin, size_t end, int) {
      simd::Gemv(w.type, w.data, w.row_bytes, w.cols, *prepared, begin, end,
                 y);
    });
  } else {
    ParallelFor(w.rows, RowGrain(w), [&](size_t begin, size_t end, int) {
      simd::GemvReference(w.type, w.data, w.row_bytes, w.cols, x, begin, end,
                          y);
    });
  }
}

void GetRow(const MatrixView& w, size_t r, float* out) {
  if (Fast()) {
    simd::DequantizeRow(w.type, w.row(r), w.cols, out);
  } else {
    simd::DequantizeRowReference(w.type, w.row(r), w.cols, out);
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

void AttentionHead(const float* q, const simd::KvRows& k, const simd::KvRows& v,
                   size_t n_pos, size_t head_dim, float scale, float* scratch, float* out) {
  if (Fast()) {
    simd::AttentionHead(q, k, v, n_pos, head_dim, scale, scratch, out);
  } else {
    simd::AttentionHeadReference(q, k, v, n_pos, head_dim, scale, scratch, out);
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
