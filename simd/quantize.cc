// Dispatch for DequantizeRow, plus the scalar parts of quantize.h: the
// reference dequantizers, the quantizers and the half-float conversions.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "simd/quantize.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "simd/quantize-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sparrow::simd {
namespace HWY_NAMESPACE {

void DequantizeRowT(TensorType type, const void* src, size_t n, float* dst) {
  DequantizeRowImpl(type, src, n, dst);
}

size_t ConvertRowToF16T(const float* src, size_t n, uint16_t* dst) {
  return ConvertRowToF16(src, n, dst);
}

void DequantizeRowToBF16T(TensorType type, const void* src, size_t n, uint16_t* dst) {
  const TensorTypeInfo& info = GetTensorTypeInfo(type);
  DequantizeRowToBF16Impl(type, info.block_elems, info.block_bytes, src, n, dst);
}

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "base/error.h"
#include "simd/quantize.h"

namespace sparrow::simd {
namespace {

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

void StoreU16(uint16_t v, uint8_t* p) { std::memcpy(p, &v, 2); }

// Checks the type and that `n` is a whole number of its blocks.
void CheckRow(TensorType type, size_t n) {
  if (!CanConvert(type)) {
    ThrowInputError("tensor type ", TensorTypeName(type),
                    " cannot be converted to or from f32");
  }
  const uint32_t block = GetTensorTypeInfo(type).block_elems;
  if (n % block != 0) {
    ThrowInputError("row of ", n, " elements is not a whole number of ",
                    TensorTypeName(type), " blocks of ", block);
  }
}

// IEEE half from float, round to nearest even (F32ToF16).
inline uint16_t HalfFromFloat(float f) {
  const uint32_t bits = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) {  // NaN: keep the top payload bits, force quiet
    return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  }
  // 65520 = halfway between the largest half (65504) and 2^16: ties go to
  // the even neighbour, which is infinity.
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  const uint32_t exp = abs >> 23;
  if (exp < 113) {  // below 2^-14: a half subnormal (or zero)
    if (exp < 102) return sign;  // below 2^-25: rounds to zero
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp;  // value / 2^-24 = mant >> shift
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t q = ((exp - 112) << 10) | ((abs >> 13) & 0x3ffu);
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1))) ++q;  // may carry: fine
  return static_cast<uint16_t>(sign | q);
}

// ---------------------------------------------------------------- reference

void DequantizeQ8_0Reference(const uint8_t* src, size_t n, float* dst) {
  for (size_t b = 0; b < n / kQ8_0Elems; ++b) {
    const uint8_t* block = src + b * sizeof(BlockQ8_0);
    const float d = F16ToF32(LoadU16(block));
    for (size_t i = 0; i < 32; ++i) {
      dst[32 * b + i] = d * static_cast<float>(static_cast<int8_t>(block[2 + i]));
    }
  }
}

void DequantizeQ4_0Reference(const uint8_t* src, size_t n, float* dst, Q4_0Layout layout) {
  for (size_t b = 0; b < n / kQ4_0Elems; ++b) {
    const float d = F16ToF32(LoadU16(layout.Scale(src, b)));
    const uint8_t* qs = layout.Nibbles(src, b);
    for (size_t j = 0; j < 16; ++j) {
      const uint8_t byte = qs[j];
      dst[32 * b + j] = static_cast<float>((byte & 15) - 8) * d;
      dst[32 * b + j + 16] = static_cast<float>((byte >> 4) - 8) * d;
    }
  }
}

