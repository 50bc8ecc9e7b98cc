#include "simd/packed_gemv.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "simd/gemv.h"
#include "simd/quant_blocks.h"
#include "simd/quantize.h"
#include "simd/prefetch_test_util.h"
#include "simd/targets.h"

namespace sparrow::simd {
namespace {

constexpr TensorType kTypes[] = {TensorType::kQ4_0, TensorType::kQ4_K, TensorType::kQ8_0};

size_t BlockElems(TensorType type) { return type == TensorType::kQ4_K ? 256 : 32; }
size_t BlockBytes(TensorType type) {
  return type == TensorType::kQ4_K ? 144 : type == TensorType::kQ8_0 ? 34 : 18;
}

// `rows` random rows of `cols` elements: random nibbles (Q8_0: bytes, -128
// included) and (Q4_K) 6-bit scales and mins, and f16 scales of both signs
// over two orders of magnitude.
std::vector<uint8_t> RandomRows(TensorType type, size_t rows, size_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mag(0.001f, 0.1f);
  const size_t bb = BlockBytes(type);
  std::vector<uint8_t> w(rows * cols / BlockElems(type) * bb);
  for (uint8_t& b : w) b = static_cast<uint8_t>(rng());
  for (size_t b = 0; b < w.size() / bb; ++b) {
    const uint16_t d = F32ToF16((rng() & 1 ? -1.0f : 1.0f) * mag(rng) * (type == TensorType::kQ4_K ? 0.05f : 1.0f));
    std::memcpy(&w[b * bb], &d, 2);
    if (type == TensorType::kQ4_K) {
      const uint16_t dmin = F32ToF16((rng() & 1 ? -1.0f : 1.0f) * mag(rng) * 0.05f);
      std::memcpy(&w[b * bb + 2], &dmin, 2);
    }
  }
  return w;
}

std::vector<float> RandomVector(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  for (size_t i = 0; i < n; i += 97) x[i] *= 30.0f;  // outliers
  return x;
}

// oneDNN's bf16 panels read packed rows through UnpackRowToBF16: bit for
// bit DequantizeRowToBF16 of the unpacked row, on every target, with the
// CPU's bf16 instruction (x86 AVX512_BF16: Q4_0 straight from the group)
// and with it hidden. Random bytes: scales of every magnitude, NaN and
// infinity included.
TEST_CASE("UnpackRowToBF16 is DequantizeRowToBF16 of UnpackRow, on every target") {
  for (TensorType type : kTypes) {
    for (size_t blocks : {1, 3, 16, 70}) {
      const size_t cols = blocks * BlockElems(type);
      const size_t row_bytes = blocks * BlockBytes(type);
      std::vector<uint8_t> packed = RandomRows(type, kPackedRows, cols, 11);
      PackMatrix(type, packed.data(), kPackedRows, cols);
      for (bool hidden : {false, true}) {
        HideCpuExtensionsForTest(hidden);
        ForEachTarget([&](const Target& t) {
          CAPTURE(t.name);
          CAPTURE(TensorTypeName(type));
          CAPTURE(cols);
          CAPTURE(hidden);
          std::vector<uint8_t> row(row_bytes), scratch(row_bytes);
          std::vector<uint16_t> want(cols), got(cols + 1);
          for (size_t r = 0; r < kPackedRows; ++r) {
            CAPTURE(r);
            UnpackRow(type, packed.data(), cols, r, row.data());
            DequantizeRowToBF16(type, row.data(), cols, want.data());
            got[cols] = 0xABCD;  // guard: nothing written past the row
            UnpackRowToBF16(type, packed.data(), cols, r, scratch.data(), got.data());
            REQUIRE(std::memcmp(got.data(), want.data(), cols * sizeof(uint16_t)) == 0);
            REQUIRE(got[cols] == 0xABCD);
          }
          // The whole group at once: each row as above, in rows of a
          // wider stride whose gaps stay untouched.
          const size_t stride = cols + 5;
          std::vector<uint16_t> all(kPackedRows * stride, 0xABCD);
          UnpackGroupToBF16(type, packed.data(), cols, scratch.data(), all.data(), stride);
          for (size_t r = 0; r < kPackedRows; ++r) {
            CAPTURE(r);
            UnpackRowToBF16(type, packed.data(), cols, r, scratch.data(), got.data());
            REQUIRE(std::memcmp(&all[r * stride], got.data(), cols * sizeof(uint16_t)) == 0);
            for (size_t i = cols; i < stride; ++i) REQUIRE(all[r * stride + i] == 0xABCD);
          }
        });
      }
      HideCpuExtensionsForTest(false);
    }
  }
}

TEST_CASE("PackGroup and UnpackRow are inverses; PackMatrix packs whole groups") {
  for (TensorType type : kTypes) {
    for (size_t blocks : {1, 2, 3, 16}) {
      const size_t cols = blocks * BlockElems(type);
      CAPTURE(TensorTypeName(type));
      CAPTURE(cols);
      const size_t rows = 19;  // two groups and a tail of 3 rows
      const size_t row_bytes = blocks * BlockBytes(type);
      const std::vector<uint8_t> w = RandomRows(type, rows, cols, 7);
      std::vector<uint8_t> packed = w;
      PackMatrix(type, packed.data(), rows, cols);
      CHECK(packed != w);
      std::vector<uint8_t> row(row_bytes);
      for (size_t g = 0; g < 2; ++g) {
        for (size_t r = 0; r < kPackedRows; ++r) {
          UnpackRow(type, packed.data() + g * kPackedRows * row_bytes, cols, r, row.data());
          CHECK(std::memcmp(row.data(), &w[(8 * g + r) * row_bytes], row_bytes) == 0);
        }
      }
      CHECK(std::memcmp(&packed[16 * row_bytes], &w[16 * row_bytes], 3 * row_bytes) == 0);
    }
  }
  // The Q4_0 layout itself: block 1's scale of row 5, and its nibble bytes 8..11.
  const std::vector<uint8_t> w = RandomRows(TensorType::kQ4_0, 8, 64, 9);
  std::vector<uint8_t> packed(w.size());
  PackGroup(TensorType::kQ4_0, w.data(), 36, 64, packed.data());
  CHECK(std::memcmp(&packed[144 + 10], &w[5 * 36 + 18], 2) == 0);
  CHECK(std::memcmp(&packed[144 + 16 + 64 + 20], &w[5 * 36 + 18 + 2 + 8], 4) == 0);
  // Q4_K: row 3's qs[32 * 2 + 4 * 5 ..] in chunk (2, 5), and its sub-block 6's scale.
  const std::vector<uint8_t> k = RandomRows(TensorType::kQ4_K, 8, 256, 10);
  std::vector<uint8_t> kp(k.size());
  PackGroup(TensorType::kQ4_K, k.data(), 144, 256, kp.data());
  CHECK(std::memcmp(&kp[128 + 256 * 2 + 32 * 5 + 12], &k[3 * 144 + 16 + 64 + 20], 4) == 0);
  uint8_t sc[8], m[8];
  UnpackQ4KScales(&k[3 * 144 + 4], sc, m);
  CHECK((kp[32 + 8 * 6 + 3] & 63) == sc[6]);
  // Q8_0: block 1's scale of row 6, and its quant bytes 28..31 in chunk 7.
  const std::vector<uint8_t> q = RandomRows(TensorType::kQ8_0, 8, 64, 12);
  std::vector<uint8_t> qp(q.size());
  PackGroup(TensorType::kQ8_0, q.data(), 68, 64, qp.data());
  CHECK(std::memcmp(&qp[272 + 12], &q[6 * 68 + 34], 2) == 0);
  CHECK(std::memcmp(&qp[272 + 16 + 32 * 7 + 24], &q[6 * 68 + 34 + 2 + 28], 4) == 0);
}

// The kernels' error against the exact product comes from the int8
// activations: each element is off by at most max|x_block| / 254, so
// |y - exact| <= sum_i |w_i| max|x_block(i)| / 254, plus f32 rounding of
// the partial sums (including Q4_0's offsets and Q4_K's mins, computed
// apart: bounded through the dequantized row with every nibble zero).
double ErrorBound(TensorType type, const uint8_t* row, size_t cols, const std::vector<float>& x) {
  std::vector<float> w(cols), offsets(cols);
  DequantizeRowReference(type, row, cols, w.data());
  std::vector<uint8_t> zeroed(row, row + cols / BlockElems(type) * BlockBytes(type));
  for (size_t b = 0; b < cols / BlockElems(type); ++b) {
    uint8_t* blk = zeroed.data() + b * BlockBytes(type);
    if (type == TensorType::kQ4_K) {
      std::memset(blk + 16, 0, 128);
    } else if (type == TensorType::kQ8_0) {
      std::memset(blk + 2, 0, 32);  // no offset: all zero
    } else {
      std::memset(blk + 2, 0, 16);
    }
  }
  DequantizeRowReference(type, zeroed.data(), cols, offsets.data());
  double bound = 0.0, magnitude = 0.0;
  for (size_t b = 0; b < cols / 32; ++b) {
    double amax = 0.0;
    for (size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(double{x[32 * b + i]}));
    for (size_t i = 32 * b; i < 32 * b + 32; ++i) {
      bound += std::fabs(double{w[i]}) * amax / 254.0;
      magnitude += (std::fabs(double{w[i]}) + 2 * std::fabs(double{offsets[i]})) * std::fabs(double{x[i]});
    }
  }
  return bound * 1.001 + 1e-5 * magnitude + 1e-30;
}

// On every target, in each 8-bit dot-product form this CPU runs there: the
// best one, and with the CPU extensions a target checks at run time
// (NEON's sdot, AVX2/AVX3's VNNI) hidden, the target's own.
TEST_CASE("PackedGemv matches the reference within the int8 bound on every target") {
  for (bool hidden : {false, true}) {
    HideCpuExtensionsForTest(hidden);
    for (TensorType type : kTypes) {
      for (size_t blocks : {1, 5, 8}) {
        const size_t cols = blocks * BlockElems(type) * (type == TensorType::kQ4_K ? 1 : 8);
        // Groups 1..7: a set of four read side by side, a pair and one alone.
        const size_t groups = 8;
        const size_t rows = groups * kPackedRows;
        const size_t row_bytes = cols / BlockElems(type) * BlockBytes(type);
        const std::vector<uint8_t> w = RandomRows(type, rows, cols, static_cast<uint32_t>(cols));
        std::vector<uint8_t> packed = w;
        PackMatrix(type, packed.data(), rows, cols);
        const std::vector<float> x = RandomVector(cols, 3);
        std::vector<float> want(rows), ref(rows);
        GemvReference(type, w.data(), row_bytes, cols, x.data(), 0, rows, want.data());
        PackedGemvReference(type, packed.data(), cols, x.data(), 0, groups, ref.data());
        CHECK(ref == want);
        std::vector<double> bound(rows);
        for (size_t r = 0; r < rows; ++r) bound[r] = ErrorBound(type, &w[r * row_bytes], cols, x);
        ForEachTarget([&](const Target& target) {
          CAPTURE(target.name);
          CAPTURE(PackedGemvDotForm());
          CAPTURE(TensorTypeName(type));
          CAPTURE(cols);
          PackedGemvInput input;
          input.Prepare(x.data(), cols);
          std::vector<float> y(rows, -1.0f);
          PackedGemv(type, packed.data(), cols, input, 1, groups, y.data());
          for (size_t r = 0; r < kPackedRows; ++r) CHECK(y[r] == -1.0f);  // group 0 untouched
          for (size_t r = kPackedRows; r < rows; ++r) {
            CAPTURE(r);
            CHECK(std::fabs(y[r] - want[r]) <= bound[r]);
          }
        });
      }
    }
  }
  HideCpuExtensionsForTest(false);
}

// Prefetching changes when bytes arrive, never what is computed.
TEST_CASE("PackedGemv results do not depend on the prefetch policy, on every target") {
  for (TensorType type : kTypes) {
    const size_t cols = 24 * (type == TensorType::kQ4_K ? 256 : 32);
    const size_t groups = 7;  // odd: a group without a pair
    const size_t rows = groups * kPackedRows;
    std::vector<uint8_t> packed = RandomRows(type, rows, cols, 11);
    PackMatrix(type, packed.data(), rows, cols);
    const std::vector<float> x = RandomVector(cols, 5);
    ForEachTarget([&](const Target& target) {
      CAPTURE(target.name);
      CAPTURE(TensorTypeName(type));
      PackedGemvInput input;
      input.Prepare(x.data(), cols);
      CHECK(SameBitsUnderEitherPrefetch(
          rows, [&](float* y) { PackedGemv(type, packed.data(), cols, input, 0, groups, y); }));
    });
  }
}

// A batch multiplies each group with every input (on Arm with i8mm, pairs of
// inputs at once with smmla): each input's results must be bit for bit
// its single-input ones, for every count (odd ones leave a single input),
// on every target and with the run-time CPU extensions hidden.
TEST_CASE("PackedGemvBatch gives each input PackedGemv's results bit for bit") {
  for (bool hidden : {false, true}) {
    HideCpuExtensionsForTest(hidden);
    for (TensorType type : kTypes) {
      const size_t cols = BlockElems(type) * (type == TensorType::kQ4_K ? 3 : 12);
      const size_t groups = 5, rows = groups * kPackedRows;
      std::vector<uint8_t> w = RandomRows(type, rows, cols, 7);
      PackMatrix(type, w.data(), rows, cols);
      std::vector<PackedGemvInput> inputs(5);
      for (size_t t = 0; t < inputs.size(); ++t) {
        const std::vector<float> x = RandomVector(cols, 11 + static_cast<uint32_t>(t));
        inputs[t].Prepare(x.data(), cols);
      }
      ForEachTarget([&](const Target& target) {
        CAPTURE(target.name);
        CAPTURE(hidden);
        CAPTURE(TensorTypeName(type));
        std::vector<std::vector<float>> single(inputs.size(), std::vector<float>(rows));
        for (size_t t = 0; t < inputs.size(); ++t) {
          PackedGemv(type, w.data(), cols, inputs[t], 0, groups, single[t].data());
        }
        for (size_t n = 1; n <= inputs.size(); ++n) {
          CAPTURE(n);
          const size_t stride = rows + 3;
          std::vector<float> y(n * stride, -1.0f);
          PackedGemvBatch(type, w.data(), cols, inputs.data(), n, 1, groups, y.data(), stride);
          for (size_t t = 0; t < n; ++t) {
            CAPTURE(t);
            for (size_t r = 0; r < kPackedRows; ++r) CHECK(y[t * stride + r] == -1.0f);
            for (size_t r = kPackedRows; r < rows; ++r) {
              CAPTURE(r);
              CHECK(y[t * stride + r] == single[t][r]);
            }
          }
        }
      });
    }
  }
  HideCpuExtensionsForTest(false);
}

TEST_CASE("PackedGemvInput rounds each block's largest value to +-127") {
  std::vector<float> x(64, 0.0f);
  x[3] = -2.0f;
  x[4] = 1.0f;
  x[40] = 0.5f;
  ForEachTarget([&](const Target& target) {
    CAPTURE(target.name);
    PackedGemvInput input;
    input.Prepare(x.data(), x.size());
    CHECK(input.quantized()[3] == -127);
    CHECK(input.quantized()[4] == 64);  // 63.5 rounds to even
    CHECK(input.quantized()[40] == 127);
    CHECK(input.scales()[0] == doctest::Approx(2.0f / 127));
    CHECK(input.sums()[0] == -63.0f);
    CHECK(input.sums()[1] == 127.0f);
  });
}

TEST_CASE("PackedGemv propagates non-finite activations, and rejects misuse") {
  for (TensorType type : kTypes) {
    const size_t cols = BlockElems(type) * 2;
    std::vector<uint8_t> w = RandomRows(type, kPackedRows, cols, 1);
    PackMatrix(type, w.data(), kPackedRows, cols);
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      std::vector<float> x = RandomVector(cols, 2);
      x[37] = bad;
      ForEachTarget([&](const Target& target) {
        CAPTURE(target.name);
        CAPTURE(TensorTypeName(type));
        PackedGemvInput input;
        input.Prepare(x.data(), cols);
        std::vector<float> y(kPackedRows);
        PackedGemv(type, w.data(), cols, input, 0, 1, y.data());
        for (float v : y) CHECK(std::isnan(v));
      });
    }
  }
  PackedGemvInput input;
  std::vector<float> x(256, 1.0f);
  CHECK_THROWS(input.Prepare(x.data(), 48));
  input.Prepare(x.data(), 32);
  std::vector<uint8_t> w(8 * 144);
  float y[8];
  CHECK_THROWS_AS(PackedGemv(TensorType::kQ4_0, w.data(), 64, input, 0, 1, y), std::invalid_argument);
  CHECK_THROWS_AS(PackedGemv(TensorType::kQ4_K, w.data(), 32, input, 0, 1, y), std::invalid_argument);
  CHECK_THROWS_AS(PackedGemv(TensorType::kQ8_0, w.data(), 64, input, 0, 1, y), std::invalid_argument);
  CHECK_FALSE(PackedGemvSupports(TensorType::kQ6_K));
}

TEST_CASE("PackedGemvPreferred: x86 targets with pmaddubsw, SVE, NEON with sdot") {
  ForEachTarget([&](const Target& target) {
    CAPTURE(target.name);
    const bool x86_int8 = target.name == "AVX2" || target.name == "SSE4" ||
                          target.name == "SSSE3" || target.name.rfind("AVX3", 0) == 0;
    const bool arm_sdot = target.name.rfind("SVE", 0) == 0 ||
                          (target.name == "NEON" && CpuHasArmDotProd());
    CHECK(PackedGemvPreferred() == (x86_int8 || arm_sdot));
  });
}

}  // namespace
}  // namespace sparrow::simd
