// Batched matrix products for prompt processing and perplexity.
//
// Which types go where: batches below a size measured per weight type
// (MinBatchForGemm below) run the Highway GEMV kernels for all their tokens
// at once (ops::MatVecs: each group of rows read once and multiplied with
// every token, bit for bit each token's MatVec result). Larger ones go to
// oneDNN. F32 weights go as they are, in f32. The other types (F16, BF16
// and the block-quantized ones; oneDNN 2.6 has no matmul for ggml's block
// formats with their per-32-element scales) are dequantized one panel of
// rows at a time (a few MiB, so the panel stays in cache), each panel
// multiplied by the whole batch, which amortizes the dequantization over
// all tokens:
// - in bf16 where oneDNN multiplies bf16 with AMX: weights and activations
//   rounded to bf16, products summed in f32. On Sapphire Rapids with AMX it
//   multiplies 7x faster than f32 (1.3 against 0.18 TFLOP/s at one thread
//   for 64 x 2048 x 5632), which doubles pp64. Not with AVX-512 BF16 alone:
//   on an Intel Xeon VM without AMX, vdpbf16ps does as many multiplies
//   per cycle as two f32 FMA ports, and oneDNN's avx512_core_bf16 kernel
//   made every type slower than f32 (125M-shaped synthetic models, `sparrow
//   bench -t 1`, --prompt-gemm bf16 / f32, tok/s: Q8_0 pp512 253-267 /
//   390-485, Q4_0 250-290 / 440-478, F16 266-268 / 330-388, Q6_K 249-265 /
//   303-360; Q8_0 pp512 at 2 threads 445 / 620), so there it runs only
//   under --prompt-gemm bf16. The rounding costs ~3e-3 of the largest
//   output against the f32 reference (ops_test.cc states it), less than the
//   types' own quantization steps and less than llama.cpp's 8-bit
//   activations; BF16 weights need no panel;
// - elsewhere in f32, numerically equal to the decode path's to ~1e-6.
// F32 weights stay in f32 everywhere, so a model stored in f32 keeps its
// f32 results. Builds without oneDNN (e.g. Termux) run MatVecs for every
// batch.
#include <algorithm>
#include <stdexcept>
#include <mutex>
#include <string>
#include <type_traits>
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

