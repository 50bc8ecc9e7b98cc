// For the kernel tests: a kernel's results must not depend on how its rows
// are prefetched (CpuStreamsRowsItself), only when the bytes arrive.
#pragma once

#include <cstddef>
#include <cstring>
#include <vector>

#include "simd/targets.h"

namespace sparrow::simd {

// Runs `run(out)` (writing n floats) with software prefetches, then with
// the hardware prefetchers alone; true when both wrote the same bits.
template <class Run>
bool SameBitsUnderEitherPrefetch(size_t n, const Run& run) {
  std::vector<float> software(n), hardware(n);
  SetStreamsRowsItselfForTest(false);
  run(software.data());
  SetStreamsRowsItselfForTest(true);
  run(hardware.data());
  ResetStreamsRowsItselfForTest();
  return std::memcmp(software.data(), hardware.data(), n * sizeof(float)) == 0;
}

}  // namespace sparrow::simd
