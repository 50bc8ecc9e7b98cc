// Attention of one query head over cached keys and values, and the storage
// types of those caches.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sparrow::simd {

// How one head of one position is stored in a KV cache:
// - kF32, kF16: head_dim values;
// - kQ8_0: ggml's Q8_0 blocks along the head (an f16 scale d, then 32 int8
//   q, x = d * q), the last block shorter when head_dim is not a multiple
//   of 32 (its scale still comes first). With head_dim a multiple of 32 a
//   head is exactly ggml's Q8_0 row.
// - kQ4_0: ggml's Q4_0 blocks (an f16 scale d, then 16 bytes: byte i holds
//   element i in its low nibble and element i + 16 in its high one, x =
//   d * (nibble - 8)). A short last block of L values keeps min(L, 16) bytes
//   (its high nibbles past L are 8, i.e. zero). With head_dim a multiple of
//   32 a head is exactly ggml's Q4_0 row.
enum class KvType : uint8_t { kF32, kF16, kQ8_0, kQ4_0 };

// Bytes of one head of head_dim values.
size_t KvHeadBytes(KvType type, size_t head_dim);

// Stores n_heads consecutive heads of head_dim floats from `src` into `dst`
// (n_heads * KvHeadBytes bytes). F16 rounds to nearest even; Q8_0 and Q4_0
// pick the scale and round as ggml's quantizers do (Q8_0: d = absmax / 127,
// q rounded half away from zero; Q4_0: d = the value of largest magnitude
// / -8), so a head of 32k values is bit-equal to ggml's.
void StoreKvHeads(KvType type, const float* src, size_t n_heads,
                  size_t head_dim, void* dst);
// One stored head back to f32 (exact for f32/f16; d * q for Q8_0 and
// d * (q - 8) for Q4_0).
void LoadKvHead(KvType type, const void* src, size_t head_dim, float* dst);

// The keys (or values) of one head for every position: position t's head
// starts at data + t * stride bytes.
struct KvRows {
  KvType type = KvType::kF32;
  const void* data = nullptr;
  size_t stride = 0;  // bytes
};

// Up to four queries over the same keys and values: the query heads of one
// KV head (grouped-query attention) at one position. Each query's result is
// what AttentionHead gives it alone, bit for bit; the group reads each key
// and value row once for all of them.
inline constexpr size_t kMaxAttentionQueries = 4;
struct AttentionQueries {
  const float* q = nullptr;  // query g at q + g * q_stride
  size_t q_stride = 0;
  size_t n_queries = 1;      // 1 .. kMaxAttentionQueries
  KvRows k, v;
  size_t n_pos = 0, head_dim = 0;
  float scale = 1.0f;
  float* scratch = nullptr;  // n_queries * n_pos floats: query g's p at g * n_pos
  float* out = nullptr;      // query g's output at out + g * out_stride
  size_t out_stride = 0;
};
// std::invalid_argument if n_queries is not in 1..kMaxAttentionQueries.
void AttentionGroup(const AttentionQueries& a);
void AttentionGroupReference(const AttentionQueries& a);

// Computes s_t = scale * dot(q, k_t) for t < n_pos, p = softmax(s),
// out = sum_t p_t v_t, reading K and V in their stored types (f16, Q8_0 and
// Q4_0 are widened to f32 in registers; products and sums are f32). `scratch`
// holds n_pos floats and ends up holding p. With n_pos == 0, out is all
// zeros. `out` must not overlap the inputs.
void AttentionHead(const float* q, const KvRows& k, const KvRows& v,
                   size_t n_pos, size_t head_dim, float scale, float* scratch,
                   float* out);
// Scalar reference: each row widened with LoadKvHead, double-accumulated
// dots, the reference softmax, and the weighted sum of V in double.
void AttentionHeadReference(const float* q, const KvRows& k, const KvRows& v,
                            size_t n_pos, size_t head_dim, float scale,
                            float* scratch, float* out);

}  // namespace sparrow::simd
