#include "simd/quantize.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "base/error.h"
#include "base/tensor_type.h"
#include "simd/quant_blocks.h"
#include "simd/targets.h"

namespace sparrow::simd {
namespace {

constexpr TensorType kAllTypes[] = {TensorType::kF32,  TensorType::kF16,
                                    TensorType::kBF16, TensorType::kQ8_0,
                                    TensorType::kQ4_0, TensorType::kQ4_K,
                                    TensorType::kQ6_K, TensorType::kQ4_0S};

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

size_t RowBytes(TensorType type, size_t n) {
  uint64_t bytes = 0;
  REQUIRE(TensorTypeBytes(type, n, &bytes));
  return static_cast<size_t>(bytes);
}

// Half to float straight from the IEEE definition, independent of the code
// under test.
double HalfValue(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 31, mant = h & 1023;
  double v;
  if (exp == 0) {
    v = std::ldexp(mant, -24);
  } else if (exp == 31) {
    v = mant == 0 ? std::numeric_limits<double>::infinity()
                  : std::numeric_limits<double>::quiet_NaN();
  } else {
    v = std::ldexp(1024 + mant, exp - 25);
  }
  return sign ? -v : v;
}

void PutU16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

}  // namespace

TEST_CASE("block structs match the GGUF type table") {
  CHECK(GetTensorTypeInfo(TensorType::kQ8_0).block_bytes == sizeof(BlockQ8_0));
  CHECK(GetTensorTypeInfo(TensorType::kQ8_0).block_elems == kQ8_0Elems);
  CHECK(GetTensorTypeInfo(TensorType::kQ4_0).block_bytes == sizeof(BlockQ4_0));
  CHECK(GetTensorTypeInfo(TensorType::kQ4_0).block_elems == kQ4_0Elems);
  CHECK(GetTensorTypeInfo(TensorType::kQ4_K).block_bytes == sizeof(BlockQ4_K));
  CHECK(GetTensorTypeInfo(TensorType::kQ4_K).block_elems == kQKElems);
  CHECK(GetTensorTypeInfo(TensorType::kQ6_K).block_bytes == sizeof(BlockQ6_K));
  CHECK(GetTensorTypeInfo(TensorType::kQ6_K).block_elems == kQKElems);
}

TEST_CASE("CanConvert and row size checks") {
  for (TensorType t : kAllTypes) CHECK(CanConvert(t));
  CHECK_FALSE(CanConvert(TensorType::kQ4_1));
  CHECK_FALSE(CanConvert(TensorType::kQ5_K));
  float buf[64] = {};
  uint8_t out[256];
  CHECK_THROWS_AS(DequantizeRow(TensorType::kQ4_0, out, 31, buf), InputError);
  CHECK_THROWS_AS(DequantizeRowReference(TensorType::kQ6_K, out, 32, buf), InputError);
  CHECK_THROWS_AS(QuantizeRow(TensorType::kQ8_0, buf, 48, out), InputError);
  CHECK_THROWS_AS(QuantizeRow(TensorType::kIQ2_XS, buf, 256, out), InputError);
}

TEST_CASE("F16ToF32 matches the IEEE definition for all 65536 values") {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = F16ToF32(static_cast<uint16_t>(h));
    const double want = HalfValue(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      REQUIRE(std::isnan(f));
      // The payload's top bits survive (quiet NaNs stay quiet).
      REQUIRE(((Bits(f) >> 13) & 0x3ff) == (h & 0x3ff));
    } else {
      REQUIRE(static_cast<double>(f) == want);
      REQUIRE(std::signbit(f) == ((h & 0x8000) != 0));
    }
  }
}