// From how many tokens a batch goes through oneDNN instead of the batched
// GEMV kernels (MatVecs: each group of rows read once, multiplied with
// every token in the integer/half kernels). Measured with `sparrow bench -p
// N -n 0 -t 1` on 125M-shaped synthetic models (Intel Xeon Sapphire Rapids,
// AVX-512 VNNI, AMX, oneDNN 2.6), tok/s GEMV / oneDNN f32 / oneDNN bf16:
//   Q8_0      n=12 264 / -   / 283, n=16 224 / 205 / 370, n=24 235 / 284 / 508
//   F16       n=12 227 / -   / 208, n=16 233 / 192 / 262, n=32 257 / 296
//   Q6_K      n=8  176 / 123 / 198, n=16 173 / 218 / 377
//   Q4_K x8   n=32 735 / - / 628, n=64 729 / - / 920, n=512 639 / 544 / 1138
//   Q4_0 x8   n=40 816 / - / 688, n=48 819 / - / 814, n=64 790 / - / 1001,
//             n=128 791 / 768, n=256 758 / 572, n=512 662 / 552 / 1106
// (x8: packed for decode, ops::PackForDecode; with the VNNI byte dots of
// simd/int8_dot-inl.h, several tokens per unpacked block: the packed
// kernels beat oneDNN's f32 path at every batch the engine makes by
// default, 512 tokens at most, so unless batches are bf16 packed matrices stay
// on them). Below its threshold a token's results are also bit for bit
// those it gets alone, which keeps block decoding (sparrow batch, 16
// sequences by default) on each sequence's own text: so plain matrices go
// to oneDNN from 24 tokens even where bf16 wins from 12 or 16.
constexpr size_t kFewestForGemm = 16;           // the smallest entry below
constexpr size_t kMostForPlainGemm = 24;        // the largest for plain matrices
constexpr size_t kPackedForBf16Gemm = 48;       // packed ones, with bf16 batches
constexpr size_t kMostForPackedGemm = 1024;     // packed ones: above the default batch
[[maybe_unused]] size_t MinBatchForGemm(const MatrixView& w, bool bf16) {
  // Packed Q8_0 keeps the plain threshold where oneDNN multiplies bf16,
  // which wins from 32 tokens (125M-shaped, 1 thread: pp32 845 tok/s on the
  // packed kernel, 890 on oneDNN bf16 from plain rows).
  if (w.packed) {
    if (!bf16) return kMostForPackedGemm;
    return w.type == TensorType::kQ8_0 ? kMostForPlainGemm : kPackedForBf16Gemm;
  }
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
  // with row stride ldw (elements); src and W both f32 or both bf16
  // (uint16_t bits), dst f32.
  void Multiply(bool bf16, const void* src, size_t m, size_t k, const void* weights,
                size_t ldw, size_t n_out, float* dst, size_t ldd) {
    Gemm g;
    g.bf16 = bf16;
    g.src = src;
    g.m = m;
    g.k = k;
    g.lds = k;
    g.weights = weights;
    g.wei_k_stride = 1;
    g.wei_n_stride = ldw;
    g.n_out = n_out;
    g.dst = dst;
    g.ldd = ldd;
    Run(g);
  }

  // The general form: src m x k (row stride lds), weights element (i, j)
  // of the k x n_out product operand at i * wei_k_stride + j *
  // wei_n_stride, dst m x n_out (row stride ldd), which `accumulate` adds
  // to (oneDNN's sum post-op) instead of overwriting.
  struct Gemm {
    bool bf16 = false;
    const void* src = nullptr;
    size_t m = 0, k = 0, lds = 0;
    const void* weights = nullptr;
    size_t wei_k_stride = 0, wei_n_stride = 0, n_out = 0;
    float* dst = nullptr;
    size_t ldd = 0;
    bool accumulate = false;
  };
  void Run(const Gemm& g) {
    using dnnl::memory;
    using dt = memory::data_type;
    const dt in_type = g.bf16 ? dt::bf16 : dt::f32;
    const memory::dims src_dims = {dim(g.m), dim(g.k)};
    const memory::dims wei_dims = {dim(g.k), dim(g.n_out)};
    const memory::dims dst_dims = {dim(g.m), dim(g.n_out)};
    const memory::desc src_md(src_dims, in_type, memory::dims{dim(g.lds), 1});
    const memory::desc wei_md(wei_dims, in_type,
                              memory::dims{dim(g.wei_k_stride), dim(g.wei_n_stride)});
    const memory::desc dst_md(dst_dims, dt::f32, memory::dims{dim(g.ldd), 1});

    std::lock_guard<std::mutex> lock(mu_);
    const Key key{g.m, g.k, g.n_out, g.lds, g.wei_k_stride, g.wei_n_stride, g.ldd, g.bf16,
                  g.accumulate};
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      dnnl::primitive_attr attr;
      if (g.accumulate) {
        dnnl::post_ops ops;
        ops.append_sum(1.0f);
        attr.set_post_ops(ops);
      }
      dnnl::matmul::primitive_desc pd(
          dnnl::matmul::desc(src_md, wei_md, dst_md), attr, engine_);
      it = cache_.emplace(key, dnnl::matmul(pd)).first;
      if (cache_.size() > 256) {  // shapes vary with prompt length
        const dnnl::matmul keep = it->second;
        cache_.clear();
        it = cache_.emplace(key, keep).first;
      }
    }
    memory src_mem(src_md, engine_, const_cast<void*>(g.src));
    memory wei_mem(wei_md, engine_, const_cast<void*>(g.weights));
    memory dst_mem(dst_md, engine_, g.dst);
    it->second.execute(stream_, {{DNNL_ARG_SRC, src_mem},
                                 {DNNL_ARG_WEIGHTS, wei_mem},
                                 {DNNL_ARG_DST, dst_mem}});
    stream_.wait();
    NoteOpenMpRegion();  // OpenMP's threads are hot: the next steps run on them
  }

  // Whether oneDNN multiplies bf16 matrices with the CPU's own bf16
  // instructions (AVX-512 BF16 or AMX; elsewhere it would emulate them),
  // and whether with AMX, the only case where that is faster than f32.
  bool NativeBf16() const { return native_bf16_; }
  bool AmxBf16() const { return amx_bf16_; }
  const std::string& Bf16Impl() const { return bf16_impl_; }

 private:
  OneDnn() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
    using dnnl::memory;
    using dt = memory::data_type;
    try {
      const memory::desc a({64, 256}, dt::bf16, memory::format_tag::ab);
      const memory::desc b({256, 256}, dt::bf16, memory::format_tag::ba);
      const memory::desc c({64, 256}, dt::f32, memory::format_tag::ab);
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), engine_);
      const std::string impl = pd.impl_info_str();
      amx_bf16_ = impl.find("amx") != std::string::npos;
      native_bf16_ = amx_bf16_ || impl.find("bf16") != std::string::npos;
      bf16_impl_ = impl;
    } catch (const dnnl::error&) {
      native_bf16_ = false;
    }
  }
  static dnnl::memory::dim dim(size_t v) {
    return static_cast<dnnl::memory::dim>(v);
  }

  struct Key {
    size_t m, k, n, lds, wei_k, wei_n, ldd;
    bool bf16, accumulate;
    bool operator==(const Key& o) const {
      return m == o.m && k == o.k && n == o.n && lds == o.lds && wei_k == o.wei_k &&
             wei_n == o.wei_n && ldd == o.ldd && bf16 == o.bf16 && accumulate == o.accumulate;
    }
  };
  struct KeyHash {
    size_t operator()(const Key& key) const {
      size_t h = key.m;
      for (size_t v : {key.k, key.n, key.lds, key.wei_k, key.wei_n, key.ldd, size_t{key.bf16},
                       size_t{key.accumulate}}) {
        h = h * 1000003u ^ v;
      }
      return h;
    }
  };

  dnnl::engine engine_;
  dnnl::stream stream_;
  std::mutex mu_;
  std::unordered_map<Key, dnnl::matmul, KeyHash> cache_;
  bool native_bf16_ = false, amx_bf16_ = false;
  std::string bf16_impl_;
};


