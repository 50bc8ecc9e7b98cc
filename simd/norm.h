// RMS normalisation: out[i] = x[i] * weight[i] / sqrt(mean(x^2) + eps).
#pragma once

#include <cstddef>

namespace sparrow::simd {

// `out` may alias `x`.
void RmsNorm(const float* x, const float* weight, size_t n, float eps,
             float* out);
void RmsNormReference(const float* x, const float* weight, size_t n, float eps,
                      float* out);

}  // namespace sparrow::simd
