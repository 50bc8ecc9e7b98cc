// Per-target dequantization (quantize.h: DequantizeRow). Each element comes
// out with exactly the float operations of the scalar reference (one
// multiply, or multiply then subtract), so results match it bit for bit.

#if defined(SPARROW_SIMD_QUANTIZE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SPARROW_SIMD_QUANTIZE_INL_H_
#undef SPARROW_SIMD_QUANTIZE_INL_H_
#else
#define SPARROW_SIMD_QUANTIZE_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include "base/tensor_type.h"
#include "simd/quant_blocks.h"
#include "simd/targets.h"  // CpuHasX86Bf16

HWY_BEFORE_NAMESPACE();
namespace sparrow::simd {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// f16 -> f32 for a vector of halves. Highway 1.0.3 emulates the conversion
// where the CPU has no instruction for it (SSE4, the scalar target) and there
// turns inf and NaN halves into large finite floats; there we convert the
// bits ourselves (exactly, like HalfBitsToFloat). Elsewhere (F16C, Arm) the
// hardware conversion is exact.
template <class DF>
HWY_INLINE hn::Vec<DF> PromoteHalf(DF df,
                                   hn::Vec<hn::Rebind<hwy::float16_t, DF>> h) {
#if HWY_TARGET == HWY_SSE4 || HWY_TARGET == HWY_SSSE3 || \
    HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<uint16_t, DF> du16;
  const auto bits = hn::BitCast(
      di, hn::PromoteTo(hn::RebindToUnsigned<DF>(), hn::BitCast(du16, h)));
  const auto em = hn::And(bits, hn::Set(di, 0x7fff));  // exponent, mantissa
  const auto sign = hn::ShiftLeft<16>(hn::And(bits, hn::Set(di, 0x8000)));
  const auto normal = hn::Add(hn::ShiftLeft<13>(em), hn::Set(di, 112 << 23));
  const auto special = hn::Or(hn::Set(di, 0x7f800000),
                              hn::ShiftLeft<13>(hn::And(em, hn::Set(di, 0x3ff))));
  const auto subnormal =
      hn::BitCast(di, hn::Mul(hn::ConvertTo(df, em), hn::Set(df, 0x1p-24f)));
  const auto magnitude = hn::IfThenElse(
      hn::Lt(em, hn::Set(di, 0x400)), subnormal,
      hn::IfThenElse(hn::Lt(em, hn::Set(di, 0x7c00)), normal, special));
  return hn::BitCast(df, hn::Or(magnitude, sign));
#else
  return hn::PromoteTo(df, h);
#endif
}

template <class DF>
HWY_INLINE hn::Vec<DF> PromoteHalf(DF df,
                                   hn::Vec<hn::Rebind<hwy::bfloat16_t, DF>> h) {
  return hn::PromoteTo(df, h);  // a shift: exact everywhere
}

// F16 or BF16 (T = hwy::float16_t / hwy::bfloat16_t) to f32. Highway's
// promotions are exact, like the scalar conversions.
template <typename T>
HWY_INLINE void DequantizeHalfRow(const uint8_t* HWY_RESTRICT src, size_t n,
                                  float* HWY_RESTRICT dst) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<T, decltype(df)> dh;
  const size_t N = hn::Lanes(df);
  const T* in = reinterpret_cast<const T*>(src);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    hn::StoreU(PromoteHalf(df, hn::LoadU(dh, in + i)), df, dst + i);
  }
  if (i < n) {
    // Through a zeroed stack buffer: never reads or writes past the ends.
    HWY_ALIGN T tail_in[HWY_MAX_BYTES / sizeof(float)] = {};
    HWY_ALIGN float tail_out[HWY_MAX_BYTES / sizeof(float)];
    std::memcpy(tail_in, in + i, (n - i) * sizeof(T));
    hn::Store(PromoteHalf(df, hn::Load(dh, tail_in)), df, tail_out);
    std::memcpy(dst + i, tail_out, (n - i) * sizeof(float));
  }
}

