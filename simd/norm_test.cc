#include "simd/norm.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "simd/targets.h"

namespace sparrow::simd {
namespace {

const size_t kSizes[] = {1, 3, 15, 16, 17, 31, 33, 64, 1000, 4096, 150000};
constexpr double kU = 0x1p-24;  // unit roundoff of f32

std::vector<float> RandomVector(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Activations with a few large outliers, as real residual streams have.
std::vector<float> Activations(size_t n, uint32_t seed) {
  std::vector<float> v = RandomVector(n, seed, -2.0f, 2.0f);
  for (size_t i = 0; i < n; i += 97) v[i] *= 60.0f;
  return v;
}

// x * weight / sqrt(mean(x^2) + eps), all in double.
std::vector<double> Exact(const std::vector<float>& x,
                          const std::vector<float>& w, float eps) {
  double sum = 0.0;
  for (float v : x) sum += static_cast<double>(v) * v;
  const double scale = 1.0 / std::sqrt(sum / x.size() + eps);
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] * scale * w[i];
  return out;
}

TEST_CASE("RmsNorm matches a double-precision RMSNorm and the reference") {
  ForEachTarget([](const Target& t) {
    for (size_t n : kSizes) {
      CAPTURE(t.name);
      CAPTURE(n);
      const std::vector<float> x = Activations(n, 11 + n);
      const std::vector<float> w = RandomVector(n, 12 + n, 0.5f, 1.5f);
      const float eps = 1e-5f;
      std::vector<float> out(n);
      std::vector<float> ref(n);
      RmsNorm(x.data(), w.data(), n, eps, out.data());
      RmsNormReference(x.data(), w.data(), n, eps, ref.data());
      const std::vector<double> exact = Exact(x, w, eps);
      // Error budget relative to |exact|: f32 squares (u) summed in double
      // (~0), mean rounded to f32 (u), + eps (u), sqrtf (u/2 on a quantity
      // already off by 3u -> 1.5u), 1/s (u): scale within ~4u; then x*scale
      // and *w round once each: 6u. 8u leaves margin but still rejects an
      // f32 running sum of the squares (its error grows like n u) and any
      // wrong element.
      size_t bad = 0;
      size_t bad_ref = 0;
      size_t differ = 0;
      size_t far_from_ref = 0;
      for (size_t i = 0; i < n; ++i) {
        const double tol = 8 * kU * std::fabs(exact[i]) + 1e-37;
        bad += !(std::fabs(out[i] - exact[i]) <= tol);
        bad_ref += !(std::fabs(ref[i] - exact[i]) <= tol);
        differ += out[i] != ref[i];
        // Same roundings as the reference except the order of the double
        // sum, which can only move the f32 mean by one ulp: <= 2 ulp here.
        far_from_ref += !(std::fabs(out[i] - ref[i]) <= 4 * kU * std::fabs(ref[i]));
      }
      CHECK(bad == 0);
      CHECK(bad_ref == 0);
      CHECK(far_from_ref == 0);
      // In practice the double sums agree and so does every bit.
      CHECK(differ == 0);
    }
  });
}

TEST_CASE("RmsNorm hand-computed case: mean square 4, scale exactly 1/2") {
  ForEachTarget([](const Target& t) {
    for (size_t n : {size_t{1}, size_t{2}, size_t{17}, size_t{1000}}) {
      CAPTURE(t.name);
      CAPTURE(n);
      std::vector<float> x(n);
      for (size_t i = 0; i < n; ++i) x[i] = (i % 2) ? -2.0f : 2.0f;
      const std::vector<float> w = RandomVector(n, 13 + n, -3.0f, 3.0f);
      std::vector<float> out(n);
      RmsNorm(x.data(), w.data(), n, 0.0f, out.data());
      size_t bad = 0;
      for (size_t i = 0; i < n; ++i) {
        bad += out[i] != ((i % 2) ? -w[i] : w[i]);  // +-2 * 0.5 * w, exact
      }
      CHECK(bad == 0);
    }
  });
}

TEST_CASE("RmsNorm works in place and eps keeps zeros finite") {
  ForEachTarget([](const Target& t) {
    for (size_t n : {size_t{3}, size_t{17}, size_t{4096}}) {
      CAPTURE(t.name);
      CAPTURE(n);
      const std::vector<float> x = Activations(n, 14 + n);
      const std::vector<float> w = RandomVector(n, 15 + n, 0.5f, 1.5f);
      std::vector<float> separate(n);
      RmsNorm(x.data(), w.data(), n, 1e-6f, separate.data());
      std::vector<float> in_place = x;
      RmsNorm(in_place.data(), w.data(), n, 1e-6f, in_place.data());
      CHECK(in_place == separate);

      std::vector<float> zeros(n, 0.0f);
      RmsNorm(zeros.data(), w.data(), n, 1e-5f, zeros.data());
      CHECK(zeros == std::vector<float>(n, 0.0f));
    }
    RmsNorm(nullptr, nullptr, 0, 1e-5f, nullptr);  // n == 0 touches nothing
  });
}

}  // namespace
}  // namespace sparrow::simd
