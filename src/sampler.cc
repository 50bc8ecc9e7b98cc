#include "src/sampler.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "simd/topk.h"
#include "simd/vector_ops.h"

namespace sparrow {

void CheckLogitBias(const SamplerParams& params, size_t n_vocab, std::string_view what) {
  for (const auto& [token, bias] : params.logit_bias) {
    if (token < 0 || static_cast<size_t>(token) >= n_vocab) {
      ThrowInputError(what, ": token ", token, " is not in the vocabulary (0..", n_vocab - 1, ")");
    }
  }
}

Sampler::Sampler(const SamplerParams& params) : params_(params), rng_(params.seed) {}

double Sampler::Uniform() {
  return static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0);
}

void Sampler::Accept(std::span<const int32_t> tokens) {
  if (params_.penalty_last_n == 0 || !params_.ShapesLogits()) return;
  history_.insert(history_.end(), tokens.begin(), tokens.end());
  // Keep what the window needs, trimming now and then rather than per token.
  const size_t keep = static_cast<size_t>(params_.penalty_last_n);
  if (params_.penalty_last_n > 0 && history_.size() > 2 * keep + 64) {
    history_.erase(history_.begin(), history_.end() - keep);
  }
}

const float* Sampler::Shape(const float* logits, size_t n_vocab) {
  shaped_.assign(logits, logits + n_vocab);
  for (const auto& [token, bias] : params_.logit_bias) {
    if (token >= 0 && static_cast<size_t>(token) < n_vocab) shaped_[token] += bias;
  }
  if (params_.penalty_last_n == 0 || history_.empty()) return shaped_.data();
  const size_t n = params_.penalty_last_n < 0
                       ? history_.size()
                       : std::min(history_.size(), static_cast<size_t>(params_.penalty_last_n));
  window_.assign(history_.end() - n, history_.end());
  std::sort(window_.begin(), window_.end());
  for (size_t i = 0; i < window_.size();) {
    const int32_t token = window_[i];
    size_t count = 0;
    for (; i < window_.size() && window_[i] == token; ++i) ++count;
    if (token < 0 || static_cast<size_t>(token) >= n_vocab) continue;
    float& logit = shaped_[token];
    if (params_.repeat_penalty != 1.0f) {
      logit = logit > 0.0f ? logit / params_.repeat_penalty : logit * params_.repeat_penalty;
    }
    logit -= params_.presence_penalty + params_.frequency_penalty * static_cast<float>(count);
  }
  return shaped_.data();
}

int32_t Sampler::Sample(const float* logits, size_t n_vocab) {
  if (params_.ShapesLogits()) logits = Shape(logits, n_vocab);
  const int32_t token = Choose(logits, n_vocab);
  Accept(std::span(&token, 1));  // kept only where penalties look back
  return token;
}

int32_t Sampler::Choose(const float* logits, size_t n_vocab) {
  if (params_.temperature <= 0.0f) {
    return static_cast<int32_t>(simd::ArgMax(logits, n_vocab));
  }
  // Top-k (sorted by decreasing logit), then min-p, then softmax at the
  // temperature over those, then the smallest prefix whose mass reaches top_p.
  const size_t k = params_.top_k > 0 ? std::min<size_t>(params_.top_k, n_vocab)
                                     : n_vocab;
  candidates_.resize(k);
  simd::TopK(logits, n_vocab, k, simd::TopKOrder::kLargest, candidates_.data());
  const double max_logit = logits[candidates_[0]];
  size_t kept_k = k;
  if (params_.min_p > 0.0f) {
    // p_i >= min_p * p_max  <=>  logit_i >= max_logit + log(min_p): a prefix
    // of the sorted candidates (at least the likeliest).
    const double floor = max_logit + std::log(static_cast<double>(params_.min_p));
    kept_k = 1;
    while (kept_k < k && logits[candidates_[kept_k]] >= floor) ++kept_k;
  }
  probs_.resize(kept_k);
  double sum = 0.0;
  for (size_t i = 0; i < kept_k; ++i) {
    probs_[i] = std::exp((logits[candidates_[i]] - max_logit) / params_.temperature);
    sum += probs_[i];
  }
  size_t keep = kept_k;
  if (params_.top_p < 1.0f) {
    double mass = 0.0;
    for (size_t i = 0; i < kept_k; ++i) {
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
