// 8-bit activations for the kernels that multiply 4-bit weights by them
// (packed_q4_0-inl.h, and Q4_K in gemv-inl.h on x86): the per-block int8
// quantizer and the two integer steps of an 8-bit dot product.
//
// On x86 (SSSE3 and up) the 8-bit products and their pairwise sums are one
// instruction, pmaddubsw (u8 x i8 -> i16), and summing int16 pairs is
// pmaddwd. Highway 1.0.3 has no 8-bit multiply-add: emulated with its ops
// it takes 8 instead of 1, which makes it slower than the 16-bit kernels.
// Measured on an AMD EPYC (Zen 3, AVX2) VM, one thread: packed Q4_0 at
// 18.9-19.3 GB/s against 7.8-8.2 for the 16-bit kernel (gemv_bench). Other
// targets get the emulation, for tests and the packed kernel's portable form.

#if defined(SPARROW_SIMD_INT8_DOT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SPARROW_SIMD_INT8_DOT_INL_H_
#undef SPARROW_SIMD_INT8_DOT_INL_H_
#else
#define SPARROW_SIMD_INT8_DOT_INL_H_
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace sparrow::simd {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// x86 targets with pmaddubsw, in the widths our capped tags produce.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_SSSE3
#define SPARROW_INT8_MADDUBS 1
#else
#undef SPARROW_INT8_MADDUBS
#endif

// Quantizes x (n a multiple of 32) to int8 per block of 32.
HWY_INLINE void QuantizeInt8Impl(const float* HWY_RESTRICT x, size_t n,
                                 int8_t* HWY_RESTRICT q, float* HWY_RESTRICT scales,
                                 float* HWY_RESTRICT sums) {
  const hn::CappedTag<float, 16> df;
  const hn::Rebind<int32_t, decltype(df)> di32;
  const hn::Rebind<int16_t, decltype(df)> di16;
  const hn::Rebind<int8_t, decltype(df)> di8;
  const size_t N = hn::Lanes(df);
  for (size_t b = 0; b < n / 32; ++b) {
    const float* xb = x + 32 * b;
    auto vmax = hn::Zero(df);
    auto poison = hn::Zero(df);  // NaN iff some element is inf or NaN
    for (size_t s = 0; s < 32; s += N) {
      const auto v = hn::LoadU(df, xb + s);
      vmax = hn::Max(vmax, hn::Abs(v));
      poison = hn::MulAdd(v, hn::Zero(df), poison);
    }
    const float amax = hn::GetLane(hn::SumOfLanes(df, poison)) +
                       hn::GetLane(hn::MaxOfLanes(df, vmax));
    if (!std::isfinite(amax)) {
      scales[b] = std::numeric_limits<float>::quiet_NaN();
      sums[b] = 0.0f;
      std::memset(q + 32 * b, 0, 32);
      continue;
    }
    scales[b] = amax / 127.0f;
    const auto vinv = hn::Set(df, amax > 0.0f ? 127.0f / amax : 0.0f);
    auto vsum = hn::Zero(di32);
    for (size_t s = 0; s < 32; s += N) {
      const auto qi = hn::NearestInt(hn::Mul(hn::LoadU(df, xb + s), vinv));
      hn::StoreU(hn::DemoteTo(di8, hn::DemoteTo(di16, qi)), di8, q + 32 * b + s);
      vsum = hn::Add(vsum, qi);
    }
    sums[b] = static_cast<float>(hn::GetLane(hn::SumOfLanes(di32, vsum)));
  }
}

#if HWY_TARGET != HWY_SCALAR
// Lane i of the result (int16) = a[2i] * b[2i] + a[2i+1] * b[2i+1], with a
// unsigned and b signed bytes; the callers' operands never saturate it.
template <class DU8>
HWY_INLINE hn::Vec<hn::Repartition<int16_t, DU8>> MulAddBytePairs(DU8 du8, hn::Vec<DU8> a,
                                                                 hn::Vec<DU8> b) {
  const hn::Repartition<int16_t, DU8> di16;
#ifdef SPARROW_INT8_MADDUBS
  (void)du8;
#if HWY_TARGET <= HWY_AVX2  // CappedTag<uint8_t, 32>: 256-bit vectors
  return hn::Vec<decltype(di16)>{_mm256_maddubs_epi16(a.raw, b.raw)};
#else
  return hn::Vec<decltype(di16)>{_mm_maddubs_epi16(a.raw, b.raw)};
#endif
#else
  const auto a16 = hn::BitCast(di16, a);
  const auto b16 = hn::BitCast(di16, b);
  const auto a_even = hn::And(a16, hn::Set(di16, 0xFF));
  const auto a_odd = hn::BitCast(di16, hn::ShiftRight<8>(hn::BitCast(hn::RebindToUnsigned<decltype(di16)>(), a16)));
  const auto b_even = hn::ShiftRight<8>(hn::ShiftLeft<8>(b16));
  const auto b_odd = hn::ShiftRight<8>(b16);
  return hn::Add(hn::Mul(a_even, b_even), hn::Mul(a_odd, b_odd));
#endif
}

// Lane i of the result (int32) = lanes 2i and 2i+1 of v (int16) summed.
template <class DI16>
HWY_INLINE hn::Vec<hn::RepartitionToWide<DI16>> SumInt16Pairs(DI16 di16, hn::Vec<DI16> v) {
  const hn::RepartitionToWide<DI16> di32;
#ifdef SPARROW_INT8_MADDUBS
  (void)di16;
#if HWY_TARGET <= HWY_AVX2
  return hn::Vec<decltype(di32)>{_mm256_madd_epi16(v.raw, _mm256_set1_epi16(1))};
#else
  return hn::Vec<decltype(di32)>{_mm_madd_epi16(v.raw, _mm_set1_epi16(1))};
#endif
#else
  const auto v32 = hn::BitCast(di32, v);
  return hn::Add(hn::ShiftRight<16>(hn::ShiftLeft<16>(v32)), hn::ShiftRight<16>(v32));
#endif
}

// The 256-bit-vector kernels on the x86 target with AVX-512 VNNI:
// vpdpbusd adds the four u8 x i8 products of each 32-bit lane to it in one
// instruction, where pmaddubsw + pmaddwd + add take three. Highway 1.0.3
// has no such op, and its AVX3_DL target string enables "avxvnni" rather
// than "avx512vnni", so the intrinsic does not compile inside HWY_ATTR
// code (and the VEX form would fault on Ice Lake, which lacks AVX-VNNI):
// the EVEX instruction is written as inline assembly. AVX3_DL's runtime
// check requires AVX512_VNNI. Measured on Sapphire Rapids (2 vCPU VM), one
// thread, 125M-shaped synthetic Q4_0: `sparrow bench -p 64` 544-545 tok/s
// before, 611-624 after (decode unchanged: memory-bound).
#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3_DL && (defined(__GNUC__) || defined(__clang__))
#define SPARROW_INT8_VNNI 1
#else
#undef SPARROW_INT8_VNNI
#endif

// Exact sums of unsigned x signed byte products, per 32-bit lane: Add
// accumulates, into lane i, a[4i..4i+3] . b[4i..4i+3]; Total returns the
// int32 lanes. The callers' operands never overflow the int16 pairs of the
// pmaddubsw form, so every form gives the same integers.
template <class DU8>
struct ByteDotSum {
  using DI32 = hn::Repartition<int32_t, DU8>;
  using DI16 = hn::Repartition<int16_t, DU8>;
#ifdef SPARROW_INT8_VNNI
  static_assert(hn::MaxLanes(DU8()) == 32, "the VNNI form takes 256-bit vectors");
  using Acc = hn::Vec<DI32>;
  static HWY_INLINE Acc Zero() { return hn::Zero(DI32()); }
  static HWY_INLINE Acc Add(DU8, Acc acc, hn::Vec<DU8> a, hn::Vec<DU8> b) {
    __m256i raw = acc.raw;
    asm("vpdpbusd %2, %1, %0" : "+v"(raw) : "v"(a.raw), "v"(b.raw));
    return Acc{raw};
  }
  static HWY_INLINE hn::Vec<DI32> Total(Acc acc) { return acc; }
#else
  using Acc = hn::Vec<DI16>;
  static HWY_INLINE Acc Zero() { return hn::Zero(DI16()); }
  static HWY_INLINE Acc Add(DU8 du8, Acc acc, hn::Vec<DU8> a, hn::Vec<DU8> b) {
    return hn::Add(acc, MulAddBytePairs(du8, a, b));
  }
  static HWY_INLINE hn::Vec<DI32> Total(Acc acc) { return SumInt16Pairs(DI16(), acc); }
#endif
};

#endif  // HWY_TARGET != HWY_SCALAR

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::simd
HWY_AFTER_NAMESPACE();

#endif  // include guard
