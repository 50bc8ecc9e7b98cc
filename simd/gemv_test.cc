#include "simd/gemv.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "base/error.h"
#include "base/tensor_type.h"
#include "simd/quantize.h"
#include "simd/prefetch_test_util.h"
#include "simd/targets.h"

namespace sparrow::simd {
namespace {

constexpr TensorType kAllTypes[] = {TensorType::kF32,  TensorType::kF16,
                                    TensorType::kBF16, TensorType::kQ8_0,
                                    TensorType::kQ4_0, TensorType::kQ4_K,
                                    TensorType::kQ6_K, TensorType::kQ4_0S};

bool IsQuantized(TensorType t) {
  return t == TensorType::kQ8_0 || t == TensorType::kQ4_0 || t == TensorType::kQ4_K ||
         t == TensorType::kQ6_K || t == TensorType::kQ4_0S;
}

size_t MinRowBytes(TensorType type, size_t cols) {
  uint64_t bytes = 0;
  REQUIRE(TensorTypeBytes(type, cols, &bytes));
  return static_cast<size_t>(bytes);
}

void PutHalf(uint8_t* p, float v) {
  const uint16_t h = F32ToF16(v);
  std::memcpy(p, &h, 2);
}

// Byte ranges [begin, end) of the quant values (not the scales) inside one
// block of `type`, from the GGUF layout.
struct QuantBytes {
  size_t begin, end;
};
std::vector<QuantBytes> QuantRanges(TensorType type) {
  switch (type) {
    case TensorType::kQ8_0: return {{2, 34}};
    case TensorType::kQ4_0: return {{2, 18}};
    case TensorType::kQ4_K: return {{16, 144}};
    case TensorType::kQ6_K: return {{0, 192}};
    default: return {};
  }
}

// A random row: either what QuantizeRow makes of Gaussian values, or random
// bytes with finite random scales (every quant pattern, independent of the
// quantizer).
void FillRow(TensorType type, size_t cols, bool random_bytes, std::mt19937& rng,
             uint8_t* out) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::uniform_int_distribution<int> byte(0, 255);
  if (!random_bytes || !IsQuantized(type)) {
    std::vector<float> v(cols);
    const float sigma = 0.01f + 0.1f * std::fabs(normal(rng));
    for (float& f : v) f = sigma * normal(rng);
    QuantizeRow(type, v.data(), cols, out);
    return;
  }
  const size_t bytes = MinRowBytes(type, cols);
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(byte(rng));
  if (type == TensorType::kQ4_0S) {  // the scales first (quant_blocks.h)
    for (size_t b = 0; b < cols / 32; ++b) PutHalf(out + 2 * b, 0.01f * uni(rng));
    return;
  }
  const size_t block_bytes = GetTensorTypeInfo(type).block_bytes;
  for (size_t b = 0; b < bytes / block_bytes; ++b) {
    uint8_t* blk = out + b * block_bytes;
    switch (type) {
      case TensorType::kQ8_0:
      case TensorType::kQ4_0:
        PutHalf(blk, 0.01f * uni(rng));
        break;
      case TensorType::kQ4_K:
        PutHalf(blk, 0.002f * uni(rng));
        PutHalf(blk + 2, 0.004f * uni(rng));
        break;
      case TensorType::kQ6_K:
        PutHalf(blk + 208, 0.0005f * uni(rng));
        break;
      default:
        break;
    }
  }
}

// The row with every quant value zero: each element's constant offset
// (Q4_0's -8d, Q4_K's -dmin*m, Q6_K's -32*d*sc; zero for the others).
std::vector<float> Offsets(TensorType type, const uint8_t* row, size_t cols) {
  std::vector<float> out(cols, 0.0f);
  if (!IsQuantized(type)) return out;
  const size_t bytes = MinRowBytes(type, cols);
  std::vector<uint8_t> copy(row, row + bytes);
  if (type == TensorType::kQ4_0S) {  // the nibbles follow the scales
    std::memset(copy.data() + 2 * (cols / 32), 0, bytes - 2 * (cols / 32));
    DequantizeRowReference(type, copy.data(), cols, out.data());
    return out;
  }
  const size_t block_bytes = GetTensorTypeInfo(type).block_bytes;
  for (size_t b = 0; b < bytes / block_bytes; ++b) {
    for (const QuantBytes& q : QuantRanges(type)) {
      std::memset(copy.data() + b * block_bytes + q.begin, 0, q.end - q.begin);
    }
  }
  DequantizeRowReference(type, copy.data(), cols, out.data());
  return out;
}

// How far Gemv may be from GemvReference for row `w` and input `x` on the
// current target:
//  - activation rounding (quantized types): x is stored as q * s with
//    s = amax_block / M (M = GemvActivationMax(type)) and |x - q * s| <= 0.5 s (plus
//    2^-24 relative slop for computing x / s in f32), so the dot moves by
//    at most sum_blocks 0.502 * amax / M * sum |w_i|;
//  - f32 rounding: every f32 operation (products, sums of per-block or
//    per-lane partials, scale products, int-to-float conversion) errs by at
//    most 2^-24 relative, and no partial passes through more than `steps`
//    of them; a partial's magnitude is bounded by sum |w_i x_i| plus the
//    offsets that the kernels apply separately (sum |o_i x_i|);
//  - the reference's own rounding to f32: 2^-24 |y|.
double Tolerance(TensorType type, const std::vector<float>& w,
                 const std::vector<float>& offsets, const float* x, size_t cols,
                 double y) {
  double magnitude = 0;
  for (size_t i = 0; i < cols; ++i) {
    magnitude += (std::fabs(double(w[i])) + std::fabs(double(offsets[i]))) *
                 std::fabs(double(x[i]));
  }
  double quant = 0;
  double steps = static_cast<double>(cols) + 16;
  if (IsQuantized(type)) {
    steps = static_cast<double>(cols) / 16 + 16;
    for (size_t b = 0; b < cols / 32; ++b) {
      double amax = 0, wsum = 0;
      for (size_t i = 32 * b; i < 32 * b + 32; ++i) {
        amax = std::max(amax, std::fabs(double(x[i])));
        wsum += std::fabs(double(w[i]));
      }
      quant += 0.502 * amax / GemvActivationMax(type) * wsum;
    }
  }
  const double u = std::ldexp(1.0, -24);
  return quant + 1.01 * (steps + 4) * u * magnitude * (1 + 1e-4) +
         u * std::fabs(y) + 1e-30;
}

std::vector<float> Activations(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  // Outliers, and a block of zeros when there is room for one.
  for (size_t i = 0; i < n; i += 97) x[i] *= 40.0f;
  if (n >= 96) std::fill(x.begin() + 32, x.begin() + 64, 0.0f);
  return x;
}

struct Shape {
  size_t rows, cols, pad;  // pad: extra bytes per row (keeps 2-byte alignment)
};

std::vector<Shape> ShapesFor(TensorType type) {
  if (type == TensorType::kQ4_K || type == TensorType::kQ6_K) {
    return {{1, 256, 0}, {5, 512, 0}, {7, 768, 6}, {9, 2304, 0}, {4, 256, 2}};
  }
  if (IsQuantized(type)) {
    // 70 blocks: more than one scale chunk (64) plus a partial one.
    return {{1, 32, 0}, {5, 64, 0}, {13, 288, 4}, {6, 2240, 0}, {3, 96, 2}};
  }
  return {{1, 1, 0}, {3, 7, 2}, {5, 64, 0}, {9, 129, 6}, {6, 1000, 0}, {2, 33, 0}};
}

}  // namespace

