// Attention of one query head over cached keys and values.
#pragma once

#include <cstddef>

namespace sparrow::simd {

// Keys and values of position t are at k + t*stride and v + t*stride
// (head_dim floats each). Computes s_t = scale * dot(q, k_t) for t < n_pos,
// p = softmax(s), out = sum_t p_t v_t. `scratch` holds n_pos floats and
// ends up holding p. With n_pos == 0, out is all zeros. `out` must not
// overlap the inputs.
void AttentionHead(const float* q, const float* k, const float* v,
                   size_t stride, size_t n_pos, size_t head_dim, float scale,
                   float* scratch, float* out);
void AttentionHeadReference(const float* q, const float* k, const float* v,
                            size_t stride, size_t n_pos, size_t head_dim,
                            float scale, float* scratch, float* out);

}  // namespace sparrow::simd
