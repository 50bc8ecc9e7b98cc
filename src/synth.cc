#include "src/synth.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/error.h"
#include "formats/gguf.h"
#include "formats/tokenizer_data.h"
#include "simd/gemv.h"
#include "simd/quantize.h"
#include "base/threads.h"

namespace sparrow {
namespace {

uint64_t SplitMix(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Approximately normal values with standard deviation `sigma`: the sum of
// four 16-bit uniforms (Irwin-Hall), cheap enough for billions of weights.
void FillRandom(uint64_t seed, float sigma, float mean, float* out, size_t n) {
  uint64_t state = seed;
  // Sum of 4 U(0,1): mean 2, variance 4/12.
  const float scale = sigma / std::sqrt(4.0f / 12.0f) / 65536.0f;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t r = SplitMix(state);
    const uint32_t sum = static_cast<uint32_t>(r & 0xFFFF) + ((r >> 16) & 0xFFFF) +
                         ((r >> 32) & 0xFFFF) + (r >> 48);
    out[i] = mean + (static_cast<float>(sum) - 2.0f * 65536.0f) * scale;
  }
}

// A SentencePiece vocabulary: specials, the 256 byte tokens, then printable
// characters and lower-case letter strings with and without the U+2581 word
// prefix, shortest first, until `vocab` tokens.
TokenizerData SynthTokenizer(uint32_t vocab) {
  TokenizerData t;
  t.model = "llama";
  t.pre = "default";
  t.bos_id = 1;
  t.eos_id = 2;
  t.unk_id = 0;
  t.add_bos = true;
  t.add_space_prefix = true;
  auto add = [&](std::string text, TokenType type) {
    if (t.tokens.size() >= vocab) return;
    t.scores.push_back(type == TokenType::kNormal ? -static_cast<float>(t.tokens.size()) : 0.0f);
    t.types.push_back(type);
    t.tokens.push_back(std::move(text));
  };
  add("<unk>", TokenType::kUnknown);
  add("<s>", TokenType::kControl);
  add("</s>", TokenType::kControl);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    add(name, TokenType::kByte);
  }
  const std::string kWord = "\xE2\x96\x81";  // U+2581
  add(kWord, TokenType::kNormal);
  for (char c = 0x21; c < 0x7F; ++c) add(std::string(1, c), TokenType::kNormal);
  std::vector<std::string> level = {""};
  while (t.tokens.size() < vocab) {
    std::vector<std::string> next;
    for (const std::string& prefix : level) {
      for (char c = 'a'; c <= 'z'; ++c) next.push_back(prefix + c);
    }
    for (const std::string& s : next) {
      if (s.size() > 1) add(s, TokenType::kNormal);
      add(kWord + s, TokenType::kNormal);
    }
    level = std::move(next);
  }
  return t;
}

// Which hot-structure strengths multiply a tensor (see synth.h): per column
// by residual channel (the ffn_norm vectors) or per row by FFN unit (ffn_up).
enum class HotScale { kNone, kChannels, kUnits };

struct TensorPlan {
  std::string name;
  uint64_t rows;
  uint64_t cols;
  TensorType type;
  float sigma;
  float mean;
  HotScale hot = HotScale::kNone;
  uint32_t layer = 0;
};

// Seeds of the hot-structure permutations; distinct from the weights' seeds
// (which mix in the tensor index) so the two streams are unrelated.
constexpr uint64_t kChannelPermSalt = 0x6A09E667F3BCC908ull;
constexpr uint64_t kUnitPermSalt = 0xBB67AE8584CAA73Bull;

// A seeded Fisher-Yates shuffle of 0..n-1: perm[rank] is the index holding
// that rank. Our own generator rather than std::shuffle, whose output
// differs between standard libraries. The modulo bias is below n / 2^64.
std::vector<uint32_t> SeededPermutation(uint64_t seed, uint32_t n) {
  std::vector<uint32_t> perm(n);
  for (uint32_t i = 0; i < n; ++i) perm[i] = i;
  uint64_t state = seed;
  for (uint32_t i = n; i > 1; --i) {
    const uint64_t j = SplitMix(state) % i;
    std::swap(perm[i - 1], perm[j]);
  }
  return perm;
}

// Strength of every index 0..n-1, ranked by a permutation drawn from `seed`.
std::vector<float> RankedStrengths(uint64_t seed, uint32_t n, float fraction, float gain) {
  const std::vector<uint32_t> perm = SeededPermutation(seed, n);
  const uint32_t n_hot = SynthHotCount(n, fraction);
  std::vector<float> strength(n);
  for (uint32_t rank = 0; rank < n; ++rank) strength[perm[rank]] = SynthStrength(rank, n_hot, gain);
  return strength;
}

void ValidateHotOptions(const SynthSpec& s) {
  if (s.hot_fraction.has_value() != s.hot_gain.has_value()) {
    ThrowInputError(s.hot_fraction ? "synth: --hot-fraction needs --hot-gain"
                                   : "synth: --hot-gain needs --hot-fraction");
  }
  if (!s.hot_fraction) return;
  // Written as negations so that NaN fails too.
  if (!(*s.hot_fraction > 0.0f && *s.hot_fraction <= 1.0f)) {
    ThrowInputError("synth: --hot-fraction must be in (0, 1], got ", *s.hot_fraction);
  }
  if (!(std::isfinite(*s.hot_gain) && *s.hot_gain >= 1.0f)) {
    ThrowInputError("synth: --hot-gain must be a finite number >= 1, got ", *s.hot_gain);
  }
}

// The per-column or per-row multipliers for tensor `t`; empty if none.
std::vector<float> HotScalesFor(const SynthSpec& s, const TensorPlan& t) {
  switch (t.hot) {
    case HotScale::kChannels: return SynthChannelStrengths(s);
    case HotScale::kUnits: return SynthUnitStrengths(s, t.layer);
    case HotScale::kNone: break;
  }
  return {};
}

}  // namespace