TEST_CASE("Gemv matches GemvReference for every type, shape and target") {
  std::mt19937 rng(1234);
  for (TensorType type : kAllTypes) {
    for (const Shape& shape : ShapesFor(type)) {
      const size_t row_bytes = MinRowBytes(type, shape.cols) + shape.pad;
      // +2: start the matrix at an address that is only 2-byte aligned.
      std::vector<uint8_t> storage(shape.rows * row_bytes + 2);
      uint8_t* w = storage.data() + 2;
      for (size_t r = 0; r < shape.rows; ++r) {
        FillRow(type, shape.cols, r % 2 == 1, rng, w + r * row_bytes);
      }
      const std::vector<float> x = Activations(shape.cols, rng);
      std::vector<float> ref(shape.rows);
      GemvReference(type, w, row_bytes, shape.cols, x.data(), 0, shape.rows, ref.data());
      // Row ranges: everything, a middle part, one row, the tail.
      const size_t R = shape.rows;
      const std::pair<size_t, size_t> ranges[] = {
          {0, R}, {R > 2 ? 1 : 0, R > 2 ? R - 1 : R}, {R / 2, R / 2 + 1}, {R - 1, R}};
      // Q4_0 on AVX3 takes int8 activations where the CPU has AVX-512
      // VNNI, int16 where not: both forms.
      ForEachTargetAndCpuForm([&](const Target& target, bool hidden) {
        if (hidden && type != TensorType::kQ4_0 && type != TensorType::kQ4_0S) return;
        CAPTURE(hidden);
        std::vector<double> tol(shape.rows);
        for (size_t r = 0; r < shape.rows; ++r) {
          std::vector<float> row(shape.cols);
          DequantizeRowReference(type, w + r * row_bytes, shape.cols, row.data());
          tol[r] = Tolerance(type, row, Offsets(type, w + r * row_bytes, shape.cols),
                             x.data(), shape.cols, ref[r]);
        }
        GemvInput input;
        input.Prepare(type, x.data(), shape.cols);
        for (const auto& range : ranges) {
          // Named copies, not a structured binding: clang 14 (the
          // sanitizer build) cannot capture those in CAPTURE's lambda.
          const size_t begin = range.first, end = range.second;
          CAPTURE(target.name);
          CAPTURE(TensorTypeName(type));
          CAPTURE(shape.rows);
          CAPTURE(shape.cols);
          CAPTURE(begin);
          CAPTURE(end);
          std::vector<float> y(R, 1234.5f);
          Gemv(type, w, row_bytes, shape.cols, input, begin, end, y.data());
          for (size_t r = 0; r < R; ++r) {
            CAPTURE(r);
            if (r < begin || r >= end) {
              REQUIRE(y[r] == 1234.5f);  // outside the range: untouched
            } else {
              CAPTURE(ref[r]);
              CAPTURE(y[r]);
              CAPTURE(tol[r]);
              REQUIRE(std::fabs(double(y[r]) - ref[r]) <= tol[r]);
            }
          }
        }
      });
    }
  }
}

