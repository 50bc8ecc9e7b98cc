// Per-target attention of query heads over a KV cache (attention.h).
//
// Three passes, as llama.cpp's CPU path does for one head: scores
// s_t = dot(q, k_t) * scale, softmax over t (softmax-inl.h: f32 exp, double
// sum), then out = sum_t p_t v_t accumulated in f32, one position at a time.
// Decoding streams n_pos * head_dim stored values of K and of V per head, so
// memory bandwidth, not arithmetic, bounds this: f16 and Q8_0 caches are
// widened to f32 in registers, which costs a few instructions per vector and
// halves (quarters) the bytes read.

#if defined(SPARROW_SIMD_ATTENTION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SPARROW_SIMD_ATTENTION_INL_H_
#undef SPARROW_SIMD_ATTENTION_INL_H_
#else
#define SPARROW_SIMD_ATTENTION_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <hwy/highway.h>

#include "simd/attention.h"  // KvType
#include "simd/quant_blocks.h"
#include "simd/quantize-inl.h"  // PromoteHalf
#include "simd/softmax-inl.h"
#include "simd/vector_ops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sparrow::simd {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// A block's f16 scale as f32, through the target's own conversion (one
// instruction where it has one: F16C, NEON) rather than the scalar bit
// manipulation, since attention reads one per block and row. Exact either
// way.
HWY_INLINE float HalfScaleAt(const uint8_t* p) {
  const hn::CappedTag<float, 1> d1;
  const hn::Rebind<hwy::float16_t, decltype(d1)> dh;
  return hn::GetLane(PromoteHalf(d1, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p))));
}

// Stored head formats (attention.h's KvType). A head is a run of blocks;
// block b starts at element b * kBlock, its values are multiplied by
// Scale(head, start) (1 for unscaled formats). Values(head, start) points
// at element `start` of formats with one value per T; Q4_0's nibbles are
// found by Bytes instead (kNibbles).
struct KvF32Format {
  using T = float;
  static constexpr size_t kBlock = ~size_t{0};  // one block: the whole head
  static constexpr bool kScaled = false;
  static constexpr bool kNibbles = false;
  static const T* Values(const uint8_t* head, size_t start) {
    return reinterpret_cast<const T*>(head) + start;
  }
  static float Scale(const uint8_t*, size_t) { return 1.0f; }
};
struct KvF16Format {
  using T = hwy::float16_t;
  static constexpr size_t kBlock = ~size_t{0};
  static constexpr bool kScaled = false;
  static constexpr bool kNibbles = false;
  static const T* Values(const uint8_t* head, size_t start) {
    return reinterpret_cast<const T*>(head) + start;
  }
  static float Scale(const uint8_t*, size_t) { return 1.0f; }
};
struct KvQ8_0Format {
  using T = int8_t;
  static constexpr size_t kBlock = kQ8_0Elems;
  static constexpr bool kScaled = true;
  static constexpr bool kNibbles = false;
  static const T* Values(const uint8_t* head, size_t start) {
    return reinterpret_cast<const T*>(head + (start / kBlock) * sizeof(BlockQ8_0) + 2 +
                                      start % kBlock);
  }
  static float Scale(const uint8_t* head, size_t start) {
    return HalfScaleAt(head + (start / kBlock) * sizeof(BlockQ8_0));
  }
};
struct KvQ4_0Format {
  static constexpr size_t kBlock = kQ4_0Elems;
  static constexpr bool kScaled = true;
  static constexpr bool kNibbles = true;
  // The byte holding element e: byte e % 16 of its block, in the low nibble
  // for the block's first 16 elements and the high one for the rest.
  static const uint8_t* Bytes(const uint8_t* head, size_t e) {
    return head + (e / kBlock) * sizeof(BlockQ4_0) + 2 + e % (kBlock / 2);
  }
  static bool High(size_t e) { return e % kBlock >= kBlock / 2; }
  static float Scale(const uint8_t* head, size_t start) {
    return HalfScaleAt(head + (start / kBlock) * sizeof(BlockQ4_0));
  }
};