uint32_t SynthHotCount(uint32_t n, float hot_fraction) {
  const double hot = std::round(static_cast<double>(hot_fraction) * n);
  // At least one hot entry, so a tiny fraction of a small model still has one.
  return static_cast<uint32_t>(std::clamp(hot, 1.0, static_cast<double>(n)));
}

float SynthStrength(uint32_t rank, uint32_t n_hot, float hot_gain) {
  if (rank < n_hot) return hot_gain;
  return static_cast<float>(std::pow(1.0 + (rank - n_hot), -kSynthColdAlpha));
}

std::vector<float> SynthChannelStrengths(const SynthSpec& s) {
  if (!s.hot_fraction || !s.hot_gain) return {};
  return RankedStrengths(s.seed ^ kChannelPermSalt, s.dim, *s.hot_fraction, *s.hot_gain);
}

std::vector<float> SynthUnitStrengths(const SynthSpec& s, uint32_t layer) {
  if (!s.hot_fraction || !s.hot_gain) return {};
  uint64_t state = s.seed ^ kUnitPermSalt ^ (uint64_t{layer} * 0xD1B54A32D192ED03ull);
  return RankedStrengths(SplitMix(state), s.ffn, *s.hot_fraction, *s.hot_gain);
}

void ValidateSynthSpec(const SynthSpec& s) {
  if (s.dim == 0 || s.ffn == 0 || s.layers == 0 || s.heads == 0 || s.kv_heads == 0 || s.vocab == 0) {
    ThrowInputError("synth: --dim, --ffn, --layers, --heads, --kv-heads and --vocab must all be positive");
  }
  if (s.dim % s.heads != 0) {
    ThrowInputError("synth: --dim ", s.dim, " is not a multiple of --heads ", s.heads);
  }
  if ((s.dim / s.heads) % 2 != 0) {
    ThrowInputError("synth: the head size ", s.dim / s.heads, " must be even for RoPE");
  }
  if (s.heads % s.kv_heads != 0) {
    ThrowInputError("synth: --heads ", s.heads, " is not a multiple of --kv-heads ", s.kv_heads);
  }
  if (!simd::GemvSupports(s.type) || !simd::CanConvert(s.type) ||
      FindGgufTensorType(static_cast<uint32_t>(s.type)) == nullptr) {
    ThrowInputError("synth: type ", TensorTypeName(s.type), " is not supported (",
                    TensorTypeNames(TypeAbility::kGemv, /*gguf_only=*/true), ")");
  }
  ValidateHotOptions(s);
  const uint32_t block = GetTensorTypeInfo(s.type).block_elems;
  if (s.dim % block != 0 || s.ffn % block != 0) {
    ThrowInputError("synth: --dim and --ffn must be multiples of ", block, " for type ",
                    TensorTypeName(s.type));
  }
  if (s.vocab < 259 + 95) {
    ThrowInputError("synth: --vocab must be at least 354 (specials, 256 bytes, printable characters)");
  }
}

