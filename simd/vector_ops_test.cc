#include "simd/vector_ops.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "simd/targets.h"

namespace sparrow::simd {
namespace {

// Sizes around every vector width we may meet (1..64 lanes), remainders
// included, plus a vocabulary-sized one.
const size_t kSizes[] = {0, 1, 3, 15, 16, 17, 31, 33, 63, 65, 1000, 150000};
constexpr double kU = 0x1p-24;  // unit roundoff of f32

std::vector<float> RandomVector(size_t n, uint32_t seed, float lo = -1.0f,
                                float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Small integers: every product and partial sum below is exact in f32
// (|sum| <= 150000 * 64 < 2^24), so any summation order gives the exact
// answer and a dropped, repeated or misplaced element shows up as a mismatch.
std::vector<float> SmallIntegers(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-8, 8);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(dist(rng));
  return v;
}

TEST_CASE("Dot is exact on small integers on every target") {
  ForEachTarget([](const Target& t) {
    for (size_t n : kSizes) {
      CAPTURE(t.name);
      CAPTURE(n);
      const std::vector<float> a = SmallIntegers(n, 1 + n);
      const std::vector<float> b = SmallIntegers(n, 2 + n);
      int64_t exact = 0;
      for (size_t i = 0; i < n; ++i) {
        exact += static_cast<int64_t>(a[i]) * static_cast<int64_t>(b[i]);
      }
      CHECK(Dot(a.data(), b.data(), n) == static_cast<float>(exact));
      CHECK(DotReference(a.data(), b.data(), n) == static_cast<float>(exact));
    }
  });
}

TEST_CASE("Dot of random floats stays within the summation error bound") {
  ForEachTarget([](const Target& t) {
    for (size_t n : kSizes) {
      CAPTURE(t.name);
      CAPTURE(n);
      // Offset by one float so nothing is vector-aligned.
      std::vector<float> a = RandomVector(n + 1, 3 + n);
      std::vector<float> b = RandomVector(n + 1, 4 + n);
      double exact = 0.0;
      double abs_sum = 0.0;
      for (size_t i = 1; i <= n; ++i) {
        exact += static_cast<double>(a[i]) * b[i];
        abs_sum += std::fabs(static_cast<double>(a[i]) * b[i]);
      }
      // Recursive summation of m terms errs by at most (m - 1) u sum|terms|;
      // the kernel splits n products over >= 4 partial sums, then adds them
      // up (<= 6 more levels for 64 lanes) and rounds each product once.
      // n/4 + 8 bounds every target's depth; the final f32 rounding adds u.
      const double bound = (static_cast<double>(n) / 4 + 8) * kU * abs_sum +
                           kU * std::fabs(exact) + 1e-30;
      CHECK(std::fabs(Dot(a.data() + 1, b.data() + 1, n) - exact) <= bound);
      // The reference sums exact products in double: one f32 rounding.
      CHECK(std::fabs(DotReference(a.data() + 1, b.data() + 1, n) - exact) <=
            kU * std::fabs(exact) + 1e-30);
    }
  });
}

TEST_CASE("Axpy rounds like one multiply-add per element") {
  ForEachTarget([](const Target& t) {
    for (size_t n : kSizes) {
      CAPTURE(t.name);
      CAPTURE(n);
      const float alpha = -0.7f;
      const std::vector<float> x = RandomVector(n, 5 + n);
      const std::vector<float> y0 = RandomVector(n, 6 + n, -3.0f, 3.0f);
      std::vector<float> y = y0;
      std::vector<float> y_ref = y0;
      Axpy(alpha, x.data(), y.data(), n);
      AxpyReference(alpha, x.data(), y_ref.data(), n);
      size_t bad = 0;
      size_t bad_ref = 0;
      for (size_t i = 0; i < n; ++i) {
        const double ax = static_cast<double>(alpha) * x[i];
        const double exact = ax + y0[i];
        // Fused: one rounding of the exact result. Unfused (SSE4, scalar):
        // alpha*x is rounded first, then the sum. Either stays within
        // u (|alpha x| + |exact|) plus a hair for the product's own error.
        const double bound =
            1.01 * kU * (std::fabs(ax) + std::fabs(exact)) + 1e-30;
        bad += !(std::fabs(y[i] - exact) <= bound);
        bad_ref += !(std::fabs(y_ref[i] - exact) <= bound);
      }
      CHECK(bad == 0);
      CHECK(bad_ref == 0);
    }
  });
}

TEST_CASE("AddInPlace and ScaleInPlace round exactly once") {
  ForEachTarget([](const Target& t) {
    for (size_t n : kSizes) {
      CAPTURE(t.name);
      CAPTURE(n);
      const std::vector<float> x = RandomVector(n, 7 + n);
      const std::vector<float> y0 = RandomVector(n, 8 + n, -5.0f, 5.0f);
      std::vector<float> sum = y0;
      std::vector<float> scaled = y0;
      AddInPlace(x.data(), sum.data(), n);
      ScaleInPlace(1.37f, scaled.data(), n);
      size_t bad_sum = 0;
      size_t bad_scale = 0;
      for (size_t i = 0; i < n; ++i) {
        // One IEEE operation each: the result is fully determined.
        bad_sum += sum[i] != y0[i] + x[i];
        bad_scale += scaled[i] != y0[i] * 1.37f;
      }
      CHECK(bad_sum == 0);
      CHECK(bad_scale == 0);
      std::vector<float> sum_ref = y0;
      AddInPlaceReference(x.data(), sum_ref.data(), n);
      CHECK(sum_ref == sum);
      std::vector<float> scaled_ref = y0;
      ScaleInPlaceReference(1.37f, scaled_ref.data(), n);
      CHECK(scaled_ref == scaled);
    }
  });
}

TEST_CASE("ArgMax finds the first maximum anywhere, tails included") {
  ForEachTarget([](const Target& t) {
    for (size_t n : kSizes) {
      if (n == 0) continue;
      CAPTURE(t.name);
      CAPTURE(n);
      std::vector<float> x = RandomVector(n, 9 + n);
      // Plant the maximum at the start, the end, and in between.
      for (size_t at : {size_t{0}, n / 2, n - 1}) {
        CAPTURE(at);
        std::vector<float> y = x;
        y[at] = 2.0f;
        CHECK(ArgMax(y.data(), n) == at);
        CHECK(ArgMaxReference(y.data(), n) == at);
        // A later copy of the same maximum must not win.
        if (at + 1 < n) {
          y[n - 1] = 2.0f;
          CHECK(ArgMax(y.data(), n) == at);
        }
      }
      // All equal: index 0. All negative: still the largest.
      std::vector<float> same(n, -3.5f);
      CHECK(ArgMax(same.data(), n) == 0);
      std::vector<float> neg = RandomVector(n, 10 + n, -9.0f, -1.0f);
      size_t expected = 0;
      for (size_t i = 1; i < n; ++i) {
        if (neg[i] > neg[expected]) expected = i;
      }
      CHECK(ArgMax(neg.data(), n) == expected);
    }
  });
}

TEST_CASE("ArgMax: NaN is skipped, infinities and signed zeros behave") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  ForEachTarget([&](const Target& t) {
    CAPTURE(t.name);
    CHECK(ArgMax(nullptr, 0) == 0);
    for (size_t n : {size_t{1}, size_t{17}, size_t{1000}}) {
      CAPTURE(n);
      std::vector<float> all_nan(n, nan);
      CHECK(ArgMax(all_nan.data(), n) == 0);
      CHECK(ArgMaxReference(all_nan.data(), n) == 0);
      // NaN before and after the maximum changes nothing.
      std::vector<float> x(n, 1.0f);
      x[n - 1] = 4.0f;
      x[0] = nan;
      if (n > 2) x[n / 2] = nan;
      CHECK(ArgMax(x.data(), n) == n - 1);
      CHECK(ArgMaxReference(x.data(), n) == n - 1);
      // -inf everywhere but NaN first: the first -inf.
      std::vector<float> ninf(n, -inf);
      ninf[0] = nan;
      const size_t want = n == 1 ? 0 : 1;
      CHECK(ArgMax(ninf.data(), n) == want);
      CHECK(ArgMaxReference(ninf.data(), n) == want);
      // +inf wins; -0 and +0 are equal, so the earlier one wins.
      std::vector<float> zeros(n, -1.0f);
      zeros[n - 1] = 0.0f;
      zeros[n / 2] = -0.0f;
      CHECK(ArgMax(zeros.data(), n) == n / 2);
      CHECK(ArgMaxReference(zeros.data(), n) == n / 2);
      zeros[n - 1] = inf;
      CHECK(ArgMax(zeros.data(), n) == n - 1);
    }
  });
}

}  // namespace
}  // namespace sparrow::simd