HWY_INLINE void DequantizeQ8_0Row(const uint8_t* HWY_RESTRICT src, size_t n,
                                  float* HWY_RESTRICT dst) {
  const hn::CappedTag<float, 32> df;
  const hn::Rebind<int32_t, decltype(df)> di32;
  const hn::Rebind<int8_t, decltype(df)> di8;
  const size_t N = hn::Lanes(df);
  for (size_t b = 0; b < n / kQ8_0Elems; ++b) {
    const uint8_t* block = src + b * sizeof(BlockQ8_0);
    uint16_t d_bits;
    std::memcpy(&d_bits, block, 2);
    const auto d = hn::Set(df, HalfBitsToFloat(d_bits));
    const int8_t* qs = reinterpret_cast<const int8_t*>(block + 2);
    float* out = dst + b * kQ8_0Elems;
    for (size_t s = 0; s < kQ8_0Elems; s += N) {
      const auto q = hn::ConvertTo(df, hn::PromoteTo(di32, hn::LoadU(di8, qs + s)));
      hn::StoreU(hn::Mul(d, q), df, out + s);
    }
  }
}

// Blocks first_block.. of the row at `src` (n elements of them).
HWY_INLINE void DequantizeQ4_0Row(const uint8_t* HWY_RESTRICT src, size_t n,
                                  float* HWY_RESTRICT dst, Q4_0Layout layout,
                                  size_t first_block = 0) {
  const hn::CappedTag<float, 16> df;
  const hn::Rebind<int32_t, decltype(df)> di32;
  const hn::Rebind<uint8_t, decltype(df)> du8;
  const size_t N = hn::Lanes(df);
  const auto mask = hn::Set(di32, 15);
  const auto eight = hn::Set(di32, 8);
  for (size_t b = 0; b < n / kQ4_0Elems; ++b) {
    uint16_t d_bits;
    std::memcpy(&d_bits, layout.Scale(src, first_block + b), 2);
    const uint8_t* qs = layout.Nibbles(src, first_block + b);
    const auto d = hn::Set(df, HalfBitsToFloat(d_bits));
    float* out = dst + b * kQ4_0Elems;
    for (size_t s = 0; s < 16; s += N) {
      const auto bytes = hn::BitCast(di32, hn::PromoteTo(
          hn::RebindToUnsigned<decltype(di32)>(), hn::LoadU(du8, qs + s)));
      const auto lo = hn::Sub(hn::And(bytes, mask), eight);
      const auto hi = hn::Sub(hn::ShiftRight<4>(bytes), eight);
      hn::StoreU(hn::Mul(hn::ConvertTo(df, lo), d), df, out + s);
      hn::StoreU(hn::Mul(hn::ConvertTo(df, hi), d), df, out + 16 + s);
    }
  }
}

// A Q4_K super-block's scale and min scale, as floats, and its sub-blocks'
// 6-bit scales and mins.
struct Q4_KHeader {
  float d, dmin;
  uint8_t sc[8], m[8];
};
HWY_INLINE Q4_KHeader ReadQ4_KHeader(const uint8_t* HWY_RESTRICT block) {
  Q4_KHeader h;
  uint16_t d_bits, dmin_bits;
  std::memcpy(&d_bits, block, 2);
  std::memcpy(&dmin_bits, block + 2, 2);
  h.d = HalfBitsToFloat(d_bits);
  h.dmin = HalfBitsToFloat(dmin_bits);
  UnpackQ4KScales(block + offsetof(BlockQ4_K, scales), h.sc, h.m);
  return h;
}

HWY_INLINE void DequantizeQ4_KRow(const uint8_t* HWY_RESTRICT src, size_t n,
                                  float* HWY_RESTRICT dst) {
  const hn::CappedTag<float, 32> df;
  const hn::Rebind<int32_t, decltype(df)> di32;
  const hn::Rebind<uint8_t, decltype(df)> du8;
  const size_t N = hn::Lanes(df);
  const auto mask = hn::Set(di32, 15);
  for (size_t b = 0; b < n / kQKElems; ++b) {
    const uint8_t* block = src + b * sizeof(BlockQ4_K);
    const Q4_KHeader h = ReadQ4_KHeader(block);
    const uint8_t* qs = block + offsetof(BlockQ4_K, qs);
    float* out = dst + b * kQKElems;
    for (size_t g = 0; g < 4; ++g) {
      const auto d_lo = hn::Set(df, h.d * h.sc[2 * g]);
      const auto m_lo = hn::Set(df, h.dmin * h.m[2 * g]);
      const auto d_hi = hn::Set(df, h.d * h.sc[2 * g + 1]);
      const auto m_hi = hn::Set(df, h.dmin * h.m[2 * g + 1]);
      for (size_t s = 0; s < 32; s += N) {
        const auto bytes = hn::BitCast(di32, hn::PromoteTo(
            hn::RebindToUnsigned<decltype(di32)>(), hn::LoadU(du8, qs + 32 * g + s)));
        const auto lo = hn::ConvertTo(df, hn::And(bytes, mask));
        const auto hi = hn::ConvertTo(df, hn::ShiftRight<4>(bytes));
        hn::StoreU(hn::Sub(hn::Mul(d_lo, lo), m_lo), df, out + 64 * g + s);
        hn::StoreU(hn::Sub(hn::Mul(d_hi, hi), m_hi), df, out + 64 * g + 32 + s);
      }
    }
  }
}

