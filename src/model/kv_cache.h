// Keys and values of every layer for positions [0, n_ctx), each in its own
// storage type (f32, f16, Q8_0 or Q4_0, simd/attention.h), laid out
// [layer][kv_head][position]: one head's keys (values) are contiguous, so
// attention reads them as one stream. (With positions outermost each head's
// rows were strided across pages, the hardware prefetchers lost them at
// every page, and decoding at long contexts waited on memory: see
// Session::Attention.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/aligned_buffer.h"
#include "simd/attention.h"

namespace sparrow {

// The KV cache types users can choose (--cache-type-k/-v), by llama.cpp's
// names. The first row is the default's.
struct KvTypeInfo {
  simd::KvType type;
  const char* name;
};
inline constexpr KvTypeInfo kKvTypes[] = {
    {simd::KvType::kF16, "f16"},
    {simd::KvType::kF32, "f32"},
    {simd::KvType::kQ8_0, "q8_0"},
    {simd::KvType::kQ4_0, "q4_0"},
};
const char* KvTypeName(simd::KvType type);
// InputError naming the choices for anything else; `flag` starts the message.
simd::KvType ParseKvType(std::string_view name, std::string_view flag);

struct KvCacheTypes {
  simd::KvType k = kKvTypes[0].type;
  simd::KvType v = kKvTypes[0].type;
};

struct KvShape {
  size_t n_layers = 0;
  size_t n_ctx = 0;
  size_t n_kv_heads = 0;
  size_t head_dim = 0;
};

class KvCache {
 public:
  KvCache(const KvShape& shape, KvCacheTypes types);

  // What the constructor allocates, for the DRAM budget.
  static uint64_t Bytes(const KvShape& shape, KvCacheTypes types);

  // Stores the kv_dim floats of position `pos`'s keys (values) of `layer`.
  void StoreKeys(size_t layer, size_t pos, const float* k);
  void StoreValues(size_t layer, size_t pos, const float* v);
  // One kv head's keys (values) of `layer` for positions 0, 1, ...
  simd::KvRows Keys(size_t layer, size_t kv_head) const;
  simd::KvRows Values(size_t layer, size_t kv_head) const;

  size_t n_ctx() const { return shape_.n_ctx; }
  KvCacheTypes types() const { return types_; }
  uint64_t bytes() const { return k_.size() + v_.size(); }

 private:
  struct Side {
    simd::KvType type;
    size_t head_bytes;
    size_t row_bytes;  // all kv heads of one position
  };
  // Bytes from the start of a side's buffer to position 0 of a head.
  size_t HeadOffset(const Side& side, size_t layer, size_t kv_head) const;
  static Side MakeSide(const KvShape& shape, simd::KvType type);
  void Store(const Side& side, AlignedBuffer<uint8_t>& buf, size_t layer, size_t pos,
             const float* src);
  simd::KvRows Rows(const Side& side, const AlignedBuffer<uint8_t>& buf, size_t layer,
                    size_t kv_head) const;

  KvShape shape_;
  KvCacheTypes types_;
  Side k_side_, v_side_;
  AlignedBuffer<uint8_t> k_;
  AlignedBuffer<uint8_t> v_;
};

}  // namespace sparrow