void WriteSyntheticModel(const SynthSpec& s, const std::string& path,
                         const std::function<void(uint64_t, uint64_t)>& progress) {
  ValidateSynthSpec(s);
  const uint32_t head_dim = s.dim / s.heads;
  const uint32_t kv_dim = head_dim * s.kv_heads;

  std::vector<TensorPlan> plan;
  const float sigma = 0.02f;
  plan.push_back({"token_embd.weight", s.vocab, s.dim, s.type, sigma, 0.0f});
  for (uint32_t i = 0; i < s.layers; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    plan.push_back({b + "attn_norm.weight", 1, s.dim, TensorType::kF32, 0.05f, 1.0f});
    plan.push_back({b + "attn_q.weight", s.dim, s.dim, s.type, sigma, 0.0f});
    plan.push_back({b + "attn_k.weight", kv_dim, s.dim, s.type, sigma, 0.0f});
    plan.push_back({b + "attn_v.weight", kv_dim, s.dim, s.type, sigma, 0.0f});
    plan.push_back({b + "attn_output.weight", s.dim, s.dim, s.type, sigma, 0.0f});
    plan.push_back({b + "ffn_norm.weight", 1, s.dim, TensorType::kF32, 0.05f, 1.0f,
                    HotScale::kChannels, i});
    plan.push_back({b + "ffn_gate.weight", s.ffn, s.dim, s.type, sigma, 0.0f});
    plan.push_back({b + "ffn_up.weight", s.ffn, s.dim, s.type, sigma, 0.0f, HotScale::kUnits, i});
    plan.push_back({b + "ffn_down.weight", s.dim, s.ffn, s.type, sigma, 0.0f});
  }
  plan.push_back({"output_norm.weight", 1, s.dim, TensorType::kF32, 0.05f, 1.0f});
  plan.push_back({"output.weight", s.vocab, s.dim, s.type, sigma, 0.0f});

  gguf::GgufWriter writer(path);
  writer.Add("general.architecture", gguf::Value::String("llama"));
  writer.Add("general.name", gguf::Value::String(StrCat("sparrow-synth-", s.dim, "x", s.layers, "-",
                                                        TensorTypeName(s.type))));
  writer.Add("llama.context_length", gguf::Value::U32(s.context_length));
  writer.Add("llama.embedding_length", gguf::Value::U32(s.dim));
  writer.Add("llama.feed_forward_length", gguf::Value::U32(s.ffn));
  writer.Add("llama.block_count", gguf::Value::U32(s.layers));
  writer.Add("llama.attention.head_count", gguf::Value::U32(s.heads));
  writer.Add("llama.attention.head_count_kv", gguf::Value::U32(s.kv_heads));
  writer.Add("llama.rope.dimension_count", gguf::Value::U32(head_dim));
  writer.Add("llama.rope.freq_base", gguf::Value::F32(10000.0f));
  writer.Add("llama.attention.layer_norm_rms_epsilon", gguf::Value::F32(1e-5f));
  // Only when given, so that a model without them keeps its old bytes.
  if (s.hot_fraction && s.hot_gain) {
    writer.Add("sparrow.synth.hot_fraction", gguf::Value::F32(*s.hot_fraction));
    writer.Add("sparrow.synth.hot_gain", gguf::Value::F32(*s.hot_gain));
  }
  SynthTokenizer(s.vocab).AddToGguf(writer);

  uint64_t total = 0;
  for (const TensorPlan& t : plan) {
    if (t.rows == 1) {
      writer.AddTensor(t.name, {t.cols}, t.type);
    } else {
      writer.AddTensor(t.name, {t.cols, t.rows}, t.type);
    }
    uint64_t bytes = 0;
    (void)TensorTypeBytes(t.type, t.rows * t.cols, &bytes);
    total += bytes;
  }

  uint64_t done = 0;
  for (size_t ti = 0; ti < plan.size(); ++ti) {
    const TensorPlan& t = plan[ti];
    uint64_t row_bytes = 0;
    (void)TensorTypeBytes(t.type, t.cols, &row_bytes);
    // Rows per chunk: ~8 MiB of f32 scratch.
    const uint64_t chunk_rows = std::max<uint64_t>(1, (8u << 20) / (t.cols * sizeof(float)));
    AlignedBuffer<uint8_t> out(std::min(chunk_rows, t.rows) * row_bytes);
    // Computed once per tensor, before the threads split the rows, so the
    // weights stay independent of the thread count.
    const std::vector<float> hot = HotScalesFor(s, t);
    for (uint64_t r0 = 0; r0 < t.rows; r0 += chunk_rows) {
      const uint64_t rows = std::min(chunk_rows, t.rows - r0);
      ParallelFor(rows, 1, [&](size_t begin, size_t end, int) {
        std::vector<float> row(t.cols);
        for (size_t r = begin; r < end; ++r) {
          uint64_t seed_state = s.seed ^ (ti * 0x9E3779B97F4A7C15ull);
          const uint64_t row_seed = SplitMix(seed_state) ^ (r0 + r) * 0xD1B54A32D192ED03ull;
          FillRandom(row_seed, t.sigma, t.mean, row.data(), t.cols);
          if (t.hot == HotScale::kChannels && !hot.empty()) {
            for (size_t c = 0; c < t.cols; ++c) row[c] *= hot[c];
          } else if (t.hot == HotScale::kUnits && !hot.empty()) {
            for (float& w : row) w *= hot[r0 + r];
          }
          simd::QuantizeRow(t.type, row.data(), t.cols, out.data() + r * row_bytes);
        }
      });
      writer.WriteTensorData(out.data(), rows * row_bytes);
      done += rows * row_bytes;
      if (progress) progress(done, total);
    }
  }
  writer.Finish();
}

