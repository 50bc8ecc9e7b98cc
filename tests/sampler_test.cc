#include "src/sampler.h"

#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <vector>

using sparrow::Sampler;
using sparrow::SamplerParams;

TEST_CASE("greedy picks the largest logit, first among equals") {
  SamplerParams p;
  p.temperature = 0.0f;
  Sampler s(p);
  const std::vector<float> logits = {0.1f, 3.0f, -1.0f, 3.0f, 2.9f};
  CHECK(s.Sample(logits.data(), logits.size()) == 1);
}

TEST_CASE("the same seed gives the same sequence, another seed another one") {
  std::vector<float> logits(100);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(i * 0.7f) * 2.0f;
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  auto draw = [&](uint64_t seed) {
    p.seed = seed;
    Sampler s(p);
    std::vector<int32_t> out;
    for (int i = 0; i < 50; ++i) out.push_back(s.Sample(logits.data(), logits.size()));
    return out;
  };
  CHECK(draw(7) == draw(7));
  CHECK(draw(7) != draw(8));
}

TEST_CASE("top-k restricts to the k best; top-p to the nucleus") {
  const std::vector<float> logits = {5.0f, 4.0f, 1.0f, 0.5f, -2.0f, 4.5f};
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_p = 1.0f;
  p.top_k = 2;
  p.seed = 3;
  Sampler topk(p);
  for (int i = 0; i < 500; ++i) {
    const int32_t t = topk.Sample(logits.data(), logits.size());
    CHECK((t == 0 || t == 5));
  }
  // Probabilities at T=1: token 0 holds ~0.50, token 5 ~0.30, token 1 ~0.18:
  // top_p = 0.6 keeps exactly tokens 0 and 5.
  p.top_k = 0;
  p.top_p = 0.6f;
  Sampler topp(p);
  for (int i = 0; i < 500; ++i) {
    const int32_t t = topp.Sample(logits.data(), logits.size());
    CHECK((t == 0 || t == 5));
  }
}

TEST_CASE("sampling frequencies follow the softmax at the temperature") {
  const std::vector<float> logits = {0.0f, std::log(2.0f), std::log(4.0f)};
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.seed = 11;
  Sampler s(p);
  std::map<int32_t, int> counts;
  const int n = 70000;
  for (int i = 0; i < n; ++i) counts[s.Sample(logits.data(), logits.size())]++;
  // Expected 1/7, 2/7, 4/7; 5 standard deviations of a binomial at n=70000
  // is under 0.01.
  CHECK(std::abs(counts[0] / double(n) - 1.0 / 7) < 0.01);
  CHECK(std::abs(counts[1] / double(n) - 2.0 / 7) < 0.01);
  CHECK(std::abs(counts[2] / double(n) - 4.0 / 7) < 0.01);
  // Temperature 0.5 squares the odds: 1:4:16.
  p.temperature = 0.5f;
  Sampler cold(p);
  counts.clear();
  for (int i = 0; i < n; ++i) counts[cold.Sample(logits.data(), logits.size())]++;
  CHECK(std::abs(counts[2] / double(n) - 16.0 / 21) < 0.01);
}
