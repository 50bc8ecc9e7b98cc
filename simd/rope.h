// Rotary position embedding.
#pragma once

#include <cstddef>

namespace sparrow::simd {

enum class RopeStyle {
  kAdjacentPairs,  // rotates (0,1), (2,3), ...: GGUF llama (Q/K pre-permuted)
  kHalves,         // rotates (i, i + rope_dims/2): "neox", used by qwen2
};

// Angles for one position: for pair i < rope_dims/2,
// theta_i = position * freq_base^(-2i/rope_dims), computed as ggml does
// (theta starts at position and is multiplied by the per-pair ratio in f32),
// so results match llama.cpp to the last bit where libm agrees.
// Writes rope_dims / 2 values to each of cos_out and sin_out. InputError if
// rope_dims is odd.
void RopeAngles(float position, size_t rope_dims, float freq_base,
                float* cos_out, float* sin_out);

// Rotates the first `rope_dims` dimensions of each of `n_heads` heads of
// `head_dim` floats laid out back to back in `heads`; the rest are untouched.
// `cos` and `sin` hold rope_dims / 2 angles (RopeAngles). InputError unless
// rope_dims is even and at most head_dim.
void ApplyRope(float* heads, size_t n_heads, size_t head_dim, size_t rope_dims,
               const float* cos, const float* sin, RopeStyle style);
void ApplyRopeReference(float* heads, size_t n_heads, size_t head_dim,
                        size_t rope_dims, const float* cos, const float* sin,
                        RopeStyle style);

}  // namespace sparrow::simd
