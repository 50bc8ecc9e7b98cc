// Dispatch and scalar reference for the SwiGLU gate.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "simd/activation.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "simd/activation-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sparrow::simd {
namespace HWY_NAMESPACE {

void SiluMulT(const float* gate, const float* up, size_t n, float* out) {
  SiluMulImpl(gate, up, n, out);
}

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include <cmath>

#include "simd/activation.h"

namespace sparrow::simd {

HWY_EXPORT(SiluMulT);

void SiluMul(const float* gate, const float* up, size_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(SiluMulT)(gate, up, n, out);
}

void SiluMulReference(const float* gate, const float* up, size_t n,
                      float* out) {
  for (size_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

}  // namespace sparrow::simd

#endif  // HWY_ONCE
