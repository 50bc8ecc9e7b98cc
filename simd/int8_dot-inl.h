// 8-bit activations for the kernels that multiply 4-bit weights by them
// (packed_gemv-inl.h): the per-block int8 quantizer and the integer steps of
// an 8-bit dot product, in the best form each target has.
//
// On x86 (SSSE3 and up) the 8-bit products and their pairwise sums are one
// instruction, pmaddubsw (u8 x i8 -> i16), and summing int16 pairs is
// pmaddwd. Highway 1.0.3 has no 8-bit multiply-add: emulated with its ops
// it takes 8 instead of 1, which makes it slower than the 16-bit kernels.
// Measured on an AMD EPYC (Zen 3, AVX2) VM, one thread: packed Q4_0 at
// 18.9-19.3 GB/s against 7.8-8.2 for the 16-bit kernel (gemv_bench). Arm has
// the same instruction in two places: `sdot` (four i8 x i8 products summed
// into each 32-bit lane) is part of every SVE target, and of NEON on cores
// with the dot-product extension (Armv8.2+: Cortex-A55/A75 and later), which
// is found at run time. Other targets get the emulation, for tests and the
// packed kernel's portable form.

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
#if HWY_ARCH_ARM_A64
#include <arm_neon.h>  // Highway's SVE targets do not include it
#endif

#include "simd/targets.h"  // CpuHasArmDotProd, CpuHasArmI8mm

#ifndef SPARROW_ARM_ASM_ARCH
// Prefix of the Arm instructions written as inline assembly (sdot, smmla)
// where the compiler's flags do not declare their intrinsics: the assembler
// rejects them without an `.arch` naming their extensions
// (`.arch_extension dotprod` alone is not enough below Armv8.2). The
// directive holds for the rest of the file, so it names a superset of what
// any of our targets emits (crypto for NEON, sve2-aes for SVE2); it only
// widens what the assembler accepts, the compiler's code does not change.
#define SPARROW_ARM_ASM_ARCH ".arch armv8.2-a+crypto+dotprod+i8mm+sve2-aes\n\t"
#endif

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
//
// The same instruction exists on x86 CPUs whose best Highway target is
// below AVX3_DL: AVX-512 VNNI on AVX3 (Cascade Lake, whose missing VBMI2
// keeps it off AVX3_DL), and AVX-VNNI, the VEX form, on AVX2 (Alder Lake
// and later laptops, which lack AVX-512; Zen 5). Those targets check the CPU
// at run time (CpuHasX86Vnni), as NEON does for `sdot`. Measured on the same
// Sapphire Rapids VM with dispatch forced to AVX2 (SPARROW_SIMD_TARGET),
// one thread, oneDNN off, 125M-shaped synthetic files, `sparrow bench -p 64
// -n 32 -r 3`, alternating: pp64 Q4_0 414-460 tok/s with pmaddubsw, 575-599
// with the VEX vpdpbusd; Q4_K 354-367, 450-467.
#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3_DL && (defined(__GNUC__) || defined(__clang__))
#define SPARROW_INT8_VNNI 1
#else
#undef SPARROW_INT8_VNNI
#endif
#if HWY_ARCH_X86 && (HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX2) && \
    (defined(__GNUC__) || defined(__clang__))
#define SPARROW_INT8_VNNI_RUNTIME 1  // where CpuHasX86Vnni(...)
#else
#undef SPARROW_INT8_VNNI_RUNTIME
#endif

// Arm's `sdot` multiplies signed bytes: the forms below take `a` as signed,
// which gives the same products because the callers' `a` bytes (4-bit
// weights) are below 128.
#if HWY_ARCH_ARM_A64 && HWY_HAVE_SCALABLE
#define SPARROW_INT8_SDOT_SVE 1  // every SVE target: svdot_s32
#else
#undef SPARROW_INT8_SDOT_SVE
#endif
#if HWY_ARCH_ARM_A64 && HWY_TARGET == HWY_NEON && (defined(__GNUC__) || defined(__clang__))
#define SPARROW_INT8_SDOT_NEON 1  // NEON, where CpuHasArmDotProd()
#else
#undef SPARROW_INT8_SDOT_NEON
#endif
// Arm's `smmla` (the i8mm extension, Armv8.6; Cortex-A510/A710/X2 and
// later, Neoverse V1/N2): a 2x8 by 8x2 int8 matrix product added to a 2x2
// int32 tile, 32 products per instruction against `sdot`'s 16. The packed
// Q4_0 kernel uses it for pairs of tokens (packed_gemv-inl.h), on NEON and
// on SVE targets (in 128-bit NEON registers, which every SVE CPU has),
// where CpuHasArmI8mm().
#if HWY_ARCH_ARM_A64 && (HWY_TARGET == HWY_NEON || HWY_HAVE_SCALABLE) && \
    (defined(__GNUC__) || defined(__clang__))