#endif  // SPARROW_HAVE_ONEDNN

}  // namespace

namespace {
PromptGemm g_prompt_gemm = PromptGemm::kAuto;
}  // namespace

void SetPromptGemm(PromptGemm mode) { g_prompt_gemm = mode; }
PromptGemm GetPromptGemm() { return g_prompt_gemm; }

std::string PromptGemmDescription() {
#if SPARROW_HAVE_ONEDNN
  const OneDnn& dnn = OneDnn::Get();
  if (dnn.AmxBf16()) return "oneDNN bf16 (" + dnn.Bf16Impl() + ")";
  if (dnn.NativeBf16()) return "oneDNN f32 (bf16 with --prompt-gemm bf16: " + dnn.Bf16Impl() + ")";
  return "oneDNN f32";
#else
  return "GEMV kernels (no oneDNN)";
#endif
}

bool PromptGemmBf16Available() {
#if SPARROW_HAVE_ONEDNN
  return OneDnn::Get().NativeBf16();
#else
  return false;
#endif
}

bool PromptGemmUsesBf16() {
#if SPARROW_HAVE_ONEDNN
  switch (g_prompt_gemm) {
    case PromptGemm::kAuto:
      return OneDnn::Get().AmxBf16();
    case PromptGemm::kBf16:
      return OneDnn::Get().NativeBf16();
    case PromptGemm::kF32:
      return false;
  }
#endif
  return false;
}

uint64_t MatMulScratchBytes(size_t cols, size_t max_rows, size_t n) {
  if (cols == 0 || n == 0) return 0;
#if SPARROW_HAVE_ONEDNN
  // MatMul's panel for the path in use (f32 or bf16; f32 weights need none,
  // but the callers cannot always tell the type in advance), by panel.h's
  // rule, under which the widest, tallest matrix's bounds every other's;
  // the bf16 path's activations; and each thread's unpacked row of a packed
  // matrix (4-bit: under a byte per element).
  const bool bf16 = PromptGemmUsesBf16();
  const bool gemm = n >= kFewestForGemm;
  const uint64_t panel = !gemm ? 0 : bf16 ? Bf16Panel(cols, max_rows).bytes
                                          : F32Panel(cols, max_rows).bytes;
  const uint64_t activations = gemm && bf16 ? uint64_t{n} * cols * sizeof(uint16_t) : 0;
  const uint64_t unpacked = gemm ? uint64_t(ThreadCount()) * cols : 0;
  return panel + activations + unpacked + MatVecsInputBytes(cols, n, /*with_gemm=*/true);
#else
  (void)max_rows;
  return MatVecsInputBytes(cols, n, /*with_gemm=*/false);
#endif
}

