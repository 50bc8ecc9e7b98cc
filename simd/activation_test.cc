#include "simd/activation.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "simd/targets.h"

namespace sparrow::simd {
namespace {

const size_t kSizes[] = {0, 1, 3, 15, 16, 17, 31, 33, 64, 1000, 11008, 150000};
constexpr double kU = 0x1p-24;  // unit roundoff of f32

std::vector<float> Normal(size_t n, uint32_t seed, float sigma) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

double ExactSiluMul(float g, float up) {
  return static_cast<double>(g) / (1.0 + std::exp(-static_cast<double>(g))) *
         up;
}

// Error budget relative to the exact result: exp(-g) within 1 ulp (2u);
// 1 + e then within 3u (the exp error is scaled by e / (1 + e) <= 1, plus
// the addition's own rounding); the division and the product by `up` add u
// each: 5u. We allow 6u. Below g = -88.7, exp(-g) overflows to +inf and the
// formula (llama.cpp's too) gives -0 where the exact value is below
// 2.6e-37 |up|: an absolute 1e-35 covers that flush.
size_t CountOutsideBudget(const std::vector<float>& g,
                          const std::vector<float>& up,
                          const std::vector<float>& out) {
  size_t bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double exact = ExactSiluMul(g[i], up[i]);
    bad += !(std::fabs(out[i] - exact) <= 6 * kU * std::fabs(exact) + 1e-35);
  }
  return bad;
}

TEST_CASE("SiluMul matches double precision on every target") {
  ForEachTarget([](const Target& t) {
    for (size_t n : kSizes) {
      CAPTURE(t.name);
      CAPTURE(n);
      // Gate pre-activations spread wide enough to reach both saturated ends.
      const std::vector<float> g = Normal(n, 31 + n, 8.0f);
      const std::vector<float> up = Normal(n, 32 + n, 1.0f);
      std::vector<float> out(n);
      SiluMul(g.data(), up.data(), n, out.data());
      CHECK(CountOutsideBudget(g, up, out) == 0);
      std::vector<float> ref(n);
      SiluMulReference(g.data(), up.data(), n, ref.data());
      CHECK(CountOutsideBudget(g, up, ref) == 0);
    }
  });
}

TEST_CASE("SiluMul at the edges of exp's range, infinities and NaN") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  ForEachTarget([&](const Target& t) {
    CAPTURE(t.name);
    // 17 values: a full vector plus a tail on every width up to 16 lanes.
    const std::vector<float> g = {0.0f,   1.0f,   -1.0f,   1e-30f, -1e-30f,
                                  20.0f,  -20.0f, 87.0f,   -87.0f, 89.0f,
                                  -89.0f, 100.0f, -100.0f, 1e6f,   -1e6f,
                                  inf,    -3.5f};
    const std::vector<float> up(g.size(), 2.0f);
    std::vector<float> out(g.size());
    SiluMul(g.data(), up.data(), g.size(), out.data());
    std::vector<float> ref(g.size());
    SiluMulReference(g.data(), up.data(), g.size(), ref.data());
    for (size_t i = 0; i < g.size(); ++i) {
      CAPTURE(g[i]);
      if (g[i] == inf) continue;  // checked exactly below
      const double exact = ExactSiluMul(g[i], up[i]);
      CHECK(std::fabs(out[i] - exact) <= 6 * kU * std::fabs(exact) + 1e-35);
      CHECK(std::fabs(ref[i] - exact) <= 6 * kU * std::fabs(exact) + 1e-35);
    }
    CHECK(out[0] == 0.0f);
    CHECK(out[15] == inf);                   // silu(+inf) = +inf
    CHECK(out[14] == 0.0f);                  // -1e6 * exp(-1e6) underflows
    CHECK(out[1] == doctest::Approx(2.0 / (1.0 + std::exp(-1.0))).epsilon(1e-6));

    // -inf / (1 + inf) is NaN, as in the libm reference; NaN stays NaN.
    const std::vector<float> odd = {-inf, nan, nan, 1.0f};
    const std::vector<float> odd_up = {1.0f, 1.0f, 0.0f, nan};
    std::vector<float> odd_out(odd.size());
    SiluMul(odd.data(), odd_up.data(), odd.size(), odd_out.data());
    for (float v : odd_out) CHECK(std::isnan(v));
    SiluMulReference(odd.data(), odd_up.data(), odd.size(), odd_out.data());
    for (float v : odd_out) CHECK(std::isnan(v));
  });
}

TEST_CASE("SiluMul may write over either input") {
  ForEachTarget([](const Target& t) {
    for (size_t n : {size_t{17}, size_t{1000}}) {
      CAPTURE(t.name);
      CAPTURE(n);
      const std::vector<float> g = Normal(n, 33 + n, 4.0f);
      const std::vector<float> up = Normal(n, 34 + n, 1.0f);
      std::vector<float> out(n);
      SiluMul(g.data(), up.data(), n, out.data());
      std::vector<float> over_gate = g;
      SiluMul(over_gate.data(), up.data(), n, over_gate.data());
      CHECK(over_gate == out);
      std::vector<float> over_up = up;
      SiluMul(g.data(), over_up.data(), n, over_up.data());
      CHECK(over_up == out);
    }
  });
}

}  // namespace
}  // namespace sparrow::simd
