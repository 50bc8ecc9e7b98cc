// Numerically stable softmax in place.
#pragma once

#include <cstddef>

namespace sparrow::simd {

void Softmax(float* x, size_t n);
void SoftmaxReference(float* x, size_t n);

}  // namespace sparrow::simd
