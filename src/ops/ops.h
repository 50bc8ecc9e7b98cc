// The ops layer: the operations the model graph is written in, on plain
// arrays. It picks kernels (fast Highway or scalar reference), splits work
// across threads and batches through oneDNN; it knows nothing of layers,
// attention heads' meaning or where weights came from.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>
#include <string>

#include "base/tensor_type.h"
#include "simd/attention.h"
#include "simd/rope.h"

namespace sparrow::ops {

// kReference routes every op through the scalar reference kernels (and no
// oneDNN), the yardstick for the fast path (`--kernels reference`).
enum class KernelMode { kFast, kReference };
void SetKernelMode(KernelMode mode);
KernelMode GetKernelMode();

// A weight matrix as stored: `rows` rows of `cols` elements, each row
// `row_bytes` long, in one of the simd/gemv.h types.
struct MatrixView {
  TensorType type = TensorType::kF32;
  const uint8_t* data = nullptr;
  size_t rows = 0;
  size_t cols = 0;
  size_t row_bytes = 0;
  // Q4_0, Q4_K and Q8_0 only: the whole groups of 8 rows are interleaved for the
  // packed decode kernels (simd/packed_gemv.h; see PackForDecode). Read a
  // row's blocks through RowBlocks then, not row().
  bool packed = false;

  const uint8_t* row(size_t r) const { return data + r * row_bytes; }
};

// Row r's blocks in the type's plain layout: a pointer into w, or for a
// row of a packed group, the row unpacked into `scratch` (row_bytes).
const uint8_t* RowBlocks(const MatrixView& w, size_t r, uint8_t* scratch);
// The packed group of 8 rows that holds row r (its row r % 8), or null
// where row r is stored plain.
const uint8_t* PackedGroupOf(const MatrixView& w, size_t r);

// Whether PackForDecode would pack w: Q4_0, Q4_K or Q8_0 with whole rows back to
// back, at least one group of 8, and a CPU whose packed kernels beat the
// plain ones.
bool WantsPacking(const MatrixView& w);
// Interleaves w's whole groups of rows in place (`writable` is w.data,
// writable) and marks w packed, if WantsPacking(w). The packed matrix takes
// the same bytes, so it costs no memory.
void PackForDecode(MatrixView& w, uint8_t* writable);

// y = W x (x has cols entries, y has rows), threaded over rows.
void MatVec(const MatrixView& w, const float* x, float* y);
// MatVec for n tokens (x: n x cols, y: n x rows): each token's results are
// bit for bit MatVec's, and each group of rows is read from memory once for
// all n (then from L1), so a batch costs about one pass over the weights.
void MatVecs(const MatrixView& w, const float* x, size_t n, float* y);

// y[t] = W x[t] for t < n: x is n x cols, y is n x rows, both row-major.
// Large batches go through oneDNN (f32 weights directly, other types
// dequantized panel by panel); smaller ones (up to a size measured per
// weight type, matmul.cc) through MatVecs, bit for bit MatVec's results.
void MatMul(const MatrixView& w, const float* x, size_t n, float* y);
// How MatMul multiplies large batches of non-F32 weights (matmul.cc):
// kAuto in bf16 where oneDNN multiplies it with AMX, else f32; kF32 always
// in f32, within ~1e-6 of the decode kernels' results, so that a token's
// result hardly depends on the batch it came in (`sparrow batch` uses it:
// its passes mix sequences); kBf16 in bf16 wherever the CPU has bf16
// instructions oneDNN uses (AMX or AVX-512 BF16; PromptGemmBf16Available).
// Set before a model is opened (the budget charges the path's scratch).
enum class PromptGemm { kAuto, kF32, kBf16 };
void SetPromptGemm(PromptGemm mode);
PromptGemm GetPromptGemm();
// Whether kBf16 can run here: oneDNN is built in and has a bf16 matmul
// kernel for this CPU's bf16 instructions.
bool PromptGemmBf16Available();
// What MatMul runs large batches of non-F32 weights through on this CPU
// with kAuto, for `sparrow info`: "oneDNN bf16 (<oneDNN's kernel>)",
// "oneDNN f32 (bf16 with --prompt-gemm bf16: <kernel>)", "oneDNN f32", or
// "GEMV kernels (no oneDNN)".
std::string PromptGemmDescription();
// Whether those batches are rounded to bf16 now (ops_test.cc's tolerance).
bool PromptGemmUsesBf16();
// Bytes MatMul (and MatVec/MatVecs) keep for batches of up to n tokens over
// matrices of at most `max_rows` rows of at most `cols` elements: on the
// calling thread the dequantized panel of oneDNN batches and the prepared
// inputs of the GEMV kernels, on each thread an unpacked row.
uint64_t MatMulScratchBytes(size_t cols, size_t max_rows, size_t n);

// A set of stored vectors ("rows") of one type and length, taken from
// records: record r is at base + index[r] * stride + offset (index ==
// nullptr: at r * stride), and each record gives `parts` rows,
// part_stride bytes apart. Row k is part k % parts of record k / parts, so
// the rows of one record are listed together. This is how a compacted unit
// cache's parts are seen: each cache row holds several parts back to back,
// `offset` picks the first one used, and parts = 2 takes a neuron record's
// gate and up parts in one pass over the record.
struct RowSet {
  TensorType type = TensorType::kF32;
  const uint8_t* base = nullptr;
  size_t stride = 0;
  size_t offset = 0;
  size_t cols = 0;                  // elements per row
  const uint32_t* index = nullptr;  // optional record selection
  size_t count = 0;                 // rows: records times parts
  size_t parts = 1;
  size_t part_stride = 0;
  // RowAxpys: each row is this many rows of cols / row_parts elements back
  // to back (a record's parts summed as one row). Only a layout that spans
  // a row (Q4_0S: its scales in front) reads them apart.
  size_t row_parts = 1;