#if SPARROW_HAVE_ONEDNN
namespace {

// y = src * W^T one panel of w's rows at a time: each panel dequantized on
// all threads into E (float, or uint16_t holding bf16 bits; src is the batch
// in the same form), then multiplied by oneDNN, which amortizes the
// dequantization over all n tokens.
template <typename E>
void MultiplyByPanels(OneDnn& dnn, const MatrixView& w, const E* src, size_t n, float* y) {
  constexpr bool kBf16 = std::is_same_v<E, uint16_t>;
  const Panel shape = kBf16 ? Bf16Panel(w.cols, w.rows) : F32Panel(w.cols, w.rows);
  const size_t panel_rows = shape.rows;
  thread_local AlignedBuffer<E> panel;  // MatMulScratchBytes
  if (panel.size() * sizeof(E) < shape.bytes) panel.Reset(shape.bytes / sizeof(E));
  E* panel_data = panel.data();
  for (size_t r0 = 0; r0 < w.rows; r0 += panel_rows) {
    const size_t rows = std::min(panel_rows, w.rows - r0);
    ParallelFor(rows, w.packed ? simd::kPackedRows : 4, [&](size_t begin, size_t end, int) {
      thread_local std::vector<uint8_t> scratch;  // a packed row, unpacked
      if (w.packed && scratch.size() < w.row_bytes) scratch.resize(w.row_bytes);
      for (size_t r = begin; r < end; ++r) {
        if constexpr (kBf16) {
          const size_t row = r0 + r;
          const uint8_t* group = PackedGroupOf(w, row);
          if (group != nullptr && row % simd::kPackedRows == 0 && r + simd::kPackedRows <= end) {
            simd::UnpackGroupToBF16(w.type, group, w.cols, scratch.data(), panel_data + r * w.cols,
                                    w.cols);  // the whole group at once
            r += simd::kPackedRows - 1;
          } else if (group != nullptr) {  // no plain copy on the way
            simd::UnpackRowToBF16(w.type, group, w.cols, row % simd::kPackedRows, scratch.data(),
                                  panel_data + r * w.cols);
          } else {
            simd::DequantizeRowToBF16(w.type, w.row(row), w.cols, panel_data + r * w.cols);
          }
        } else {
          const uint8_t* blocks = RowBlocks(w, r0 + r, scratch.data());
          simd::DequantizeRow(w.type, blocks, w.cols, panel_data + r * w.cols);
        }
      }
    });
    dnn.Multiply(kBf16, src, n, w.cols, panel_data, w.cols, rows, y + r0, w.rows);
  }
}

// The bf16 path: activations rounded to bf16 once per call, weights in bf16
// panels (BF16 matrices as they are), products summed in f32 by oneDNN.
void MultiplyBf16(OneDnn& dnn, const MatrixView& w, const float* x, size_t n, float* y) {
  thread_local AlignedBuffer<uint16_t> x16;  // MatMulScratchBytes
  if (x16.size() < n * w.cols) x16.Reset(n * w.cols);
  uint16_t* x16_data = x16.data();
  ParallelFor(n, 1, [&](size_t begin, size_t end, int) {
    for (size_t t = begin; t < end; ++t) {
      simd::DequantizeRowToBF16(TensorType::kF32, x + t * w.cols, w.cols, x16_data + t * w.cols);
    }
  });
  if (w.type == TensorType::kBF16 && w.row_bytes % sizeof(uint16_t) == 0 &&
      reinterpret_cast<uintptr_t>(w.data) % alignof(uint16_t) == 0) {
    dnn.Multiply(true, x16_data, n, w.cols, w.data, w.row_bytes / sizeof(uint16_t), w.rows, y,
                 w.rows);
    return;
  }
  MultiplyByPanels(dnn, w, static_cast<const uint16_t*>(x16_data), n, y);
}

}  // namespace
#endif

#if SPARROW_HAVE_ONEDNN
void MatMulRowsAdd(const MatrixView& w, const float* a, size_t lda, size_t n, float* y) {
  if (w.type != TensorType::kF32 && w.type != TensorType::kBF16) {
    throw std::invalid_argument("MatMulRowsAdd: the rows must be F32 or BF16");
  }
  if (w.rows == 0 || n == 0) return;
  OneDnn& dnn = OneDnn::Get();
  OneDnn::Gemm g;
  g.bf16 = w.type == TensorType::kBF16;
  g.m = n;
  g.k = w.rows;
  g.weights = w.data;
  g.wei_k_stride = w.row_bytes / (g.bf16 ? sizeof(uint16_t) : sizeof(float));
  g.wei_n_stride = 1;
  g.n_out = w.cols;
  g.dst = y;
  g.ldd = w.cols;
  g.accumulate = true;
  if (g.bf16) {
    // The coefficients rounded to bf16 like MatMul's activations.
    thread_local AlignedBuffer<uint16_t> a16;  // RowAxpysScratchBytes
    if (a16.size() < n * w.rows) a16.Reset(n * w.rows);
    for (size_t t = 0; t < n; ++t) {
      simd::DequantizeRowToBF16(TensorType::kF32, a + t * lda, w.rows, a16.data() + t * w.rows);
    }
    g.src = a16.data();
    g.lds = w.rows;
  } else {
    g.src = a;
    g.lds = lda;
  }
  dnn.Run(g);
}
#endif

void MatMul(const MatrixView& w, const float* x, size_t n, float* y) {
#if SPARROW_HAVE_ONEDNN
  if (GetKernelMode() == KernelMode::kFast && n >= kFewestForGemm &&
      n >= MinBatchForGemm(w, PromptGemmUsesBf16())) {
    OneDnn& dnn = OneDnn::Get();
    if (w.type == TensorType::kF32) {
      dnn.Multiply(false, x, n, w.cols, w.data, w.row_bytes / sizeof(float), w.rows, y, w.rows);
      return;
    }
    if (PromptGemmUsesBf16()) return MultiplyBf16(dnn, w, x, n, y);
    MultiplyByPanels(dnn, w, x, n, y);
    return;
  }
#endif
  MatVecs(w, x, n, y);
}

}  // namespace sparrow::ops
