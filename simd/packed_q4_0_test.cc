#include "simd/packed_q4_0.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "simd/gemv.h"
#include "simd/quant_blocks.h"
#include "simd/quantize.h"
#include "simd/targets.h"

namespace sparrow::simd {
namespace {

constexpr size_t kBlock = 18;

// `rows` random Q4_0 rows of `cols` elements: random nibbles, and scales of
// both signs spread over two orders of magnitude.
std::vector<uint8_t> RandomQ4_0(size_t rows, size_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mag(0.001f, 0.1f);
  std::vector<uint8_t> w(rows * cols / 32 * kBlock);
  for (size_t b = 0; b < w.size() / kBlock; ++b) {
    const float d = (rng() & 1 ? -1.0f : 1.0f) * mag(rng);
    const uint16_t h = F32ToF16(d);
    std::memcpy(&w[b * kBlock], &h, 2);
    for (size_t i = 2; i < kBlock; ++i) w[b * kBlock + i] = static_cast<uint8_t>(rng());
  }
  return w;
}

std::vector<float> RandomVector(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

TEST_CASE("PackQ4_0Group and UnpackQ4_0Row are inverses; PackQ4_0Matrix packs whole groups") {
  for (size_t cols : {32, 64, 96, 4096}) {
    const size_t rows = 19;  // two groups and a tail of 3 rows
    const size_t row_bytes = cols / 32 * kBlock;
    const std::vector<uint8_t> w = RandomQ4_0(rows, cols, 7);
    std::vector<uint8_t> packed = w;
    PackQ4_0Matrix(packed.data(), rows, cols);
    CHECK(packed != w);
    std::vector<uint8_t> row(row_bytes);
    for (size_t g = 0; g < 2; ++g) {
      for (size_t r = 0; r < kPackedRows; ++r) {
        UnpackQ4_0Row(packed.data() + g * kPackedRows * row_bytes, cols, r, row.data());
        CHECK(std::memcmp(row.data(), &w[(8 * g + r) * row_bytes], row_bytes) == 0);
      }
    }
    CHECK(std::memcmp(&packed[16 * row_bytes], &w[16 * row_bytes], 3 * row_bytes) == 0);
    // The layout itself: block 1's scale of row 5, and its nibble bytes 8..11.
    if (cols >= 64) {
      const uint8_t* g0b1 = packed.data() + 8 * kBlock;
      CHECK(std::memcmp(g0b1 + 10, &w[5 * row_bytes + kBlock], 2) == 0);
      CHECK(std::memcmp(g0b1 + 16 + 64 + 20, &w[5 * row_bytes + kBlock + 2 + 8], 4) == 0);
    }
  }
}

// The kernel's error against the exact product comes from the int8
// activations: each element is off by at most max|x_block| / 254, so
// |y - exact| <= sum_i |w_i| max|x_block(i)| / 254, plus f32 rounding.
double ErrorBound(const uint8_t* row, size_t cols, const std::vector<float>& x) {
  std::vector<float> w(cols);
  DequantizeRowReference(TensorType::kQ4_0, row, cols, w.data());
  double bound = 0.0, magnitude = 0.0;
  for (size_t b = 0; b < cols / 32; ++b) {
    double amax = 0.0;
    for (size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(double{x[32 * b + i]}));
    for (size_t i = 0; i < 32; ++i) {
      bound += std::fabs(double{w[32 * b + i]}) * amax / 254.0;
      magnitude += std::fabs(double{w[32 * b + i]} * x[32 * b + i]);
    }
  }
  return bound * 1.001 + 1e-5 * magnitude + 1e-30;
}

TEST_CASE("PackedQ4_0Gemv matches the reference within the int8 bound on every target") {
  for (size_t cols : {32, 160, 2048}) {
    const size_t groups = 5;
    const size_t rows = groups * kPackedRows;
    const size_t row_bytes = cols / 32 * kBlock;
    const std::vector<uint8_t> w = RandomQ4_0(rows, cols, static_cast<uint32_t>(cols));
    std::vector<uint8_t> packed = w;
    PackQ4_0Matrix(packed.data(), rows, cols);
    const std::vector<float> x = RandomVector(cols, 3);
    std::vector<float> want(rows), ref(rows);
    GemvReference(TensorType::kQ4_0, w.data(), row_bytes, cols, x.data(), 0, rows, want.data());
    PackedQ4_0GemvReference(packed.data(), cols, x.data(), 0, groups, ref.data());
    CHECK(ref == want);
    ForEachTarget([&](const Target& target) {
      CAPTURE(target.name);
      CAPTURE(cols);
      PackedQ4_0Input input;
      input.Prepare(x.data(), cols);
      std::vector<float> y(rows, -1.0f);
      PackedQ4_0Gemv(packed.data(), cols, input, 1, groups, y.data());
      for (size_t r = 0; r < kPackedRows; ++r) CHECK(y[r] == -1.0f);  // group 0 untouched
      for (size_t r = kPackedRows; r < rows; ++r) {
        CAPTURE(r);
        CHECK(std::fabs(y[r] - want[r]) <= ErrorBound(&w[r * row_bytes], cols, x));
      }
    });
  }
}

TEST_CASE("PackedQ4_0Gemv: the int8 quantizer rounds each block's largest value to +-127") {
  std::vector<float> x(64, 0.0f);
  x[3] = -2.0f;
  x[4] = 1.0f;
  x[40] = 0.5f;
  ForEachTarget([&](const Target& target) {
    CAPTURE(target.name);
    PackedQ4_0Input input;
    input.Prepare(x.data(), x.size());
    CHECK(input.quantized()[3] == -127);
    CHECK(input.quantized()[4] == 64);  // 63.5 rounds to even
    CHECK(input.quantized()[40] == 127);
    CHECK(input.scales()[0] == doctest::Approx(2.0f / 127));
    CHECK(input.sums()[0] == -63.0f);
    CHECK(input.sums()[1] == 127.0f);
  });
}

TEST_CASE("PackedQ4_0Gemv propagates non-finite activations, and rejects misuse") {
  const size_t cols = 64;
  std::vector<uint8_t> w = RandomQ4_0(kPackedRows, cols, 1);
  PackQ4_0Matrix(w.data(), kPackedRows, cols);
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<float> x = RandomVector(cols, 2);
    x[37] = bad;
    ForEachTarget([&](const Target& target) {
      CAPTURE(target.name);
      PackedQ4_0Input input;
      input.Prepare(x.data(), cols);
      std::vector<float> y(kPackedRows);
      PackedQ4_0Gemv(w.data(), cols, input, 0, 1, y.data());
      for (float v : y) CHECK(std::isnan(v));
    });
  }
  PackedQ4_0Input input;
  std::vector<float> x(cols, 1.0f);
  CHECK_THROWS(input.Prepare(x.data(), 48));
  input.Prepare(x.data(), 32);
  float y[8];
  CHECK_THROWS_AS(PackedQ4_0Gemv(w.data(), cols, input, 0, 1, y), std::invalid_argument);
}

TEST_CASE("PackedQ4_0Preferred: x86 targets with pmaddubsw") {
  ForEachTarget([&](const Target& target) {
    const bool x86_int8 = target.name == "AVX2" || target.name == "SSE4" ||
                          target.name == "SSSE3" || target.name.rfind("AVX3", 0) == 0;
    CHECK(PackedQ4_0Preferred() == x86_int8);
  });
}

}  // namespace
}  // namespace sparrow::simd