void DequantizeQ4_KReference(const uint8_t* src, size_t n, float* dst) {
  for (size_t b = 0; b < n / kQKElems; ++b) {
    const uint8_t* block = src + b * sizeof(BlockQ4_K);
    const float d = F16ToF32(LoadU16(block));
    const float dmin = F16ToF32(LoadU16(block + 2));
    uint8_t sc[8], m[8];
    UnpackQ4KScales(block + offsetof(BlockQ4_K, scales), sc, m);
    const uint8_t* qs = block + offsetof(BlockQ4_K, qs);
    float* out = dst + b * kQKElems;
    for (size_t g = 0; g < 4; ++g) {
      const float d_lo = d * sc[2 * g], m_lo = dmin * m[2 * g];
      const float d_hi = d * sc[2 * g + 1], m_hi = dmin * m[2 * g + 1];
      for (size_t j = 0; j < 32; ++j) {
        const uint8_t byte = qs[32 * g + j];
        out[64 * g + j] = d_lo * static_cast<float>(byte & 15) - m_lo;
        out[64 * g + 32 + j] = d_hi * static_cast<float>(byte >> 4) - m_hi;
      }
    }
  }
}

void DequantizeQ6_KReference(const uint8_t* src, size_t n, float* dst) {
  for (size_t b = 0; b < n / kQKElems; ++b) {
    const uint8_t* block = src + b * sizeof(BlockQ6_K);
    const float d = F16ToF32(LoadU16(block + offsetof(BlockQ6_K, d)));
    const int8_t* sc =
        reinterpret_cast<const int8_t*>(block + offsetof(BlockQ6_K, scales));
    float* out = dst + b * kQKElems;
    for (size_t h = 0; h < 2; ++h) {
      const uint8_t* ql = block + 64 * h;
      const uint8_t* qh = block + offsetof(BlockQ6_K, qh) + 32 * h;
      for (size_t l = 0; l < 32; ++l) {
        const int q0 = ((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q1 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        const size_t g = 8 * h + l / 16;
        float* o = out + 128 * h + l;
        o[0] = d * sc[g + 0] * static_cast<float>(q0);
        o[32] = d * sc[g + 2] * static_cast<float>(q1);
        o[64] = d * sc[g + 4] * static_cast<float>(q2);
        o[96] = d * sc[g + 6] * static_cast<float>(q3);
      }
    }
  }
}

// ---------------------------------------------------------------- quantizers

// Round to nearest even, then clamp to [lo, hi]; NaN gives lo. Never
// converts an out-of-range float to int.
int NearestInt(float x, int lo, int hi) {
  if (!(x >= static_cast<float>(lo))) return lo;
  if (x >= static_cast<float>(hi)) return hi;
  // |x| < 2^22 here: adding and removing 1.5 * 2^23 rounds to nearest even
  // (no libm call, unlike nearbyint without SSE4.1).
  return static_cast<int>((x + 0x1.8p23f) - 0x1.8p23f);
}

// Round to nearest even as a float, for |x| < 2^22 (callers clamp first).
inline float RoundEven(float x) { return (x + 0x1.8p23f) - 0x1.8p23f; }

// Clamps to [lo, hi]; NaN gives lo. Branch-free, so loops vectorize.
inline float ClampF(float x, float lo, float hi) {
  return x >= lo ? (x <= hi ? x : hi) : lo;
}

// Round half away from zero (C's roundf), for |x| < 2^22.
inline float RoundAway(float x) {
  const float t = static_cast<float>(static_cast<int>(x));  // toward zero
  return std::fabs(x - t) >= 0.5f ? t + std::copysign(1.0f, x) : t;
}

// Truncate toward zero, clamped like NearestInt.
int TruncInt(float x, int lo, int hi) {
  if (!(x >= static_cast<float>(lo))) return lo;
  if (x >= static_cast<float>(hi)) return hi;
  return static_cast<int>(x);
}

// ggml's Q8_0 rule: d = absmax / 127, q = round-half-away(x / d).
void QuantizeQ8_0(const float* src, size_t n, uint8_t* dst) {
  for (size_t b = 0; b < n / kQ8_0Elems; ++b) {
    const float* x = src + b * kQ8_0Elems;
    float amax = 0.0f;
    for (size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint8_t* block = dst + b * sizeof(BlockQ8_0);
    StoreU16(F32ToF16(d), block);
    for (size_t i = 0; i < 32; ++i) {
      const int q = static_cast<int>(RoundAway(ClampF(x[i] * id, -128.0f, 127.0f)));
      block[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(q));
    }
  }
}

// ggml's Q4_0 rule: the element of largest magnitude maps to -8, so
// d = that element / -8; q = floor(x / d + 8.5) clamped to 15.
void QuantizeQ4_0(const float* src, size_t n, uint8_t* dst, Q4_0Layout layout) {
  for (size_t b = 0; b < n / kQ4_0Elems; ++b) {
    const float* x = src + b * kQ4_0Elems;
    float amax = 0.0f, max = 0.0f;
    for (size_t i = 0; i < 32; ++i) {
      if (std::fabs(x[i]) > amax) {
        amax = std::fabs(x[i]);
        max = x[i];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    StoreU16(F32ToF16(d), layout.Scale(dst, b));
    uint8_t* qs = layout.Nibbles(dst, b);
    for (size_t j = 0; j < 16; ++j) {
      const int q0 = TruncInt(x[j] * id + 8.5f, 0, 15);
      const int q1 = TruncInt(x[j + 16] * id + 8.5f, 0, 15);
      qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

// Importance of each element for the K-quant searches: large elements count
// more (their error matters more in a dot product), small ones still count.
void ImportanceWeights(const float* x, size_t n, float* w) {
  double sum2 = 0.0;
  for (size_t i = 0; i < n; ++i) sum2 += static_cast<double>(x[i]) * x[i];
  const float rms = static_cast<float>(std::sqrt(sum2 / static_cast<double>(n)));
  for (size_t i = 0; i < n; ++i) w[i] = rms + std::fabs(x[i]);
}

// Fits x[i] ~ scale * q[i] - min with q in [0, nmax], scale >= 0, min >= 0
// (ie the offset -min is <= 0, as Q4_K stores it). Tries a few quantization
// grids around (max - min) / nmax and, for each, the weighted least-squares
// scale and offset for the rounded q; keeps the fit with the least weighted
// squared error. f32 sums over one sub-block are plenty accurate here.
void FitAffine(const float* x, const float* w, int n, int nmax, float* scale,
               float* min_out) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  lo = std::min(lo, 0.0f);
  if (!(hi > lo) || !std::isfinite(hi - lo)) {  // all equal (to lo <= 0), or non-finite
    *scale = 0.0f;
    *min_out = std::isfinite(lo) ? -lo : 0.0f;
    return;
  }
  float sw = 0, swx = 0, swxx = 0;
  for (int i = 0; i < n; ++i) {
    sw += w[i];
    swx += w[i] * x[i];
    swxx += w[i] * x[i] * x[i];
  }
  float best_scale = (hi - lo) / static_cast<float>(nmax);
  float best_offset = lo;
  float best_err = std::numeric_limits<float>::infinity();
  const float top = static_cast<float>(nmax);
  constexpr int kSteps = 8;
  for (int step = 0; step <= kSteps; ++step) {
    // Grids from (nmax - 0.8) to (nmax + 0.8) steps over the range.
    const float iscale = (top - 0.8f + 0.2f * step) / (hi - lo);
    // Four interleaved partial sums in a fixed order: the compiler can keep
    // them in one vector, and the result does not depend on the machine.
    float pl[4] = {}, pll[4] = {}, plx[4] = {};
    for (int i = 0; i < n; i += 4) {
      for (int k = 0; k < 4; ++k) {
        // Finite and >= 0 here (lo is the minimum): only the top needs a clamp.
        const float l = RoundEven(std::min(iscale * (x[i + k] - lo), top));
        pl[k] += w[i + k] * l;
        pll[k] += w[i + k] * l * l;
        plx[k] += w[i + k] * l * x[i + k];
      }
    }
    const float swl = (pl[0] + pl[1]) + (pl[2] + pl[3]);
    const float swll = (pll[0] + pll[1]) + (pll[2] + pll[3]);
    const float swlx = (plx[0] + plx[1]) + (plx[2] + plx[3]);
    const float det = sw * swll - swl * swl;
    if (!(det > 0)) continue;
    float s = (sw * swlx - swl * swx) / det;
    float off = (swll * swx - swl * swlx) / det;
    if (off > 0) {  // the offset must stay <= 0
      off = 0;
      s = swlx / swll;
    }
    if (!(s >= 0)) continue;
    const float err = swxx - 2 * s * swlx - 2 * off * swx + s * s * swll +
                      2 * s * off * swl + off * off * sw;
    if (err < best_err) {
      best_err = err;
      best_scale = s;
      best_offset = off;
    }
  }
  *scale = best_scale;
  *min_out = -best_offset;
}

void QuantizeQ4_K(const float* src, size_t n, uint8_t* dst) {
  for (size_t b = 0; b < n / kQKElems; ++b) {
    const float* x = src + b * kQKElems;
    float w[256];
    ImportanceWeights(x, 256, w);
    float scales[8], mins[8];
    float max_scale = 0.0f, max_min = 0.0f;
    for (int s = 0; s < 8; ++s) {
      FitAffine(x + 32 * s, w + 32 * s, 32, 15, &scales[s], &mins[s]);
      max_scale = std::max(max_scale, scales[s]);
      max_min = std::max(max_min, mins[s]);
    }
    // 6-bit sub-block scales and mins relative to f16 super-block scales.
    const uint16_t d_bits = F32ToF16(max_scale / 63.0f);
    const uint16_t dmin_bits = F32ToF16(max_min / 63.0f);
    const float d = F16ToF32(d_bits), dmin = F16ToF32(dmin_bits);
    uint8_t sc[8], m[8];
    for (int s = 0; s < 8; ++s) {
      sc[s] = static_cast<uint8_t>(
          d > 0 ? NearestInt(scales[s] / d, 0, 63) : 0);
      m[s] = static_cast<uint8_t>(
          dmin > 0 ? NearestInt(mins[s] / dmin, 0, 63) : 0);
    }
    uint8_t* block = dst + b * sizeof(BlockQ4_K);
    StoreU16(d_bits, block);
    StoreU16(dmin_bits, block + 2);
    PackQ4KScales(sc, m, block + offsetof(BlockQ4_K, scales));
    // Requantize against the scales the reader will actually use.
    uint8_t q[256];
    for (int s = 0; s < 8; ++s) {
      const float step = d * sc[s], offset = dmin * m[s];
      const float inv = step > 0 ? 1.0f / step : 0.0f;
      for (int i = 0; i < 32; ++i) {
        q[32 * s + i] = static_cast<uint8_t>(
            NearestInt((x[32 * s + i] + offset) * inv, 0, 15));
      }
    }
    uint8_t* qs = block + offsetof(BlockQ4_K, qs);
    for (int g = 0; g < 4; ++g) {
      for (int j = 0; j < 32; ++j) {
        qs[32 * g + j] =
            static_cast<uint8_t>(q[64 * g + j] | (q[64 * g + 32 + j] << 4));
      }
    }
  }
}

// Fits x[i] ~ scale * l[i] with l in [-nmax, nmax - 1]. The grid is chosen
// so that the element of largest magnitude lands near -nmax (the side with
// one more step); the scale is then the weighted least-squares one for the
// rounded l, over a few grids.
float FitSymmetric(const float* x, const float* w, int n, int nmax) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (!(amax > 0.0f) || !std::isfinite(amax)) return 0.0f;
  float best_scale = max / -static_cast<float>(nmax);
  float best_gain = -1.0f;
  const float lo = -static_cast<float>(nmax), hi = static_cast<float>(nmax - 1);
  constexpr int kSteps = 8;
  for (int step = 0; step <= kSteps; ++step) {
    const float iscale = -(static_cast<float>(nmax) - 0.8f + 0.2f * step) / max;
    float plx[4] = {}, pll[4] = {};  // fixed-order partial sums (FitAffine)
    for (int i = 0; i < n; i += 4) {
      for (int k = 0; k < 4; ++k) {
        // Finite here (|x| <= |max|): min/max clamps vectorize.
        const float l = RoundEven(std::min(std::max(iscale * x[i + k], lo), hi));
        plx[k] += w[i + k] * l * x[i + k];
        pll[k] += w[i + k] * l * l;
      }
    }
    const float swlx = (plx[0] + plx[1]) + (plx[2] + plx[3]);
    const float swll = (pll[0] + pll[1]) + (pll[2] + pll[3]);
    // Weighted error = sum(w x^2) - swlx^2 / swll at the best scale.
    if (swll > 0 && swlx * swlx / swll > best_gain) {
      best_gain = swlx * swlx / swll;
      best_scale = swlx / swll;
    }
  }
  return best_scale;
}

void QuantizeQ6_K(const float* src, size_t n, uint8_t* dst) {
  for (size_t b = 0; b < n / kQKElems; ++b) {
    const float* x = src + b * kQKElems;
    float w[256];
    ImportanceWeights(x, 256, w);
    float scales[16];
    float amax = 0.0f, max = 0.0f;
    for (int g = 0; g < 16; ++g) {
      scales[g] = FitSymmetric(x + 16 * g, w + 16 * g, 16, 32);
      if (std::fabs(scales[g]) > amax) {
        amax = std::fabs(scales[g]);
        max = scales[g];
      }
    }
    // int8 group scales; the largest maps to -128 (one more step that side).
    const uint16_t d_bits = F32ToF16(max / -128.0f);
    const float d = F16ToF32(d_bits);
    int8_t sc[16];
    for (int g = 0; g < 16; ++g) {
      sc[g] = static_cast<int8_t>(
          d != 0 ? NearestInt(scales[g] / d, -128, 127) : 0);
    }
    uint8_t q[256];
    for (int g = 0; g < 16; ++g) {
      const float step = d * sc[g];
      const float inv = step != 0 ? 1.0f / step : 0.0f;
      for (int i = 0; i < 16; ++i) {
        q[16 * g + i] = static_cast<uint8_t>(
            NearestInt(x[16 * g + i] * inv, -32, 31) + 32);
      }
    }
    uint8_t* block = dst + b * sizeof(BlockQ6_K);
    uint8_t* ql = block;
    uint8_t* qh = block + offsetof(BlockQ6_K, qh);
    for (int h = 0; h < 2; ++h) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t* e = q + 128 * h + l;
        ql[64 * h + l] = static_cast<uint8_t>((e[0] & 15) | ((e[64] & 15) << 4));
        ql[64 * h + 32 + l] =
            static_cast<uint8_t>((e[32] & 15) | ((e[96] & 15) << 4));
        qh[32 * h + l] = static_cast<uint8_t>((e[0] >> 4) | ((e[32] >> 4) << 2) |
                                              ((e[64] >> 4) << 4) |
                                              ((e[96] >> 4) << 6));
      }
    }
    std::memcpy(block + offsetof(BlockQ6_K, scales), sc, 16);
    StoreU16(d_bits, block + offsetof(BlockQ6_K, d));
  }
}

}  // namespace

HWY_EXPORT(DequantizeRowT);
HWY_EXPORT(DequantizeRowToBF16T);
HWY_EXPORT(ConvertRowToF16T);

bool CanConvert(TensorType type) { return TensorTypeCan(type, TypeAbility::kConvert); }

void DequantizeRow(TensorType type, const void* src, size_t n, float* dst) {
  CheckRow(type, n);
  HWY_DYNAMIC_DISPATCH(DequantizeRowT)(type, src, n, dst);
}

void F32ToF16Row(const float* src, size_t n, uint16_t* dst) {
  size_t i = HWY_DYNAMIC_DISPATCH(ConvertRowToF16T)(src, n, dst);
  for (; i < n; ++i) dst[i] = HalfFromFloat(src[i]);
}

void DequantizeRowToBF16(TensorType type, const void* src, size_t n, uint16_t* dst) {
  CheckRow(type, n);
  HWY_DYNAMIC_DISPATCH(DequantizeRowToBF16T)(type, src, n, dst);
}

void DequantizeRowReference(TensorType type, const void* src, size_t n,
                            float* dst) {
  CheckRow(type, n);
  const uint8_t* in = static_cast<const uint8_t*>(src);
  switch (type) {
    case TensorType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case TensorType::kF16:
      for (size_t i = 0; i < n; ++i) dst[i] = F16ToF32(LoadU16(in + 2 * i));
      return;
    case TensorType::kBF16:
      for (size_t i = 0; i < n; ++i) dst[i] = BF16ToF32(LoadU16(in + 2 * i));
      return;
    case TensorType::kQ8_0:
      return DequantizeQ8_0Reference(in, n, dst);
    case TensorType::kQ4_0:
      return DequantizeQ4_0Reference(in, n, dst, Q4_0Layout::Interleaved());
    case TensorType::kQ4_0S:
      return DequantizeQ4_0Reference(in, n, dst, Q4_0Layout::Split(n / kQ4_0Elems));
    case TensorType::kQ4_K:
      return DequantizeQ4_KReference(in, n, dst);
    case TensorType::kQ6_K:
      return DequantizeQ6_KReference(in, n, dst);
    default:
      return;
  }
}

float LargestBlockScale(TensorType type, const void* row, size_t n) {
  CheckRow(type, n);
  const uint8_t* in = static_cast<const uint8_t*>(row);
  const size_t blocks = n / 32;
  size_t stride = 0;  // bytes from one block's scale to the next's
  switch (type) {
    case TensorType::kQ8_0:
      stride = sizeof(BlockQ8_0);
      break;
    case TensorType::kQ4_0:
      stride = Q4_0Layout::Interleaved().scale_stride;
      break;
    case TensorType::kQ4_0S:
      stride = Q4_0Layout::Split(blocks).scale_stride;
      break;
    default:
      return 0.0f;
  }
  float largest = 0.0f;
  for (size_t b = 0; b < blocks; ++b) {
    const float d = std::fabs(F16ToF32(LoadU16(in + b * stride)));
    if (d > largest) largest = d;
  }
  return largest;
}

void QuantizeRow(TensorType type, const float* src, size_t n, void* dst) {
  CheckRow(type, n);
  uint8_t* out = static_cast<uint8_t*>(dst);
  switch (type) {
    case TensorType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case TensorType::kF16:
      if (reinterpret_cast<uintptr_t>(dst) % alignof(uint16_t) == 0) {
        return F32ToF16Row(src, n, static_cast<uint16_t*>(dst));
      }
      for (size_t i = 0; i < n; ++i) StoreU16(HalfFromFloat(src[i]), out + 2 * i);
      return;
    case TensorType::kBF16:
      for (size_t i = 0; i < n; ++i) StoreU16(F32ToBF16(src[i]), out + 2 * i);
      return;
    case TensorType::kQ8_0:
      return QuantizeQ8_0(src, n, out);
    case TensorType::kQ4_0:
      return QuantizeQ4_0(src, n, out, Q4_0Layout::Interleaved());
    case TensorType::kQ4_0S:
      return QuantizeQ4_0(src, n, out, Q4_0Layout::Split(n / kQ4_0Elems));
    case TensorType::kQ4_K:
      return QuantizeQ4_K(src, n, out);
    case TensorType::kQ6_K:
      return QuantizeQ6_K(src, n, out);
    default:
      return;
  }
}

float F16ToF32(uint16_t h) { return HalfBitsToFloat(h); }

uint16_t F32ToF16(float f) { return HalfFromFloat(f); }

float BF16ToF32(uint16_t b) { return BitsFloat(static_cast<uint32_t>(b) << 16); }

uint16_t F32ToBF16(float f) {
  const uint32_t bits = FloatBits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {  // NaN: truncate, force quiet
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);  // nearest even
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

}  // namespace sparrow::simd

#endif  // HWY_ONCE
