// Batched matrix products for prompt processing and perplexity.
//
// Which types go where: batches below a size measured per weight type
// (MinBatchForGemm below) run the Highway GEMV kernels for all their tokens
// at once (ops::MatVecs: each group of rows read once and multiplied with
// every token, bit for bit each token's MatVec result). Larger ones go to
// oneDNN's f32 matmul: F32 weights as they are; F16, BF16 and the
// block-quantized types dequantized to f32 one panel of rows at a time
// (F32PanelRows rows, a few MiB, so the panel stays in cache), each panel
// multiplied by the whole batch, which amortizes the dequantization over
// all tokens. oneDNN 2.6 has no matmul for ggml's block formats
// (per-32-element scales), and its bf16/f16 paths would round the
// activations too; f32 keeps it numerically equal to the decode path's to
// ~1e-6. Builds without oneDNN (e.g. Termux) run MatVecs for every batch.
#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "base/aligned_buffer.h"
#include "simd/gemv.h"
#include "simd/packed_gemv.h"
#include "simd/quantize.h"
#include "sparrow_config.h"
#include "src/ops/ops.h"
#include "src/ops/panel.h"
#include "base/threads.h"

#if SPARROW_HAVE_ONEDNN
#include <dnnl.hpp>
#endif

namespace sparrow::ops {
namespace {

// From how many tokens a batch goes through oneDNN (panels dequantized to
// f32) instead of the batched GEMV kernels (MatVecs: each group of rows
// read once, multiplied with every token in the integer/half kernels).
// Measured with `sparrow bench -p N -n 0 -t 1` on 125M-shaped synthetic
// models (Intel Xeon, AVX-512 VNNI, oneDNN 2.6), tok/s GEMV / oneDNN:
//   Q8_0      n=16 224 / 205, n=24 235 / 284
//   F16       n=16 233 / 192, n=24 252 / 253, n=32 257 / 296
//   Q6_K      n=8  176 / 123, n=16 173 / 218
//   Q4_K x8   n=128 732 / 532, n=256 713 / 580, n=512 639 / 544
//   Q4_0 x8   n=128 791 / 768, n=256 758 / 572, n=512 662 / 552
// (x8: packed for decode, ops::PackForDecode; with the VNNI byte dots of
// simd/int8_dot-inl.h, several tokens per unpacked block: the packed
// kernels beat oneDNN at every batch the engine makes by default, 512
// tokens at most, so packed matrices stay on them). Below its threshold a
// token's results are also bit for bit those it gets alone, which keeps
// block decoding (sparrow batch) on each sequence's own text.
constexpr size_t kFewestForGemm = 16;        // the smallest entry below
constexpr size_t kMostForPlainGemm = 24;     // the largest for plain matrices
constexpr size_t kMostForPackedGemm = 1024;  // packed ones: above the default batch
[[maybe_unused]] size_t MinBatchForGemm(const MatrixView& w) {  // oneDNN builds only
  if (w.packed) return kMostForPackedGemm;
  switch (w.type) {
    case TensorType::kQ6_K: return kFewestForGemm;
    default: return kMostForPlainGemm;  // Q8_0, F16; F32 and BF16 as F16
  }
}

// What MatVecs keeps prepared for a batch of n tokens of `cols` elements,
// at most (thread_locals of ops.cc, sized by the inputs' own Bytes): one
// input per token for the batches that stay on the GEMV kernels (all of
// them without oneDNN; Q6_K's inputs are the largest plain ones), plus the
// packed tail's one input.
uint64_t MatVecsInputBytes(size_t cols, size_t n, bool with_gemm) {
  const size_t plain = with_gemm ? std::min(n, kMostForPlainGemm - 1) : n;
  const size_t packed = with_gemm ? std::min(n, kMostForPackedGemm - 1) : n;
  return plain * simd::GemvInput::Bytes(TensorType::kQ6_K, cols) +
         packed * simd::PackedGemvInput::Bytes(cols) +
         simd::GemvInput::Bytes(TensorType::kQ6_K, cols);
}

#if SPARROW_HAVE_ONEDNN

class OneDnn {
 public:
  static OneDnn& Get() {
    static OneDnn instance;
    return instance;
  }