HWY_INLINE void DequantizeQ6_KRow(const uint8_t* HWY_RESTRICT src, size_t n,
                                  float* HWY_RESTRICT dst) {
  const hn::CappedTag<float, 16> df;
  const hn::Rebind<int32_t, decltype(df)> di32;
  const hn::Rebind<uint8_t, decltype(df)> du8;
  const size_t N = hn::Lanes(df);
  const auto low4 = hn::Set(di32, 15);
  const auto high2 = hn::Set(di32, 0x30);
  const auto bias = hn::Set(di32, 32);
  for (size_t b = 0; b < n / kQKElems; ++b) {
    const uint8_t* block = src + b * sizeof(BlockQ6_K);
    uint16_t d_bits;
    std::memcpy(&d_bits, block + offsetof(BlockQ6_K, d), 2);
    const float d = HalfBitsToFloat(d_bits);
    const int8_t* sc =
        reinterpret_cast<const int8_t*>(block + offsetof(BlockQ6_K, scales));
    float* out = dst + b * kQKElems;
    for (size_t h = 0; h < 2; ++h) {
      const uint8_t* ql = block + 64 * h;
      const uint8_t* qh = block + offsetof(BlockQ6_K, qh) + 32 * h;
      for (size_t l0 = 0; l0 < 32; l0 += 16) {
        // Element groups of 16 at 128h + 32k + l0 use scale sc[8h + 2k + l0/16].
        const size_t g = 8 * h + l0 / 16;
        const auto s0 = hn::Set(df, d * sc[g + 0]);
        const auto s1 = hn::Set(df, d * sc[g + 2]);
        const auto s2 = hn::Set(df, d * sc[g + 4]);
        const auto s3 = hn::Set(df, d * sc[g + 6]);
        for (size_t s = l0; s < l0 + 16; s += N) {
          const auto a = hn::BitCast(di32, hn::PromoteTo(
              hn::RebindToUnsigned<decltype(di32)>(), hn::LoadU(du8, ql + s)));
          const auto c = hn::BitCast(di32, hn::PromoteTo(
              hn::RebindToUnsigned<decltype(di32)>(), hn::LoadU(du8, ql + 32 + s)));
          const auto hb = hn::BitCast(di32, hn::PromoteTo(
              hn::RebindToUnsigned<decltype(di32)>(), hn::LoadU(du8, qh + s)));
          const auto q0 = hn::Or(hn::And(a, low4), hn::And(hn::ShiftLeft<4>(hb), high2));
          const auto q1 = hn::Or(hn::And(c, low4), hn::And(hn::ShiftLeft<2>(hb), high2));
          const auto q2 = hn::Or(hn::ShiftRight<4>(a), hn::And(hb, high2));
          const auto q3 = hn::Or(hn::ShiftRight<4>(c), hn::And(hn::ShiftRight<2>(hb), high2));
          float* o = out + 128 * h + s;
          hn::StoreU(hn::Mul(s0, hn::ConvertTo(df, hn::Sub(q0, bias))), df, o);
          hn::StoreU(hn::Mul(s1, hn::ConvertTo(df, hn::Sub(q1, bias))), df, o + 32);
          hn::StoreU(hn::Mul(s2, hn::ConvertTo(df, hn::Sub(q2, bias))), df, o + 64);
          hn::StoreU(hn::Mul(s3, hn::ConvertTo(df, hn::Sub(q3, bias))), df, o + 96);
        }
      }
    }
  }
}

