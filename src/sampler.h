// Next-token choice from logits: greedy, or temperature with top-k and
// top-p (nucleus) filtering, from a seeded generator. The same seed gives the
// same tokens on every platform (no std:: distributions, whose results differ
// between standard libraries).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace sparrow {

struct SamplerParams {
  float temperature = 0.8f;  // <= 0: greedy
  int top_k = 40;            // <= 0: no limit
  float top_p = 0.95f;       // >= 1: no limit
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerParams& params);
  int32_t Sample(const float* logits, size_t n_vocab);

 private:
  double Uniform();  // [0, 1)

  SamplerParams params_;
  std::mt19937_64 rng_;
  std::vector<uint32_t> candidates_;
  std::vector<double> probs_;
};

}  // namespace sparrow
