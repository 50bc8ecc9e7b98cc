// Dispatch and scalar references for the small vector operations.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "simd/vector_ops.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "simd/vector_ops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sparrow::simd {
namespace HWY_NAMESPACE {

float DotT(const float* a, const float* b, size_t n) {
  return DotImpl(hn::ScalableTag<float>(), a, b, n);
}
void AxpyT(float alpha, const float* x, float* y, size_t n) {
  AxpyImpl(hn::ScalableTag<float>(), alpha, x, y, n);
}
void AddInPlaceT(const float* x, float* y, size_t n) {
  AddInPlaceImpl(hn::ScalableTag<float>(), x, y, n);
}
void ScaleInPlaceT(float alpha, float* y, size_t n) {
  ScaleInPlaceImpl(hn::ScalableTag<float>(), alpha, y, n);
}
size_t ArgMaxT(const float* x, size_t n) {
  return ArgMaxImpl(hn::ScalableTag<float>(), x, n);
}

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include <cmath>

#include "simd/vector_ops.h"

namespace sparrow::simd {

HWY_EXPORT(DotT);
HWY_EXPORT(AxpyT);
HWY_EXPORT(AddInPlaceT);
HWY_EXPORT(ScaleInPlaceT);
HWY_EXPORT(ArgMaxT);

float Dot(const float* a, const float* b, size_t n) {
  return HWY_DYNAMIC_DISPATCH(DotT)(a, b, n);
}
void Axpy(float alpha, const float* x, float* y, size_t n) {
  HWY_DYNAMIC_DISPATCH(AxpyT)(alpha, x, y, n);
}
void AddInPlace(const float* x, float* y, size_t n) {
  HWY_DYNAMIC_DISPATCH(AddInPlaceT)(x, y, n);
}
void ScaleInPlace(float alpha, float* y, size_t n) {
  HWY_DYNAMIC_DISPATCH(ScaleInPlaceT)(alpha, y, n);
}
size_t ArgMax(const float* x, size_t n) {
  return HWY_DYNAMIC_DISPATCH(ArgMaxT)(x, n);
}

// The references favour being obviously right: Dot sums exact f32 products
// in double, so it is at least as accurate as any vector order.
float DotReference(const float* a, const float* b, size_t n) {
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    sum += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  }
  return static_cast<float>(sum);
}

void AxpyReference(float alpha, const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void AddInPlaceReference(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] += x[i];
}

void ScaleInPlaceReference(float alpha, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] *= alpha;
}

size_t ArgMaxReference(const float* x, size_t n) {
  size_t best = n;  // no non-NaN value seen yet
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) continue;
    if (best == n || x[i] > x[best]) best = i;
  }
  return best == n ? 0 : best;
}

}  // namespace sparrow::simd

#endif  // HWY_ONCE
