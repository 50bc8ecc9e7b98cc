#include "simd/softmax.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "simd/targets.h"

namespace sparrow::simd {
namespace {

const size_t kSizes[] = {1, 3, 15, 16, 17, 31, 33, 64, 1000, 32000, 150000};
constexpr double kU = 0x1p-24;  // unit roundoff of f32
constexpr float kInf = std::numeric_limits<float>::infinity();

// Logits spread like a language model's: mostly within a few units, a long
// tail, some far below the maximum.
std::vector<float> Logits(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 4.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Checks `p` = softmax(x) against the double-precision softmax with a
// tolerance derived from the kernel's roundings:
// - a_i = f32(x_i - max) is off by at most u |x_i - max|, which changes
//   exp(a_i) by that much relatively; exp itself errs by <= 1 ulp (2u);
//   so each exponential e_i is within r_i = u (|x_i - max| + 2) relative.
// - The double sum of the e_i is then off by S = sum(e_i r_i) / sum(e_i)
//   relative (its own rounding is negligible).
// - f32(1 / sum) and the final product add u each.
// So |p_i - exact_i| <= (r_i + S + 2u) exact_i, with 5% margin; denormal
// results get an absolute 1e-44 (below f32's smallest normal, 1.2e-38).
void CheckSoftmax(const std::vector<float>& x, const std::vector<float>& p) {
  const size_t n = x.size();
  const double max = *std::max_element(x.begin(), x.end());
  std::vector<double> e(n);
  std::vector<double> r(n);
  double sum = 0.0;
  double weighted = 0.0;
  for (size_t i = 0; i < n; ++i) {
    e[i] = std::exp(x[i] - max);
    r[i] = kU * (std::fabs(x[i] - max) + 2);
    sum += e[i];
    weighted += e[i] * r[i];
  }
  const double s = weighted / sum;
  size_t bad = 0;
  double total = 0.0;
  double worst_rel = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double exact = e[i] / sum;
    const double rel = r[i] + s + 2 * kU;
    bad += !(std::fabs(p[i] - exact) <= 1.05 * rel * exact + 1e-44);
    total += p[i];
    worst_rel = std::max(worst_rel, rel);
  }
  CHECK(bad == 0);
  // Sums to one within the largest per-element relative error (a weighted
  // average of per-element errors cannot exceed their maximum).
  CHECK(std::fabs(total - 1.0) <= 1.05 * worst_rel);
}

TEST_CASE("Softmax matches double precision within its error budget") {
  ForEachTarget([](const Target& t) {
    for (size_t n : kSizes) {
      CAPTURE(t.name);
      CAPTURE(n);
      const std::vector<float> x = Logits(n, 21 + n);
      std::vector<float> p = x;
      Softmax(p.data(), n);
      CheckSoftmax(x, p);
      std::vector<float> ref = x;
      SoftmaxReference(ref.data(), n);
      CheckSoftmax(x, ref);
    }
  });
}

TEST_CASE("Softmax hand-computed cases, masks and large logits") {
  ForEachTarget([](const Target& t) {
    CAPTURE(t.name);
    std::vector<float> one = {-123.0f};
    Softmax(one.data(), 1);
    CHECK(one[0] == 1.0f);

    // exp(ln 3) = 3: probabilities 1/6, 1/6, 1/6, 3/6.
    std::vector<float> x = {2.0f, 2.0f, 2.0f, 2.0f + std::log(3.0f)};
    Softmax(x.data(), x.size());
    for (int i = 0; i < 3; ++i) CHECK(x[i] == doctest::Approx(1.0 / 6).epsilon(1e-6));
    CHECK(x[3] == doctest::Approx(0.5).epsilon(1e-6));

    // Uniform over 17 (a remainder on every width): 1/17 each.
    std::vector<float> flat(17, 0.25f);
    Softmax(flat.data(), flat.size());
    for (float v : flat) CHECK(v == doctest::Approx(1.0 / 17).epsilon(1e-6));

    // Logits far beyond exp's range: only differences matter.
    std::vector<float> big = {1000.0f, 999.0f, -1000.0f};
    Softmax(big.data(), big.size());
    CHECK(big[0] == doctest::Approx(1.0 / (1.0 + std::exp(-1.0))).epsilon(1e-6));
    CHECK(big[1] == doctest::Approx(std::exp(-1.0) / (1.0 + std::exp(-1.0)))
                        .epsilon(1e-6));
    CHECK(big[2] == 0.0f);

    // Masked (-inf) positions, in the vector body and in the tail, give 0.
    for (size_t n : {size_t{5}, size_t{40}, size_t{1001}}) {
      CAPTURE(n);
      std::vector<float> masked = Logits(n, 22 + n);
      for (size_t i = 1; i < n; i += 2) masked[i] = -kInf;
      std::vector<float> p = masked;
      Softmax(p.data(), n);
      std::vector<float> finite_x;
      std::vector<float> finite_p;
      for (size_t i = 0; i < n; ++i) {
        if (i % 2) {
          CHECK(p[i] == 0.0f);
        } else {
          finite_x.push_back(masked[i]);
          finite_p.push_back(p[i]);
        }
      }
      CheckSoftmax(finite_x, finite_p);
    }
    Softmax(nullptr, 0);  // touches nothing
  });
}

TEST_CASE("Softmax: a NaN logit makes every probability NaN") {
  ForEachTarget([](const Target& t) {
    for (size_t n : {size_t{1}, size_t{17}, size_t{1000}}) {
      CAPTURE(t.name);
      CAPTURE(n);
      for (size_t at : {size_t{0}, n - 1}) {
        std::vector<float> x = Logits(n, 23 + n);
        x[at] = std::numeric_limits<float>::quiet_NaN();
        std::vector<float> ref = x;
        Softmax(x.data(), n);
        SoftmaxReference(ref.data(), n);
        CHECK(std::all_of(x.begin(), x.end(), [](float v) { return std::isnan(v); }));
        CHECK(std::all_of(ref.begin(), ref.end(), [](float v) { return std::isnan(v); }));
      }
    }
  });
}

}  // namespace
}  // namespace sparrow::simd
