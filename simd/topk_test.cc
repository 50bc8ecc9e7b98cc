#include "simd/topk.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "simd/targets.h"

namespace sparrow::simd {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// The full ranking, built independently of topk.cc: sort (is a number, key,
// -index) tuples in decreasing order with an unstable sort. Keys are
// compared as doubles, so -0 == +0; NaN gets flag 0 and so ranks last.
std::vector<uint32_t> Ranking(const std::vector<float>& v, bool abs) {
  std::vector<std::tuple<int, double, int64_t>> rows(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const bool nan = std::isnan(v[i]);
    const double key = nan ? 0.0 : (abs ? std::fabs(v[i]) : v[i]);
    rows[i] = {nan ? 0 : 1, key, -static_cast<int64_t>(i)};
  }
  std::sort(rows.begin(), rows.end(), std::greater<>());
  std::vector<uint32_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    out[i] = static_cast<uint32_t>(-std::get<2>(rows[i]));
  }
  return out;
}

struct Dataset {
  std::string name;
  std::vector<float> v;
};

std::vector<Dataset> Datasets(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Dataset> sets;
  auto add = [&](std::string name, auto&& value_of) {
    Dataset d{std::move(name), std::vector<float>(n)};
    for (size_t i = 0; i < n; ++i) d.v[i] = value_of(i);
    sets.push_back(std::move(d));
  };
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<int> small(-5, 5);
  std::uniform_int_distribution<int> pick(0, 99);
  add("normal", [&](size_t) { return normal(rng); });
  add("small integers (ties)", [&](size_t) { return float(small(rng)); });
  add("specials", [&](size_t) {
    const int p = pick(rng);
    if (p < 3) return kNaN;
    if (p < 5) return kInf;
    if (p < 7) return -kInf;
    if (p < 12) return 0.0f;
    if (p < 17) return -0.0f;
    if (p < 19) return -std::numeric_limits<float>::denorm_min();
    if (p < 21) return std::numeric_limits<float>::denorm_min();
    return normal(rng);
  });
  add("increasing", [&](size_t i) { return float(i) * 0.5f - 100.0f; });
  add("decreasing", [&](size_t i) { return -float(i); });
  add("all equal", [&](size_t) { return 1.25f; });
  add("mostly NaN", [&](size_t) { return pick(rng) < 90 ? kNaN : normal(rng); });
  // Spikes on a period: the large values may sit exactly where an evenly
  // spaced sample never looks, which must only cost speed.
  for (size_t period : {2, 3, 7, 16}) {
    for (size_t offset : {size_t{0}, period / 2}) {
      add("spikes " + std::to_string(period) + "/" + std::to_string(offset),
          [&](size_t i) {
            return (i % period == offset ? 100.0f : 0.0f) + normal(rng) * 0.01f;
          });
    }
  }
  return sets;
}

std::vector<size_t> Ks(size_t n) {
  std::vector<size_t> ks = {0, 1, 2, 7, 40, n / 100, n / 10, n / 3, n / 2};
  if (n > 0) ks.push_back(n - 1);
  ks.push_back(n);
  ks.push_back(n + 5);
  std::sort(ks.begin(), ks.end());
  ks.erase(std::unique(ks.begin(), ks.end()), ks.end());
  return ks;
}

