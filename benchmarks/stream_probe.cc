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

// Four independent accumulators so that the adds never limit the loads.
uint64_t StreamSumT(const uint8_t* data, size_t bytes) {
  const hn::ScalableTag<uint64_t> d;
  const size_t N = hn::Lanes(d);
  const uint64_t* p = reinterpret_cast<const uint64_t*>(data);
  const size_t n = bytes / sizeof(uint64_t);
  auto s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
  size_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    s0 = hn::Add(s0, hn::LoadU(d, p + i));
    s1 = hn::Add(s1, hn::LoadU(d, p + i + N));
    s2 = hn::Add(s2, hn::LoadU(d, p + i + 2 * N));
    s3 = hn::Add(s3, hn::LoadU(d, p + i + 3 * N));
  }
  uint64_t sum = hn::GetLane(hn::SumOfLanes(
      d, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
  for (; i < n; ++i) sum += p[i];
  return sum;
}

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::bench
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/timer.h"
#include "benchmarks/stream_probe.h"
#include "src/threads.h"

namespace sparrow::bench {

HWY_EXPORT(StreamSumT);

uint64_t StreamSum(const void* data, size_t bytes) {
  return HWY_DYNAMIC_DISPATCH(StreamSumT)(static_cast<const uint8_t*>(data),
                                          bytes);
}

StreamResult MeasureStreamRead(size_t buffer_bytes, int reps) {
  constexpr size_t kGrain = 1 << 20;  // whole MiBs per thread
  buffer_bytes = std::max<size_t>(kGrain, buffer_bytes / kGrain * kGrain);
  AlignedBuffer<uint8_t> buffer(buffer_bytes, 4096);
  // Touch every page (and give it distinct contents) before timing.
  for (size_t i = 0; i < buffer_bytes; i += 64) {
    std::memset(buffer.data() + i, static_cast<int>(i >> 6), 64);
  }
  std::atomic<uint64_t> sink{0};
  auto pass = [&] {
    const double start = NowSeconds();
    ParallelFor(buffer_bytes, kGrain, [&](size_t begin, size_t end, int) {
      sink.fetch_add(StreamSum(buffer.data() + begin, end - begin),
                     std::memory_order_relaxed);
    });
    return static_cast<double>(buffer_bytes) / (NowSeconds() - start) / 1e9;
  };
  pass();  // warm-up: page tables, thread pool
  std::vector<double> rates;
  for (int r = 0; r < std::max(reps, 1); ++r) rates.push_back(pass());
  std::sort(rates.begin(), rates.end());
  return StreamResult{rates[rates.size() / 2], rates.front(), rates.back()};
}

}  // namespace sparrow::bench

#endif  // HWY_ONCE
