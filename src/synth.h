// Synthetic llama models: valid GGUF files with random weights of any shape
// and weight type, and a small valid SentencePiece tokenizer, so benchmarks
// build their own large models instead of downloading them. Written tensor
// by tensor; memory use is bounded by a few MiB of row buffers whatever the
// model size. Weights depend only on the seed and the tensor/row, not on the
// thread count.
//
// Hot structure (optional: SynthSpec::hot_fraction and hot_gain, both or
// neither). Trained models have persistent activation outliers: a few
// residual channels and a few FFN units are large on almost every token, and
// the rest fall off smoothly. Pruning benchmarks on i.i.d. random weights
// would miss that, so synth can plant it:
//
//   n_hot(n)       = clamp(round(F * n), 1, n)   for n channels or units
//   strength(rank) = G                                 rank <  n_hot
//                  = (1 + rank - n_hot)^(-alpha)       rank >= n_hot
//   alpha          = 0.25
//
// so the strongest cold entry has strength 1 and G is measured against it.
// alpha = 0.25 keeps the tail alive: the coldest of 230 cold channels (dim
// 256, F = 0.1) has 0.26 and the coldest of 12902 cold units (ffn 14336) has
// 0.094, a spread of 4-10x like the bulk of a trained model's channels,
// whereas alpha >= 0.5 would leave a near-dead tail that makes pruning look
// easier than it is.
//
// Ranks come from seeded permutations (SplitMix-driven Fisher-Yates): one
// for the residual channels, shared by every layer because it is the same
// residual stream, and one per layer for the FFN units.
//  - Residual channel c: every blk.L.ffn_norm.weight[c] (the usual random
//    value around 1) is multiplied by its strength, so the FFN input of a hot
//    channel is G times larger. attn_norm and output_norm are unchanged.
//  - FFN unit u of layer L: row u of blk.L.ffn_up.weight is multiplied by
//    its strength. The GLU output SiLU(gate.x) * (up.x) is linear in the up
//    row, so a hot unit's |GLU output| is on average exactly G times that of
//    the strongest cold unit (and strength(rank)^-1 times that of a colder
//    one). The gate row is left alone so that SiLU's operating point, and
//    with it which units fire, stays as in the unscaled model.
// The scaling is applied in f32 before quantization. Without the options the
// output is byte-identical to a model written before they existed.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/tensor_type.h"

namespace sparrow {

struct SynthSpec {
  uint32_t dim = 0;
  uint32_t ffn = 0;
  uint32_t layers = 0;
  uint32_t heads = 0;
  uint32_t kv_heads = 0;
  uint32_t vocab = 0;
  uint32_t context_length = 4096;
  TensorType type = TensorType::kF32;
  uint64_t seed = 1;
  // Hot structure (see above): F in (0, 1] and G >= 1, both or neither.
  std::optional<float> hot_fraction;
  std::optional<float> hot_gain;
};

// The exponent of the cold channels' power law.
inline constexpr double kSynthColdAlpha = 0.25;

// InputError for an impossible shape (with the reason) or unsupported type,
// or hot options that are out of range or given one without the other.
void ValidateSynthSpec(const SynthSpec& spec);

// n_hot(n) and strength(rank) as defined above.
uint32_t SynthHotCount(uint32_t n, float hot_fraction);
float SynthStrength(uint32_t rank, uint32_t n_hot, float hot_gain);

// The strength of every residual channel (dim entries) and of every FFN unit
// of `layer` (ffn entries), indexed by channel/unit, exactly as the writer
// applies them; empty when the spec has no hot options. For tests and for
// benchmarks that want to know which units are hot.
std::vector<float> SynthChannelStrengths(const SynthSpec& spec);
std::vector<float> SynthUnitStrengths(const SynthSpec& spec, uint32_t layer);

// Writes the model to `path` (temporary file, renamed at the end).
// progress(bytes_done, bytes_total) is called as tensor data is written.
void WriteSyntheticModel(
    const SynthSpec& spec, const std::string& path,
    const std::function<void(uint64_t, uint64_t)>& progress = nullptr);

// Synthetic LoRA adapters in llama.cpp's GGUF adapter format, for any base
// model: `rank` x n_in A and n_out x `rank` B for every attention and FFN
// matrix of every layer, random (sigma as for synth weights, seeded),
// stored as `type` (f32, f16, bf16 or q8_0: a Q8_0 adapter needs rows of
// whole 32-blocks, so n_in and the rank must be multiples of 32), with
// adapter.lora.alpha = `alpha`. For testing fusion on shapes and types the
// fixtures do not cover.
struct SynthLoraSpec {
  uint32_t rank = 4;
  float alpha = 8.0f;
  TensorType type = TensorType::kF32;
  float sigma = 0.02f;
  uint64_t seed = 1;
};
void WriteSyntheticLora(const std::string& base_path, const SynthLoraSpec& spec,
                        const std::string& path);

}  // namespace sparrow