  const uint8_t* record(size_t r) const {
    return base + (index != nullptr ? index[r] : r) * stride + offset;
  }
  const uint8_t* row(size_t k) const {
    if (parts == 1) return record(k);  // no division where there is one part
    return record(k / parts) + (k % parts) * part_stride;
  }
};

// out[t * rows.count + k] = dot(row k, x[t]) for t < n (x is n x cols).
void RowDots(const RowSet& rows, const float* x, size_t n, float* out);
// Bytes of the scratch RowDots keeps on its calling thread for batches of
// up to n tokens over sets of at most `max_rows` rows of `cols` elements
// of `type` (exactly that many: a narrower row gets a taller panel; 0
// where it needs none).
uint64_t RowDotsScratchBytes(TensorType type, size_t cols, size_t max_rows, size_t n);
// y[t] += sum_k a[t * rows.count + k] * row k for t < n (y is n x cols).
void RowAxpys(const RowSet& rows, const float* a, size_t n, float* y);
// Bytes of the scratch RowAxpys keeps for batches of up to n tokens over
// sets of at most `max_rows` rows of `cols` elements of `type`, on all its
// threads (0 where it needs none).
uint64_t RowAxpysScratchBytes(TensorType type, size_t cols, size_t max_rows, size_t n);
// RowAxpys' integer form (simd/axpy_int.h) for sums made of several calls
// (the streamed FFN's cached rows, then each chunk read from flash):
//   sums.Begin(cols, row_parts, n, steps); RowAxpysInt(...)...; sums.Finish(y);
// Each token's terms are kept as exact integer sums, so its result does not
// depend on the order or the split of its rows, the thread count or the
// other tokens of its batch. What it rounds is each coefficient times
// block scale, to a multiple of the token's step: steps[t] = its largest
// |coefficient| times the rows' largest block scale (known before any row
// is read: the bundle records it) / simd::kAxpyIntMaxMultiple, 15 bits of
// the largest term.
class RowAxpyIntSums {
 public:
  // Whether RowAxpysInt takes rows of `type` in the current kernel mode on
  // this CPU: Q4_0S and Q4_0 with the fast kernels where the SIMD target
  // sums in integers faster than RowAxpys (x86: AVX3_DL, whose CPUs have
  // AVX-512 VNNI, and AVX2 where the CPU has AVX-VNNI).
  static bool Usable(TensorType type);
  // Bytes of the sums of n tokens over rows of `cols` elements (a set for
  // each thread).
  static uint64_t Bytes(size_t cols, size_t n);
  // The most rows a token's sums may take (over all its calls).
  static size_t MaxRows();
  // The step of a token whose largest |coefficient| is `largest_coefficient`
  // over rows whose largest |block scale| is `largest_scale`.
  static float Step(float largest_coefficient, float largest_scale);
  // Zeroes the sums of n tokens (token t's step steps[t], finite, >= 0)
  // over RowSets of `cols` elements in `row_parts` parts.
  void Begin(size_t cols, size_t row_parts, size_t n, const float* steps);
  // y (n x cols) += each token's sums times its step (once per Begin).
  void Finish(float* y);

 private:
  friend void RowAxpysInt(const RowSet& rows, const float* a, size_t n, RowAxpyIntSums& sums);
  // Sets of sums: one per thread (ParallelFor's ranges).
  static size_t Sets();
  // Token t's sums of the rows that ParallelFor's range `range` took.
  int32_t* sums(size_t range, size_t t) { return sums_.data() + (range * n_ + t) * per_token_; }

  // One set of n tokens' sums per thread: RowAxpysInt splits its rows
  // between threads, each of which sums its rows over every column (a
  // split of the columns instead reads part of every row in each thread,
  // which streams badly from DRAM); Finish adds them up.
  std::vector<int32_t> sums_;
  std::vector<float> steps_;
  size_t cols_ = 0, parts_ = 1, n_ = 0, per_token_ = 0, sets_ = 1;
};
// sums' tokens += sum_k a[t * rows.count + k] * row k, as RowAxpys would add
// to y: rows of sums' type, cols and row_parts, n the tokens of Begin.
void RowAxpysInt(const RowSet& rows, const float* a, size_t n, RowAxpyIntSums& sums);

// Whether RowDots and RowAxpys (fast kernels) send a batch of n tokens to
// oneDNN on panels of the rows rather than to the gather kernels: false in
// builds without oneDNN; else from row_ops.cc's threshold, unless
// --prompt-gemm f32. Tests size their bounds by it.
bool RowProductsUsePanels(size_t n);
// y (n x w.cols) += a (n x w.rows, row stride lda) * w, for an F32 or BF16
// matrix w (RowAxpys' panels), through oneDNN (builds with it only); bf16
// rounds a like MatMul's activations.
void MatMulRowsAdd(const MatrixView& w, const float* a, size_t lda, size_t n, float* y);

// One row of W (e.g. an embedding) converted to f32.
void GetRow(const MatrixView& w, size_t r, float* out);

void RmsNorm(const float* x, const float* weight, size_t n, float eps,
             float* out);
void ApplyRope(float* heads, size_t n_heads, size_t head_dim, size_t rope_dims,
               const float* cos, const float* sin, simd::RopeStyle style);
void SiluMul(const float* gate, const float* up, size_t n, float* out);
// Up to simd::kMaxAttentionQueries query heads over one KV head's rows.
void AttentionGroup(const simd::AttentionQueries& a);
void AddInPlace(const float* x, float* y, size_t n);

}  // namespace sparrow::ops
