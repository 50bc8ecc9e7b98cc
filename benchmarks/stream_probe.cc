// Stream-read probe (stream_probe.h): a Highway kernel with dynamic dispatch
// so it uses the same vector width as the kernels it is compared with.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "benchmarks/stream_probe.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace sparrow::bench {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// Sums `bytes` as `streams` equal parts read side by side (one vector from
// each part per step, one accumulator per part). Several streams keep more
// cache lines in flight than one (hardware prefetchers track each stream
// separately), which is what kernels reading several matrix rows at once
// get too, so the probe uses the better of 1 and 4 streams.
uint64_t StreamSumT(const uint8_t* data, size_t bytes, size_t streams) {
  const hn::ScalableTag<uint64_t> d;
  const size_t N = hn::Lanes(d);
  const uint64_t* p = reinterpret_cast<const uint64_t*>(data);
  const size_t n = bytes / sizeof(uint64_t);
  auto s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
  uint64_t sum = 0;
  if (streams == 4) {
    const size_t part = n / 4 / N * N;  // whole vectors per stream
    const uint64_t* p1 = p + part;
    const uint64_t* p2 = p + 2 * part;
    const uint64_t* p3 = p + 3 * part;
    for (size_t i = 0; i < part; i += N) {
      s0 = hn::Add(s0, hn::LoadU(d, p + i));
      s1 = hn::Add(s1, hn::LoadU(d, p1 + i));
      s2 = hn::Add(s2, hn::LoadU(d, p2 + i));
      s3 = hn::Add(s3, hn::LoadU(d, p3 + i));
    }
    for (size_t i = 4 * part; i < n; ++i) sum += p[i];
  } else {
    size_t i = 0;
    for (; i + 4 * N <= n; i += 4 * N) {
      s0 = hn::Add(s0, hn::LoadU(d, p + i));
      s1 = hn::Add(s1, hn::LoadU(d, p + i + N));
      s2 = hn::Add(s2, hn::LoadU(d, p + i + 2 * N));
      s3 = hn::Add(s3, hn::LoadU(d, p + i + 3 * N));
    }
    for (; i < n; ++i) sum += p[i];
  }
  return sum + hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
}

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::bench
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <new>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/timer.h"
#include "benchmarks/stream_probe.h"
#include "base/threads.h"

namespace sparrow::bench {

HWY_EXPORT(StreamSumT);

uint64_t StreamSum(const void* data, size_t bytes, size_t streams) {
  return HWY_DYNAMIC_DISPATCH(StreamSumT)(static_cast<const uint8_t*>(data),
                                          bytes, streams == 4 ? 4 : 1);
}

namespace {
constexpr size_t kGrain = 64 << 10;  // bytes per thread chunk unit
}  // namespace

StreamProbe::StreamProbe(size_t buffer_bytes, bool huge_pages) {
  bytes_ = std::max<size_t>(kGrain, buffer_bytes / kGrain * kGrain);
  buffer_ = MapWithWholeHugePages(bytes_, huge_pages);
  uint8_t* data = buffer_.data();
  // Touch every page (and give it distinct contents) before timing.
  for (size_t i = 0; i < bytes_; i += 64) {
    std::memset(data + i, static_cast<int>(i >> 6), 64);
  }
}

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double StreamProbe::Pass(size_t bytes, bool cpu_clock) {
  bytes = std::max<size_t>(kGrain, std::min(bytes, bytes_) / kGrain * kGrain);
  if (position_ + bytes > bytes_) position_ = 0;
  const uint8_t* start = buffer_.data() + position_;
  position_ += bytes;
  std::atomic<uint64_t> sink{0};
  std::mutex mu;
  double cpu_seconds = 0;
  const double t0 = NowSeconds();
  ParallelFor(bytes, kGrain, [&](size_t begin, size_t end, int) {
    const double c0 = cpu_clock ? ThreadCpuSeconds() : 0.0;
    sink.fetch_add(StreamSum(start + begin, end - begin, streams_), std::memory_order_relaxed);
    if (cpu_clock) {
      const double c = ThreadCpuSeconds() - c0;
      std::lock_guard<std::mutex> lock(mu);
      cpu_seconds = std::max(cpu_seconds, c);
    }
  });
  const double seconds = cpu_clock ? cpu_seconds : NowSeconds() - t0;
  if (sink.load() == 1) std::fputc(' ', stderr);  // keeps the sum alive
  return static_cast<double>(bytes) / seconds / 1e9;
}

StreamResult MeasureStreamRead(size_t buffer_bytes, int reps) {
  StreamProbe probe(buffer_bytes);
  probe.Pass(probe.buffer_bytes());  // warm-up: page tables, thread pool
  std::vector<double> rates;
  for (int r = 0; r < std::max(reps, 1); ++r) rates.push_back(probe.Pass(probe.buffer_bytes()));
  std::sort(rates.begin(), rates.end());
  return StreamResult{rates[rates.size() / 2], rates.front(), rates.back()};
}

}  // namespace sparrow::bench

#endif  // HWY_ONCE