// Vectors of stored values widened to f32.
template <class DF>
HWY_INLINE hn::Vec<DF> LoadWidened(DF df, const float* HWY_RESTRICT p) {
  return hn::LoadU(df, p);
}
template <class DF>
HWY_INLINE hn::Vec<DF> LoadWidened(DF df, const hwy::float16_t* HWY_RESTRICT p) {
  return PromoteHalf(df, hn::LoadU(hn::Rebind<hwy::float16_t, DF>(), p));
}
template <class DF>
HWY_INLINE hn::Vec<DF> LoadWidened(DF df, const int8_t* HWY_RESTRICT p) {
  const hn::RebindToSigned<DF> di;
  return hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(hn::Rebind<int8_t, DF>(), p)));
}
// The first `count` (< lanes) values, the other lanes zero; copied through a
// buffer because the values past `count` may be the end of the cache.
template <class DF, typename T>
HWY_INLINE hn::Vec<DF> LoadWidenedTail(DF df, const T* HWY_RESTRICT p, size_t count) {
  HWY_ALIGN T buf[HWY_MAX_BYTES / sizeof(float)] = {};
  std::memcpy(buf, p, count * sizeof(T));
  return LoadWidened(df, buf);
}

// Q4_0 elements e .. e + count - 1 (within one block) as (nibble - 8), one
// at a time into `out`.
HWY_INLINE void NibblesMinus8(const uint8_t* HWY_RESTRICT head, size_t e, size_t count,
                              float* HWY_RESTRICT out) {
  for (size_t i = 0; i < count; ++i) {
    const uint8_t byte = *KvQ4_0Format::Bytes(head, e + i);
    const int q = KvQ4_0Format::High(e + i) ? byte >> 4 : byte & 15;
    out[i] = static_cast<float>(q - 8);
  }
}

// The stored values e .. e + lanes - 1 widened to f32 (unscaled). A vector
// starts at a multiple of its lane count and never straddles a block; one
// of up to 16 lanes stays within one half of a Q4_0 block, so its nibbles
// are all low or all high (wider vectors, a whole block, are unpacked one
// value at a time).
template <class Format, class DF>
HWY_INLINE hn::Vec<DF> LoadStored(DF df, const uint8_t* HWY_RESTRICT head, size_t e) {
  if constexpr (Format::kNibbles) {
    if (hn::Lanes(df) > Format::kBlock / 2) {
      HWY_ALIGN float buf[Format::kBlock];
      NibblesMinus8(head, e, hn::Lanes(df), buf);
      return hn::Load(df, buf);
    }
    const hn::RebindToSigned<DF> di32;
    const hn::RebindToUnsigned<DF> du32;
    const auto bytes =
        hn::BitCast(di32, hn::PromoteTo(du32, hn::LoadU(hn::Rebind<uint8_t, DF>(), Format::Bytes(head, e))));
    const auto nibbles = Format::High(e) ? hn::ShiftRight<4>(bytes) : hn::And(bytes, hn::Set(di32, 15));
    return hn::ConvertTo(df, hn::Sub(nibbles, hn::Set(di32, 8)));
  } else {
    return LoadWidened(df, Format::Values(head, e));
  }
}
// The first `count` (< lanes) values from e, the other lanes zero.
template <class Format, class DF>
HWY_INLINE hn::Vec<DF> LoadStoredTail(DF df, const uint8_t* HWY_RESTRICT head, size_t e,
                                      size_t count) {
  if constexpr (Format::kNibbles) {
    HWY_ALIGN float buf[HWY_MAX_BYTES / sizeof(float)] = {};
    NibblesMinus8(head, e, count, buf);
    return hn::Load(df, buf);
  } else {
    return LoadWidenedTail(df, Format::Values(head, e), count);
  }
}

