// Per-target attention of one query head over a KV cache (attention.h).
//
// Three passes, as llama.cpp's CPU path does for one head: scores
// s_t = dot(q, k_t) * scale, softmax over t (softmax-inl.h: f32 exp, double
// sum), then out = sum_t p_t v_t accumulated in f32, one position at a time.
// Decoding streams n_pos * head_dim floats of K and of V per head, so memory
// bandwidth, not arithmetic, bounds this; the passes stay simple.

#if defined(SPARROW_SIMD_ATTENTION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SPARROW_SIMD_ATTENTION_INL_H_
#undef SPARROW_SIMD_ATTENTION_INL_H_
#else
#define SPARROW_SIMD_ATTENTION_INL_H_
#endif

#include <cstddef>

#include <hwy/highway.h>

#include "simd/softmax-inl.h"
#include "simd/vector_ops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sparrow::simd {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

HWY_INLINE void AttentionHeadImpl(const float* HWY_RESTRICT q,
                                  const float* HWY_RESTRICT k,
                                  const float* HWY_RESTRICT v, size_t stride,
                                  size_t n_pos, size_t head_dim, float scale,
                                  float* HWY_RESTRICT scratch,
                                  float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> d;
  for (size_t t = 0; t < n_pos; ++t) {
    scratch[t] = DotImpl(d, q, k + t * stride, head_dim) * scale;
  }
  SoftmaxImpl(scratch, n_pos);

  const size_t N = hn::Lanes(d);
  size_t j = 0;
  // Blocks of up to four vectors of `out` stay in registers across all
  // positions; each V row is then read once per block.
  for (; j + 4 * N <= head_dim; j += 4 * N) {
    auto o0 = hn::Zero(d), o1 = hn::Zero(d), o2 = hn::Zero(d),
         o3 = hn::Zero(d);
    for (size_t t = 0; t < n_pos; ++t) {
      const float* HWY_RESTRICT row = v + t * stride + j;
      const auto p = hn::Set(d, scratch[t]);
      o0 = hn::MulAdd(p, hn::LoadU(d, row), o0);
      o1 = hn::MulAdd(p, hn::LoadU(d, row + N), o1);
      o2 = hn::MulAdd(p, hn::LoadU(d, row + 2 * N), o2);
      o3 = hn::MulAdd(p, hn::LoadU(d, row + 3 * N), o3);
    }
    hn::StoreU(o0, d, out + j);
    hn::StoreU(o1, d, out + j + N);
    hn::StoreU(o2, d, out + j + 2 * N);
    hn::StoreU(o3, d, out + j + 3 * N);
  }
  for (; j + N <= head_dim; j += N) {
    auto o = hn::Zero(d);
    for (size_t t = 0; t < n_pos; ++t) {
      o = hn::MulAdd(hn::Set(d, scratch[t]), hn::LoadU(d, v + t * stride + j),
                     o);
    }
    hn::StoreU(o, d, out + j);
  }
  if (j < head_dim) {
    const size_t rest = head_dim - j;
    auto o = hn::Zero(d);
    for (size_t t = 0; t < n_pos; ++t) {
      o = hn::MulAdd(hn::Set(d, scratch[t]),
                     LoadTail(d, v + t * stride + j, rest), o);
    }
    StoreTail(d, o, out + j, rest);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::simd
HWY_AFTER_NAMESPACE();

#endif  // SPARROW_SIMD_ATTENTION_INL_H_ toggle guard