// Prefetching changes when bytes arrive, never what is computed: float
// rows (StreamAhead or HardwarePrefetch) give the same bits either way.
TEST_CASE("Gemv results do not depend on the prefetch policy, every float type and target") {
  std::mt19937 rng(77);
  for (TensorType type : {TensorType::kF32, TensorType::kF16, TensorType::kBF16}) {
    const size_t rows = 37, cols = 3000;  // rows over several 4 KiB pages, a ragged tail
    const size_t row_bytes = MinRowBytes(type, cols);
    std::vector<uint8_t> w(rows * row_bytes);
    for (size_t r = 0; r < rows; ++r) FillRow(type, cols, false, rng, w.data() + r * row_bytes);
    const std::vector<float> x = Activations(cols, rng);
    ForEachTarget([&](const Target& target) {
      CAPTURE(target.name);
      CAPTURE(TensorTypeName(type));
      GemvInput input;
      input.Prepare(type, x.data(), cols);
      CHECK(SameBitsUnderEitherPrefetch(
          rows, [&](float* y) { Gemv(type, w.data(), row_bytes, cols, input, 0, rows, y); }));
    });
  }
}

// Q4_0's int8 form is chosen where it takes fewer instructions than int16:
// always on AVX3_DL, whose runtime check requires AVX-512 VNNI, on AVX3 when
// the CPU reports that, always on AVX2 and SSE4 (vpdpbusd where the CPU has
// AVX-VNNI, else pmaddubsw), and on Arm with `sdot`.
TEST_CASE("Q4_0 and Q8_0 activations are int8 exactly where the target and CPU have them") {
  ForEachTargetAndCpuForm([&](const Target& target, bool hidden) {
    CAPTURE(target.name);
    CAPTURE(hidden);
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
    const bool int8 = target.name == "AVX3_DL" ||
                      (target.name == "AVX3" && CpuHasX86Vnni(/*evex=*/true)) ||
                      target.name == "AVX2" || target.name == "SSE4" || target.name == "SSSE3";
#elif defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
    // Arm: with `sdot`, on every SVE target and on NEON where the core has it.
    const bool int8 =
        target.name.rfind("SVE", 0) == 0 || (target.name == "NEON" && CpuHasArmDotProd());
#else
    const bool int8 = false;
#endif
    CHECK(GemvActivationMax(TensorType::kQ4_0) == (int8 ? kInt8ActivationMax : 32767));
    CHECK(GemvActivationMax(TensorType::kQ4_0S) == (int8 ? kInt8ActivationMax : 32767));
    // Q8_0: only where the byte permute gathers its blocks (AVX3_DL).
    CHECK(GemvActivationMax(TensorType::kQ8_0) ==
          (target.name == "AVX3_DL" ? kInt8ActivationMax : 32767));
  });
}

