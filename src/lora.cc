#include "src/lora.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "base/error.h"
#include "simd/quantize.h"
#include "src/model/config.h"
#include "base/threads.h"

namespace sparrow {
namespace {

std::string BaseName(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.find_last_of('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

// A stored LoRA matrix as f32, rows x cols (its dims[1] x dims[0]).
std::vector<float> ToF32(const LoraMatrix& m) {
  const size_t cols = m.dims[0], rows = m.dims[1];
  std::vector<float> out(rows * cols);
  uint64_t row_bytes = 0;
  (void)TensorTypeBytes(m.type, cols, &row_bytes);
  for (size_t r = 0; r < rows; ++r) {
    simd::DequantizeRow(m.type, m.data + r * row_bytes, cols, out.data() + r * cols);
  }
  return out;
}

// llama.cpp's converter stores each q/k head's rows interleaved for its
// RoPE: GGUF row h*hd + 2j + t holds Hugging Face row h*hd + t*hd/2 + j.
// B's rows follow the weight's rows, so a PEFT B is reordered the same way.
std::vector<float> PermuteHeadRows(const std::vector<float>& b, uint32_t n_out, uint32_t rank,
                                   uint32_t n_heads) {
  std::vector<float> out(b.size());
  const uint32_t hd = n_out / n_heads;
  for (uint32_t h = 0; h < n_heads; ++h) {
    for (uint32_t j = 0; j < hd / 2; ++j) {
      for (uint32_t t = 0; t < 2; ++t) {
        const size_t to = size_t{h} * hd + 2 * j + t;
        const size_t from = size_t{h} * hd + t * (hd / 2) + j;
        std::memcpy(&out[to * rank], &b[from * rank], rank * sizeof(float));
      }
    }
  }
  return out;
}

// One update to one base tensor, ready to add: factor * B A.
struct Update {
  std::vector<float> a;  // rank x n_in
  std::vector<float> b;  // n_out x rank, already scaled by the factor
  uint32_t rank = 0;
};

}  // namespace

FusedLora FusedLora::Fuse(const gguf::GgufFile& base, const std::vector<LoraSpec>& specs,
                          const std::function<void(uint64_t, uint64_t)>& progress) {
  FusedLora fused;
  const ModelConfig config = ModelConfig::FromGguf(base);
  std::map<std::string, std::vector<Update>> updates;  // by base tensor name
  for (const LoraSpec& spec : specs) {
    if (!std::isfinite(spec.scale)) ThrowInputError("--lora-scaled: the scale must be finite");
    const LoraAdapterFile adapter = ReadLoraAdapter(spec.path);
    if (!adapter.architecture.empty() && adapter.architecture != config.arch) {
      ThrowInputError(adapter.path, ": the adapter is for architecture '", adapter.architecture,
                      "' but the model is '", config.arch, "'");
    }
    for (const LoraTensorPair& pair : adapter.pairs) {
      const gguf::TensorInfo* w = base.FindTensor(pair.base_name);
      if (w == nullptr) {
        ThrowInputError(adapter.path, ": the adapter changes '", pair.base_name,
                        "', which the model does not have");
      }
      if (w->dims.size() != 2 || w->dims[0] != pair.n_in || w->dims[1] != pair.n_out) {
        ThrowInputError(adapter.path, ": '", pair.base_name, "' is ", w->dims[0], " x ",
                        w->dims.size() > 1 ? w->dims[1] : 1, " (n_in x n_out) in the model but ",
                        pair.n_in, " x ", pair.n_out, " in the adapter");
      }
      if (!simd::CanConvert(w->type)) {
        ThrowInputError(adapter.path, ": cannot fuse into '", pair.base_name, "': its type ",
                        TensorTypeName(w->type), " cannot be written back");
      }
      Update u;
      u.rank = pair.rank;
      u.a = ToF32(pair.a);
      u.b = ToF32(pair.b);
      // Hugging Face q/k rows are in checkpoint order; llama GGUFs hold
      // them permuted (qwen2 GGUFs do not: its RoPE is the NeoX one):
      // Architecture::qk_rows_permuted.
      const bool q = pair.base_name.find(".attn_q.") != std::string::npos;
      const bool k = pair.base_name.find(".attn_k.") != std::string::npos;
      if (adapter.hf_row_order && config.architecture->qk_rows_permuted && (q || k)) {
        u.b = PermuteHeadRows(u.b, pair.n_out, pair.rank, q ? config.n_heads : config.n_kv_heads);
      }
      const float factor = adapter.Factor(pair, spec.scale);
      for (float& v : u.b) v *= factor;
      updates[pair.base_name].push_back(std::move(u));
    }
    fused.adapters_.push_back({BaseName(adapter.path), adapter.format, adapter.crc32c, spec.scale});
  }

  uint64_t done = 0, total = 0;
  for (const auto& entry : updates) total += base.FindTensor(entry.first)->n_bytes;
  for (const auto& entry : updates) {
    // Named, not a structured binding: lambdas may not capture those
    // before C++20's clang 16.
    const std::string& name = entry.first;
    const std::vector<Update>& list = entry.second;
    const gguf::TensorInfo& w = *base.FindTensor(name);
    const size_t n_in = w.dims[0], n_out = w.dims[1];
    uint64_t row_bytes = 0;
    (void)TensorTypeBytes(w.type, n_in, &row_bytes);
    AlignedBuffer<uint8_t> out(w.n_bytes);
    std::vector<double> squares(2 * static_cast<size_t>(ThreadCount()), 0.0);
    ParallelFor(n_out, 1, [&](size_t begin, size_t end, int thread) {
      std::vector<float> row(n_in), before(n_in);
      double changed = 0, original = 0;
      for (size_t o = begin; o < end; ++o) {
        simd::DequantizeRow(w.type, w.data + o * row_bytes, n_in, row.data());
        before = row;
        for (const Update& u : list) {
          for (uint32_t r = 0; r < u.rank; ++r) {
            const float coef = u.b[o * u.rank + r];
            const float* a = &u.a[size_t{r} * n_in];
            for (size_t i = 0; i < n_in; ++i) row[i] += coef * a[i];
          }
        }
        uint8_t* dst = out.data() + o * row_bytes;
        simd::QuantizeRow(w.type, row.data(), n_in, dst);
        simd::DequantizeRow(w.type, dst, n_in, row.data());  // what is stored
        for (size_t i = 0; i < n_in; ++i) {
          const double d = static_cast<double>(row[i]) - before[i];
          changed += d * d;
          original += static_cast<double>(before[i]) * before[i];
        }
      }
      squares[2 * thread] += changed;
      squares[2 * thread + 1] += original;
    });
    double changed = 0, original = 0;
    for (size_t t = 0; t < squares.size(); t += 2) {
      changed += squares[t];
      original += squares[t + 1];
    }
    fused.changes_.push_back({name, original > 0 ? std::sqrt(changed / original) : 0.0});
    fused.bytes_ += w.n_bytes;
    fused.fused_.emplace(name, std::move(out));
    done += w.n_bytes;
    if (progress) progress(done, total);
  }
  return fused;
}

void FusedLora::ApplyTo(gguf::GgufFile& base) const {
  for (const auto& [name, bytes] : fused_) base.ReplaceTensorData(name, bytes.data());
}

std::vector<std::string> FusedLora::Describe() const {
  std::vector<std::string> lines;
  for (const AdapterInfo& a : adapters_) {
    char crc[16];
    std::snprintf(crc, sizeof(crc), "0x%08x", a.crc32c);
    lines.push_back(StrCat(a.name, " (", a.format, ", crc32c ", crc, ", scale ", a.scale, ")"));
  }
  return lines;
}

}  // namespace sparrow
