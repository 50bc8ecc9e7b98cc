// What the user's own device delivers for random reads, by read size and
// parallelism (LLM in a flash, Figure 2b): the numbers that decide how the
// read planner should coalesce and how many I/O threads to run.
// `sparrow probe-io` (src/cli/probe_io_command.cc) prints them.
#pragma once

#include <cstdint>
#include <string>

#include "src/runtime/loader_internal.h"

namespace sparrow {

struct ProbeCell {
  uint64_t read_bytes = 0;   // size of each read
  int threads = 0;           // reads in flight (one per thread)
  double seconds = 0;        // wall time, start to the last read's end
  uint64_t reads = 0;
  uint64_t bytes = 0;
  double mb_per_s = 0;       // 10^6 bytes per second
  double iops = 0;
  double mean_latency_us = 0;
  double p50_latency_us = 0;
  double p99_latency_us = 0;
};

class IoProbe {
 public:
  // Opens `path` (a file or block device) with O_DIRECT when `direct`;
  // where the filesystem refuses it, one warning and buffered reads.
  IoProbe(const std::string& path, bool direct);

  // `threads` threads each read `read_bytes` at uniformly random
  // 4096-aligned offsets, one read at a time, for about `seconds`.
  // Buffered probes first drop the file's pages from the page cache.
  // InputError if the file is smaller than one read or a read fails.
  ProbeCell Measure(uint64_t read_bytes, int threads, double seconds, uint64_t seed = 1);

  bool direct() const { return direct_; }
  uint64_t file_size() const { return file_size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  io::FileDescriptor fd_;
  bool direct_ = false;
  uint64_t file_size_ = 0;
};

}  // namespace sparrow
