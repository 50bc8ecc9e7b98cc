// SwiGLU's gate: out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)).
#pragma once

#include <cstddef>

namespace sparrow::simd {

// `out` may alias `gate` or `up`.
void SiluMul(const float* gate, const float* up, size_t n, float* out);
void SiluMulReference(const float* gate, const float* up, size_t n,
                      float* out);

}  // namespace sparrow::simd
