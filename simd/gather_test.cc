#include "simd/gather.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <utility>
#include <string>
#include <vector>

#include "base/tensor_type.h"
#include "simd/gemv.h"
#include "simd/quantize.h"
#include "simd/prefetch_test_util.h"
#include "simd/row_prefetch.h"
#include "simd/targets.h"

namespace sparrow::simd {
namespace {

constexpr TensorType kTypes[] = {TensorType::kF32,  TensorType::kF16,  TensorType::kBF16,
                                 TensorType::kQ8_0, TensorType::kQ4_0, TensorType::kQ4_0S};

bool IsQ4_0Family(TensorType t) { return t == TensorType::kQ4_0 || t == TensorType::kQ4_0S; }
bool IsQuantized(TensorType t) { return t == TensorType::kQ8_0 || IsQ4_0Family(t); }

// Where a quantized row of `cols` keeps block b's f16 scale, and its quants
// (Q4_0S: all scales first, then the blocks' nibbles).
size_t ScaleAt(TensorType type, size_t /*cols*/, size_t b) {
  if (type == TensorType::kQ4_0S) return 2 * b;
  return b * GetTensorTypeInfo(type).block_bytes;
}
size_t QuantsAt(TensorType type, size_t cols, size_t b) {
  if (type == TensorType::kQ4_0S) return 2 * (cols / 32) + 16 * b;
  return b * GetTensorTypeInfo(type).block_bytes + 2;
}

size_t RowBytes(TensorType type, size_t cols) {
  uint64_t bytes = 0;
  REQUIRE(TensorTypeBytes(type, cols, &bytes));
  return static_cast<size_t>(bytes);
}

void PutHalf(uint8_t* p, float v) {
  const uint16_t h = F32ToF16(v);
  std::memcpy(p, &h, 2);
}

// A random row: what QuantizeRow makes of Gaussian values, or (quantized
// types, odd calls) random bytes with random finite scales, so every quant
// pattern occurs whatever the quantizer does.
void FillRow(TensorType type, size_t cols, bool random_bytes, std::mt19937& rng, uint8_t* out) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  if (!random_bytes || !IsQuantized(type)) {
    std::vector<float> v(cols);
    const float sigma = 0.01f + 0.1f * std::fabs(normal(rng));
    for (float& f : v) f = sigma * normal(rng);
    QuantizeRow(type, v.data(), cols, out);
    return;
  }
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  const size_t bytes = RowBytes(type, cols);
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(byte(rng));
  for (size_t b = 0; b < cols / 32; ++b) PutHalf(out + ScaleAt(type, cols, b), 0.01f * uni(rng));
}

// A row whose every element is NaN (float types) or whose block scales are
// NaN (quantized): any use of it shows in the result.
void FillPoison(TensorType type, size_t cols, uint8_t* out) {
  const size_t bytes = RowBytes(type, cols);
  if (IsQuantized(type)) {
    std::memset(out, 0x11, bytes);
    for (size_t b = 0; b < cols / 32; ++b) {
      const uint16_t nan = 0x7e00;
      std::memcpy(out + ScaleAt(type, cols, b), &nan, 2);
    }
    return;
  }
  std::vector<float> v(cols, std::numeric_limits<float>::quiet_NaN());
  QuantizeRow(type, v.data(), cols, out);
}

// A pool of distinct rows, each at a random byte offset inside one buffer
// (records are packed, so rows have no alignment at all), and the last
// row ending exactly at the end of the buffer (a kernel that reads past a
// row would read past the allocation there: ASan builds catch it).
struct Pool {
  std::vector<uint8_t> storage;
  std::vector<const uint8_t*> rows;
  size_t row_bytes = 0;
};

Pool MakePool(TensorType type, size_t cols, size_t distinct, bool poison_last, std::mt19937& rng) {
  Pool pool;
  pool.row_bytes = RowBytes(type, cols);
  std::uniform_int_distribution<size_t> gap(0, 71);
  std::vector<size_t> offsets;
  size_t at = gap(rng);
  for (size_t r = 0; r < distinct; ++r) {
    offsets.push_back(at);
    at += pool.row_bytes + (r + 1 < distinct ? gap(rng) : 0);
  }
  pool.storage.resize(at);
  for (size_t r = 0; r < distinct; ++r) {
    uint8_t* row = pool.storage.data() + offsets[r];
    if (poison_last && r + 1 == distinct) {
      FillPoison(type, cols, row);
    } else {
      FillRow(type, cols, r % 2 == 1, rng, row);
    }
    pool.rows.push_back(row);
  }
  return pool;
}

// `count` picks from the first `usable` rows of the pool: arbitrary order,
// with repeats.
std::vector<const uint8_t*> Pick(const Pool& pool, size_t usable, size_t count, std::mt19937& rng) {
  std::uniform_int_distribution<size_t> pick(0, usable - 1);
  std::vector<const uint8_t*> out(count);
  for (auto& p : out) p = pool.rows[pick(rng)];
  return out;
}

std::vector<float> Activations(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  for (size_t i = 0; i < n; i += 97) x[i] *= 40.0f;  // outliers
  if (n >= 96) std::fill(x.begin() + 32, x.begin() + 64, 0.0f);
  return x;
}

std::vector<float> Dequantized(TensorType type, const uint8_t* row, size_t cols) {
  std::vector<float> w(cols);
  DequantizeRowReference(type, row, cols, w.data());
  return w;
}

// The row with every quant value zero: Q4_0's constant -8 d per element,
// which the dot kernels apply separately (zero for the other types).
std::vector<float> Offsets(TensorType type, const uint8_t* row, size_t cols) {
  if (!IsQ4_0Family(type)) return std::vector<float>(cols, 0.0f);
  std::vector<uint8_t> copy(row, row + RowBytes(type, cols));
  for (size_t b = 0; b < cols / 32; ++b) std::memset(copy.data() + QuantsAt(type, cols, b), 0, 16);
  return Dequantized(type, copy.data(), cols);
}

// How far a dot product may be from the double-precision reference on the
// current target (the same bound gemv_test.cc derives for Gemv, whose
// arithmetic DotRows repeats): activation rounding for quantized types (at
// most 0.502 * amax_block / GemvActivationMax(type) per unit of sum |w_i| in the
// block), f32 rounding along at most `steps` operations on partials
// bounded by sum (|w_i| + |o_i|) |x_i|, and the reference's own rounding.
double DotTolerance(TensorType type, const std::vector<float>& w, const std::vector<float>& o,
                    const float* x, size_t cols, double ref) {
  double magnitude = 0;
  for (size_t i = 0; i < cols; ++i) {
    magnitude += (std::fabs(double(w[i])) + std::fabs(double(o[i]))) * std::fabs(double(x[i]));
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
  return quant + 1.01 * (steps + 4) * u * magnitude * (1 + 1e-4) + u * std::fabs(ref) + 1e-30;
}

struct DotCase {
  size_t cols, count, n;
};

std::vector<DotCase> DotCases(TensorType type) {
  if (IsQuantized(type)) {
    // One block; odd counts; 70 blocks (more than one scale chunk plus a
    // partial one, and an odd number of Q4_0 blocks); prompt batches.
    return {{32, 1, 1},  {32, 7, 3},  {64, 5, 1},  {96, 13, 3},   {2240, 6, 1},
            {2240, 9, 3}, {288, 4, 1}, {320, 37, 64}, {32, 3, 64}};
  }
  return {{1, 1, 1},  {7, 3, 3},  {64, 5, 1},    {129, 9, 3},
          {1000, 6, 1}, {33, 13, 64}, {256, 4, 64}, {2048, 5, 3}};
}

}  // namespace

TEST_CASE("DotRows equals Gemv bit for bit and the reference within the Gemv bound") {
  std::mt19937 rng(2024);
  for (TensorType type : kTypes) {
    for (const DotCase& c : DotCases(type)) {
      const Pool pool = MakePool(type, c.cols, 6, false, rng);
      const std::vector<const uint8_t*> rows = Pick(pool, pool.rows.size(), c.count, rng);
      std::vector<float> x(c.n * c.cols);
      for (size_t t = 0; t < c.n; ++t) {
        const std::vector<float> xt = Activations(c.cols, rng);
        std::copy(xt.begin(), xt.end(), x.begin() + t * c.cols);
      }
      const size_t stride = c.count + 3;  // the gaps must stay untouched
      std::vector<float> ref(c.n * stride, 0.0f);
      DotRowsReference(type, rows.data(), c.count, c.cols, x.data(), c.n, ref.data(), stride);
      // Q4_0 on AVX3 takes int8 activations where the CPU has AVX-512
      // VNNI, int16 where not: both forms.
      ForEachTargetAndCpuForm([&](const Target& target, bool hidden) {
        if (hidden && !IsQ4_0Family(type)) return;
        CAPTURE(hidden);
        std::vector<double> tol(c.n * stride);
        for (size_t k = 0; k < c.count; ++k) {
          const std::vector<float> w = Dequantized(type, rows[k], c.cols);
          const std::vector<float> o = Offsets(type, rows[k], c.cols);
          for (size_t t = 0; t < c.n; ++t) {
            tol[t * stride + k] =
                DotTolerance(type, w, o, x.data() + t * c.cols, c.cols, ref[t * stride + k]);
          }
        }
        std::vector<GemvInput> inputs(c.n);
        for (size_t t = 0; t < c.n; ++t) inputs[t].Prepare(type, x.data() + t * c.cols, c.cols);
        std::vector<float> out(c.n * stride, 1234.5f);
        DotRows(type, rows.data(), c.count, c.cols, inputs.data(), c.n, out.data(), stride);
        for (size_t t = 0; t < c.n; ++t) {
          for (size_t k = 0; k < stride; ++k) {
            CAPTURE(target.name);
            CAPTURE(TensorTypeName(type));
            CAPTURE(c.cols);
            CAPTURE(c.count);
            CAPTURE(c.n);
            CAPTURE(t);
            CAPTURE(k);
            const float got = out[t * stride + k];
            if (k >= c.count) {
              REQUIRE(got == 1234.5f);
              continue;
            }
            float gemv = 0.0f;
            Gemv(type, rows[k], pool.row_bytes, c.cols, inputs[t], 0, 1, &gemv);
            CAPTURE(got);
            CAPTURE(gemv);
            CAPTURE(ref[t * stride + k]);
            REQUIRE(std::memcmp(&got, &gemv, sizeof(float)) == 0);
            REQUIRE(std::fabs(double(got) - ref[t * stride + k]) <= tol[t * stride + k]);
          }
        }
      });
    }
  }
}

namespace {

// Bounds for AxpyRows against the double reference, per element. The kernel
// (gather.h) runs m multiply-adds y <- y + s_k q_k, with s_k = a_k d_k
// rounded once (relative error u = 2^-24, which moves the result by at most
// u sum |a_k w_k|), each step rounding at most twice by u of a partial
// bounded by |y0| + sum |s_k q_k| (for Q4_0 q_k is the nibble minus 8, the
// element being d q). Every partial is below M = |y0| + sum |a_k| (|w_k| +
// 3 |o_k|) (o_k = -8 d_k, Q4_0's offset, zero otherwise: a margin kept from
// when the kernel applied it apart), so the error is at most (2m + 3) u M,
// plus the reference's own rounding u |ref|.
double AxpyTolerance(double magnitude, size_t m, double ref) {
  const double u = std::ldexp(1.0, -24);
  return 1.01 * static_cast<double>(2 * m + 3) * u * magnitude + u * std::fabs(ref) + 1e-30;
}

// The scale and the integer of element i of a quantized row (q is the
// nibble minus 8 for Q4_0).
void ScaleAndQuant(TensorType type, const uint8_t* row, size_t cols, size_t i, float* d,
                   float* q) {
  uint16_t bits;
  std::memcpy(&bits, row + ScaleAt(type, cols, i / 32), 2);
  *d = F16ToF32(bits);
  const uint8_t* quants = row + QuantsAt(type, cols, i / 32);
  const size_t e = i % 32;
  if (type == TensorType::kQ8_0) {
    *q = static_cast<float>(static_cast<int8_t>(quants[e]));
  } else {
    *q = static_cast<float>((e < 16 ? quants[e] & 15 : quants[e - 16] >> 4) - 8);
  }
}

// Fused multiply-add on the targets whose Highway MulAdd is one instruction
// here (x86 with FMA); a separate multiply and add on SSE4 and the scalar
// target. Elsewhere (Arm) the exact chain is not checked.
enum class Chain { kFused, kSeparate, kUnknown };
Chain ChainFor(const std::string& target) {
#if defined(__x86_64__) || defined(__i386__)
  if (target == "SSE4" || target == "SSSE3" || target == "SCALAR" || target == "EMU128") {
    return Chain::kSeparate;
  }
  if (target.rfind("AVX", 0) == 0) return Chain::kFused;
#endif
  (void)target;
  return Chain::kUnknown;
}

struct AxpyCase {
  size_t cols, count, n;
};

std::vector<AxpyCase> AxpyCases(TensorType type) {
  if (IsQuantized(type)) {
    // One token and 16 rows or more: Q4_0S on AVX-512 adds whole chunks of
    // four blocks in another order of y (gather-inl.h: chunk order), the
    // blocks past them as usual.
    return {{32, 1, 1},    {32, 7, 3},   {64, 5, 1},    {96, 13, 3},   {2240, 6, 1},
            {2240, 9, 3},  {544, 11, 1}, {1056, 10, 3}, {320, 37, 64}, {32, 3, 64},
            {2240, 40, 1}, {128, 21, 1}, {160, 24, 1},  {544, 30, 1}};
  }
  return {{1, 1, 1},   {7, 3, 3},   {64, 5, 1},   {129, 9, 3},  {1000, 6, 1},
          {33, 13, 64}, {520, 9, 3}, {256, 4, 64}, {2048, 5, 1}};
}

}  // namespace

// Rows read in order (one matrix, front to back) are left to the hardware
// prefetchers on some CPUs: prefetching changes when bytes arrive, never
// what DotRows computes.
TEST_CASE("DotRows over rows in order gives the same bits with either prefetch policy") {
  std::mt19937 rng(99);
  for (TensorType type : kTypes) {
    const size_t cols = 512, count = 43;  // ten groups of four and three single rows
    const size_t row_bytes = RowBytes(type, cols);
    std::vector<uint8_t> matrix(count * row_bytes);
    std::vector<const uint8_t*> rows(count);
    for (size_t k = 0; k < count; ++k) {
      FillRow(type, cols, k % 2 == 1, rng, matrix.data() + k * row_bytes);
      rows[k] = matrix.data() + k * row_bytes;
    }
    const std::vector<float> x = Activations(cols, rng);
    ForEachTarget([&](const Target& target) {
      CAPTURE(target.name);
      CAPTURE(TensorTypeName(type));
      GemvInput input;
      input.Prepare(type, x.data(), cols);
      CHECK(SameBitsUnderEitherPrefetch(
          count, [&](float* y) { DotRows(type, rows.data(), count, cols, &input, 1, y, count); }));
    });
  }
}

TEST_CASE("AxpyRows matches the reference, the exact multiply-add chain, and itself across batch sizes") {
  std::mt19937 rng(77);
  for (TensorType type : kTypes) {
    for (const AxpyCase& c : AxpyCases(type)) {
      // The pool's last row is poison; it is picked only with all-zero
      // coefficients, so it must never be read into the result.
      const Pool pool = MakePool(type, c.cols, 7, true, rng);
      std::vector<const uint8_t*> rows = Pick(pool, pool.rows.size() - 1, c.count, rng);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::uniform_int_distribution<int> die(0, 5);
      const size_t a_stride = c.count + 1;
      std::vector<float> a(c.n * a_stride, std::numeric_limits<float>::quiet_NaN());
      for (size_t t = 0; t < c.n; ++t) {
        for (size_t k = 0; k < c.count; ++k) {
          // Some zeros per token; rows 2 and 5 (when present) zero for all.
          const bool zero = die(rng) == 0 || k == 2 || k == 5;
          a[t * a_stride + k] = zero ? 0.0f : normal(rng);
        }
      }
      if (c.count > 2) rows[2] = pool.rows.back();
      if (c.count > 5) rows[5] = pool.rows.back();
      const size_t y_stride = c.cols + 5;
      std::vector<float> y0(c.n * y_stride);
      for (size_t i = 0; i < y0.size(); ++i) y0[i] = (i % y_stride) < c.cols ? normal(rng) : 777.0f;

      std::vector<float> ref = y0;
      AxpyRowsReference(type, rows.data(), c.count, c.cols, a.data(), a_stride, c.n, ref.data(),
                        y_stride);
      // Tolerances, and the exact chains of gather.h (fused and separate
      // multiply-adds) in f32.
      std::vector<double> tol(y0.size(), 0.0);
      std::vector<float> fused = y0, separate = y0;
      std::vector<std::vector<float>> w(c.count), o(c.count);
      for (size_t k = 0; k < c.count; ++k) {
        w[k] = Dequantized(type, rows[k], c.cols);
        o[k] = Offsets(type, rows[k], c.cols);
      }
      for (size_t t = 0; t < c.n; ++t) {
        for (size_t i = 0; i < c.cols; ++i) {
          const size_t at = t * y_stride + i;
          double magnitude = std::fabs(double(y0[at]));
          size_t m = 0;
          for (size_t k = 0; k < c.count; ++k) {
            const float coeff = a[t * a_stride + k];
            if (coeff == 0.0f) continue;
            ++m;
            magnitude += std::fabs(double(coeff)) *
                         (std::fabs(double(w[k][i])) + 3 * std::fabs(double(o[k][i])));
            float scale = coeff, value = w[k][i];
            if (IsQuantized(type)) {
              float d;
              ScaleAndQuant(type, rows[k], c.cols, i, &d, &value);
              scale = coeff * d;
            }
            fused[at] = std::fma(scale, value, fused[at]);
            const float product = scale * value;
            separate[at] = separate[at] + product;
          }
          tol[at] = AxpyTolerance(magnitude, m, ref[at]);
        }
      }
      ForEachTarget([&](const Target& target) {
        CAPTURE(target.name);
        CAPTURE(TensorTypeName(type));
        CAPTURE(c.cols);
        CAPTURE(c.count);
        CAPTURE(c.n);
        std::vector<float> y = y0;
        AxpyRows(type, rows.data(), c.count, c.cols, a.data(), a_stride, c.n, y.data(), y_stride);
        // Each token on its own (the one-token kernels).
        std::vector<float> single = y0;
        for (size_t t = 0; t < c.n; ++t) {
          AxpyRows(type, rows.data(), c.count, c.cols, a.data() + t * a_stride, a_stride, 1,
                   single.data() + t * y_stride, y_stride);
        }
        const Chain chain = ChainFor(target.name);
        for (size_t t = 0; t < c.n; ++t) {
          for (size_t i = 0; i < y_stride; ++i) {
            CAPTURE(t);
            CAPTURE(i);
            const size_t at = t * y_stride + i;
            if (i >= c.cols) {
              REQUIRE(y[at] == 777.0f);
              REQUIRE(single[at] == 777.0f);
              continue;
            }
            CAPTURE(y[at]);
            CAPTURE(single[at]);
            CAPTURE(ref[at]);
            REQUIRE(std::fabs(double(y[at]) - ref[at]) <= tol[at]);
            REQUIRE(std::memcmp(&y[at], &single[at], sizeof(float)) == 0);
            if (chain == Chain::kFused) REQUIRE(std::memcmp(&y[at], &fused[at], 4) == 0);
            if (chain == Chain::kSeparate) REQUIRE(std::memcmp(&y[at], &separate[at], 4) == 0);
          }
        }
      });
    }
  }
}

// The ops layer's threads each take a window of the rows' columns: the
// windows together must give AxpyRows' bits over the whole rows, for every
// layout (a Q4_0S row's scales and nibbles lie apart, so its window is not a
// pointer into it) and both the one-token and the batch kernels.
TEST_CASE("AxpyRowColumns over windows gives the bits of AxpyRows over whole rows") {
  std::mt19937 rng(31);
  for (TensorType type : kTypes) {
    const size_t cols = 640, count = 41;  // 20 blocks
    const Pool pool = MakePool(type, cols, 9, false, rng);
    const std::vector<const uint8_t*> rows = Pick(pool, pool.rows.size(), count, rng);
    const std::pair<size_t, size_t> windows[] = {{0, 64}, {64, 320}, {384, 256}};
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (size_t n : {size_t{1}, size_t{3}}) {
      std::vector<float> a(n * count), y0(n * cols);
      for (float& v : a) v = normal(rng);
      for (float& v : y0) v = normal(rng);
      std::vector<float> ref_whole = y0, ref_parts = y0;
      AxpyRowsReference(type, rows.data(), count, cols, a.data(), count, n, ref_whole.data(), cols);
      for (const auto& [first, width] : windows) {
        AxpyRowColumnsReference(type, rows.data(), count, cols, first, width, a.data(), count, n,
                                ref_parts.data() + first, cols);
      }
      CHECK(ref_parts == ref_whole);
      ForEachTarget([&](const Target& target) {
        CAPTURE(target.name);
        CAPTURE(TensorTypeName(type));
        CAPTURE(n);
        std::vector<float> whole = y0, parts = y0;
        AxpyRows(type, rows.data(), count, cols, a.data(), count, n, whole.data(), cols);
        for (const auto& [first, width] : windows) {
          AxpyRowColumns(type, rows.data(), count, cols, first, width, a.data(), count, n,
                         parts.data() + first, cols);
        }
        REQUIRE(std::memcmp(whole.data(), parts.data(), whole.size() * sizeof(float)) == 0);
        for (size_t i = 0; i < whole.size(); ++i) {
          CAPTURE(i);
          REQUIRE(std::fabs(double(whole[i]) - ref_whole[i]) <=
                  1e-3 * (1 + std::fabs(ref_whole[i])));
        }
      });
    }
    // Windows that are not whole blocks inside the rows.
    float a = 1.0f, y[640] = {};
    const size_t block = IsQuantized(type) ? 32 : 1;
    CHECK_THROWS_AS(AxpyRowColumns(type, rows.data(), 1, cols, 0, 0, &a, 1, 1, y, cols),
                    std::invalid_argument);
    CHECK_THROWS_AS(
        AxpyRowColumns(type, rows.data(), 1, cols, cols - block, 2 * block, &a, 1, 1, y, cols),
        std::invalid_argument);
    if (block > 1) {
      CHECK_THROWS_AS(AxpyRowColumns(type, rows.data(), 1, cols, 16, 32, &a, 1, 1, y, cols),
                      std::invalid_argument);
    }
  }
}

// A record's parts summed as one row (parts = 2, the dip layout's up and
// gate): the bits of one call per part, each part a row of its own (Q4_0S
// keeps each part's scales in front of that part), the window split across
// threads included; the reference agrees.
TEST_CASE("AxpyRowColumns over records of two parts gives the bits of a call per part") {
  std::mt19937 rng(43);
  for (TensorType type : kTypes) {
    const size_t part_cols = 320, parts = 2, count = 23;  // 10 blocks per part
    const size_t part_bytes = RowBytes(type, part_cols);
    std::vector<uint8_t> storage(count * parts * part_bytes);
    std::vector<const uint8_t*> records(count), second(count);
    for (size_t k = 0; k < count; ++k) {
      for (size_t p = 0; p < parts; ++p) {
        FillRow(type, part_cols, (k + p) % 2 == 1, rng,
                storage.data() + (k * parts + p) * part_bytes);
      }
      records[k] = storage.data() + k * parts * part_bytes;
      second[k] = records[k] + part_bytes;
    }
    const size_t cols = parts * part_cols;
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (size_t n : {size_t{1}, size_t{3}}) {
      std::vector<float> a(n * count), y0(n * cols);
      for (float& v : a) v = normal(rng);
      for (float& v : y0) v = normal(rng);
      std::vector<float> ref = y0, per_part_ref = y0;
      AxpyRowColumnsReference(type, records.data(), count, cols, 0, cols, a.data(), count, n,
                              ref.data(), cols, parts);
      AxpyRowsReference(type, records.data(), count, part_cols, a.data(), count, n,
                        per_part_ref.data(), cols);
      AxpyRowsReference(type, second.data(), count, part_cols, a.data(), count, n,
                        per_part_ref.data() + part_cols, cols);
      CHECK(ref == per_part_ref);
      ForEachTarget([&](const Target& target) {
        CAPTURE(target.name);
        CAPTURE(TensorTypeName(type));
        CAPTURE(n);
        std::vector<float> whole = y0, windows = y0, per_part = y0;
        AxpyRowColumns(type, records.data(), count, cols, 0, cols, a.data(), count, n, whole.data(),
                       cols, parts);
        // Windows as threads take them, one across the parts' border.
        for (const auto& [first, width] :
             {std::pair<size_t, size_t>{0, 256}, std::pair<size_t, size_t>{256, 128},
              std::pair<size_t, size_t>{384, 256}}) {
          AxpyRowColumns(type, records.data(), count, cols, first, width, a.data(), count, n,
                         windows.data() + first, cols, parts);
        }
        AxpyRows(type, records.data(), count, part_cols, a.data(), count, n, per_part.data(), cols);
        AxpyRows(type, second.data(), count, part_cols, a.data(), count, n,
                 per_part.data() + part_cols, cols);
        REQUIRE(std::memcmp(whole.data(), per_part.data(), whole.size() * sizeof(float)) == 0);
        REQUIRE(std::memcmp(windows.data(), per_part.data(), whole.size() * sizeof(float)) == 0);
        for (size_t i = 0; i < whole.size(); ++i) {
          CAPTURE(i);
          REQUIRE(std::fabs(double(whole[i]) - ref[i]) <= 1e-3 * (1 + std::fabs(ref[i])));
        }
      });
    }
    float a = 1.0f, y[640] = {};
    CHECK_THROWS_AS(AxpyRowColumns(type, records.data(), 1, cols, 0, cols, &a, 1, 1, y, cols, 3),
                    std::invalid_argument);
    CHECK_THROWS_AS(AxpyRowColumns(type, records.data(), 1, cols, 0, cols, &a, 1, 1, y, cols, 0),
                    std::invalid_argument);
  }
}

TEST_CASE("AxpyRows spreads NaN from a row that a token uses") {
  // The other side of the skip rule: a used poisoned row must show.
  std::mt19937 rng(5);
  for (TensorType type : kTypes) {
    const size_t cols = 64;
    const Pool pool = MakePool(type, cols, 3, true, rng);
    const std::vector<const uint8_t*> rows = {pool.rows[0], pool.rows[2], pool.rows[1]};
    const float a[6] = {0.5f, 0.0f, 1.0f, 0.25f, 2.0f, -1.0f};  // token 1 uses the poison
    ForEachTarget([&](const Target& target) {
      CAPTURE(target.name);
      CAPTURE(TensorTypeName(type));
      std::vector<float> y(2 * cols, 1.0f);
      AxpyRows(type, rows.data(), 3, cols, a, 3, 2, y.data(), cols);
      for (size_t i = 0; i < cols; ++i) {
        REQUIRE(std::isfinite(y[i]));
        REQUIRE(std::isnan(y[cols + i]));
      }
    });
  }
}

TEST_CASE("Prefetches lead by about kLeadBytes of each row, one to kMaxLeadGroups groups") {
  CHECK(LeadGroups(1152) == 1);  // a 2048-wide Q4_0 row
  CHECK(LeadGroups(kLeadBytes) == 1);
  CHECK(LeadGroups(1 << 20) == 1);
  CHECK(LeadGroups(432) == 2);  // a 768-wide Q4_0 row
  CHECK(LeadGroups(kLeadBytes / 3) == 3);
  CHECK(LeadGroups(18) == kMaxLeadGroups);  // one Q4_0 block
  CHECK(LeadGroups(0) == kMaxLeadGroups);
}

TEST_CASE("Gather kernels reject what they cannot do") {
  std::vector<uint8_t> row(1024);
  const uint8_t* rows[1] = {row.data()};
  float out[4] = {};
  std::vector<float> x(64, 1.0f);
  GemvInput input;
  input.Prepare(TensorType::kQ8_0, x.data(), 64);
  CHECK_FALSE(GatherSupports(TensorType::kQ4_K));
  CHECK_THROWS_AS(DotRows(TensorType::kQ4_K, rows, 1, 256, &input, 1, out, 1),
                  std::invalid_argument);
  // Input prepared for another type or size.
  CHECK_THROWS_AS(DotRows(TensorType::kQ4_0, rows, 1, 64, &input, 1, out, 1),
                  std::invalid_argument);
  CHECK_THROWS_AS(DotRows(TensorType::kQ8_0, rows, 1, 32, &input, 1, out, 1),
                  std::invalid_argument);
  // Not a whole number of blocks, an output stride narrower than a row.
  CHECK_THROWS_AS(AxpyRows(TensorType::kQ8_0, rows, 1, 48, out, 1, 1, x.data(), 48),
                  std::invalid_argument);
  CHECK_THROWS_AS(AxpyRows(TensorType::kF32, rows, 1, 16, out, 1, 2, x.data(), 8),
                  std::invalid_argument);
  // Nothing to do is fine, whatever the pointers.
  DotRows(TensorType::kQ8_0, nullptr, 0, 64, &input, 1, nullptr, 0);
  AxpyRows(TensorType::kQ8_0, nullptr, 0, 64, nullptr, 0, 1, nullptr, 0);
}

}  // namespace sparrow::simd