#define SPARROW_INT8_MMLA 1
#else
#undef SPARROW_INT8_MMLA
#endif

// Whether this CPU has the VNNI form the target can use (EVEX on AVX3, VEX
// on AVX2).
HWY_INLINE bool TargetHasVnni() {
#if HWY_TARGET == HWY_AVX2
  return CpuHasX86Vnni(/*evex=*/false);
#else
  return CpuHasX86Vnni(/*evex=*/true);
#endif
}

// Whether the best form is a native 8-bit dot product (not the emulation).
HWY_INLINE bool HasFastByteDotSum() {
#if defined(SPARROW_INT8_MADDUBS) || defined(SPARROW_INT8_SDOT_SVE)
  return true;
#elif defined(SPARROW_INT8_SDOT_NEON)
  return CpuHasArmDotProd();
#else
  return false;
#endif
}

// The form ByteDotSum and WithBestByteDotSum use on this CPU, for `sparrow
// info` and the Arm check.
HWY_INLINE const char* ByteDotFormName() {
#if defined(SPARROW_INT8_VNNI)
  return "vpdpbusd (AVX-512 VNNI)";
#elif defined(SPARROW_INT8_VNNI_RUNTIME)
  if (TargetHasVnni()) {
    return HWY_TARGET == HWY_AVX2 ? "vpdpbusd (AVX-VNNI)" : "vpdpbusd (AVX-512 VNNI)";
  }
  return "pmaddubsw";
#elif defined(SPARROW_INT8_MADDUBS)
  return "pmaddubsw";
#elif defined(SPARROW_INT8_SDOT_SVE)
  return "sdot (SVE)";
#elif defined(SPARROW_INT8_SDOT_NEON)
  return CpuHasArmDotProd() ? "sdot (NEON dotprod)" : "emulated";
#else
  return "emulated";
#endif
}

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
  (void)du8;
#ifdef SPARROW_INT8_MADDUBS
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
  (void)di16;
#ifdef SPARROW_INT8_MADDUBS
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


// Signed weights (Q8_0): every form also takes `w` as signed bytes, through
//   PrepareSigned(du8, w)          once per weight vector (shared by inputs),
//   AddSigned(du8, acc, pw, b)     acc (int32 lanes) += pw . b per lane,
// so that the int32 lanes end up as dot(w, b) + kSignedBias * sum(b) over
// each lane's bytes: VNNI multiplies unsigned bytes, so it takes w + 128
// and the caller subtracts 128 * sum(b); the other forms give dot(w, b)
// itself (bias 0). With |b| <= 127 nothing saturates or overflows, so
// every form yields the same integers.
//
// pmaddubsw form: |w| (at most 128, unsigned) times b with w's sign, the
// pairs (at most 2 * 128 * 127 = 32512) widened to int32 at once.
template <class DU8>
HWY_INLINE hn::Vec<hn::Repartition<int32_t, DU8>> SignedBytePairsTo32(DU8 du8, hn::Vec<DU8> w,
                                                                     hn::Vec<DU8> b) {
  const hn::Repartition<int16_t, DU8> di16;
#ifdef SPARROW_INT8_MADDUBS
  (void)du8;
#if HWY_TARGET <= HWY_AVX2
  const __m256i pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(w.raw), _mm256_sign_epi8(b.raw, w.raw));
#else
  const __m128i pairs = _mm_maddubs_epi16(_mm_abs_epi8(w.raw), _mm_sign_epi8(b.raw, w.raw));
#endif
  return SumInt16Pairs(di16, hn::Vec<decltype(di16)>{pairs});
#else
  (void)du8;
  const auto w16 = hn::BitCast(di16, w);
  const auto b16 = hn::BitCast(di16, b);
  const auto w_even = hn::ShiftRight<8>(hn::ShiftLeft<8>(w16));
  const auto b_even = hn::ShiftRight<8>(hn::ShiftLeft<8>(b16));
  const auto pairs = hn::Add(hn::Mul(w_even, b_even), hn::Mul(hn::ShiftRight<8>(w16), hn::ShiftRight<8>(b16)));
  return SumInt16Pairs(di16, pairs);