// Up to four queries that read the same K and V rows (the query heads of one
// KV head under grouped-query attention) share each pass over them: a row is
// read, widened and scaled once for all of them, so decoding at long
// contexts reads the cache once per group of four heads, not once per head.
// Each query's arithmetic is its own (its own chains, the same operations
// whatever the other queries are), so its result does not depend on how the
// heads were grouped.

// a_g += q_g[e ...] * w for the kQ queries (q_g = q + g * q_stride).
template <size_t kQ, class DF, class V>
HWY_INLINE void QueriesMulAdd(DF df, const float* HWY_RESTRICT q, size_t q_stride, size_t e, V w,
                              V& a0, V& a1, V& a2, V& a3) {
  a0 = hn::MulAdd(hn::LoadU(df, q + e), w, a0);
  if constexpr (kQ > 1) a1 = hn::MulAdd(hn::LoadU(df, q + q_stride + e), w, a1);
  if constexpr (kQ > 2) a2 = hn::MulAdd(hn::LoadU(df, q + 2 * q_stride + e), w, a2);
  if constexpr (kQ > 3) a3 = hn::MulAdd(hn::LoadU(df, q + 3 * q_stride + e), w, a3);
}
// The same for the last `count` (< lanes) elements.
template <size_t kQ, class DF, class V>
HWY_INLINE void QueriesMulAddTail(DF df, const float* HWY_RESTRICT q, size_t q_stride, size_t e,
                                  size_t count, V w, V& a0, V& a1, V& a2, V& a3) {
  a0 = hn::MulAdd(LoadTail(df, q + e, count), w, a0);
  if constexpr (kQ > 1) a1 = hn::MulAdd(LoadTail(df, q + q_stride + e, count), w, a1);
  if constexpr (kQ > 2) a2 = hn::MulAdd(LoadTail(df, q + 2 * q_stride + e, count), w, a2);
  if constexpr (kQ > 3) a3 = hn::MulAdd(LoadTail(df, q + 3 * q_stride + e, count), w, a3);
}

// scores[g * n_pos + t] = scale * dot(q_g, k_t) for g < kQ, t < n_pos. A
// key's block is widened and multiplied by its scale once; each query sums
// its products in one chain per key. Vectors never straddle a block: the
// caller's tag holds at most 32 lanes, which divides the Q8_0 and Q4_0
// blocks.
template <class Format, size_t kQ, class DF>
HWY_INLINE void ScoresGroup(DF df, const float* HWY_RESTRICT q, size_t q_stride,
                            const uint8_t* HWY_RESTRICT k, size_t k_stride, size_t n_pos,
                            size_t head_dim, float scale, float* HWY_RESTRICT scores) {
  const size_t N = hn::Lanes(df);
  for (size_t t = 0; t < n_pos; ++t) {
    const uint8_t* head = k + t * k_stride;
    auto a0 = hn::Zero(df), a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
    for (size_t start = 0; start < head_dim;) {
      const size_t len = std::min(Format::kBlock, head_dim - start);
      const auto s = hn::Set(df, Format::Scale(head, start));
      size_t i = 0;
      for (; i + N <= len; i += N) {
        auto w = LoadStored<Format>(df, head, start + i);
        if constexpr (Format::kScaled) w = hn::Mul(w, s);
        QueriesMulAdd<kQ>(df, q, q_stride, start + i, w, a0, a1, a2, a3);
      }
      if (i < len) {
        auto w = LoadStoredTail<Format>(df, head, start + i, len - i);
        if constexpr (Format::kScaled) w = hn::Mul(w, s);
        QueriesMulAddTail<kQ>(df, q, q_stride, start + i, len - i, w, a0, a1, a2, a3);
      }
      start += len;
    }
    scores[t] = hn::GetLane(hn::SumOfLanes(df, a0)) * scale;
    if constexpr (kQ > 1) scores[n_pos + t] = hn::GetLane(hn::SumOfLanes(df, a1)) * scale;
    if constexpr (kQ > 2) scores[2 * n_pos + t] = hn::GetLane(hn::SumOfLanes(df, a2)) * scale;
    if constexpr (kQ > 3) scores[3 * n_pos + t] = hn::GetLane(hn::SumOfLanes(df, a3)) * scale;
  }
}