TEST_CASE("TopK equals an independent full ranking's prefix on every target") {
  // 70001: indices past 16 bits, and a threshold sample (kSampleSize)
  // spaced 68 apart. The case runs on every target, under qemu too, so the
  // largest size is kept no larger than that (150000 took 39 s of the SVE_256
  // run there).
  const size_t kSizes[] = {0, 1, 3, 15, 16, 17, 1000, 2047, 2048, 4099, 70001};
  for (size_t n : kSizes) {
    for (const Dataset& data : Datasets(n, 81 + n)) {
      for (TopKOrder order : {TopKOrder::kLargest, TopKOrder::kLargestAbs}) {
        const bool abs = order == TopKOrder::kLargestAbs;
        const std::vector<uint32_t> ranking = Ranking(data.v, abs);
        // The reference, once per data set (it is slow and has no targets).
        std::vector<uint32_t> ref(n);
        TopKReference(data.v.data(), n, n, order, ref.data());
        CAPTURE(n);
        CAPTURE(data.name);
        CAPTURE(abs);
        CHECK(ref == ranking);
        ForEachTarget([&](const Target& t) {
          for (size_t k : Ks(n)) {
            CAPTURE(t.name);
            CAPTURE(k);
            const size_t want = std::min(k, n);
            // One spare slot past the end must stay untouched.
            std::vector<uint32_t> out(want + 1, 0xDEADBEEF);
            TopK(data.v.data(), n, k, order, out.data());
            CHECK(out[want] == 0xDEADBEEF);
            out.resize(want);
            const std::vector<uint32_t> expected(ranking.begin(),
                                                 ranking.begin() + want);
            CHECK(out == expected);
          }
        });
      }
    }
  }
}

TEST_CASE("TopK hand-computed: order, ties to the lower index, magnitudes") {
  const std::vector<float> v = {1.0f, -5.0f, 3.0f, 3.0f, -0.0f, 0.0f, 5.0f,
                                kNaN, -kInf};
  ForEachTarget([&](const Target& t) {
    CAPTURE(t.name);
    std::vector<uint32_t> out(v.size());
    TopK(v.data(), v.size(), v.size(), TopKOrder::kLargest, out.data());
    CHECK(out == std::vector<uint32_t>{6, 2, 3, 0, 4, 5, 1, 8, 7});
    // |-5| ties with 5: index 1 first; |-inf| is the largest magnitude.
    TopK(v.data(), v.size(), 4, TopKOrder::kLargestAbs, out.data());
    out.resize(4);
    CHECK(out == std::vector<uint32_t>{8, 1, 6, 2});
  });
}

TEST_CASE("CacheWeightedMagnitudes equals its reference on every target, every tail") {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::uniform_int_distribution<int32_t> row(-3, 5);
  for (size_t n : {0, 1, 3, 7, 15, 16, 17, 31, 33, 64, 65, 200, 1027}) {
    std::vector<float> x(n);
    std::vector<int32_t> rows(n);
    for (size_t i = 0; i < n; ++i) {
      x[i] = normal(rng);
      rows[i] = row(rng);
    }
    if (n > 2) x[1] = -0.0f, x[2] = -kInf;
    std::vector<float> want(n);
    CacheWeightedMagnitudesReference(x.data(), rows.data(), 0.2f, n, want.data());
    ForEachTarget([&](const Target& t) {
      CAPTURE(t.name);
      CAPTURE(n);
      std::vector<float> got(n, kNaN);
      CacheWeightedMagnitudes(x.data(), rows.data(), 0.2f, n, got.data());
      for (size_t i = 0; i < n; ++i) {
        CHECK(std::memcmp(&got[i], &want[i], sizeof(float)) == 0);
      }
    });
  }
}

TEST_CASE("CacheWeightedMagnitudes hand-computed: cached units keep |x|, others get gamma") {
  const std::vector<float> x = {-2.0f, 3.0f, -0.5f, 4.0f};
  const std::vector<int32_t> rows = {0, -1, 7, -1};
  std::vector<float> out(4);
  CacheWeightedMagnitudesReference(x.data(), rows.data(), 0.25f, 4, out.data());
  CHECK(out == std::vector<float>{2.0f, 0.75f, 0.5f, 1.0f});
  // Ranked, the cached -2 now beats the uncached 3 and 4.
  std::vector<uint32_t> top(2);
  TopKReference(out.data(), 4, 2, TopKOrder::kLargest, top.data());
  CHECK(top == std::vector<uint32_t>{0, 3});
}

}  // namespace
}  // namespace sparrow::simd
