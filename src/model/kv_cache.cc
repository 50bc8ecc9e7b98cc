#include "src/model/kv_cache.h"

namespace sparrow {

KvCache::KvCache(size_t n_layers, size_t n_ctx, size_t kv_dim)
    : n_ctx_(n_ctx),
      kv_dim_(kv_dim),
      k_(n_layers * n_ctx * kv_dim),
      v_(n_layers * n_ctx * kv_dim) {}

}  // namespace sparrow
