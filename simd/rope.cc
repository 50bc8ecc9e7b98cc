// Dispatch, angle table and scalar reference for rotary position embedding.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "simd/rope.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "simd/rope-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sparrow::simd {
namespace HWY_NAMESPACE {

void ApplyRopeT(float* heads, size_t n_heads, size_t head_dim,
                size_t rope_dims, const float* cos, const float* sin,
                bool halves) {
  const size_t pairs = rope_dims / 2;
  for (size_t h = 0; h < n_heads; ++h) {
    float* head = heads + h * head_dim;
    if (halves) {
      RopeHalvesHead(head, pairs, cos, sin);
    } else {
      RopeAdjacentHead(head, pairs, cos, sin);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include <cmath>

#include "base/error.h"
#include "simd/rope.h"

namespace sparrow::simd {

HWY_EXPORT(ApplyRopeT);

namespace {

// rope_dims comes from model metadata, so a bad value is bad input.
void CheckRopeDims(size_t head_dim, size_t rope_dims) {
  if (rope_dims % 2 != 0 || rope_dims > head_dim) {
    ThrowInputError("RoPE dimension count ", rope_dims,
                    " must be even and at most the head size ", head_dim);
  }
}

}  // namespace

void RopeAngles(float position, size_t rope_dims, float freq_base,
                float* cos_out, float* sin_out) {
  if (rope_dims % 2 != 0) {
    ThrowInputError("RoPE dimension count ", rope_dims, " must be even");
  }
  // ggml's recurrence, operation for operation: the ratio is
  // powf(base, -2.0f / dims) and theta is multiplied by it in f32 after each
  // pair, rather than computed as position * base^(-2i/dims) directly. The
  // two differ by a few ulp of theta, which at large positions is visible.
  const float theta_scale =
      std::pow(freq_base, -2.0f / static_cast<float>(rope_dims));
  float theta = position;
  for (size_t i = 0; i < rope_dims / 2; ++i) {
    cos_out[i] = std::cos(theta);
    sin_out[i] = std::sin(theta);
    theta *= theta_scale;
  }
}

void ApplyRope(float* heads, size_t n_heads, size_t head_dim, size_t rope_dims,
               const float* cos, const float* sin, RopeStyle style) {
  CheckRopeDims(head_dim, rope_dims);
  HWY_DYNAMIC_DISPATCH(ApplyRopeT)(heads, n_heads, head_dim, rope_dims, cos,
                                   sin, style == RopeStyle::kHalves);
}

void ApplyRopeReference(float* heads, size_t n_heads, size_t head_dim,
                        size_t rope_dims, const float* cos, const float* sin,
                        RopeStyle style) {
  CheckRopeDims(head_dim, rope_dims);
  const size_t pairs = rope_dims / 2;
  for (size_t h = 0; h < n_heads; ++h) {
    float* head = heads + h * head_dim;
    for (size_t i = 0; i < pairs; ++i) {
      const size_t i0 = style == RopeStyle::kHalves ? i : 2 * i;
      const size_t i1 = style == RopeStyle::kHalves ? i + pairs : 2 * i + 1;
      const float x0 = head[i0];
      const float x1 = head[i1];
      head[i0] = x0 * cos[i] - x1 * sin[i];
      head[i1] = x0 * sin[i] + x1 * cos[i];
    }
  }
}

}  // namespace sparrow::simd

#endif  // HWY_ONCE