TEST_CASE("F32ToF16: exact values, round trips, ties, overflow, NaN") {
  CHECK(F32ToF16(1.0f) == 0x3c00);
  CHECK(F32ToF16(-2.0f) == 0xc000);
  CHECK(F32ToF16(0.0f) == 0x0000);
  CHECK(F32ToF16(-0.0f) == 0x8000);
  CHECK(F32ToF16(65504.0f) == 0x7bff);
  CHECK(F32ToF16(65519.99f) == 0x7bff);
  CHECK(F32ToF16(65520.0f) == 0x7c00);  // tie between 65504 and 2^16: even
  CHECK(F32ToF16(1e10f) == 0x7c00);
  CHECK(F32ToF16(-std::numeric_limits<float>::infinity()) == 0xfc00);
  CHECK(F32ToF16(std::ldexp(1.0f, -14)) == 0x0400);  // smallest normal
  CHECK(F32ToF16(std::ldexp(1.0f, -24)) == 0x0001);  // smallest subnormal
  CHECK(F32ToF16(std::ldexp(1.0f, -25)) == 0x0000);  // tie: to even (zero)
  CHECK(F32ToF16(std::ldexp(1.5f, -25)) == 0x0001);
  CHECK(F32ToF16(std::ldexp(3.0f, -25)) == 0x0002);  // 1.5 ulp: tie to even
  CHECK(F32ToF16(std::ldexp(5.0f, -25)) == 0x0002);  // 2.5 ulp: tie to even
  CHECK(F32ToF16(std::ldexp(1023.0f, -24)) == 0x03ff);
  CHECK(F32ToF16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);      // tie: even
  CHECK(F32ToF16(1.0f + std::ldexp(3.0f, -11)) == 0x3c02);      // tie: even
  CHECK(F32ToF16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)) == 0x3c01);
  CHECK(F32ToF16(2047.0f / 1024.0f * 32768.0f) == 0x7bff);
  const uint16_t nan = F32ToF16(std::numeric_limits<float>::quiet_NaN());
  CHECK((nan & 0x7c00) == 0x7c00);
  CHECK((nan & 0x03ff) != 0);
  CHECK((F32ToF16(FromBits(0x7f800001u)) & 0x3ff) != 0);  // signalling NaN stays NaN
  // Every non-NaN half survives a round trip.
  for (uint32_t h = 0; h < 65536; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0) continue;
    REQUIRE(F32ToF16(F16ToF32(static_cast<uint16_t>(h))) == h);
  }
}

TEST_CASE("F32ToF16 picks the nearest half, ties to even, for random floats") {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits(0, 0xffffffffu);
  for (int i = 0; i < 200000; ++i) {
    // Exponents around the half range, including subnormals and overflow.
    uint32_t u = bits(rng);
    u = (u & 0x807fffffu) | ((96 + (u >> 23) % 50) << 23);
    const float f = FromBits(u);
    const uint16_t h = F32ToF16(f);
    const double got = HalfValue(h);
    const double x = f;
    if (std::fabs(x) >= 65520.0) {
      REQUIRE(std::isinf(got));
      continue;
    }
    REQUIRE(std::isfinite(got));
    // Neighbours of h (same sign) must not be closer.
    const uint16_t mag = h & 0x7fff;
    const double err = std::fabs(got - x);
    if (mag < 0x7bff) REQUIRE(std::fabs(HalfValue(static_cast<uint16_t>(h + 1)) - x) >= err);
    if (mag > 0) REQUIRE(std::fabs(HalfValue(static_cast<uint16_t>(h - 1)) - x) >= err);
    if (mag == 0 && x != 0) {
      REQUIRE(std::fabs(HalfValue(static_cast<uint16_t>((h ^ 0x8000) + 1)) - x) >= err);
    }
    for (int step : {-1, 1}) {  // on an exact tie the even one wins
      const uint16_t other = static_cast<uint16_t>(h + step);
      if ((mag == 0 && step < 0) || (other & 0x7fff) >= 0x7c00) continue;
      if (std::fabs(HalfValue(other) - x) == err) REQUIRE((h & 1) == 0);
    }
  }
}