// `n` is a whole number of blocks of a type CanConvert accepts (checked by
// the caller).
HWY_INLINE void DequantizeRowImpl(TensorType type, const void* src, size_t n,
                                  float* dst) {
  const uint8_t* in = static_cast<const uint8_t*>(src);
  switch (type) {
    case TensorType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case TensorType::kF16:
      return DequantizeHalfRow<hwy::float16_t>(in, n, dst);
    case TensorType::kBF16:
      return DequantizeHalfRow<hwy::bfloat16_t>(in, n, dst);
    case TensorType::kQ8_0:
      return DequantizeQ8_0Row(in, n, dst);
    case TensorType::kQ4_0:
      return DequantizeQ4_0Row(in, n, dst, Q4_0Layout::Interleaved());
    case TensorType::kQ4_0S:
      return DequantizeQ4_0Row(in, n, dst, Q4_0Layout::Split(n / kQ4_0Elems));
    case TensorType::kQ4_K:
      return DequantizeQ4_KRow(in, n, dst);
    case TensorType::kQ6_K:
      return DequantizeQ6_KRow(in, n, dst);
    default:
      return;
  }
}

// f32 to IEEE half bits, round to nearest even, for the leading whole
// vectors of the row; returns how many it converted (the caller converts the
// rest with F32ToF16). Only where Highway's demotion is the CPU's own
// conversion instruction (x86 F16C, from AVX2 up; Arm NEON and SVE), which
// rounds as F32ToF16 does; elsewhere it converts nothing.
HWY_INLINE size_t ConvertRowToF16(const float* HWY_RESTRICT src, size_t n,
                                  uint16_t* HWY_RESTRICT dst) {
#if (HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2) || HWY_ARCH_ARM_A64
  const hn::ScalableTag<float> df;
  const hn::Rebind<hwy::float16_t, decltype(df)> df16;
  const size_t N = hn::Lanes(df);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    hn::StoreU(hn::DemoteTo(df16, hn::LoadU(df, src + i)), df16,
               reinterpret_cast<hwy::float16_t*>(dst + i));
  }
  return i;
#else
  (void)src;
  (void)n;
  (void)dst;
  return 0;
#endif
}

// On x86 CPUs with AVX512_BF16, vcvtneps2bf16 rounds 16 floats to nearest
// even in one instruction, where the integer steps below take about twelve.
// Highway 1.0.3 has no such op (its bf16 demotion truncates) and no target
// that enables the extension, so it is written as inline assembly on the
// AVX-512 targets and used where CpuHasX86Bf16(); every CPU that runs
// oneDNN's native bf16 matmul (matmul.cc) has it. Measured on Sapphire
// Rapids (2 vCPU VM), one thread, 125M-shaped synthetic Q8_0, `sparrow
// bench -p 64`: 902 tok/s with the integer steps, 1002 with the instruction.
#if HWY_ARCH_X86 && (HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX3) && \
    (defined(__GNUC__) || defined(__clang__))
#define SPARROW_BF16_CONVERT_ASM 1
#else
#undef SPARROW_BF16_CONVERT_ASM
#endif

// f32 to bfloat16 bits, round to nearest even; NaN stays a quiet NaN
// (F32ToBF16's rules, bit for bit), except that the instruction above reads
// inputs below the smallest normal float as zero and flushes results below
// it to zero of the same sign. Highway 1.0.3's DemoteTo(bf16) truncates, so
// the portable form rounds on the integer bits.
HWY_INLINE void ConvertRowToBF16(const float* HWY_RESTRICT src, size_t n,
                                 uint16_t* HWY_RESTRICT dst) {
  const hn::ScalableTag<uint32_t> du;
  const hn::RebindToFloat<decltype(du)> df;
  const hn::Rebind<uint16_t, decltype(du)> du16;
  const size_t N = hn::Lanes(du);
  const auto one = hn::Set(du, 1u);
  const auto bias = hn::Set(du, 0x7fffu);
  const auto abs_mask = hn::Set(du, 0x7fffffffu);
  const auto inf = hn::Set(du, 0x7f800000u);
  const auto quiet = hn::Set(du, 0x00400000u);
  auto convert = [&](hn::Vec<decltype(du)> bits) {
    const auto rounded = hn::Add(bits, hn::Add(bias, hn::And(hn::ShiftRight<16>(bits), one)));
    // Unsigned compare through the sign-free magnitudes (both below 2^31).
    const auto nan = hn::Gt(hn::BitCast(hn::RebindToSigned<decltype(du)>(), hn::And(bits, abs_mask)),
                            hn::BitCast(hn::RebindToSigned<decltype(du)>(), inf));
    const auto out = hn::IfThenElse(hn::RebindMask(du, nan), hn::Or(bits, quiet), rounded);
    // Below 2^16 after the shift: the saturating i32 -> u16 demotion is exact.
    return hn::DemoteTo(du16, hn::BitCast(hn::RebindToSigned<decltype(du)>(), hn::ShiftRight<16>(out)));
  };
  size_t i = 0;
#ifdef SPARROW_BF16_CONVERT_ASM
  if (CpuHasX86Bf16()) {
    for (; i + 16 <= n; i += 16) {
      const __m512 v = _mm512_loadu_ps(src + i);
      __m256i out;
      asm("vcvtneps2bf16 %1, %0" : "=v"(out) : "v"(v));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), out);
    }
  }
