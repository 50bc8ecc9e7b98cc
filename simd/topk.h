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

// The cache-aware scores of DIP-CA (Dynamic Input Pruning, Eq. 10):
// out[i] = |x[i]| * (row_of_unit[i] >= 0 ? 1 : gamma), where row_of_unit is
// a unit cache's unit -> row index (negative: not cached). The paper also
// divides by max|x|; that scales every score of a token alike and so
// changes no top-K, and is left out. Then TopK(kLargest) picks the units.
void CacheWeightedMagnitudes(const float* x, const int32_t* row_of_unit,
                             float gamma, size_t n, float* out);
void CacheWeightedMagnitudesReference(const float* x,
                                      const int32_t* row_of_unit, float gamma,
                                      size_t n, float* out);

}  // namespace sparrow::simd
