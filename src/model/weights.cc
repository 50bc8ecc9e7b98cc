#include "src/model/weights.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <utility>

#include "base/error.h"
#include "base/huge_pages.h"
#include "base/mapped_file.h"
#include "simd/gemv.h"
#include "simd/quantize.h"

namespace sparrow {
namespace {

class TensorLookup {
 public:
  TensorLookup(const std::vector<gguf::TensorInfo>& tensors, std::string source)
      : source_(std::move(source)) {
    for (const gguf::TensorInfo& t : tensors) by_name_.emplace(t.name, &t);
  }

  const gguf::TensorInfo* Find(const std::string& name) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : it->second;
  }

  const gguf::TensorInfo& Require(const std::string& name) const {
    const gguf::TensorInfo* t = Find(name);
    if (t == nullptr) ThrowInputError(source_, ": missing tensor '", name, "'");
    return *t;
  }

  // A rows x cols matrix in a type the GEMV kernels handle.
  ops::MatrixView Matrix(const std::string& name, uint64_t rows,
                         uint64_t cols) const {
    return MatrixFrom(Require(name), rows, cols);
  }

  ops::MatrixView MatrixFrom(const gguf::TensorInfo& t, uint64_t rows,
                             uint64_t cols) const {
    if (t.dims.size() != 2 || t.dims[0] != cols || t.dims[1] != rows) {
      ThrowInputError(source_, ": tensor '", t.name, "' has shape ",
                      Shape(t), ", expected [", cols, ", ", rows, "]");
    }
    if (!simd::GemvSupports(t.type)) {
      ThrowInputError(source_, ": tensor '", t.name, "' has type ",
                      TensorTypeName(t.type),
                      ", which Sparrow does not support (supported: ",
                      TensorTypeNames(TypeAbility::kGemv, /*gguf_only=*/true), ")");
    }
    ops::MatrixView m;
    m.type = t.type;
    m.data = t.data;
    m.rows = rows;
    m.cols = cols;
    m.row_bytes = t.n_bytes / rows;
    return m;
  }

  // A 1-D tensor of `n` values converted to f32.
  std::vector<float> Vector(const std::string& name, uint64_t n) const {
    const gguf::TensorInfo& t = Require(name);
    if (t.dims.size() != 1 || t.dims[0] != n) {
      ThrowInputError(source_, ": tensor '", name, "' has shape ", Shape(t),
                      ", expected [", n, "]");
    }
    if (t.type != TensorType::kF32 && t.type != TensorType::kF16 &&
        t.type != TensorType::kBF16) {
      ThrowInputError(source_, ": tensor '", name, "' has type ",
                      TensorTypeName(t.type), "; vectors must be f32, f16 or bf16");
    }
    std::vector<float> out(n);
    simd::DequantizeRowReference(t.type, t.data, n, out.data());
    return out;
  }

 private:
  static std::string Shape(const gguf::TensorInfo& t) {
    std::string s = "[";
    for (size_t i = 0; i < t.dims.size(); ++i) {
      s += (i ? ", " : "") + std::to_string(t.dims[i]);
    }
    return s + "]";
  }

  std::string source_;
  std::unordered_map<std::string, const gguf::TensorInfo*> by_name_;
};

}  // namespace