#endif
}

template <class DU8>
struct PortableSignedBytes {
  using DI32 = hn::Repartition<int32_t, DU8>;
  using SignedAcc = hn::Vec<DI32>;
  static constexpr int32_t kSignedBias = 0;
  static HWY_INLINE SignedAcc SignedZero() { return hn::Zero(DI32()); }
  static HWY_INLINE hn::Vec<DU8> PrepareSigned(DU8, hn::Vec<DU8> w) { return w; }
  static HWY_INLINE SignedAcc AddSigned(DU8 du8, SignedAcc acc, hn::Vec<DU8> w, hn::Vec<DU8> b) {
    return hn::Add(acc, SignedBytePairsTo32(du8, w, b));
  }
};

// Exact sums of byte products (a unsigned and below 128 on Arm, b signed),
// per 32-bit lane: Add accumulates, into lane i, a[4i..4i+3] . b[4i..4i+3];
// Total returns the int32 lanes. The callers' operands never overflow the
// int16 pairs of the pmaddubsw form, so every form gives the same integers.
// This is the portable form of the target (pmaddubsw on x86, Highway ops
// elsewhere); ByteDotSum below is the best form the target always has.
template <class DU8>
struct PortableByteDotSum : PortableSignedBytes<DU8> {
  using DI32 = hn::Repartition<int32_t, DU8>;
  using DI16 = hn::Repartition<int16_t, DU8>;
  using Acc = hn::Vec<DI16>;
  // Whether `a` may use all 8 bits (pmaddubsw's int16 pairs would saturate).
  static constexpr bool kWholeUnsignedBytes = false;
  static HWY_INLINE Acc Zero() { return hn::Zero(DI16()); }
  static HWY_INLINE Acc Add(DU8 du8, Acc acc, hn::Vec<DU8> a, hn::Vec<DU8> b) {
    return hn::Add(acc, MulAddBytePairs(du8, a, b));
  }
  static HWY_INLINE hn::Vec<DI32> Total(Acc acc) { return SumInt16Pairs(DI16(), acc); }
};

// The native forms below accumulate straight into the int32 lanes.
template <class DU8>
struct Int32ByteDotSum {
  using DI32 = hn::Repartition<int32_t, DU8>;
  using Acc = hn::Vec<DI32>;
  // Whether `a` may use all 8 bits: not for `sdot`, whose bytes are signed.
  static constexpr bool kWholeUnsignedBytes = false;
  static HWY_INLINE Acc Zero() { return hn::Zero(DI32()); }
  static HWY_INLINE hn::Vec<DI32> Total(Acc acc) { return acc; }
  using SignedAcc = Acc;
  static HWY_INLINE SignedAcc SignedZero() { return Zero(); }
};

// Arm's sdot forms multiply signed bytes: signed weights go in as they are.
template <class Form, class DU8>
struct SdotSigned : Int32ByteDotSum<DU8> {
  using typename Int32ByteDotSum<DU8>::Acc;
  static constexpr int32_t kSignedBias = 0;
  static HWY_INLINE hn::Vec<DU8> PrepareSigned(DU8, hn::Vec<DU8> w) { return w; }
  static HWY_INLINE Acc AddSigned(DU8 du8, Acc acc, hn::Vec<DU8> w, hn::Vec<DU8> b) {
    return Form::Add(du8, acc, w, b);
  }
};

#if defined(SPARROW_INT8_VNNI) || defined(SPARROW_INT8_VNNI_RUNTIME)
template <class DU8>
struct VnniByteDotSum : Int32ByteDotSum<DU8> {
  using typename Int32ByteDotSum<DU8>::Acc;
  static_assert(hn::MaxLanes(DU8()) == 32, "the VNNI form takes 256-bit vectors");
  // vpdpbusd multiplies whole unsigned bytes into int32 lanes.
  static constexpr bool kWholeUnsignedBytes = true;
  // Signed weights as w + 128 (the sign bit flipped): unsigned bytes.
  static constexpr int32_t kSignedBias = 128;
  static HWY_INLINE hn::Vec<DU8> PrepareSigned(DU8 du8, hn::Vec<DU8> w) {
    return hn::Xor(w, hn::Set(du8, uint8_t{0x80}));
  }
  static HWY_INLINE Acc AddSigned(DU8 du8, Acc acc, hn::Vec<DU8> pw, hn::Vec<DU8> b) {
    return Add(du8, acc, pw, b);
  }
  static HWY_INLINE Acc Add(DU8, Acc acc, hn::Vec<DU8> a, hn::Vec<DU8> b) {
    __m256i raw = acc.raw;
#if HWY_TARGET == HWY_AVX2  // VEX: ymm0-15 only
    asm("%{vex%} vpdpbusd %2, %1, %0" : "+x"(raw) : "x"(a.raw), "x"(b.raw));
#else
    asm("vpdpbusd %2, %1, %0" : "+v"(raw) : "v"(a.raw), "v"(b.raw));
#endif
    return Acc{raw};
  }
};
#endif