#endif
  for (; i + N <= n; i += N) {
    hn::StoreU(convert(hn::BitCast(du, hn::LoadU(df, src + i))), du16, dst + i);
  }
  for (; i < n; ++i) {  // the same rules, one element at a time
    uint32_t bits;
    std::memcpy(&bits, src + i, sizeof(bits));
    const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
    dst[i] = static_cast<uint16_t>(
        (nan ? bits | 0x00400000u : bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
  }
}

#ifdef SPARROW_BF16_CONVERT_ASM
// One Q4_0 block (f16 scale bits, 16 nibble bytes: byte i holds element i
// low and i + 16 high) straight to 32 bf16 values: (q - 8) * d as
// DequantizeQ4_0Row computes it (so also -0 where q = 8 and d < 0), rounded
// as ConvertRowToBF16 does.
// One Q8_0 block (scale bits, quant bytes 0..15 and 16..31) to 32 bf16
// values: each product d * q (DequantizeQ8_0Row's) rounded in a register.
HWY_INLINE void Q8_0BlockToBF16(uint16_t d_bits, __m128i q_lo, __m128i q_hi,
                                uint16_t* HWY_RESTRICT dst) {
  const __m512 d = _mm512_set1_ps(HalfBitsToFloat(d_bits));
  for (size_t h = 0; h < 2; ++h) {
    const __m512 v = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(h ? q_hi : q_lo)));
    __m256i out;
    asm("vcvtneps2bf16 %1, %0" : "=v"(out) : "v"(v));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 16 * h), out);
  }
}

HWY_INLINE void Q4_0BlockToBF16(uint16_t d_bits, __m128i qs, uint16_t* HWY_RESTRICT dst) {
  // The 16 values a nibble can stand for, rounded once, then looked up:
  // fewer operations per element than converting each one.
  const __m512 ks = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
  const __m512 values = _mm512_mul_ps(ks, _mm512_set1_ps(HalfBitsToFloat(d_bits)));
  __m256i table;
  asm("vcvtneps2bf16 %1, %0" : "=v"(table) : "v"(values));
  const __m256i bytes = _mm256_cvtepu8_epi16(qs);
  const __m256i low4 = _mm256_set1_epi16(0x0F);
  const __m512i index = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(bytes, low4)),
                                           _mm256_srli_epi16(bytes, 4), 1);
  _mm512_storeu_si512(dst, _mm512_permutexvar_epi16(index, _mm512_castsi256_si512(table)));
}
#endif

#ifdef SPARROW_BF16_CONVERT_ASM
// One Q4_K super-block (quant_blocks.h) straight to 256 bf16 values. Each
// sub-block of 32 has 16 possible values, (d * sc) * q - dmin * m, computed
// with DequantizeQ4_KRow's operations (so the same floats), rounded once,
// and looked up by nibble; a 64-element group's two sub-blocks share one
// 32-entry table (high nibbles index its upper half).
HWY_INLINE void Q4_KBlockToBF16(const uint8_t* HWY_RESTRICT block, uint16_t* HWY_RESTRICT dst) {
  const Q4_KHeader h = ReadQ4_KHeader(block);
  const uint8_t* qs = block + offsetof(BlockQ4_K, qs);
  const __m512 ks = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i low4 = _mm512_set1_epi16(0x0F);
  const __m512i upper = _mm512_set1_epi16(16);
  for (size_t g = 0; g < 4; ++g) {
    const __m512 lo = _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(h.d * h.sc[2 * g]), ks),
                                    _mm512_set1_ps(h.dmin * h.m[2 * g]));
    const __m512 hi = _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(h.d * h.sc[2 * g + 1]), ks),
                                    _mm512_set1_ps(h.dmin * h.m[2 * g + 1]));
    __m256i table_lo, table_hi;
    asm("vcvtneps2bf16 %1, %0" : "=v"(table_lo) : "v"(lo));
    asm("vcvtneps2bf16 %1, %0" : "=v"(table_hi) : "v"(hi));
    const __m512i table = _mm512_inserti64x4(_mm512_castsi256_si512(table_lo), table_hi, 1);
    const __m512i bytes =
        _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * g)));
    _mm512_storeu_si512(dst + 64 * g,
                        _mm512_permutexvar_epi16(_mm512_and_si512(bytes, low4), table));
    _mm512_storeu_si512(dst + 64 * g + 32,
                        _mm512_permutexvar_epi16(
                            _mm512_add_epi16(_mm512_srli_epi16(bytes, 4), upper), table));
  }
}
#endif

