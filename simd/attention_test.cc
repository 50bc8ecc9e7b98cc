#include "simd/attention.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "simd/targets.h"

namespace sparrow::simd {
namespace {

constexpr double kU = 0x1p-24;  // unit roundoff of f32

std::vector<float> Normal(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// A KV cache laid out like the engine's: position-major rows of `stride`
// floats, this head's slice at `offset` within the row.
struct Cache {
  size_t stride, offset;
  std::vector<float> k, v;
  const float* K() const { return k.data() + offset; }
  const float* V() const { return v.data() + offset; }
};

Cache MakeCache(size_t n_pos, size_t head_dim, uint32_t seed) {
  Cache c;
  c.offset = head_dim + 3;           // not vector-aligned
  c.stride = 3 * head_dim + 5;       // other heads and padding in between
  c.k = Normal(n_pos * c.stride + c.offset, seed);
  c.v = Normal(n_pos * c.stride + c.offset, seed + 1);
  return c;
}

// Double-precision attention plus an error bound for the f32 kernel:
// - score s_t: the dot errs by <= (head_dim / 4 + 8) u sum|q k| (see the Dot
//   test), the scale product by u |s_t|: delta_t.
// - p_t: softmax(s) moves by <= 2 max(delta) relative when the scores move
//   by delta, plus softmax's own rounding (softmax_test.cc):
//   u (|s_t - max| + 2) + S + 2u.
// - out_j = sum_t p_t v_tj, one f32 multiply-add per position: each of the
//   n_pos steps adds <= 2u (unfused) of the running magnitude.
// Tolerance for out_j: sum_t p_t |v_tj| (2 max(delta) + max_t r_t + S + 2u +
// 2 (n_pos + 1) u), with 5% margin.
struct Expected {
  std::vector<double> out, tol;
};

Expected ExactAttention(const std::vector<float>& q, const Cache& c,
                        size_t n_pos, size_t head_dim, float scale) {
  std::vector<double> s(n_pos);
  double max_delta = 0.0;
  for (size_t t = 0; t < n_pos; ++t) {
    double dot = 0.0, abs = 0.0;
    for (size_t j = 0; j < head_dim; ++j) {
      const double prod = static_cast<double>(q[j]) * c.K()[t * c.stride + j];
      dot += prod;
      abs += std::fabs(prod);
    }
    s[t] = dot * scale;
    const double delta = (head_dim / 4.0 + 8) * kU * abs * scale +
                         kU * std::fabs(s[t]);
    max_delta = std::max(max_delta, delta);
  }
  const double max = n_pos ? *std::max_element(s.begin(), s.end()) : 0.0;
  std::vector<double> p(n_pos);
  double sum = 0.0, weighted = 0.0, max_r = 0.0;
  for (size_t t = 0; t < n_pos; ++t) {
    p[t] = std::exp(s[t] - max);
    const double r = kU * (std::fabs(s[t] - max) + 2);
    sum += p[t];
    weighted += p[t] * r;
    max_r = std::max(max_r, r);
  }
  const double rel = 2 * max_delta + max_r + weighted / sum + 2 * kU +
                     2 * (n_pos + 1) * kU;
  Expected e{std::vector<double>(head_dim, 0.0),
             std::vector<double>(head_dim, 0.0)};
  for (size_t t = 0; t < n_pos; ++t) {
    p[t] /= sum;
    for (size_t j = 0; j < head_dim; ++j) {
      const double vj = c.V()[t * c.stride + j];
      e.out[j] += p[t] * vj;
      e.tol[j] += p[t] * std::fabs(vj);
    }
  }
  for (double& t : e.tol) t = 1.05 * rel * t + 1e-30;
  return e;
}

TEST_CASE("AttentionHead matches double-precision attention") {
  const size_t kHeadDims[] = {1, 8, 17, 64, 80, 128, 256};
  const size_t kPositions[] = {1, 2, 3, 16, 17, 100, 1000};
  ForEachTarget([&](const Target& t) {
    for (size_t head_dim : kHeadDims) {
      for (size_t n_pos : kPositions) {
        CAPTURE(t.name);
        CAPTURE(head_dim);
        CAPTURE(n_pos);
        const Cache c = MakeCache(n_pos, head_dim, 51 + head_dim + n_pos);
        const std::vector<float> q = Normal(head_dim, 53 + head_dim);
        const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
        const Expected e = ExactAttention(q, c, n_pos, head_dim, scale);
        std::vector<float> scratch(n_pos), out(head_dim);
        AttentionHead(q.data(), c.K(), c.V(), c.stride, n_pos, head_dim, scale,
                      scratch.data(), out.data());
        std::vector<float> ref_scratch(n_pos), ref(head_dim);
        AttentionHeadReference(q.data(), c.K(), c.V(), c.stride, n_pos,
                               head_dim, scale, ref_scratch.data(),
                               ref.data());
        size_t bad = 0, bad_ref = 0;
        for (size_t j = 0; j < head_dim; ++j) {
          bad += !(std::fabs(out[j] - e.out[j]) <= e.tol[j]);
          bad_ref += !(std::fabs(ref[j] - e.out[j]) <= e.tol[j]);
        }
        CHECK(bad == 0);
        CHECK(bad_ref == 0);
        // scratch ends up holding the probabilities.
        double total = 0.0;
        for (float p : scratch) total += p;
        CHECK(total == doctest::Approx(1.0).epsilon(1e-5));
      }
    }
  });
}

TEST_CASE("AttentionHead: one position returns its V exactly") {
  ForEachTarget([](const Target& t) {
    for (size_t head_dim : {size_t{1}, size_t{8}, size_t{33}, size_t{128}}) {
      CAPTURE(t.name);
      CAPTURE(head_dim);
      const Cache c = MakeCache(1, head_dim, 61 + head_dim);
      const std::vector<float> q = Normal(head_dim, 62);
      float scratch[1];
      std::vector<float> out(head_dim);
      AttentionHead(q.data(), c.K(), c.V(), c.stride, 1, head_dim, 0.125f,
                    scratch, out.data());
      CHECK(scratch[0] == 1.0f);  // exp(0) / exp(0)
      CHECK(std::equal(out.begin(), out.end(), c.V()));
    }
  });
}

TEST_CASE("AttentionHead: equal keys average V; a dominant key selects its V") {
  ForEachTarget([](const Target& t) {
    CAPTURE(t.name);
    const size_t head_dim = 20, n_pos = 5;
    Cache c = MakeCache(n_pos, head_dim, 71);
    const std::vector<float> q = Normal(head_dim, 72);
    // Same key everywhere: uniform weights, out = mean of the V rows.
    for (size_t p = 1; p < n_pos; ++p) {
      std::copy(c.K(), c.K() + head_dim, c.k.data() + c.offset + p * c.stride);
    }
    std::vector<float> scratch(n_pos), out(head_dim);
    AttentionHead(q.data(), c.K(), c.V(), c.stride, n_pos, head_dim, 1.0f,
                  scratch.data(), out.data());
    for (float p : scratch) CHECK(p == doctest::Approx(0.2).epsilon(1e-6));
    for (size_t j = 0; j < head_dim; ++j) {
      double mean = 0.0;
      for (size_t p = 0; p < n_pos; ++p) mean += c.V()[p * c.stride + j];
      CHECK(out[j] == doctest::Approx(mean / n_pos).epsilon(1e-5));
    }
    // Key 3 parallel to q and long: with a large scale it takes everything.
    for (size_t j = 0; j < head_dim; ++j) {
      c.k[c.offset + 3 * c.stride + j] = 10.0f * q[j];
    }
    AttentionHead(q.data(), c.K(), c.V(), c.stride, n_pos, head_dim, 100.0f,
                  scratch.data(), out.data());
    CHECK(scratch[3] == 1.0f);
    for (size_t j = 0; j < head_dim; ++j) {
      CHECK(out[j] == c.V()[3 * c.stride + j]);
    }
    // No positions: zeros.
    std::vector<float> none(head_dim, 5.0f);
    AttentionHead(q.data(), c.K(), c.V(), c.stride, 0, head_dim, 1.0f, nullptr,
                  none.data());
    CHECK(none == std::vector<float>(head_dim, 0.0f));
  });
}

}  // namespace
}  // namespace sparrow::simd