// Q6_K's per-row kernel takes int8 activations wherever the target has a
// native 8-bit dot product (int8_dot-inl.h): x86 from SSSE3 (pmaddubsw, or
// vpdpbusd), SVE, and NEON on cores with `sdot`; int16 elsewhere.
TEST_CASE("Q6_K activations are int8 exactly where the target has a native byte dot product") {
  ForEachTargetAndCpuForm([&](const Target& target, bool hidden) {
    CAPTURE(target.name);
    CAPTURE(hidden);
    const bool x86_int8 = target.name == "AVX2" || target.name == "SSE4" ||
                          target.name == "SSSE3" || target.name.rfind("AVX3", 0) == 0;
    const bool arm_sdot =
        target.name.rfind("SVE", 0) == 0 || (target.name == "NEON" && CpuHasArmDotProd());
    CHECK(GemvActivationMax(TensorType::kQ6_K) ==
          (x86_int8 || arm_sdot ? kInt8ActivationMax : 32767));
  });
}

// A batch multiplies each group of rows with every input (Q8_0: several
// inputs per widened block): each input's results must be bit for bit its
// Gemv ones, for every count (full chunks and inputs left over), every type
// and target.
TEST_CASE("GemvBatch gives each input Gemv's results bit for bit, every type and target") {
  std::mt19937 rng(99);
  for (TensorType type : kAllTypes) {
    const size_t cols = 1024;  // whole blocks of every type (K-quants: 256)
    const size_t rows = 37;
    const size_t row_bytes = MinRowBytes(type, cols);
    std::vector<uint8_t> w(rows * row_bytes);
    for (size_t r = 0; r < rows; ++r) FillRow(type, cols, r % 2 == 1, rng, w.data() + r * row_bytes);
    std::vector<std::vector<float>> xs;
    for (size_t t = 0; t < 7; ++t) xs.push_back(Activations(cols, rng));
    ForEachTarget([&](const Target& target) {
      CAPTURE(target.name);
      CAPTURE(TensorTypeName(type));
      std::vector<GemvInput> inputs(xs.size());
      std::vector<std::vector<float>> single(xs.size(), std::vector<float>(rows));
      for (size_t t = 0; t < xs.size(); ++t) {
        inputs[t].Prepare(type, xs[t].data(), cols);
        Gemv(type, w.data(), row_bytes, cols, inputs[t], 0, rows, single[t].data());
      }
      for (size_t n = 1; n <= xs.size(); ++n) {
        CAPTURE(n);
        const size_t stride = rows + 1;
        std::vector<float> y(n * stride, 1234.5f);
        GemvBatch(type, w.data(), row_bytes, cols, inputs.data(), n, 1, rows, y.data(), stride);
        for (size_t t = 0; t < n; ++t) {
          CAPTURE(t);
          REQUIRE(y[t * stride] == 1234.5f);
          for (size_t r = 1; r < rows; ++r) {
            CAPTURE(r);
            REQUIRE(y[t * stride + r] == single[t][r]);
          }
        }
      }
    });
  }
}

