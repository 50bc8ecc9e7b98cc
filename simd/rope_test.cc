#include "simd/rope.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "base/error.h"
#include "simd/targets.h"

namespace sparrow::simd {
namespace {

constexpr double kU = 0x1p-24;  // unit roundoff of f32

std::vector<float> RandomVector(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST_CASE("RopeAngles: position 0 is the identity, theta_0 is the position") {
  std::vector<float> c(64), s(64);
  RopeAngles(0.0f, 128, 10000.0f, c.data(), s.data());
  for (size_t i = 0; i < 64; ++i) {
    CHECK(c[i] == 1.0f);
    CHECK(s[i] == 0.0f);
  }
  RopeAngles(37.0f, 128, 10000.0f, c.data(), s.data());
  CHECK(c[0] == std::cos(37.0f));
  CHECK(s[0] == std::sin(37.0f));
}

TEST_CASE("RopeAngles follows the f32 recurrence of ggml bit for bit") {
  // Pins the method, not just the values: theta_{i+1} = theta_i * r in f32
  // with r = powf(base, -2.0f / dims). The closed form position * base^(-2i/
  // dims) differs in the last bits, and llama.cpp uses the recurrence.
  for (float base : {10000.0f, 500000.0f, 1000000.0f}) {
    for (size_t dims : {size_t{8}, size_t{64}, size_t{80}, size_t{128}}) {
      for (float pos : {1.0f, 7.0f, 511.0f, 4095.0f, 131071.0f}) {
        CAPTURE(base);
        CAPTURE(dims);
        CAPTURE(pos);
        std::vector<float> c(dims / 2), s(dims / 2);
        RopeAngles(pos, dims, base, c.data(), s.data());
        const float r = powf(base, -2.0f / static_cast<float>(dims));
        float theta = pos;
        size_t differ = 0;
        for (size_t i = 0; i < dims / 2; ++i) {
          differ += c[i] != cosf(theta) || s[i] != sinf(theta);
          theta *= r;
        }
        CHECK(differ == 0);
      }
    }
  }
}

TEST_CASE("RopeAngles agrees with the closed form within the recurrence error") {
  // dims a power of two: -2/dims is exact; powf errs <= 1 ulp (2u), so r^i
  // is within 2iu and i roundings of the product add iu: theta_i is within
  // 3(i+1)u relative, and cos/sin move by at most that much of theta, plus
  // their own rounding.
  const float base = 10000.0f;
  const size_t dims = 128;
  for (float pos : {3.0f, 100.0f, 2047.0f, 32767.0f}) {
    CAPTURE(pos);
    std::vector<float> c(dims / 2), s(dims / 2);
    RopeAngles(pos, dims, base, c.data(), s.data());
    size_t bad = 0;
    for (size_t i = 0; i < dims / 2; ++i) {
      const double theta = pos * std::pow(10000.0, -2.0 * i / dims);
      const double tol = 3.0 * (i + 1) * kU * theta + 2 * kU;
      bad += std::fabs(c[i] - std::cos(theta)) > tol;
      bad += std::fabs(s[i] - std::sin(theta)) > tol;
    }
    CHECK(bad == 0);
  }
  std::vector<float> c(3), s(3);
  CHECK_THROWS_AS(RopeAngles(1.0f, 5, base, c.data(), s.data()), InputError);
}

struct Shape {
  size_t n_heads, head_dim, rope_dims;
};

// Head sizes of real models (64, 80, 128, 256), tiny ones (stories260K has
// 8), partial rotary (rope_dims < head_dim), and pair counts that leave
// remainders on every vector width.
const Shape kShapes[] = {{1, 2, 2},    {3, 8, 8},     {2, 34, 34},
                         {4, 64, 64},  {8, 64, 32},   {2, 80, 80},
                         {32, 128, 128}, {4, 128, 64}, {2, 256, 256},
                         {3, 66, 66},  {5, 100, 0}};

void CheckRope(RopeStyle style, const char* style_name) {
  ForEachTarget([&](const Target& t) {
    for (const Shape& shape : kShapes) {
      CAPTURE(t.name);
      CAPTURE(style_name);
      CAPTURE(shape.head_dim);
      CAPTURE(shape.rope_dims);
      const size_t n = shape.n_heads * shape.head_dim;
      const size_t pairs = shape.rope_dims / 2;
      const std::vector<float> x = RandomVector(n, 41 + n);
      std::vector<float> c(pairs + 1), s(pairs + 1);  // +1: pairs may be 0
      RopeAngles(123.0f, shape.rope_dims, 10000.0f, c.data(), s.data());
      std::vector<float> out = x;
      ApplyRope(out.data(), shape.n_heads, shape.head_dim, shape.rope_dims,
                c.data(), s.data(), style);
      std::vector<float> ref = x;
      ApplyRopeReference(ref.data(), shape.n_heads, shape.head_dim,
                         shape.rope_dims, c.data(), s.data(), style);
      size_t bad = 0, bad_ref = 0, untouched_changed = 0, norm_bad = 0;
      for (size_t h = 0; h < shape.n_heads; ++h) {
        const size_t base = h * shape.head_dim;
        for (size_t i = 0; i < pairs; ++i) {
          const size_t i0 = base + (style == RopeStyle::kHalves ? i : 2 * i);
          const size_t i1 =
              base + (style == RopeStyle::kHalves ? i + pairs : 2 * i + 1);
          const double x0 = x[i0], x1 = x[i1];
          const double e0 = x0 * c[i] - x1 * s[i];
          const double e1 = x0 * s[i] + x1 * c[i];
          // Two products and a sum, possibly one of them fused: each
          // rounding is <= u of a term, so 2u (|x0 c| + |x1 s|) bounds it.
          const double tol0 = 2 * kU * (std::fabs(x0 * c[i]) + std::fabs(x1 * s[i]));
          const double tol1 = 2 * kU * (std::fabs(x0 * s[i]) + std::fabs(x1 * c[i]));
          bad += std::fabs(out[i0] - e0) > tol0 || std::fabs(out[i1] - e1) > tol1;
          bad_ref += std::fabs(ref[i0] - e0) > tol0 || std::fabs(ref[i1] - e1) > tol1;
          // A rotation keeps the pair's length: c^2 + s^2 = 1 within 2u
          // (each rounded once), and the outputs add ~2u more.
          const double before = std::hypot(x0, x1);
          const double after = std::hypot(out[i0], out[i1]);
          norm_bad += std::fabs(after - before) > 8 * kU * before + 1e-30;
        }
        for (size_t j = shape.rope_dims; j < shape.head_dim; ++j) {
          untouched_changed += out[base + j] != x[base + j];
          untouched_changed += ref[base + j] != x[base + j];
        }
      }
      CHECK(bad == 0);
      CHECK(bad_ref == 0);
      CHECK(norm_bad == 0);
      CHECK(untouched_changed == 0);
    }
  });
}

TEST_CASE("ApplyRope adjacent pairs on every target") {
  CheckRope(RopeStyle::kAdjacentPairs, "adjacent");
}

TEST_CASE("ApplyRope halves (neox) on every target") {
  CheckRope(RopeStyle::kHalves, "halves");
}

TEST_CASE("ApplyRope hand-computed: which elements pair up, and the signs") {
  ForEachTarget([](const Target& t) {
    CAPTURE(t.name);
    // Two pairs, angles of exactly 90 degrees and (3/5, 4/5).
    const float c[2] = {0.0f, 0.6f};
    const float s[2] = {1.0f, 0.8f};
    // Adjacent: pairs (a0, a1) = (1, 2) and (b0, b1) = (10, 20).
    std::vector<float> adj = {1.0f, 2.0f, 10.0f, 20.0f, 7.0f};
    ApplyRope(adj.data(), 1, 5, 4, c, s, RopeStyle::kAdjacentPairs);
    // (1, 2) by 90 degrees: (-2, 1); (10, 20) by (0.6, 0.8): (-10, 20).
    CHECK(adj[0] == -2.0f);
    CHECK(adj[1] == 1.0f);
    CHECK(adj[2] == doctest::Approx(0.6 * 10 - 0.8 * 20).epsilon(1e-6));
    CHECK(adj[3] == doctest::Approx(0.8 * 10 + 0.6 * 20).epsilon(1e-6));
    CHECK(adj[4] == 7.0f);  // beyond rope_dims
    // Halves: pairs (h[0], h[2]) = (1, 2) and (h[1], h[3]) = (10, 20).
    std::vector<float> halves = {1.0f, 10.0f, 2.0f, 20.0f, 7.0f};
    ApplyRope(halves.data(), 1, 5, 4, c, s, RopeStyle::kHalves);
    CHECK(halves[0] == -2.0f);
    CHECK(halves[2] == 1.0f);
    CHECK(halves[1] == doctest::Approx(-10.0).epsilon(1e-6));
    CHECK(halves[3] == doctest::Approx(20.0).epsilon(1e-6));
    CHECK(halves[4] == 7.0f);
  });
}

TEST_CASE("ApplyRope rejects odd or oversized rope_dims") {
  std::vector<float> x(16), c(8), s(8);
  CHECK_THROWS_AS(ApplyRope(x.data(), 1, 16, 5, c.data(), s.data(),
                            RopeStyle::kAdjacentPairs),
                  InputError);
  CHECK_THROWS_AS(ApplyRope(x.data(), 1, 8, 10, c.data(), s.data(),
                            RopeStyle::kHalves),
                  InputError);
  CHECK_THROWS_AS(ApplyRopeReference(x.data(), 1, 8, 10, c.data(), s.data(),
                                     RopeStyle::kHalves),
                  InputError);
}

}  // namespace
}  // namespace sparrow::simd
