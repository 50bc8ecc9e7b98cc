#include "src/runtime/probe_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/error.h"
#include "base/timer.h"

namespace sparrow {
namespace {

constexpr uint64_t kBlock = io::kDirectAlignment;

// SplitMix64: cheap, well-mixed offsets; each thread its own stream.
uint64_t NextRandom(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double Percentile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

}  // namespace

IoProbe::IoProbe(const std::string& path, bool direct) : path_(path) {
  if (direct) {
    io::DirectOpen opened =
        io::OpenDirectOrWarn(path, "probing buffered reads instead (the page cache will flatter them)");
    direct_ = opened.direct;
    if (direct_) fd_ = std::move(opened.fd);
  }
  if (!direct_) {
    fd_ = io::OpenOrThrow(path, 0);
#if defined(POSIX_FADV_RANDOM)
    (void)::posix_fadvise(fd_.get(), 0, 0, POSIX_FADV_RANDOM);
#endif
  }
  file_size_ = io::FileSizeOf(fd_.get(), path);
}

ProbeCell IoProbe::Measure(uint64_t read_bytes, int threads, double seconds, uint64_t seed) {
  if (read_bytes == 0 || read_bytes % kBlock != 0) {
    ThrowInputError("read size ", read_bytes, " is not a positive multiple of ", kBlock);
  }
  if (threads < 1 || threads > io::kMaxThreads) {
    ThrowInputError("thread count ", threads, " outside [1, ", io::kMaxThreads, "]");
  }
  if (read_bytes > file_size_) {
    ThrowInputError("'", path_, "' (", file_size_, " bytes) is smaller than one ", read_bytes,
                    "-byte read");
  }
#if defined(POSIX_FADV_DONTNEED)
  if (!direct_) (void)::posix_fadvise(fd_.get(), 0, 0, POSIX_FADV_DONTNEED);
#endif
  const uint64_t slots = (file_size_ - read_bytes) / kBlock + 1;

  struct PerThread {
    uint64_t reads = 0;
    std::vector<double> latencies_us;
  };
  std::vector<PerThread> per(static_cast<size_t>(threads));
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::atomic<bool> failed{false};
  std::mutex error_mu;
  std::exception_ptr error;
  double start = 0;
  double deadline = 0;

  auto body = [&](int t) {
    PerThread& me = per[static_cast<size_t>(t)];
    try {
      AlignedBuffer<uint8_t> buffer(read_bytes, kBlock);
      me.latencies_us.reserve(4096);
      uint64_t rng = seed * 0x100000001b3ull + static_cast<uint64_t>(t) * 0x9e3779b9ull + read_bytes;
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      while (!failed.load(std::memory_order_relaxed)) {
        const double t0 = NowSeconds();
        if (t0 >= deadline) break;
        const uint64_t offset = NextRandom(&rng) % slots * kBlock;
        uint64_t bytes = 0;
        uint64_t calls = 0;
        io::ReadFully(fd_.get(), path_, io::ReadTask{offset, read_bytes, buffer.data()},
                      file_size_, file_size_, &bytes, &calls);
        me.latencies_us.push_back((NowSeconds() - t0) * 1e6);
        ++me.reads;
      }
    } catch (...) {
      ready.fetch_add(1);  // never leave the starter waiting
      std::lock_guard<std::mutex> lock(error_mu);
      if (!error) error = std::current_exception();
      failed.store(true);
    }
  };

  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) pool.emplace_back(body, t);
  while (ready.load() < threads) std::this_thread::yield();
  start = NowSeconds();
  deadline = start + seconds;
  go.store(true, std::memory_order_release);
  for (std::thread& th : pool) th.join();
  const double end = NowSeconds();
  if (error) std::rethrow_exception(error);

  ProbeCell cell;
  cell.read_bytes = read_bytes;
  cell.threads = threads;
  cell.seconds = end - start;
  std::vector<double> all;
  double sum_us = 0;
  for (PerThread& p : per) {
    cell.reads += p.reads;
    for (double us : p.latencies_us) sum_us += us;
    all.insert(all.end(), p.latencies_us.begin(), p.latencies_us.end());
  }
  cell.bytes = cell.reads * read_bytes;
  if (cell.seconds > 0) {
    cell.mb_per_s = static_cast<double>(cell.bytes) / cell.seconds / 1e6;
    cell.iops = static_cast<double>(cell.reads) / cell.seconds;
  }
  if (cell.reads > 0) cell.mean_latency_us = sum_us / static_cast<double>(cell.reads);
  cell.p50_latency_us = Percentile(all, 0.50);
  cell.p99_latency_us = Percentile(all, 0.99);
  return cell;
}

}  // namespace sparrow