TEST_CASE("Gemv error stays far inside the bound on a large quantized matrix") {
  // Not a bound check but a sanity figure: the typical error is well below
  // the worst case the previous test allows.
  std::mt19937 rng(99);
  for (TensorType type : {TensorType::kQ4_0, TensorType::kQ8_0, TensorType::kQ4_K,
                          TensorType::kQ6_K, TensorType::kF16, TensorType::kQ4_0S}) {
    const size_t rows = 16, cols = 4096;
    const size_t row_bytes = MinRowBytes(type, cols);
    std::vector<uint8_t> w(rows * row_bytes);
    for (size_t r = 0; r < rows; ++r) FillRow(type, cols, false, rng, w.data() + r * row_bytes);
    const std::vector<float> x = Activations(cols, rng);
    std::vector<float> ref(rows), y(rows);
    GemvReference(type, w.data(), row_bytes, cols, x.data(), 0, rows, ref.data());
    GemvInput input;
    input.Prepare(type, x.data(), cols);
    Gemv(type, w.data(), row_bytes, cols, input, 0, rows, y.data());
    double worst = 0;
    for (size_t r = 0; r < rows; ++r) {
      std::vector<float> row(cols);
      DequantizeRowReference(type, w.data() + r * row_bytes, cols, row.data());
      double mag = 0;
      for (size_t i = 0; i < cols; ++i) mag += std::fabs(double(row[i]) * x[i]);
      worst = std::max(worst, std::fabs(double(y[r]) - ref[r]) / mag);
    }
    MESSAGE(TensorTypeName(type) << ": max |y - ref| / sum|w x| = " << worst);
    // int8 activations round 258 times more coarsely than int16 ones.
    CHECK(worst < (GemvActivationMax(type) == kInt8ActivationMax ? 5e-3 : 2e-5));
  }
}

TEST_CASE("Gemv propagates non-finite activations") {
  for (TensorType type : kAllTypes) {
    const size_t cols = 256, rows = 3;
    const size_t row_bytes = MinRowBytes(type, cols);
    std::vector<uint8_t> w(rows * row_bytes);
    std::mt19937 rng(5);
    for (size_t r = 0; r < rows; ++r) FillRow(type, cols, false, rng, w.data() + r * row_bytes);
    std::vector<float> x(cols, 0.5f);
    x[77] = std::numeric_limits<float>::quiet_NaN();
    ForEachTarget([&](const Target& target) {
      CAPTURE(target.name);
      CAPTURE(TensorTypeName(type));
      GemvInput input;
      input.Prepare(type, x.data(), cols);
      std::vector<float> y(rows);
      Gemv(type, w.data(), row_bytes, cols, input, 0, rows, y.data());
      for (float v : y) CHECK(std::isnan(v));
    });
  }
}

TEST_CASE("GemvInput and Gemv reject misuse") {
  CHECK(GemvSupports(TensorType::kQ4_K));
  CHECK_FALSE(GemvSupports(TensorType::kQ5_K));
  CHECK_FALSE(GemvSupports(TensorType::kQ4_1));
  std::vector<float> x(512, 1.0f);
  GemvInput input;
  CHECK_THROWS_AS(input.Prepare(TensorType::kQ4_0, x.data(), 48), InputError);
  CHECK_THROWS_AS(input.Prepare(TensorType::kQ6_K, x.data(), 288), InputError);
  CHECK_THROWS_AS(input.Prepare(TensorType::kQ5_K, x.data(), 256), InputError);
  std::vector<uint8_t> w(4096);
  float y[2];
  input.Prepare(TensorType::kQ8_0, x.data(), 64);
  CHECK(input.weight_type() == TensorType::kQ8_0);
  CHECK(input.size() == 64);
  // Wrong type, wrong size, rows too short for the columns.
  CHECK_THROWS_AS(Gemv(TensorType::kQ4_0, w.data(), 36, 64, input, 0, 1, y),
                  std::invalid_argument);
  CHECK_THROWS_AS(Gemv(TensorType::kQ8_0, w.data(), 102, 96, input, 0, 1, y),
                  std::invalid_argument);
  CHECK_THROWS_AS(Gemv(TensorType::kQ8_0, w.data(), 67, 64, input, 0, 1, y),
                  std::invalid_argument);
  // Zero columns: empty dot products.
  for (TensorType type : kAllTypes) {
    input.Prepare(type, x.data(), 0);
    y[0] = y[1] = 7.0f;
    Gemv(type, w.data(), 0, 0, input, 0, 2, y);
    CHECK(y[0] == 0.0f);
    CHECK(y[1] == 0.0f);
  }
  // Re-preparing reuses the object for another type and size.
  input.Prepare(TensorType::kF32, x.data(), 3);
  const float w3[3] = {1, 2, 3};
  Gemv(TensorType::kF32, w3, 12, 3, input, 0, 1, y);
  CHECK(y[0] == 6.0f);
}

}  // namespace sparrow::simd
