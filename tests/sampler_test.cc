#include "src/sampler.h"

#include "base/error.h"

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

namespace {
SamplerParams Greedy() {
  SamplerParams p;
  p.temperature = 0.0f;
  return p;
}
// Temperature 1 and no top-k or top-p cut: draws follow the softmax.
SamplerParams Unrestricted() {
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  return p;
}
}  // namespace

TEST_CASE("logit biases ban or favour tokens before the choice") {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.0f};
  SamplerParams p = Greedy();
  p.logit_bias = {{1, -INFINITY}};
  CHECK(Sampler(p).Sample(logits.data(), logits.size()) == 2);
  p.logit_bias = {{3, 3.5f}};
  CHECK(Sampler(p).Sample(logits.data(), logits.size()) == 3);
  // At a temperature a banned token is never drawn.
  p = Unrestricted();
  p.logit_bias = {{1, -INFINITY}, {2, -INFINITY}};
  Sampler s(p);
  for (int i = 0; i < 200; ++i) {
    const int32_t t = s.Sample(logits.data(), logits.size());
    CHECK((t == 0 || t == 3));
  }
  CHECK_THROWS_AS(sparrow::CheckLogitBias(p, 2, "--logit-bias"), sparrow::InputError);
  CHECK_NOTHROW(sparrow::CheckLogitBias(p, 3, "--logit-bias"));
}

TEST_CASE("repeat penalty: positive logits divided, negative multiplied, in the window only") {
  SamplerParams p = Greedy();
  p.repeat_penalty = 1.25f;
  {
    // 2.0 / 1.25 = 1.6 < 1.9: token 0, seen in the prompt, loses to token 1.
    const std::vector<float> logits = {2.0f, 1.9f, -5.0f};
    Sampler s(p);
    const std::vector<int32_t> prompt = {0};
    s.Accept(prompt);
    CHECK(s.Sample(logits.data(), logits.size()) == 1);
  }
  {
    // -1.0 * 1.25 = -1.25 < -1.1: a negative logit is pushed down.
    const std::vector<float> logits = {-1.0f, -1.1f};
    Sampler s(p);
    const std::vector<int32_t> prompt = {0};
    s.Accept(prompt);
    CHECK(s.Sample(logits.data(), logits.size()) == 1);
  }
  {
    // Outside the last penalty_last_n tokens, no penalty.
    p.penalty_last_n = 2;
    const std::vector<float> logits = {2.0f, 1.9f, -5.0f};
    Sampler s(p);
    const std::vector<int32_t> prompt = {0, 2, 2};
    s.Accept(prompt);
    CHECK(s.Sample(logits.data(), logits.size()) == 0);
  }
}

TEST_CASE("presence and frequency penalties count the tokens of the window") {
  SamplerParams p = Greedy();
  p.frequency_penalty = 0.3f;
  // Token 0 twice (-0.6 -> 1.4), token 1 once (-0.3 -> 1.5): 1 wins over 0
  // but loses to token 2's 1.55.
  const std::vector<float> logits = {2.0f, 1.8f, 1.55f};
  {
    Sampler s(p);
    const std::vector<int32_t> prompt = {0, 1, 0};
    s.Accept(prompt);
    CHECK(s.Sample(logits.data(), logits.size()) == 2);
  }
  p.frequency_penalty = 0.0f;
  p.presence_penalty = 0.3f;  // once per token: 1.7, 1.5, 1.55
  {
    Sampler s(p);
    const std::vector<int32_t> prompt = {0, 1, 0};
    s.Accept(prompt);
    CHECK(s.Sample(logits.data(), logits.size()) == 0);
  }
  // Sampled tokens count too: a large presence penalty makes greedy go
  // through the tokens without repeating one inside the window.
  p.presence_penalty = 10.0f;
  p.penalty_last_n = -1;
  Sampler s(p);
  std::vector<int32_t> seen;
  for (int i = 0; i < 3; ++i) seen.push_back(s.Sample(logits.data(), logits.size()));
  CHECK(seen == std::vector<int32_t>{0, 1, 2});
}

TEST_CASE("without biases or penalties the logits are used as they are") {
  SamplerParams p;
  CHECK_FALSE(p.ShapesLogits());
  p.penalty_last_n = 0;
  p.repeat_penalty = 2.0f;  // no window: off
  CHECK_FALSE(p.ShapesLogits());
  p.penalty_last_n = 64;
  CHECK(p.ShapesLogits());
}

TEST_CASE("min-p drops tokens less likely than a share of the likeliest") {
  // Probabilities at temperature 1 in the ratio 1 : e^-1 : e^-3.
  const std::vector<float> logits = {0.0f, -1.0f, -3.0f};
  SamplerParams p = Unrestricted();
  auto draws = [&](float min_p) {
    p.min_p = min_p;
    Sampler s(p);
    std::map<int32_t, int> seen;
    for (int i = 0; i < 400; ++i) ++seen[s.Sample(logits.data(), logits.size())];
    return seen;
  };
  CHECK(draws(0.0f).size() == 3);
  const auto some = draws(0.3f);  // e^-1 = 0.37 stays, e^-3 = 0.05 goes
  CHECK(some.size() == 2);
  CHECK(some.count(2) == 0);
  CHECK(draws(0.5f) == std::map<int32_t, int>{{0, 400}});
}