// A row of any DequantizeRowImpl type to bfloat16 bits: dequantized a chunk
// at a time into a stack buffer, then ConvertRowToBF16 (so bit for bit
// F32ToBF16 of DequantizeRow's values). `block_elems`/`block_bytes`: the
// type's block.
HWY_INLINE void DequantizeRowToBF16Impl(TensorType type, size_t block_elems,
                                        size_t block_bytes, const void* src, size_t n,
                                        uint16_t* HWY_RESTRICT dst) {
  const uint8_t* in = static_cast<const uint8_t*>(src);
#ifdef SPARROW_BF16_CONVERT_ASM
  if (type == TensorType::kQ8_0 && CpuHasX86Bf16()) {
    // Q8_0 straight to bf16, each product (the same as DequantizeQ8_0Row's)
    // rounded in a register: no f32 round trip through the buffer.
    // With a prefetch 1 KiB ahead. Measured alternating, `sparrow bench -p 64
    // -r 3`, 125M-shaped Q8_0, Sapphire Rapids, tok/s at 1 / 2 threads:
    // through the buffer 1072-1142 / 1809-1882; fused 1128-1175 /
    // 1901-1906; fused with the prefetch 1304-1326 / 1993-2138. (The same
    // prefetch per chunk did not help F16 rows: 792-905 against 837-852.)
    for (size_t b = 0; b < n / kQ8_0Elems; ++b) {
      const uint8_t* block = in + b * sizeof(BlockQ8_0);
      hwy::Prefetch(block + 1024);
      uint16_t d_bits;
      std::memcpy(&d_bits, block, 2);
      Q8_0BlockToBF16(d_bits, _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2)),
                      _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 18)),
                      dst + b * kQ8_0Elems);
    }
    return;
  }
  if (type == TensorType::kQ4_K && CpuHasX86Bf16()) {
    // Measured with packed matrices (packed_gemv.h: UnpackRowToBF16).
    for (size_t b = 0; b < n / kQKElems; ++b) {
      const uint8_t* block = in + b * sizeof(BlockQ4_K);
      hwy::Prefetch(block + 1024);
      Q4_KBlockToBF16(block, dst + b * kQKElems);
    }
    return;
  }
  if (type == TensorType::kQ4_0 && CpuHasX86Bf16()) {
    // The same for Q4_0 (measured with the packed form: packed_gemv.h,
    // UnpackRowToBF16).
    for (size_t b = 0; b < n / kQ4_0Elems; ++b) {
      const uint8_t* block = in + b * sizeof(BlockQ4_0);
      hwy::Prefetch(block + 1024);
      uint16_t d_bits;
      std::memcpy(&d_bits, block, 2);
      Q4_0BlockToBF16(d_bits, _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2)),
                      dst + b * kQ4_0Elems);
    }
    return;
  }
#endif
  constexpr size_t kChunk = 1024;  // a multiple of every block (at most 256)
  HWY_ALIGN float buffer[kChunk];
  for (size_t i = 0; i < n; i += kChunk) {
    const size_t count = std::min(kChunk, n - i);
    if (type == TensorType::kQ4_0S) {  // its layout spans the whole row
      DequantizeQ4_0Row(in, count, buffer, Q4_0Layout::Split(n / kQ4_0Elems), i / kQ4_0Elems);
    } else {
      DequantizeRowImpl(type, in + i / block_elems * block_bytes, count, buffer);
    }
    ConvertRowToBF16(buffer, count, dst + i);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::simd
HWY_AFTER_NAMESPACE();

#endif  // SPARROW_SIMD_QUANTIZE_INL_H_ toggle
