// Dispatch and scalar reference for single-head attention.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "simd/attention.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "simd/attention-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sparrow::simd {
namespace HWY_NAMESPACE {

void AttentionHeadT(const float* q, const float* k, const float* v,
                    size_t stride, size_t n_pos, size_t head_dim, float scale,
                    float* scratch, float* out) {
  AttentionHeadImpl(q, k, v, stride, n_pos, head_dim, scale, scratch, out);
}

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include "simd/attention.h"
#include "simd/softmax.h"
#include "simd/vector_ops.h"

namespace sparrow::simd {

HWY_EXPORT(AttentionHeadT);

void AttentionHead(const float* q, const float* k, const float* v,
                   size_t stride, size_t n_pos, size_t head_dim, float scale,
                   float* scratch, float* out) {
  HWY_DYNAMIC_DISPATCH(AttentionHeadT)(q, k, v, stride, n_pos, head_dim, scale,
                                       scratch, out);
}

// Built from the other references: double-accumulated dots, the reference
// softmax, and the weighted sum of V accumulated in double.
void AttentionHeadReference(const float* q, const float* k, const float* v,
                            size_t stride, size_t n_pos, size_t head_dim,
                            float scale, float* scratch, float* out) {
  for (size_t t = 0; t < n_pos; ++t) {
    scratch[t] = DotReference(q, k + t * stride, head_dim) * scale;
  }
  SoftmaxReference(scratch, n_pos);
  for (size_t j = 0; j < head_dim; ++j) {
    double sum = 0.0;
    for (size_t t = 0; t < n_pos; ++t) {
      sum += static_cast<double>(scratch[t]) * v[t * stride + j];
    }
    out[j] = static_cast<float>(sum);
  }
}

}  // namespace sparrow::simd

#endif  // HWY_ONCE
