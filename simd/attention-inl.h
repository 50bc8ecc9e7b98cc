// Per-target attention of one query head over a KV cache (attention.h).
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
#include <type_traits>

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
    uint16_t bits;
    std::memcpy(&bits, head + (start / kBlock) * sizeof(BlockQ8_0), 2);
    return HalfBitsToFloat(bits);
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
    uint16_t bits;
    std::memcpy(&bits, head + (start / kBlock) * sizeof(BlockQ4_0), 2);
    return HalfBitsToFloat(bits);
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

// dot(q, head) for a stored head. Vectors never straddle a block: the
// caller's tag holds at most 32 lanes, which divides the Q8_0 and Q4_0
// blocks.
template <class Format, class DF>
HWY_INLINE float DotStored(DF df, const float* HWY_RESTRICT q,
                           const uint8_t* HWY_RESTRICT head, size_t head_dim) {
  const size_t N = hn::Lanes(df);
  auto total0 = hn::Zero(df), total1 = hn::Zero(df);
  for (size_t start = 0; start < head_dim;) {
    const size_t len = std::min(Format::kBlock, head_dim - start);
    const float* qs = q + start;
    // Two chains so consecutive multiply-adds do not wait on each other.
    auto acc0 = hn::Zero(df), acc1 = hn::Zero(df);
    size_t i = 0;
    for (; i + 2 * N <= len; i += 2 * N) {
      acc0 = hn::MulAdd(hn::LoadU(df, qs + i), LoadStored<Format>(df, head, start + i), acc0);
      acc1 = hn::MulAdd(hn::LoadU(df, qs + i + N), LoadStored<Format>(df, head, start + i + N),
                        acc1);
    }
    if (i + N <= len) {
      acc0 = hn::MulAdd(hn::LoadU(df, qs + i), LoadStored<Format>(df, head, start + i), acc0);
      i += N;
    }
    if (i < len) {
      acc1 = hn::MulAdd(LoadTail(df, qs + i, len - i),
                        LoadStoredTail<Format>(df, head, start + i, len - i), acc1);
    }
    if constexpr (Format::kScaled) {
      const auto s = hn::Set(df, Format::Scale(head, start));
      total0 = hn::MulAdd(s, acc0, total0);
      total1 = hn::MulAdd(s, acc1, total1);
    } else {
      total0 = hn::Add(total0, acc0);
      total1 = hn::Add(total1, acc1);
    }
    start += len;
  }
  return hn::GetLane(hn::SumOfLanes(df, hn::Add(total0, total1)));
}

// Coefficient of the value vector at element e of a stored head.
template <class Format, class DF>
HWY_INLINE hn::Vec<DF> Coefficient(DF df, float p, const uint8_t* head, size_t e) {
  if constexpr (Format::kScaled) return hn::Set(df, p * Format::Scale(head, e));
  return hn::Set(df, p);
}

// out = sum_t p_t v_t over stored heads at v + t * stride.
template <class Format, class DF>
HWY_INLINE void WeightedSumStored(DF df, const float* HWY_RESTRICT p,
                                  const uint8_t* HWY_RESTRICT v, size_t stride,
                                  size_t n_pos, size_t head_dim,
                                  float* HWY_RESTRICT out) {
  const size_t N = hn::Lanes(df);
  size_t j = 0;
  // Blocks of up to four vectors of `out` stay in registers across all
  // positions; each V row is then read once per block.
  for (; j + 4 * N <= head_dim; j += 4 * N) {
    auto o0 = hn::Zero(df), o1 = hn::Zero(df), o2 = hn::Zero(df), o3 = hn::Zero(df);
    for (size_t t = 0; t < n_pos; ++t) {
      const uint8_t* head = v + t * stride;
      if constexpr (Format::kScaled) {
        if (2 * N <= Format::kBlock) {
          // Vectors 0-1 share a block, as do 2-3 (all four when 4N <= 32):
          // one scale per block, not per vector.
          const float s01 = Format::Scale(head, j);
          const float s23 = 4 * N <= Format::kBlock ? s01 : Format::Scale(head, j + 2 * N);
          const auto c01 = hn::Set(df, p[t] * s01), c23 = hn::Set(df, p[t] * s23);
          o0 = hn::MulAdd(c01, LoadStored<Format>(df, head, j), o0);
          o1 = hn::MulAdd(c01, LoadStored<Format>(df, head, j + N), o1);
          o2 = hn::MulAdd(c23, LoadStored<Format>(df, head, j + 2 * N), o2);
          o3 = hn::MulAdd(c23, LoadStored<Format>(df, head, j + 3 * N), o3);
          continue;
        }
        o0 = hn::MulAdd(Coefficient<Format>(df, p[t], head, j),
                        LoadStored<Format>(df, head, j), o0);
        o1 = hn::MulAdd(Coefficient<Format>(df, p[t], head, j + N),
                        LoadStored<Format>(df, head, j + N), o1);
        o2 = hn::MulAdd(Coefficient<Format>(df, p[t], head, j + 2 * N),
                        LoadStored<Format>(df, head, j + 2 * N), o2);
        o3 = hn::MulAdd(Coefficient<Format>(df, p[t], head, j + 3 * N),
                        LoadStored<Format>(df, head, j + 3 * N), o3);
      } else {
        const typename Format::T* row = Format::Values(head, j);
        const auto c = hn::Set(df, p[t]);
        o0 = hn::MulAdd(c, LoadWidened(df, row), o0);
        o1 = hn::MulAdd(c, LoadWidened(df, row + N), o1);
        o2 = hn::MulAdd(c, LoadWidened(df, row + 2 * N), o2);
        o3 = hn::MulAdd(c, LoadWidened(df, row + 3 * N), o3);
      }
    }
    hn::StoreU(o0, df, out + j);
    hn::StoreU(o1, df, out + j + N);
    hn::StoreU(o2, df, out + j + 2 * N);
    hn::StoreU(o3, df, out + j + 3 * N);
  }
  for (; j + N <= head_dim; j += N) {
    auto o = hn::Zero(df);
    for (size_t t = 0; t < n_pos; ++t) {
      const uint8_t* head = v + t * stride;
      o = hn::MulAdd(Coefficient<Format>(df, p[t], head, j), LoadStored<Format>(df, head, j), o);
    }
    hn::StoreU(o, df, out + j);
  }
  if (j < head_dim) {
    const size_t rest = head_dim - j;
    auto o = hn::Zero(df);
    for (size_t t = 0; t < n_pos; ++t) {
      const uint8_t* head = v + t * stride;
      o = hn::MulAdd(Coefficient<Format>(df, p[t], head, j),
                     LoadStoredTail<Format>(df, head, j, rest), o);
    }
    StoreTail(df, o, out + j, rest);
  }
}