#ifdef SPARROW_INT8_VNNI
template <class DU8>
using ByteDotSum = VnniByteDotSum<DU8>;

#elif defined(SPARROW_INT8_SDOT_SVE)
// Highway's SVE vectors are the raw sizeless types. Lanes past a capped
// tag's count hold what the loads left there (zeros) and are never stored.
template <class DU8>
struct SveByteDotSum : SdotSigned<SveByteDotSum<DU8>, DU8> {
  using typename Int32ByteDotSum<DU8>::Acc;
  static HWY_INLINE Acc Add(DU8, Acc acc, hn::Vec<DU8> a, hn::Vec<DU8> b) {
    return svdot_s32(acc, svreinterpret_s8_u8(a), svreinterpret_s8_u8(b));
  }
};
template <class DU8>
using ByteDotSum = SveByteDotSum<DU8>;

#else
template <class DU8>
using ByteDotSum = PortableByteDotSum<DU8>;
#endif

#ifdef SPARROW_INT8_SDOT_NEON
// NEON's `sdot` for cores that have it (the kernels choose between this and
// the portable form once per call, by CpuHasArmDotProd()). The NEON target
// is compiled for plain Armv8.0, where the intrinsic is not declared, so
// unless the whole build targets the extension the instruction is inline
// assembly (SPARROW_ARM_ASM_ARCH).
template <class DU8>
struct NeonSdotByteDotSum : SdotSigned<NeonSdotByteDotSum<DU8>, DU8> {
  using typename Int32ByteDotSum<DU8>::Acc;
  static_assert(hn::MaxLanes(DU8()) == 16, "the NEON form takes 128-bit vectors");
  static HWY_INLINE Acc Add(DU8, Acc acc, hn::Vec<DU8> a, hn::Vec<DU8> b) {
#ifdef __ARM_FEATURE_DOTPROD
    return Acc{vdotq_s32(acc.raw, vreinterpretq_s8_u8(a.raw), vreinterpretq_s8_u8(b.raw))};
#else
    int32x4_t raw = acc.raw;
    asm(SPARROW_ARM_ASM_ARCH "sdot %0.4s, %1.16b, %2.16b"
        : "+w"(raw)
        : "w"(a.raw), "w"(b.raw));
    return Acc{raw};
#endif
  }
};
#endif

#ifdef SPARROW_INT8_MMLA
// acc (2x2 int32, row-major) += a (2x8 int8, row-major) . b (2x8 int8,
// row-major)^T: lane 2i + j gains row i of a dotted with row j of b.
HWY_INLINE int32x4_t MatMulAddBytes(int32x4_t acc, int8x16_t a, int8x16_t b) {
#ifdef __ARM_FEATURE_MATMUL_INT8
  return vmmlaq_s32(acc, a, b);
#else
  asm(SPARROW_ARM_ASM_ARCH "smmla %0.4s, %1.16b, %2.16b" : "+w"(acc) : "w"(a), "w"(b));
  return acc;
#endif
}
#endif

// Calls body(ByteDotSum-like form) with the best form this CPU runs: the
// target's own, or where the CPU has more than the target promises, `sdot`
// on NEON and vpdpbusd on AVX2/AVX3. One branch per
// kernel call, outside the loops.
template <class DU8, class Body>
HWY_INLINE void WithBestByteDotSum(DU8, const Body& body) {
#if defined(SPARROW_INT8_SDOT_NEON)
  if (CpuHasArmDotProd()) {
    body(NeonSdotByteDotSum<DU8>());
    return;
  }
#elif defined(SPARROW_INT8_VNNI_RUNTIME)
  if (TargetHasVnni()) {
    body(VnniByteDotSum<DU8>());
    return;
  }
#endif
  body(ByteDotSum<DU8>());
}

#endif  // HWY_TARGET != HWY_SCALAR

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::simd
HWY_AFTER_NAMESPACE();

#endif  // include guard
