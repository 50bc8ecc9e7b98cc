// Small vector operations used between the big kernels.
#pragma once

#include <cstddef>

namespace sparrow::simd {

// Sum of a[i] * b[i]; f32 arithmetic with many partial sums (the reference
// sums in double).
float Dot(const float* a, const float* b, size_t n);
// y[i] += alpha * x[i]
void Axpy(float alpha, const float* x, float* y, size_t n);
// y[i] += x[i]
void AddInPlace(const float* x, float* y, size_t n);
// y[i] *= alpha
void ScaleInPlace(float alpha, float* y, size_t n);
// Index of the largest value; the lowest index among equals (greedy sampling).
// NaN values are skipped; returns 0 when n == 0 or every value is NaN. -0.0
// and +0.0 compare equal, so the lower index of the two wins.
size_t ArgMax(const float* x, size_t n);

float DotReference(const float* a, const float* b, size_t n);
void AxpyReference(float alpha, const float* x, float* y, size_t n);
void AddInPlaceReference(const float* x, float* y, size_t n);
void ScaleInPlaceReference(float alpha, float* y, size_t n);
size_t ArgMaxReference(const float* x, size_t n);

}  // namespace sparrow::simd