// o_v += c * w_v for the kV vectors of one query.
template <size_t kV, class V>
HWY_INLINE void AxpyVectors(V c, V w0, V w1, V w2, V w3, V& o0, V& o1, V& o2, V& o3) {
  o0 = hn::MulAdd(c, w0, o0);
  if constexpr (kV > 1) o1 = hn::MulAdd(c, w1, o1);
  if constexpr (kV > 2) o2 = hn::MulAdd(c, w2, o2);
  if constexpr (kV > 3) o3 = hn::MulAdd(c, w3, o3);
}
template <size_t kV, class DF, class V>
HWY_INLINE void StoreVectors(DF df, V o0, V o1, V o2, V o3, float* HWY_RESTRICT out) {
  const size_t N = hn::Lanes(df);
  hn::StoreU(o0, df, out);
  if constexpr (kV > 1) hn::StoreU(o1, df, out + N);
  if constexpr (kV > 2) hn::StoreU(o2, df, out + 2 * N);
  if constexpr (kV > 3) hn::StoreU(o3, df, out + 3 * N);
}

// out_g[j, j + kV * lanes) = sum_t p_g[t] v_t[...] for g < kQ (p_g = p +
// g * n_pos, out_g = out + g * out_stride): the kQ * kV sums stay in
// registers over all positions, and each value row's vectors are widened
// once. The coefficient of a stored vector is p_g[t] times its block's
// scale, rounded to f32 once.
template <class Format, size_t kQ, size_t kV, class DF>
HWY_INLINE void WeightedSumVectors(DF df, const float* HWY_RESTRICT p,
                                   const uint8_t* HWY_RESTRICT v, size_t v_stride, size_t n_pos,
                                   size_t j, float* HWY_RESTRICT out, size_t out_stride) {
  const size_t N = hn::Lanes(df);
  using V = hn::Vec<DF>;
  V o00 = hn::Zero(df), o01 = o00, o02 = o00, o03 = o00, o10 = o00, o11 = o00, o12 = o00,
    o13 = o00, o20 = o00, o21 = o00, o22 = o00, o23 = o00, o30 = o00, o31 = o00, o32 = o00,
    o33 = o00;
  // Vector i's block is the first's or starts with it (a vector never
  // straddles one), so scales are read once per block.
  const bool one_block = Format::kBlock / N >= kV && (j / N) % (Format::kBlock / N) + kV <=
                                                          Format::kBlock / N;
  for (size_t t = 0; t < n_pos; ++t) {
    const uint8_t* head = v + t * v_stride;
    const V w0 = LoadStored<Format>(df, head, j);
    V w1 = w0, w2 = w0, w3 = w0;
    if constexpr (kV > 1) w1 = LoadStored<Format>(df, head, j + N);
    if constexpr (kV > 2) w2 = LoadStored<Format>(df, head, j + 2 * N);
    if constexpr (kV > 3) w3 = LoadStored<Format>(df, head, j + 3 * N);
    if constexpr (Format::kScaled) {
      if (!one_block) {
        // Vectors in different blocks: one query-vector product at a time.
        const float s[4] = {Format::Scale(head, j), Format::Scale(head, j + N * (kV > 1)),
                            Format::Scale(head, j + 2 * N * (kV > 2)),
                            Format::Scale(head, j + 3 * N * (kV > 3))};
        const float pt[4] = {p[t], p[(1 % kQ) * n_pos + t], p[(2 % kQ) * n_pos + t],
                             p[(3 % kQ) * n_pos + t]};
#define SPARROW_AXPY_Q(g)                                                        \
  o##g##0 = hn::MulAdd(hn::Set(df, pt[g] * s[0]), w0, o##g##0);                 \
  if constexpr (kV > 1) o##g##1 = hn::MulAdd(hn::Set(df, pt[g] * s[1]), w1, o##g##1); \
  if constexpr (kV > 2) o##g##2 = hn::MulAdd(hn::Set(df, pt[g] * s[2]), w2, o##g##2); \
  if constexpr (kV > 3) o##g##3 = hn::MulAdd(hn::Set(df, pt[g] * s[3]), w3, o##g##3);
        SPARROW_AXPY_Q(0)
        if constexpr (kQ > 1) { SPARROW_AXPY_Q(1) }
        if constexpr (kQ > 2) { SPARROW_AXPY_Q(2) }
        if constexpr (kQ > 3) { SPARROW_AXPY_Q(3) }
#undef SPARROW_AXPY_Q
        continue;
      }
    }
    const float s = Format::Scale(head, j);  // 1 for unscaled formats
    const auto coeff = [&](size_t g) HWY_ATTR {
      const float pg = p[g * n_pos + t];
      return hn::Set(df, Format::kScaled ? pg * s : pg);
    };
    AxpyVectors<kV>(coeff(0), w0, w1, w2, w3, o00, o01, o02, o03);
    if constexpr (kQ > 1) AxpyVectors<kV>(coeff(1), w0, w1, w2, w3, o10, o11, o12, o13);
    if constexpr (kQ > 2) AxpyVectors<kV>(coeff(2), w0, w1, w2, w3, o20, o21, o22, o23);
    if constexpr (kQ > 3) AxpyVectors<kV>(coeff(3), w0, w1, w2, w3, o30, o31, o32, o33);
  }
  StoreVectors<kV>(df, o00, o01, o02, o03, out + j);
  if constexpr (kQ > 1) StoreVectors<kV>(df, o10, o11, o12, o13, out + out_stride + j);
  if constexpr (kQ > 2) StoreVectors<kV>(df, o20, o21, o22, o23, out + 2 * out_stride + j);
  if constexpr (kQ > 3) StoreVectors<kV>(df, o30, o31, o32, o33, out + 3 * out_stride + j);
}

