// Next-token choice from logits: greedy, or temperature with top-k and
// top-p (nucleus) filtering, from a seeded generator. The same seed gives the
// same tokens on every platform (no std:: distributions, whose results differ
// between standard libraries). Before either, the logits may be shaped:
// biases on chosen tokens, and penalties on tokens the context already has.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace sparrow {

struct SamplerParams {
  float temperature = 0.8f;  // <= 0: greedy
  int top_k = 40;            // <= 0: no limit
  float top_p = 0.95f;       // >= 1: no limit
  // Drops tokens less likely than min_p times the likeliest (on the logits
  // as they come, before the temperature, as llama.cpp's); 0: off.
  float min_p = 0.0f;
  uint64_t seed = 0;
  // Penalties on the tokens among the last penalty_last_n of the context
  // (prompt and generated, as llama.cpp counts them): a positive logit is
  // divided by repeat_penalty and a negative one multiplied (llama.cpp's),
  // then presence_penalty is subtracted once for a token that is there and
  // frequency_penalty once per time it is (OpenAI's). 1, 0 and 0: off.
  float repeat_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int penalty_last_n = 64;  // 0: no penalties; -1: the whole context
  // Added to these tokens' logits first (OpenAI's logit_bias; -inf bans a
  // token). Ids outside the vocabulary are refused by the frontends.
  std::vector<std::pair<int32_t, float>> logit_bias;

  // Whether the logits are shaped before the choice.
  bool ShapesLogits() const {
    return !logit_bias.empty() ||
           (penalty_last_n != 0 &&
            (repeat_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f));
  }
};

// InputError naming `what` (the option or field) when a biased token is
// outside a vocabulary of n_vocab tokens.
void CheckLogitBias(const SamplerParams& params, size_t n_vocab, std::string_view what);

class Sampler {
 public:
  explicit Sampler(const SamplerParams& params);
  // Chooses the next token and counts it in the context the penalties see.
  int32_t Sample(const float* logits, size_t n_vocab);
  // Counts tokens already in the context (the prompt) for the penalties.
  void Accept(std::span<const int32_t> tokens);

 private:
  double Uniform();  // [0, 1)
  // Greedy or top-k / top-p at the temperature.
  int32_t Choose(const float* logits, size_t n_vocab);
  // The logits with the biases and penalties applied, in shaped_.
  const float* Shape(const float* logits, size_t n_vocab);

  SamplerParams params_;
  std::mt19937_64 rng_;
  std::vector<uint32_t> candidates_;
  std::vector<double> probs_;
  std::vector<int32_t> history_;  // the context's tokens, the last ones kept
  std::vector<float> shaped_;
  std::vector<int32_t> window_;
};

}  // namespace sparrow