ModelWeights BindWeights(const ModelConfig& c,
                         const std::vector<gguf::TensorInfo>& tensors,
                         const std::string& source_name, bool with_ffn) {
  const TensorLookup lookup(tensors, source_name);
  const TensorNames& n = c.architecture->names;
  ModelWeights w;
  w.token_embd = lookup.Matrix(n.token_embd, c.n_vocab, c.d_model);
  w.output_norm = lookup.Vector(n.output_norm, c.d_model);
  if (lookup.Find(n.output) != nullptr) {
    w.output = lookup.Matrix(n.output, c.n_vocab, c.d_model);
  } else {
    w.output = w.token_embd;  // tied embeddings
  }
  if (lookup.Find(n.rope_freqs) != nullptr) {
    w.rope_freq_factors = lookup.Vector(n.rope_freqs, c.rope_dims / 2);
  }
  // One layer at a time, each once all its tensors are found: a damaged
  // block count (2^26 layers in a file with two) ends at the first missing
  // tensor instead of in an allocation that size (the soak test found it).
  w.layers.reserve(std::min<size_t>(c.n_layers, tensors.size()));
  for (uint32_t i = 0; i < c.n_layers; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    LayerWeights l;
    l.attn_norm = lookup.Vector(b + n.attn_norm, c.d_model);
    l.wq = lookup.Matrix(b + n.attn_q + ".weight", c.q_dim(), c.d_model);
    l.wk = lookup.Matrix(b + n.attn_k + ".weight", c.kv_dim(), c.d_model);
    l.wv = lookup.Matrix(b + n.attn_v + ".weight", c.kv_dim(), c.d_model);
    l.wo = lookup.Matrix(b + n.attn_output + ".weight", c.d_model, c.q_dim());
    if (c.qkv_bias) {
      l.bq = lookup.Vector(b + n.attn_q + ".bias", c.q_dim());
      l.bk = lookup.Vector(b + n.attn_k + ".bias", c.kv_dim());
      l.bv = lookup.Vector(b + n.attn_v + ".bias", c.kv_dim());
    }
    l.ffn_norm = lookup.Vector(b + n.ffn_norm, c.d_model);
    if (with_ffn) {
      l.gate = lookup.Matrix(b + n.ffn_gate, c.d_ff, c.d_model);
      l.up = lookup.Matrix(b + n.ffn_up, c.d_ff, c.d_model);
      l.down = lookup.Matrix(b + n.ffn_down, c.d_model, c.d_ff);
    }
    w.layers.push_back(std::move(l));
  }
  return w;
}

namespace {

constexpr size_t kMatrixAlignment = 64;
// Below this the matrices stay where they are: small models gain nothing
// (their matrices mostly sit in the caches, within the TLB's reach), and
// rounding to whole huge pages would cost them proportionally more.
constexpr uint64_t kFewestBytesToMove = uint64_t{32} << 20;

// The matrices PrepareWeightsForDecode takes, in memory order of a layer.
std::vector<ops::MatrixView*> DecodeMatrices(ModelWeights& w) {
  std::vector<ops::MatrixView*> out;
  if (w.output.data != nullptr && w.output.data != w.token_embd.data) out.push_back(&w.output);
  for (LayerWeights& l : w.layers) {
    for (ops::MatrixView* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down}) {
      if (m->data != nullptr) out.push_back(m);
    }
  }
  return out;
}

uint64_t AlignedBytes(uint64_t bytes) {
  return (bytes + kMatrixAlignment - 1) / kMatrixAlignment * kMatrixAlignment;
}

}  // namespace

void PrepareWeightsForDecode(ModelWeights& weights) {
  const bool pack = ops::GetKernelMode() == ops::KernelMode::kFast;
  const std::vector<ops::MatrixView*> matrices = DecodeMatrices(weights);
  uint64_t total = 0;
  for (const ops::MatrixView* m : matrices) total += AlignedBytes(m->rows * m->row_bytes);
  if (TransparentHugePagesAvailable() && total >= kFewestBytesToMove) {
    auto buffer = std::make_shared<HugePageBuffer>(total);
    uint8_t* at = buffer->data();
    for (ops::MatrixView* m : matrices) {
      const size_t bytes = m->rows * m->row_bytes;
      // A few MiB at a time, each given back as soon as it is copied, so the
      // process never holds much more than the weights' own bytes.
      constexpr size_t kStep = size_t{4} << 20;
      for (size_t done = 0; done < bytes; done += kStep) {
        const size_t n = std::min(kStep, bytes - done);
        std::memcpy(at + done, m->data + done, n);
        ReleaseWholePages(m->data + done, n);
      }
      m->data = at;
      if (pack && ops::WantsPacking(*m)) ops::PackForDecode(*m, at);
      at += AlignedBytes(bytes);
    }
    weights.decode_matrices = std::move(buffer);
    return;
  }
  if (!pack) return;
  for (ops::MatrixView* m : matrices) {
    if (!ops::WantsPacking(*m)) continue;
    if (!MakeWritable(m->data, m->rows * m->row_bytes)) continue;
    ops::PackForDecode(*m, const_cast<uint8_t*>(m->data));
  }
}

uint64_t DecodeMatricesOverheadBytes(size_t n_matrices, uint64_t bytes_at_most) {
  if (!TransparentHugePagesAvailable() || bytes_at_most < kFewestBytesToMove) return 0;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  return HugePageBufferBytes(1) + n_matrices * (kMatrixAlignment + 2 * page);
}

size_t DecodeMatrixCount(const ModelConfig& config, bool with_ffn) {
  return 1 + size_t{config.n_layers} * (with_ffn ? 7 : 4);
}

}  // namespace sparrow