TEST_CASE("BF16 conversions: exact values, ties to even, subnormals, NaN") {
  CHECK(F32ToBF16(1.0f) == 0x3f80);
  CHECK(BF16ToF32(0x3f80) == 1.0f);
  CHECK(BF16ToF32(0xc040) == -3.0f);
  CHECK(F32ToBF16(FromBits(0x3f808000u)) == 0x3f80);  // tie: even
  CHECK(F32ToBF16(FromBits(0x3f818000u)) == 0x3f82);  // tie: even
  CHECK(F32ToBF16(FromBits(0x3f808001u)) == 0x3f81);
  CHECK(F32ToBF16(FromBits(0x3f807fffu)) == 0x3f80);
  CHECK(F32ToBF16(FromBits(0x00010000u)) == 0x0001);  // subnormal kept
  CHECK(Bits(BF16ToF32(0x0001)) == 0x00010000u);
  CHECK(F32ToBF16(FromBits(0x00018000u)) == 0x0002);  // subnormal tie: even
  CHECK(F32ToBF16(FromBits(0x7f7fffffu)) == 0x7f80);  // rounds up to inf
  CHECK(F32ToBF16(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK(F32ToBF16(-std::numeric_limits<float>::infinity()) == 0xff80);
  CHECK(F32ToBF16(-0.0f) == 0x8000);
  const uint16_t nan = F32ToBF16(FromBits(0x7f800001u));  // payload below bit 16
  CHECK((nan & 0x7f80) == 0x7f80);
  CHECK((nan & 0x007f) != 0);
  CHECK(std::isnan(BF16ToF32(nan)));
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = BF16ToF32(static_cast<uint16_t>(b));
    REQUIRE(Bits(f) == b << 16);
    if (!std::isnan(f)) REQUIRE(F32ToBF16(f) == b);
  }
}

TEST_CASE("Q8_0 hand-built block dequantizes as documented") {
  uint8_t block[34];
  PutU16(block, 0x3800);  // 0.5
  for (int i = 0; i < 32; ++i) block[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(3 * i - 50));
  float ref[32], fast[32];
  DequantizeRowReference(TensorType::kQ8_0, block, 32, ref);
  for (int i = 0; i < 32; ++i) CHECK(ref[i] == 0.5f * (3 * i - 50));
  ForEachTarget([&](const Target& t) {
    CAPTURE(t.name);
    DequantizeRow(TensorType::kQ8_0, block, 32, fast);
    for (int i = 0; i < 32; ++i) CHECK(fast[i] == ref[i]);
  });
}

TEST_CASE("Q4_0 hand-built block dequantizes as documented") {
  // Byte j: low nibble j (element j), high nibble 15 - j (element j + 16).
  uint8_t block[2 * 18];
  for (int b = 0; b < 2; ++b) {
    PutU16(block + 18 * b, b == 0 ? 0x4000 : 0xbc00);  // 2.0, -1.0
    for (int j = 0; j < 16; ++j) block[18 * b + 2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  }
  float ref[64], fast[64];
  DequantizeRowReference(TensorType::kQ4_0, block, 64, ref);
  for (int b = 0; b < 2; ++b) {
    const float d = b == 0 ? 2.0f : -1.0f;
    for (int j = 0; j < 16; ++j) {
      CHECK(ref[32 * b + j] == d * (j - 8));
      CHECK(ref[32 * b + j + 16] == d * (15 - j - 8));
    }
  }
  ForEachTarget([&](const Target& t) {
    CAPTURE(t.name);
    DequantizeRow(TensorType::kQ4_0, block, 64, fast);
    for (int i = 0; i < 64; ++i) CHECK(fast[i] == ref[i]);
  });
}

TEST_CASE("Q4_K hand-built block dequantizes as documented") {
  // Scales and mins chosen to use all 6 bits (sub-blocks 4..7 split theirs
  // between the low nibbles of bytes 8..11 and the top bits of bytes 0..7).
  const int sc[8] = {1, 2, 3, 63, 17, 33, 49, 60};
  const int mn[8] = {0, 5, 10, 63, 16, 32, 48, 7};
  uint8_t block[144] = {};
  PutU16(block, 0x3c00);      // d = 1
  PutU16(block + 2, 0x3800);  // dmin = 0.5
  uint8_t* packed = block + 4;
  for (int j = 0; j < 4; ++j) {
    packed[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    packed[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
    packed[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
  // Byte j of group g: low nibble j % 16 (element 64g + j), high nibble
  // (j + g) % 16 (element 64g + 32 + j).
  for (int g = 0; g < 4; ++g) {
    for (int j = 0; j < 32; ++j) {
      block[16 + 32 * g + j] = static_cast<uint8_t>((j % 16) | (((j + g) % 16) << 4));
    }
  }
  float ref[256], fast[256];
  DequantizeRowReference(TensorType::kQ4_K, block, 256, ref);
  for (int g = 0; g < 4; ++g) {
    for (int j = 0; j < 32; ++j) {
      CHECK(ref[64 * g + j] == sc[2 * g] * (j % 16) - 0.5f * mn[2 * g]);
      CHECK(ref[64 * g + 32 + j] == sc[2 * g + 1] * ((j + g) % 16) - 0.5f * mn[2 * g + 1]);
    }
  }
  ForEachTarget([&](const Target& t) {
    CAPTURE(t.name);
    DequantizeRow(TensorType::kQ4_K, block, 256, fast);
    for (int i = 0; i < 256; ++i) CHECK(fast[i] == ref[i]);
  });
}

TEST_CASE("Q6_K hand-built block dequantizes as documented") {
  // Element e has 6-bit value q(e) = (7e + 3) % 64 and group scale g - 8.
  auto q = [](int e) { return (7 * e + 3) % 64; };
  uint8_t block[210] = {};
  uint8_t* ql = block;
  uint8_t* qh = block + 128;
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      const int e = 128 * h + l;
      ql[64 * h + l] = static_cast<uint8_t>((q(e) & 15) | ((q(e + 64) & 15) << 4));
      ql[64 * h + 32 + l] = static_cast<uint8_t>((q(e + 32) & 15) | ((q(e + 96) & 15) << 4));
      qh[32 * h + l] = static_cast<uint8_t>((q(e) >> 4) | ((q(e + 32) >> 4) << 2) |
                                            ((q(e + 64) >> 4) << 4) | ((q(e + 96) >> 4) << 6));
    }
  }
  for (int g = 0; g < 16; ++g) block[192 + g] = static_cast<uint8_t>(static_cast<int8_t>(g - 8));
  PutU16(block + 208, 0x3400);  // 0.25
  float ref[256], fast[256];
  DequantizeRowReference(TensorType::kQ6_K, block, 256, ref);
  for (int e = 0; e < 256; ++e) {
    CHECK(ref[e] == 0.25f * (e / 16 - 8) * (q(e) - 32));
  }
  ForEachTarget([&](const Target& t) {
    CAPTURE(t.name);
    DequantizeRow(TensorType::kQ6_K, block, 256, fast);
    for (int i = 0; i < 256; ++i) CHECK(fast[i] == ref[i]);
  });
}

TEST_CASE("Q4_0S holds Q4_0's blocks with a row's scales first") {
  std::mt19937 rng(21);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (size_t blocks : {1, 2, 5, 70}) {
    const size_t n = 32 * blocks;
    std::vector<float> x(n);
    for (float& v : x) v = normal(rng);
    std::vector<uint8_t> q4(RowBytes(TensorType::kQ4_0, n)), q4s(RowBytes(TensorType::kQ4_0S, n));
    REQUIRE(q4.size() == q4s.size());
    QuantizeRow(TensorType::kQ4_0, x.data(), n, q4.data());
    QuantizeRow(TensorType::kQ4_0S, x.data(), n, q4s.data());
    for (size_t b = 0; b < blocks; ++b) {
      CAPTURE(b);
      REQUIRE(std::memcmp(&q4s[2 * b], &q4[18 * b], 2) == 0);
      REQUIRE(std::memcmp(&q4s[2 * blocks + 16 * b], &q4[18 * b + 2], 16) == 0);
    }
    std::vector<float> a(n), b(n);
    DequantizeRowReference(TensorType::kQ4_0, q4.data(), n, a.data());
    DequantizeRowReference(TensorType::kQ4_0S, q4s.data(), n, b.data());
    for (size_t i = 0; i < n; ++i) REQUIRE(Bits(a[i]) == Bits(b[i]));
  }
}

TEST_CASE("DequantizeRow equals the reference bit for bit on random bytes") {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> byte(0, 255);
  for (TensorType type : kAllTypes) {
    const size_t block = GetTensorTypeInfo(type).block_elems;
    for (size_t blocks : {1, 2, 3, 7, 70}) {
      const size_t n = block * blocks;
      std::vector<uint8_t> data(RowBytes(type, n));
      for (uint8_t& v : data) v = static_cast<uint8_t>(byte(rng));
      std::vector<float> ref(n), fast(n + 1);
      DequantizeRowReference(type, data.data(), n, ref.data());
      ForEachTarget([&](const Target& t) {
        CAPTURE(t.name);
        CAPTURE(TensorTypeName(type));
        CAPTURE(n);
        fast[n] = 12345.0f;  // guard: nothing written past n
        DequantizeRow(type, data.data(), n, fast.data());
        for (size_t i = 0; i < n; ++i) {
          if (std::isnan(ref[i])) {
            REQUIRE(std::isnan(fast[i]));
          } else {
            REQUIRE(Bits(fast[i]) == Bits(ref[i]));
          }
        }
        REQUIRE(fast[n] == 12345.0f);
      });
    }
  }
}

TEST_CASE("F32ToF16Row is F32ToF16 of each value, on every target") {
  std::mt19937 rng(13);
  std::uniform_int_distribution<uint32_t> any;
  std::vector<float> x(1000);
  for (float& v : x) v = FromBits(any(rng));  // NaNs, infinities, subnormals
  // Values near half's range: ties, subnormal halves, overflow.
  std::uniform_real_distribution<float> near(-70000.0f, 70000.0f);
  for (size_t i = 0; i < 300; ++i) x[i] = near(rng) * (i % 3 == 0 ? 1e-9f : 1.0f);
  const uint32_t specials[] = {0x3f801000u, 0x3f803000u, 0x33000000u, 0x387fe000u, 0x477ff000u,
                               0x477fefffu, 0x7f800001u, 0x80000000u};
  for (size_t i = 0; i < 8; ++i) x[300 + i] = FromBits(specials[i]);
  for (size_t n : {size_t{1}, size_t{7}, size_t{16}, size_t{33}, size_t{1000}}) {
    std::vector<uint16_t> got(n + 1);
    ForEachTarget([&](const Target& t) {
      CAPTURE(t.name);
      CAPTURE(n);
      got[n] = 0xABCD;
      F32ToF16Row(x.data() + (n == 1000 ? 0 : 300), n, got.data());
      for (size_t i = 0; i < n; ++i) {
        const float v = x[(n == 1000 ? 0 : 300) + i];
        CAPTURE(Bits(v));
        const uint16_t want = F32ToF16(v);
        if (std::isnan(v)) {
          REQUIRE(std::isnan(F16ToF32(got[i])));
        } else {
          REQUIRE(got[i] == want);
        }
      }
      REQUIRE(got[n] == 0xABCD);
    });
  }
}

TEST_CASE("DequantizeRowToBF16 is F32ToBF16 of the reference values, on every target") {
  std::mt19937 rng(12);
  std::uniform_int_distribution<int> byte(0, 255);
  for (TensorType type : kAllTypes) {
    const size_t block = GetTensorTypeInfo(type).block_elems;
    // 1 to 2100 blocks: vector tails and more than one 1024-element chunk.
    for (size_t blocks : {1, 3, 7, 70, 2100}) {
      const size_t n = block * blocks;
      if (n > 20000) continue;
      std::vector<uint8_t> data(RowBytes(type, n));
      for (uint8_t& v : data) v = static_cast<uint8_t>(byte(rng));
      if (type == TensorType::kF32) {  // ties, NaN, infinities, subnormals
        const uint32_t specials[] = {0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x00018000u,
                                     0x7f7fffffu, 0x7f800001u, 0xff800000u, 0x80000000u};
        for (size_t i = 0; i < std::min<size_t>(n, 8); ++i) {
          std::memcpy(data.data() + 4 * i, &specials[i], 4);
        }
      }
      std::vector<float> ref(n);
      DequantizeRowReference(type, data.data(), n, ref.data());
      std::vector<uint16_t> got(n + 1);
      // With the CPU's bf16 instruction (x86 AVX512_BF16) inputs below the
      // smallest normal float may become zero of the same sign; with it
      // hidden, every value is F32ToBF16's.
      for (bool hidden : {false, true}) {
        HideCpuExtensionsForTest(hidden);
        ForEachTarget([&](const Target& t) {
          CAPTURE(t.name);
          CAPTURE(TensorTypeName(type));
          CAPTURE(n);
          CAPTURE(hidden);
          got[n] = 0xABCD;  // guard: nothing written past n
          DequantizeRowToBF16(type, data.data(), n, got.data());
          for (size_t i = 0; i < n; ++i) {
            const uint16_t want = F32ToBF16(ref[i]);
            const bool subnormal = ref[i] != 0.0f && std::abs(ref[i]) < FLT_MIN;
            const uint16_t flushed = std::signbit(ref[i]) ? 0x8000 : 0x0000;
            if (!hidden && subnormal && got[i] == flushed) continue;
            REQUIRE(got[i] == want);
          }
          REQUIRE(got[n] == 0xABCD);
        });
      }
      HideCpuExtensionsForTest(false);
    }
  }
}

namespace {

std::vector<float> Gaussian(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

std::vector<float> RoundTrip(TensorType type, const std::vector<float>& x) {
  std::vector<uint8_t> q(RowBytes(type, x.size()) + 1, 0xA5);
  QuantizeRow(type, x.data(), x.size(), q.data());
  CHECK(q.back() == 0xA5);  // exactly the type's byte size written
  std::vector<float> y(x.size());
  DequantizeRowReference(type, q.data(), x.size(), y.data());
  return y;
}

double RelativeRmse(const std::vector<float>& x, const std::vector<float>& y) {
  double e2 = 0, x2 = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    e2 += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    x2 += double(x[i]) * x[i];
  }
  return std::sqrt(e2 / x2);
}

}  // namespace

TEST_CASE("F16/BF16/F32 round trips within half an ulp") {
  const std::vector<float> x = Gaussian(1000, 1, 3.0f);
  const std::vector<float> f32 = RoundTrip(TensorType::kF32, x);
  const std::vector<float> f16 = RoundTrip(TensorType::kF16, x);
  const std::vector<float> bf16 = RoundTrip(TensorType::kBF16, x);
  for (size_t i = 0; i < x.size(); ++i) {
    CHECK(f32[i] == x[i]);
    if (std::fabs(x[i]) >= 6.2e-5f) {  // normal halves
      CHECK(std::fabs(f16[i] - x[i]) <= std::ldexp(std::fabs(x[i]), -11));
    } else {
      CHECK(std::fabs(f16[i] - x[i]) <= std::ldexp(1.0f, -25));
    }
    CHECK(std::fabs(bf16[i] - x[i]) <= std::ldexp(std::fabs(x[i]), -8));
  }
}

TEST_CASE("Q8_0 and Q4_0 round trips stay within the block step") {
  std::vector<float> x = Gaussian(32 * 64, 2, 0.02f);
  for (int i = 0; i < 32; ++i) x[i] = 0.0f;  // an all-zero block
  x[40] = 5.0f;                             // an outlier block
  const std::vector<float> q8 = RoundTrip(TensorType::kQ8_0, x);
  const std::vector<float> q4 = RoundTrip(TensorType::kQ4_0, x);
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0;
    for (size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[32 * b + i]));
    for (size_t i = 32 * b; i < 32 * b + 32; ++i) {
      // Q8_0: half a step of amax / 127 plus the f16 rounding of the step.
      CHECK(std::fabs(q8[i] - x[i]) <= amax / 127 * (0.5f + 128 * 0x1p-11f) + 1e-12f);
      // Q4_0: the extreme maps to -8 steps, so the opposite side can clip by
      // one step (amax / 8); everything else is within half a step.
      CHECK(std::fabs(q4[i] - x[i]) <= amax / 8 * (1.0f + 16 * 0x1p-11f) + 1e-12f);
    }
  }
  for (int i = 0; i < 32; ++i) {
    CHECK(q8[i] == 0.0f);
    CHECK(q4[i] == 0.0f);
  }
  // Gaussian blocks only (not the zero and outlier blocks): about step /
  // sqrt(12) with step = amax / 127 (Q8_0) or amax / 8 (Q4_0), amax ~ 2.5 sigma.
  const std::vector<float> xg(x.begin() + 64, x.end());
  const std::vector<float> q8g(q8.begin() + 64, q8.end());
  const std::vector<float> q4g(q4.begin() + 64, q4.end());
  CHECK(RelativeRmse(xg, q8g) < 0.008);
  CHECK(RelativeRmse(xg, q4g) < 0.12);
}

TEST_CASE("Q4_K and Q6_K round trips: small error, better than a naive fit") {
  const std::vector<float> x = Gaussian(256 * 32, 3, 0.05f);
  const double e4 = RelativeRmse(x, RoundTrip(TensorType::kQ4_K, x));
  const double e6 = RelativeRmse(x, RoundTrip(TensorType::kQ6_K, x));
  // A naive 4-bit min/max fit per 32 (no scale quantization) as a yardstick:
  // the search with 6-bit scales must still do at least as well.
  std::vector<float> naive(x.size());
  for (size_t s = 0; s < x.size() / 32; ++s) {
    float lo = 0, hi = x[32 * s];
    for (size_t i = 32 * s; i < 32 * s + 32; ++i) {
      lo = std::min(lo, x[i]);
      hi = std::max(hi, x[i]);
    }
    const float step = (hi - lo) / 15;
    for (size_t i = 32 * s; i < 32 * s + 32; ++i) {
      naive[i] = lo + step * std::round((x[i] - lo) / step);
    }
  }
  const double en = RelativeRmse(x, naive);
  MESSAGE("relative RMSE: q4_K " << e4 << " (naive 4-bit " << en << "), q6_K " << e6);
  CHECK(e4 < en);
  CHECK(e4 < 0.10);
  CHECK(e6 < 0.025);
  // Constant and zero super-blocks come back exactly or nearly so.
  std::vector<float> flat(512, 0.0f);
  for (size_t i = 256; i < 512; ++i) flat[i] = -0.75f;
  for (TensorType type : {TensorType::kQ4_K, TensorType::kQ6_K}) {
    const std::vector<float> y = RoundTrip(type, flat);
    for (size_t i = 0; i < 256; ++i) CHECK(y[i] == 0.0f);
    for (size_t i = 256; i < 512; ++i) CHECK(std::fabs(y[i] + 0.75f) <= 0.75f * 0.01f);
  }
}

TEST_CASE("Q4_K/Q6_K writers fill every field of the layout") {
  // Mixed magnitudes so that the 6-bit scales use their high bits and Q6_K's
  // quants use all four 2-bit fields of qh.
  std::vector<float> x = Gaussian(256, 4, 1.0f);
  for (size_t i = 0; i < 256; ++i) x[i] *= 0.05f + static_cast<float>(i / 32) * 0.4f;
  std::vector<uint8_t> q4(144), q6(210);
  QuantizeRow(TensorType::kQ4_K, x.data(), 256, q4.data());
  QuantizeRow(TensorType::kQ6_K, x.data(), 256, q6.data());
  uint8_t sc[8], m[8];
  UnpackQ4KScales(q4.data() + 4, sc, m);
  CHECK(sc[7] > 31);  // the largest sub-block gets the largest scale
  CHECK(sc[0] < sc[7]);
  int qh_or = 0;
  for (int i = 128; i < 192; ++i) qh_or |= q6[i];
  CHECK(qh_or == 0xff);
  std::vector<float> y4(256), y6(256);
  DequantizeRowReference(TensorType::kQ4_K, q4.data(), 256, y4.data());
  DequantizeRowReference(TensorType::kQ6_K, q6.data(), 256, y6.data());
  CHECK(RelativeRmse(x, y4) < 0.10);
  CHECK(RelativeRmse(x, y6) < 0.025);
}

}  // namespace sparrow::simd

namespace sparrow::simd {

TEST_CASE("Q8_0 and Q4_0 writers follow ggml's rounding rules") {
  // Q8_0: d = absmax / 127, q = round half away from zero.
  float x[32] = {};
  x[0] = 127.0f;  // d = 1 exactly
  x[1] = 2.5f;
  x[2] = -2.5f;
  x[3] = 0.49f;
  x[4] = -126.5f;
  uint8_t q8[34];
  QuantizeRow(TensorType::kQ8_0, x, 32, q8);
  CHECK(F16ToF32(static_cast<uint16_t>(q8[0] | (q8[1] << 8))) == 1.0f);
  CHECK(static_cast<int8_t>(q8[2 + 0]) == 127);
  CHECK(static_cast<int8_t>(q8[2 + 1]) == 3);
  CHECK(static_cast<int8_t>(q8[2 + 2]) == -3);
  CHECK(static_cast<int8_t>(q8[2 + 3]) == 0);
  CHECK(static_cast<int8_t>(q8[2 + 4]) == -127);
  // Q4_0: the signed extreme (here -4) maps to -8, d = -4 / -8 = 0.5, and
  // q = floor(x / d + 8.5) clamped to 15 (so +4 clips to 15, i.e. 3.5).
  float y[32];
  for (int j = 0; j < 32; ++j) y[j] = 0.25f * static_cast<float>(j - 16);
  uint8_t q4[18];
  QuantizeRow(TensorType::kQ4_0, y, 32, q4);
  CHECK(F16ToF32(static_cast<uint16_t>(q4[0] | (q4[1] << 8))) == 0.5f);
  for (int j = 0; j < 32; ++j) {
    // x / d + 8.5 = (j - 16) / 2 + 8.5 = j / 2 + 0.5
    const int want = std::min(15, static_cast<int>(std::floor(j / 2.0 + 0.5)));
    const int got = j < 16 ? (q4[2 + j] & 15) : (q4[2 + j - 16] >> 4);
    CAPTURE(j);
    CHECK(got == want);
  }
}

TEST_CASE("LargestBlockScale: the largest |scale| of a quantized row's blocks") {
  // Block 1 holds the row's largest magnitude, -4: Q8_0's scale is 4 / 127
  // (as f16), Q4_0's -4 / -8 = 0.5 exactly (the signed extreme maps to -8).
  std::vector<float> row(96, 0.25f);
  row[40] = -4.0f;
  row[70] = 2.0f;
  for (TensorType type : {TensorType::kQ8_0, TensorType::kQ4_0, TensorType::kQ4_0S}) {
    CAPTURE(TensorTypeName(type));
    uint64_t bytes = 0;
    REQUIRE(TensorTypeBytes(type, row.size(), &bytes));
    std::vector<uint8_t> q(bytes);
    QuantizeRow(type, row.data(), row.size(), q.data());
    const float want = type == TensorType::kQ8_0 ? F16ToF32(F32ToF16(4.0f / 127)) : 0.5f;
    CHECK(LargestBlockScale(type, q.data(), row.size()) == want);
  }
  std::vector<uint8_t> f(96 * 4);
  CHECK(LargestBlockScale(TensorType::kF32, f.data(), 96) == 0.0f);
  // A NaN scale is skipped, an infinite one returned.
  std::vector<uint8_t> q8(3 * sizeof(BlockQ8_0), 0);
  const uint16_t nan = 0x7e00, one = 0x3c00, inf = 0xfc00;
  std::memcpy(q8.data(), &nan, 2);
  std::memcpy(q8.data() + sizeof(BlockQ8_0), &one, 2);
  CHECK(LargestBlockScale(TensorType::kQ8_0, q8.data(), 96) == 1.0f);
  std::memcpy(q8.data() + 2 * sizeof(BlockQ8_0), &inf, 2);
  CHECK(std::isinf(LargestBlockScale(TensorType::kQ8_0, q8.data(), 96)));
}

}  // namespace sparrow::simd
