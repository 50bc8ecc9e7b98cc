// The yardstick for memory-bound kernels: how fast plain Highway vector
// loads can read a buffer much larger than the last-level cache, with the
// same thread pool (src/threads.h) the kernels use. Benchmarks report their
// weight bandwidth as a percentage of this figure, measured in the same
// process just before, so a busy or throttled machine shows up in both.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sparrow::bench {

// Sums `bytes` (a multiple of 64) of `data` as 64-bit integers with vector
// loads and adds; returns the sum so the reads cannot be optimised away.
uint64_t StreamSum(const void* data, size_t bytes);

struct StreamResult {
  double gb_per_s;  // median over repetitions, 1 GB = 1e9 bytes
  double min_gb_per_s, max_gb_per_s;
};

// Reads a `buffer_bytes` buffer (allocated and touched once per call) with
// the current ThreadCount() threads, each its own contiguous part, `reps`
// times after one warm-up pass.
StreamResult MeasureStreamRead(size_t buffer_bytes, int reps);

}  // namespace sparrow::bench
