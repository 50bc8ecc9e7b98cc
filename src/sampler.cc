#include "src/sampler.h"

#include <algorithm>
#include <cmath>

#include "simd/topk.h"
#include "simd/vector_ops.h"

namespace sparrow {

Sampler::Sampler(const SamplerParams& params) : params_(params), rng_(params.seed) {}

double Sampler::Uniform() {
  return static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0);
}

int32_t Sampler::Sample(const float* logits, size_t n_vocab) {
  if (params_.temperature <= 0.0f) {
    return static_cast<int32_t>(simd::ArgMax(logits, n_vocab));
  }
  // Top-k (sorted by decreasing logit), then softmax at the temperature over
  // those, then the smallest prefix whose mass reaches top_p.
  const size_t k = params_.top_k > 0 ? std::min<size_t>(params_.top_k, n_vocab)
                                     : n_vocab;
  candidates_.resize(k);
  simd::TopK(logits, n_vocab, k, simd::TopKOrder::kLargest, candidates_.data());
  probs_.resize(k);
  const double max_logit = logits[candidates_[0]];
  double sum = 0.0;
  for (size_t i = 0; i < k; ++i) {
    probs_[i] = std::exp((logits[candidates_[i]] - max_logit) / params_.temperature);
    sum += probs_[i];
  }
  size_t keep = k;
  if (params_.top_p < 1.0f) {
    double mass = 0.0;
    for (size_t i = 0; i < k; ++i) {
      mass += probs_[i] / sum;
      if (mass >= params_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept = 0.0;
  for (size_t i = 0; i < keep; ++i) kept += probs_[i];
  double r = Uniform() * kept;
  for (size_t i = 0; i < keep; ++i) {
    r -= probs_[i];
    if (r < 0.0) return static_cast<int32_t>(candidates_[i]);
  }
  return static_cast<int32_t>(candidates_[keep - 1]);
}

}  // namespace sparrow
