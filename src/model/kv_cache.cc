#include "src/model/kv_cache.h"

#include <string>

#include "base/error.h"

namespace sparrow {

const char* KvTypeName(simd::KvType type) {
  for (const KvTypeInfo& info : kKvTypes) {
    if (info.type == type) return info.name;
  }
  return "?";
}

simd::KvType ParseKvType(std::string_view name, std::string_view flag) {
  std::string names;
  for (const KvTypeInfo& info : kKvTypes) {
    if (name == info.name) return info.type;
    names += names.empty() ? "" : ", ";
    names += info.name;
  }
  ThrowInputError(flag, ": unknown KV cache type '", name, "' (choose from ", names, ")");
}

KvCache::Side KvCache::MakeSide(const KvShape& shape, simd::KvType type) {
  const size_t head_bytes = simd::KvHeadBytes(type, shape.head_dim);
  return Side{type, head_bytes, head_bytes * shape.n_kv_heads};
}

uint64_t KvCache::Bytes(const KvShape& shape, KvCacheTypes types) {
  const uint64_t rows = uint64_t{shape.n_layers} * shape.n_ctx;
  return rows * (MakeSide(shape, types.k).row_bytes + MakeSide(shape, types.v).row_bytes);
}

KvCache::KvCache(const KvShape& shape, KvCacheTypes types)
    : shape_(shape),
      types_(types),
      k_side_(MakeSide(shape, types.k)),
      v_side_(MakeSide(shape, types.v)),
      k_(shape.n_layers * shape.n_ctx * k_side_.row_bytes),
      v_(shape.n_layers * shape.n_ctx * v_side_.row_bytes) {}

size_t KvCache::HeadOffset(const Side& side, size_t layer, size_t kv_head) const {
  return (layer * shape_.n_kv_heads + kv_head) * shape_.n_ctx * side.head_bytes;
}

void KvCache::Store(const Side& side, AlignedBuffer<uint8_t>& buf, size_t layer, size_t pos,
                    const float* src) {
  for (size_t h = 0; h < shape_.n_kv_heads; ++h) {
    simd::StoreKvHeads(side.type, src + h * shape_.head_dim, 1, shape_.head_dim,
                       buf.data() + HeadOffset(side, layer, h) + pos * side.head_bytes);
  }
}

void KvCache::StoreKeys(size_t layer, size_t pos, const float* k) {
  Store(k_side_, k_, layer, pos, k);
}

void KvCache::StoreValues(size_t layer, size_t pos, const float* v) {
  Store(v_side_, v_, layer, pos, v);
}

simd::KvRows KvCache::Rows(const Side& side, const AlignedBuffer<uint8_t>& buf, size_t layer,
                           size_t kv_head) const {
  return simd::KvRows{side.type, buf.data() + HeadOffset(side, layer, kv_head), side.head_bytes};
}

simd::KvRows KvCache::Keys(size_t layer, size_t kv_head) const {
  return Rows(k_side_, k_, layer, kv_head);
}

simd::KvRows KvCache::Values(size_t layer, size_t kv_head) const {
  return Rows(v_side_, v_, layer, kv_head);
}

}  // namespace sparrow