// All of out_g = sum_t p_g[t] v_t: four vectors per query at a time for one
// or two queries, two for three or four (at most eight sums in registers),
// then single vectors, then the last partial vector through a buffer.
template <class Format, size_t kQ, class DF>
HWY_INLINE void WeightedSumGroup(DF df, const float* HWY_RESTRICT p,
                                 const uint8_t* HWY_RESTRICT v, size_t v_stride, size_t n_pos,
                                 size_t head_dim, float* HWY_RESTRICT out, size_t out_stride) {
  const size_t N = hn::Lanes(df);
  constexpr size_t kV = kQ <= 2 ? 4 : 2;
  size_t j = 0;
  for (; j + kV * N <= head_dim; j += kV * N) {
    WeightedSumVectors<Format, kQ, kV>(df, p, v, v_stride, n_pos, j, out, out_stride);
  }
  for (; j + N <= head_dim; j += N) {
    WeightedSumVectors<Format, kQ, 1>(df, p, v, v_stride, n_pos, j, out, out_stride);
  }
  if (j < head_dim) {
    const size_t rest = head_dim - j;
    for (size_t g = 0; g < kQ; ++g) {
      auto o = hn::Zero(df);
      for (size_t t = 0; t < n_pos; ++t) {
        const uint8_t* head = v + t * v_stride;
        const float pg = p[g * n_pos + t];
        const float c = Format::kScaled ? pg * Format::Scale(head, j) : pg;
        o = hn::MulAdd(hn::Set(df, c), LoadStoredTail<Format>(df, head, j, rest), o);
      }
      StoreTail(df, o, out + g * out_stride + j, rest);
    }
  }
}