  // dst[m x n_out] (row stride ldd) = src[m x k] * W^T where W is n_out x k
  // with row stride ldw; all f32.
  void Multiply(const float* src, size_t m, size_t k, const float* weights,
                size_t ldw, size_t n_out, float* dst, size_t ldd) {
    using dnnl::memory;
    using dt = memory::data_type;
    const memory::dims src_dims = {dim(m), dim(k)};
    const memory::dims wei_dims = {dim(k), dim(n_out)};
    const memory::dims dst_dims = {dim(m), dim(n_out)};
    const memory::desc src_md(src_dims, dt::f32, memory::dims{dim(k), 1});
    const memory::desc wei_md(wei_dims, dt::f32, memory::dims{1, dim(ldw)});
    const memory::desc dst_md(dst_dims, dt::f32, memory::dims{dim(ldd), 1});

    std::lock_guard<std::mutex> lock(mu_);
    const Key key{m, k, n_out, ldw, ldd};
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      dnnl::matmul::primitive_desc pd(
          dnnl::matmul::desc(src_md, wei_md, dst_md), engine_);
      it = cache_.emplace(key, dnnl::matmul(pd)).first;
      if (cache_.size() > 256) {  // shapes vary with prompt length
        const dnnl::matmul keep = it->second;
        cache_.clear();
        it = cache_.emplace(key, keep).first;
      }
    }
    memory src_mem(src_md, engine_, const_cast<float*>(src));
    memory wei_mem(wei_md, engine_, const_cast<float*>(weights));
    memory dst_mem(dst_md, engine_, dst);
    it->second.execute(stream_, {{DNNL_ARG_SRC, src_mem},
                                 {DNNL_ARG_WEIGHTS, wei_mem},
                                 {DNNL_ARG_DST, dst_mem}});
    stream_.wait();
  }

 private:
  OneDnn() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}
  static dnnl::memory::dim dim(size_t v) {
    return static_cast<dnnl::memory::dim>(v);
  }

  struct Key {
    size_t m, k, n, ldw, ldd;
    bool operator==(const Key& o) const {
      return m == o.m && k == o.k && n == o.n && ldw == o.ldw && ldd == o.ldd;
    }
  };
  struct KeyHash {
    size_t operator()(const Key& key) const {
      size_t h = key.m;
      for (size_t v : {key.k, key.n, key.ldw, key.ldd}) h = h * 1000003u ^ v;
      return h;
    }
  };

  dnnl::engine engine_;
  dnnl::stream stream_;
  std::mutex mu_;
  std::unordered_map<Key, dnnl::matmul, KeyHash> cache_;
};


#endif  // SPARROW_HAVE_ONEDNN

}  // namespace

uint64_t MatMulScratchBytes(size_t cols, size_t max_rows, size_t n) {
  if (cols == 0 || n == 0) return 0;
#if SPARROW_HAVE_ONEDNN
  // MatMul's panel, sized as MatMul sizes it (f32 weights need none, but the
  // callers cannot always tell the type in advance).
  const uint64_t panel =
      n >= kFewestForGemm ? uint64_t{std::min(F32PanelRows(cols), max_rows)} * cols * sizeof(float)
                          : 0;
  return panel + MatVecsInputBytes(cols, n, /*with_gemm=*/true);
#else
  (void)max_rows;
  return MatVecsInputBytes(cols, n, /*with_gemm=*/false);
#endif
}

void MatMul(const MatrixView& w, const float* x, size_t n, float* y) {
#if SPARROW_HAVE_ONEDNN
  if (n >= MinBatchForGemm(w) && GetKernelMode() == KernelMode::kFast) {
    OneDnn& dnn = OneDnn::Get();
    if (w.type == TensorType::kF32) {
      dnn.Multiply(x, n, w.cols, reinterpret_cast<const float*>(w.data),
                   w.row_bytes / sizeof(float), w.rows, y, w.rows);
      return;
    }
    const size_t panel_rows = std::min(F32PanelRows(w.cols), w.rows);
    thread_local AlignedBuffer<float> panel;
    if (panel.size() < panel_rows * w.cols) panel.Reset(panel_rows * w.cols);
    float* panel_data = panel.data();
    for (size_t r0 = 0; r0 < w.rows; r0 += panel_rows) {
      const size_t rows = std::min(panel_rows, w.rows - r0);
      ParallelFor(rows, 4, [&](size_t begin, size_t end, int) {
        thread_local std::vector<uint8_t> scratch;  // a packed row, unpacked
        if (w.packed && scratch.size() < w.row_bytes) scratch.resize(w.row_bytes);
        for (size_t r = begin; r < end; ++r) {
          simd::DequantizeRow(w.type, RowBlocks(w, r0 + r, scratch.data()), w.cols,
                              panel_data + r * w.cols);
        }
      });
      dnn.Multiply(x, n, w.cols, panel_data, w.cols, rows, y + r0, w.rows);
    }
    return;
  }
#endif
  MatVecs(w, x, n, y);
}

}  // namespace sparrow::ops
