// Top-K selection: the indices of the k largest values (or largest
// magnitudes), used by sampling and by pruning policies.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sparrow::simd {

enum class TopKOrder { kLargest, kLargestAbs };

// Writes min(k, n) indices to `out`, sorted by decreasing key; ties go to the
// lower index, so the result is deterministic and equals the reference.
// -0 and +0 are equal keys; NaN ranks below every number (-inf included).
// n must be below 2^32 (InputError otherwise).
void TopK(const float* v, size_t n, size_t k, TopKOrder order, uint32_t* out);
void TopKReference(const float* v, size_t n, size_t k, TopKOrder order,
                   uint32_t* out);

}  // namespace sparrow::simd
