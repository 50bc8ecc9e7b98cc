// The yardstick for memory-bound kernels: how fast plain Highway vector
// loads can read a buffer much larger than the last-level cache, with the
// same thread pool (base/threads.h) the kernels use. Benchmarks report their
// weight bandwidth as a percentage of this figure, measured in the same
// process just before, so a busy or throttled machine shows up in both.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/huge_pages.h"

namespace sparrow::bench {

// Sums `bytes` (a multiple of 64) of `data` as 64-bit integers with vector
// loads and adds, reading it as `streams` (1 or 4) contiguous parts side by
// side; returns the sum so the reads cannot be optimised away.
uint64_t StreamSum(const void* data, size_t bytes, size_t streams);

// CPU time of the calling thread, in seconds. On a machine shared with busy
// neighbours, wall time mostly measures the scheduler; a thread's CPU time
// still measures its work (though not its share of caches and DRAM).
double ThreadCpuSeconds();

struct StreamResult {
  double gb_per_s;  // median over repetitions, 1 GB = 1e9 bytes
  double min_gb_per_s, max_gb_per_s;
};

// A buffer much larger than the last-level cache, read in passes of any
// size that walk through it (wrapping around), so that a pass never finds
// its data in cache. Benchmarks interleave probe passes of the same size as
// their own repetitions, so both see the same machine conditions.
class StreamProbe {
 public:
  // With `huge_pages`, the buffer's whole 2 MiB pages are advised for
  // transparent huge pages (where the system has them), as a benchmark's
  // data on huge pages needs its yardstick to be: the probe reads 5-20%
  // faster on them (2 vCPU Zen 4 VM, one thread, 4 streams).
  explicit StreamProbe(size_t buffer_bytes, bool huge_pages = false);
  StreamProbe(const StreamProbe&) = delete;
  StreamProbe& operator=(const StreamProbe&) = delete;

  // Reads the next `bytes` with the current ThreadCount() threads, each its
  // own contiguous part; returns GB/s. With `cpu_clock` the time is the
  // largest CPU time any thread spent on its part (ThreadCpuSeconds).
  double Pass(size_t bytes, bool cpu_clock = false);
  size_t buffer_bytes() const { return bytes_; }
  // Streams per thread (1 or 4); see StreamSum.
  void set_streams(size_t streams) { streams_ = streams; }
  size_t streams() const { return streams_; }

 private:
  HugePageBuffer buffer_;
  size_t streams_ = 1;
  size_t bytes_ = 0;
  size_t position_ = 0;
};

// Whole-buffer passes over a `buffer_bytes` buffer, `reps` times after one
// warm-up pass.
StreamResult MeasureStreamRead(size_t buffer_bytes, int reps);

}  // namespace sparrow::bench