void WriteSyntheticLora(const std::string& base_path, const SynthLoraSpec& spec,
                        const std::string& path) {
  if (spec.rank == 0 || spec.rank > 4096) ThrowInputError("synth-lora: --rank must be in [1, 4096]");
  if (!(spec.alpha > 0) || !std::isfinite(spec.alpha)) ThrowInputError("synth-lora: --alpha must be positive");
  if (!(spec.sigma > 0) || !std::isfinite(spec.sigma)) ThrowInputError("synth-lora: --sigma must be positive");
  if (spec.type != TensorType::kF32 && spec.type != TensorType::kF16 &&
      spec.type != TensorType::kBF16 && spec.type != TensorType::kQ8_0) {
    ThrowInputError("synth-lora: --type must be f32, f16, bf16 or q8_0");
  }
  const gguf::GgufFile base = gguf::GgufFile::Open(base_path);
  const std::optional<std::string> arch = base.GetString("general.architecture");
  if (!arch) ThrowInputError(base_path, ": lacks general.architecture");
  const uint32_t block = GetTensorTypeInfo(spec.type).block_elems;
  struct Matrix {
    std::string name;
    uint64_t cols, rows;
  };
  std::vector<Matrix> plan;  // lora_a then lora_b of each adapted tensor
  for (const gguf::TensorInfo& t : base.tensors()) {
    const bool adapted = t.dims.size() == 2 && t.name.rfind("blk.", 0) == 0 &&
                         (t.name.find(".attn_") != std::string::npos ||
                          t.name.find(".ffn_") != std::string::npos);
    if (!adapted) continue;
    if (t.dims[0] % block != 0 || spec.rank % block != 0) {
      ThrowInputError("synth-lora: ", TensorTypeName(spec.type), " adapters need rows of whole ",
                      block, "-element blocks, but '", t.name, "' has ", t.dims[0],
                      " columns and the rank is ", spec.rank);
    }
    plan.push_back({t.name + ".lora_a", t.dims[0], spec.rank});
    plan.push_back({t.name + ".lora_b", spec.rank, t.dims[1]});
  }
  if (plan.empty()) ThrowInputError(base_path, ": no attention or feed-forward matrices to adapt");

  gguf::GgufWriter writer(path);
  writer.Add("general.architecture", gguf::Value::String(*arch));
  writer.Add("general.type", gguf::Value::String("adapter"));
  writer.Add("adapter.type", gguf::Value::String("lora"));
  writer.Add("adapter.lora.alpha", gguf::Value::F32(spec.alpha));
  for (const Matrix& m : plan) writer.AddTensor(m.name, {m.cols, m.rows}, spec.type);
  for (size_t mi = 0; mi < plan.size(); ++mi) {
    const Matrix& m = plan[mi];
    uint64_t row_bytes = 0;
    (void)TensorTypeBytes(spec.type, m.cols, &row_bytes);
    std::vector<float> row(m.cols);
    std::vector<uint8_t> out(row_bytes);
    for (uint64_t r = 0; r < m.rows; ++r) {
      uint64_t state = spec.seed ^ (mi * 0x9E3779B97F4A7C15ull);
      FillRandom(SplitMix(state) ^ (r * 0xD1B54A32D192ED03ull), spec.sigma, 0.0f, row.data(), m.cols);
      simd::QuantizeRow(spec.type, row.data(), m.cols, out.data());
      writer.WriteTensorData(out.data(), out.size());
    }
  }
  writer.Finish();
}

}  // namespace sparrow
