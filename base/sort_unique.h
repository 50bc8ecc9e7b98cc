// Sorting a set of distinct small integers through a bitmap: O(n + bound /
// 64) instead of a comparison sort's O(n log n). The streamed FFN sorts the
// units a token needs and the cache rows holding them, a few thousand values
// below a few thousand, for every group of every layer: std::sort took an
// eighth of a decode token on a 125M-shaped dip bundle in RAM.
#pragma once

#include <bit>
#include <cstdint>
#include <vector>

namespace sparrow {

// The bytes of SortDistinctBelow's scratch for values below `bound`.
inline uint64_t SortDistinctScratchBytes(uint32_t bound) {
  return (uint64_t{bound} + 63) / 64 * sizeof(uint64_t);
}

// Sorts `values` (distinct, each below `bound`) in increasing order. `bits`
// is scratch, kept by the caller between calls (SortDistinctScratchBytes).
inline void SortDistinctBelow(std::vector<uint32_t>* values, uint32_t bound,
                              std::vector<uint64_t>* bits) {
  bits->assign((size_t{bound} + 63) / 64, 0);
  for (const uint32_t v : *values) (*bits)[v >> 6] |= uint64_t{1} << (v & 63);
  values->clear();
  for (size_t w = 0; w < bits->size(); ++w) {
    for (uint64_t word = (*bits)[w]; word != 0; word &= word - 1) {
      values->push_back(static_cast<uint32_t>(64 * w + std::countr_zero(word)));
    }
  }
}

}  // namespace sparrow
