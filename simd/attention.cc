// Dispatch, storage helpers and scalar reference for single-head attention.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "simd/attention.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "simd/attention.h"
#include "simd/attention-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sparrow::simd {
namespace HWY_NAMESPACE {

void AttentionGroupT(const AttentionQueries& a) { AttentionGroupImpl(a); }

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "simd/attention.h"
#include "simd/quantize.h"
#include "simd/softmax.h"
#include "simd/vector_ops.h"

namespace sparrow::simd {

HWY_EXPORT(AttentionGroupT);

static void CheckQueryCount(const AttentionQueries& a) {
  if (a.n_queries < 1 || a.n_queries > kMaxAttentionQueries) {
    throw std::invalid_argument("AttentionGroup: " + std::to_string(a.n_queries) +
                                " queries (1 to " + std::to_string(kMaxAttentionQueries) + ")");
  }
}

void AttentionGroup(const AttentionQueries& a) {
  CheckQueryCount(a);
  HWY_DYNAMIC_DISPATCH(AttentionGroupT)(a);
}

void AttentionHead(const float* q, const KvRows& k, const KvRows& v, size_t n_pos,
                   size_t head_dim, float scale, float* scratch, float* out) {
  AttentionQueries a;
  a.q = q;
  a.k = k;
  a.v = v;
  a.n_pos = n_pos;
  a.head_dim = head_dim;
  a.scale = scale;
  a.scratch = scratch;
  a.out = out;
  HWY_DYNAMIC_DISPATCH(AttentionGroupT)(a);
}

// Q8_0 and Q4_0 heads are runs of ggml blocks of 32 values, the last one
// shorter when head_dim is not a multiple of 32: it keeps its scale and the
// bytes that hold its values (Q8_0: one per value; Q4_0: the first
// min(len, 16), whose low nibbles hold values 0-15 and high ones 16-31).
constexpr size_t kKvBlockElems = 32;
static_assert(kQ8_0Elems == kKvBlockElems && kQ4_0Elems == kKvBlockElems &&
              sizeof(BlockQ8_0) >= sizeof(BlockQ4_0));

static TensorType BlockTypeOf(KvType type) {
  return type == KvType::kQ8_0 ? TensorType::kQ8_0 : TensorType::kQ4_0;
}

// Bytes of a block of `len` (<= 32) values.
static size_t StoredBlockBytes(KvType type, size_t len) {
  return 2 + (type == KvType::kQ8_0 ? len : std::min(len, kKvBlockElems / 2));
}

size_t KvHeadBytes(KvType type, size_t head_dim) {
  switch (type) {
    case KvType::kF32:
      return head_dim * sizeof(float);
    case KvType::kF16:
      return head_dim * sizeof(uint16_t);
    case KvType::kQ8_0:
    case KvType::kQ4_0: {
      const size_t rest = head_dim % kKvBlockElems;
      return head_dim / kKvBlockElems * StoredBlockBytes(type, kKvBlockElems) +
             (rest == 0 ? 0 : StoredBlockBytes(type, rest));
    }
  }
  return 0;
}

// A short block is padded with zeros (which change neither Q8_0's absmax
// nor Q4_0's value of largest magnitude), quantized by ggml's rule, and cut
// to the bytes that hold its values.
static void StoreBlocksHead(KvType type, const float* src, size_t head_dim, uint8_t* dst) {
  for (size_t start = 0; start < head_dim; start += kKvBlockElems) {
    const size_t len = std::min(kKvBlockElems, head_dim - start);
    float padded[kKvBlockElems] = {};
    std::memcpy(padded, src + start, len * sizeof(float));
    uint8_t block[sizeof(BlockQ8_0)];
    QuantizeRow(BlockTypeOf(type), padded, kKvBlockElems, block);
    const size_t bytes = StoredBlockBytes(type, len);
    std::memcpy(dst, block, bytes);
    dst += bytes;
  }
}

void StoreKvHeads(KvType type, const float* src, size_t n_heads, size_t head_dim,
                  void* dst) {
  auto* out = static_cast<uint8_t*>(dst);
  switch (type) {
    case KvType::kF32:
      std::memcpy(out, src, n_heads * head_dim * sizeof(float));
      return;
    case KvType::kF16:  // the cache's rows are 2-byte aligned
      return F32ToF16Row(src, n_heads * head_dim, reinterpret_cast<uint16_t*>(out));
    case KvType::kQ8_0:
    case KvType::kQ4_0: {
      const size_t bytes = KvHeadBytes(type, head_dim);
      for (size_t h = 0; h < n_heads; ++h) {
        StoreBlocksHead(type, src + h * head_dim, head_dim, out + h * bytes);
      }
      return;
    }
  }
}

void LoadKvHead(KvType type, const void* src, size_t head_dim, float* dst) {
  const auto* in = static_cast<const uint8_t*>(src);
  switch (type) {
    case KvType::kF32:
      std::memcpy(dst, in, head_dim * sizeof(float));
      return;
    case KvType::kF16:
      for (size_t i = 0; i < head_dim; ++i) {
        uint16_t h;
        std::memcpy(&h, in + 2 * i, 2);
        dst[i] = F16ToF32(h);
      }
      return;
    case KvType::kQ8_0:
    case KvType::kQ4_0:
      // The inverse of StoreBlocksHead: each stored block back into a whole
      // one (the bytes a short block dropped are zeros), dequantized.
      for (size_t start = 0; start < head_dim; start += kKvBlockElems) {
        const size_t len = std::min(kKvBlockElems, head_dim - start);
        const size_t bytes = StoredBlockBytes(type, len);
        uint8_t block[sizeof(BlockQ8_0)] = {};
        std::memcpy(block, in, bytes);
        float values[kKvBlockElems];
        DequantizeRowReference(BlockTypeOf(type), block, kKvBlockElems, values);
        std::memcpy(dst + start, values, len * sizeof(float));
        in += bytes;
      }
      return;
  }
}

// Built from the other references: each stored row widened exactly, double-
// accumulated dots, the reference softmax, the weighted sum of V in double.
void AttentionHeadReference(const float* q, const KvRows& k, const KvRows& v, size_t n_pos,
                            size_t head_dim, float scale, float* scratch, float* out) {
  std::vector<float> row(head_dim);
  for (size_t t = 0; t < n_pos; ++t) {
    LoadKvHead(k.type, static_cast<const uint8_t*>(k.data) + t * k.stride, head_dim, row.data());
    scratch[t] = DotReference(q, row.data(), head_dim) * scale;
  }
  SoftmaxReference(scratch, n_pos);
  std::vector<double> sum(head_dim, 0.0);
  for (size_t t = 0; t < n_pos; ++t) {
    LoadKvHead(v.type, static_cast<const uint8_t*>(v.data) + t * v.stride, head_dim, row.data());
    for (size_t j = 0; j < head_dim; ++j) sum[j] += static_cast<double>(scratch[t]) * row[j];
  }
  for (size_t j = 0; j < head_dim; ++j) out[j] = static_cast<float>(sum[j]);
}

void AttentionGroupReference(const AttentionQueries& a) {
  CheckQueryCount(a);
  for (size_t g = 0; g < a.n_queries; ++g) {
    AttentionHeadReference(a.q + g * a.q_stride, a.k, a.v, a.n_pos, a.head_dim, a.scale,
                           a.scratch + g * a.n_pos, a.out + g * a.out_stride);
  }
}

}  // namespace sparrow::simd

#endif  // HWY_ONCE