// The three passes for kQ queries with vectors of the tag d. The scores are
// instantiated per key format and the weighted sum per value format, not
// per pair of them.
template <size_t kQ, class DF>
HWY_INLINE void AttentionGroupTagged(DF d, const AttentionQueries& a) {
  const auto* k = static_cast<const uint8_t*>(a.k.data);
  const auto* v = static_cast<const uint8_t*>(a.v.data);
  switch (a.k.type) {
    case KvType::kF32:
      ScoresGroup<KvF32Format, kQ>(d, a.q, a.q_stride, k, a.k.stride, a.n_pos, a.head_dim,
                                   a.scale, a.scratch);
      break;
    case KvType::kF16:
      ScoresGroup<KvF16Format, kQ>(d, a.q, a.q_stride, k, a.k.stride, a.n_pos, a.head_dim,
                                   a.scale, a.scratch);
      break;
    case KvType::kQ8_0:
      ScoresGroup<KvQ8_0Format, kQ>(d, a.q, a.q_stride, k, a.k.stride, a.n_pos, a.head_dim,
                                    a.scale, a.scratch);
      break;
    case KvType::kQ4_0:
      ScoresGroup<KvQ4_0Format, kQ>(d, a.q, a.q_stride, k, a.k.stride, a.n_pos, a.head_dim,
                                    a.scale, a.scratch);
      break;
  }
  for (size_t g = 0; g < kQ; ++g) SoftmaxImpl(a.scratch + g * a.n_pos, a.n_pos);
  switch (a.v.type) {
    case KvType::kF32:
      return WeightedSumGroup<KvF32Format, kQ>(d, a.scratch, v, a.v.stride, a.n_pos, a.head_dim,
                                               a.out, a.out_stride);
    case KvType::kF16:
      return WeightedSumGroup<KvF16Format, kQ>(d, a.scratch, v, a.v.stride, a.n_pos, a.head_dim,
                                               a.out, a.out_stride);
    case KvType::kQ8_0:
      return WeightedSumGroup<KvQ8_0Format, kQ>(d, a.scratch, v, a.v.stride, a.n_pos,
                                                a.head_dim, a.out, a.out_stride);
    case KvType::kQ4_0:
      return WeightedSumGroup<KvQ4_0Format, kQ>(d, a.scratch, v, a.v.stride, a.n_pos,
                                                a.head_dim, a.out, a.out_stride);
  }
}

template <class DF>
HWY_INLINE void AttentionGroupCounted(DF d, const AttentionQueries& a) {
  switch (a.n_queries) {
    case 1: return AttentionGroupTagged<1>(d, a);
    case 2: return AttentionGroupTagged<2>(d, a);
    case 3: return AttentionGroupTagged<3>(d, a);
    case 4: return AttentionGroupTagged<4>(d, a);
  }
}

// Heads shorter than a full vector take vectors of at most 8 lanes: at full
// width every key and value of such a head would go through the tail path (a
// copy through a buffer). stories260K's heads are 8 values: its perplexity
// on 100 KB took 8.0 s with 16-lane vectors and 1.45 s with 8 (AVX3_DL, 2
// threads). Where the full width is 8 lanes or fewer, both tags are one type.
// Such heads (tiny models) are attended up to two queries at a time:
// instantiating all four group sizes for this second tag too made this file
// take 56 s to compile for the five x86 targets (32 s now), and one query
// at a time cost stories260K (two query heads per KV head) 18% of its
// perplexity speed.
HWY_INLINE void AttentionGroupImpl(const AttentionQueries& a) {
  const hn::CappedTag<float, 32> wide;
  if (a.head_dim < hn::Lanes(wide)) {
    const hn::CappedTag<float, 8> narrow;
    AttentionQueries part = a;
    for (size_t g = 0; g < a.n_queries; g += part.n_queries) {
      part.n_queries = std::min<size_t>(2, a.n_queries - g);
      part.q = a.q + g * a.q_stride;
      part.scratch = a.scratch + g * a.n_pos;
      part.out = a.out + g * a.out_stride;
      if (part.n_queries == 2) {
        AttentionGroupTagged<2>(narrow, part);
      } else {
        AttentionGroupTagged<1>(narrow, part);
      }
    }
    return;
  }
  AttentionGroupCounted(wide, a);
}

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::simd
HWY_AFTER_NAMESPACE();

#endif  // SPARROW_SIMD_ATTENTION_INL_H_ toggle guard