// scratch[t] = scale * dot(q, k_t) for t < n_pos.
template <class KFormat, class DF>
HWY_INLINE void ScoresStored(DF d, const float* HWY_RESTRICT q, const uint8_t* HWY_RESTRICT k,
                             size_t k_stride, size_t n_pos, size_t head_dim, float scale,
                             float* HWY_RESTRICT scratch) {
  for (size_t t = 0; t < n_pos; ++t) {
    const uint8_t* head = k + t * k_stride;
    if constexpr (std::is_same_v<KFormat, KvF32Format>) {
      scratch[t] = DotImpl(d, q, reinterpret_cast<const float*>(head), head_dim) * scale;
    } else {
      scratch[t] = DotStored<KFormat>(d, q, head, head_dim) * scale;
    }
  }
}

// The three passes with vectors of the tag d (at most 32 lanes, so no
// vector straddles a Q8_0 or Q4_0 block). The scores are instantiated per key
// format and the weighted sum per value format, not per pair of them.
template <class DF>
HWY_INLINE void AttentionHeadTagged(DF d, const float* HWY_RESTRICT q, KvType k_type,
                                    const uint8_t* HWY_RESTRICT k, size_t k_stride,
                                    KvType v_type, const uint8_t* HWY_RESTRICT v,
                                    size_t v_stride, size_t n_pos, size_t head_dim, float scale,
                                    float* HWY_RESTRICT scratch, float* HWY_RESTRICT out) {
  switch (k_type) {
    case KvType::kF32:
      ScoresStored<KvF32Format>(d, q, k, k_stride, n_pos, head_dim, scale, scratch);
      break;
    case KvType::kF16:
      ScoresStored<KvF16Format>(d, q, k, k_stride, n_pos, head_dim, scale, scratch);
      break;
    case KvType::kQ8_0:
      ScoresStored<KvQ8_0Format>(d, q, k, k_stride, n_pos, head_dim, scale, scratch);
      break;
    case KvType::kQ4_0:
      ScoresStored<KvQ4_0Format>(d, q, k, k_stride, n_pos, head_dim, scale, scratch);
      break;
  }
  SoftmaxImpl(scratch, n_pos);
  switch (v_type) {
    case KvType::kF32:
      return WeightedSumStored<KvF32Format>(d, scratch, v, v_stride, n_pos, head_dim, out);
    case KvType::kF16:
      return WeightedSumStored<KvF16Format>(d, scratch, v, v_stride, n_pos, head_dim, out);
    case KvType::kQ8_0:
      return WeightedSumStored<KvQ8_0Format>(d, scratch, v, v_stride, n_pos, head_dim, out);
    case KvType::kQ4_0:
      return WeightedSumStored<KvQ4_0Format>(d, scratch, v, v_stride, n_pos, head_dim, out);
  }
}

// Heads shorter than a full vector take vectors of at most 8 lanes: at full
// width every key and value of such a head would go through the tail path (a
// copy through a buffer). stories260K's heads are 8 values: its perplexity
// on 100 KB took 8.0 s with 16-lane vectors and 1.45 s with 8 (AVX3_DL, 2
// threads). Where the full width is 8 lanes or fewer, both tags are one type.
HWY_INLINE void AttentionHeadImpl(const float* HWY_RESTRICT q, KvType k_type,
                                  const uint8_t* HWY_RESTRICT k, size_t k_stride, KvType v_type,
                                  const uint8_t* HWY_RESTRICT v, size_t v_stride, size_t n_pos,
                                  size_t head_dim, float scale, float* HWY_RESTRICT scratch,
                                  float* HWY_RESTRICT out) {
  const hn::CappedTag<float, 32> wide;
  if (head_dim < hn::Lanes(wide)) {
    return AttentionHeadTagged(hn::CappedTag<float, 8>(), q, k_type, k, k_stride, v_type, v,
                               v_stride, n_pos, head_dim, scale, scratch, out);
  }
  AttentionHeadTagged(wide, q, k_type, k, k_stride, v_type, v, v_stride, n_pos, head_dim, scale,
                      scratch, out);
}

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::simd
HWY_AFTER_NAMESPACE();

#endif  // SPARROW_SIMD_ATTENTION_INL_H_ toggle guard
