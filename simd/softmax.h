// Numerically stable softmax in place.
#pragma once

#include <cstddef>

namespace sparrow::simd {

// x[i] = exp(x[i] - max) / sum_j exp(x[j] - max). -inf entries (masked
// positions) become 0; the exponentials are summed in double. Needs at least
// one finite value; a NaN anywhere makes every output NaN.
void Softmax(float* x, size_t n);
void SoftmaxReference(float* x, size_t n);

}  // namespace sparrow::simd
