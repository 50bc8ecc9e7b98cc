// Small vector operations used between the big kernels.
#pragma once

#include <cstddef>

namespace sparrow::simd {

float Dot(const float* a, const float* b, size_t n);
// y[i] += alpha * x[i]
void Axpy(float alpha, const float* x, float* y, size_t n);
// y[i] += x[i]
void AddInPlace(const float* x, float* y, size_t n);
// y[i] *= alpha
void ScaleInPlace(float alpha, float* y, size_t n);
// Index of the largest value; the lowest index among equals (greedy sampling).
size_t ArgMax(const float* x, size_t n);

float DotReference(const float* a, const float* b, size_t n);
void AxpyReference(float alpha, const float* x, float* y, size_t n);
void AddInPlaceReference(const float* x, float* y, size_t n);
void ScaleInPlaceReference(float alpha, float* y, size_t n);
size_t ArgMaxReference(const float* x, size_t n);

}  // namespace sparrow::simd
