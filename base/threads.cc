#include "base/threads.h"

#include <algorithm>
#include <memory>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "sparrow_config.h"

#if SPARROW_HAVE_OPENMP
#include <omp.h>
#endif

namespace sparrow {
namespace {

int g_threads = 0;  // 0: not set yet

int HardwareThreads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

// The range of chunk `t` of `parts` over [0, n), in units of `grain`.
void ChunkRange(size_t n, size_t grain, int parts, int t, size_t* begin,
                size_t* end) {
  const size_t units = (n + grain - 1) / grain;
  const size_t per = units / parts;
  const size_t extra = units % parts;
  const size_t first = t * per + std::min<size_t>(t, extra);
  const size_t count = per + (static_cast<size_t>(t) < extra ? 1 : 0);
  *begin = std::min(n, first * grain);
  *end = std::min(n, (first + count) * grain);
}

#if !SPARROW_HAVE_OPENMP
// Workers wait for a generation counter to change, run their chunk, and
// report back; the caller runs chunk 0 itself.
class Pool {
 public:
  explicit Pool(int workers) {
    for (int i = 0; i < workers; ++i) {
      threads_.emplace_back([this, i] { Loop(i + 1); });
    }
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      ++generation_;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  int size() const { return static_cast<int>(threads_.size()) + 1; }

  void Run(const std::function<void(int)>& job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = &job;
      pending_ = static_cast<int>(threads_.size());
      ++generation_;
    }
    cv_.notify_all();
    job(0);
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [this] { return pending_ == 0; });
    job_ = nullptr;
  }

 private:
  void Loop(int index) {
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        if (stop_) return;
        job = job_;
      }
      (*job)(index);
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }

  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

std::unique_ptr<Pool>& GlobalPool() {
  static std::unique_ptr<Pool> pool;
  return pool;
}
#endif

}  // namespace

void SetThreadCount(int n) {
  g_threads = n <= 0 ? HardwareThreads() : n;
#if SPARROW_HAVE_OPENMP
  omp_set_num_threads(g_threads);  // oneDNN sizes its own parallel regions by this
#else
  GlobalPool().reset();
#endif
}

int ThreadCount() {
  if (g_threads == 0) SetThreadCount(0);
  return g_threads;
}

namespace {
// Set while a thread runs a ParallelFor body: a ParallelFor called from
// there runs its whole range on that thread. (A nested OpenMP region gets
// a team of one, which would run only the first part's range; the pool
// would wait on itself.)
thread_local bool t_in_body = false;

struct InBody {
  InBody() { t_in_body = true; }
  ~InBody() { t_in_body = false; }
};
}  // namespace

void ParallelFor(size_t n, size_t grain,
                 const std::function<void(size_t, size_t, int)>& body) {
  if (n == 0) return;
  grain = std::max<size_t>(grain, 1);
  const size_t units = (n + grain - 1) / grain;
  const int parts = static_cast<int>(std::min<size_t>(ThreadCount(), units));
  if (parts <= 1 || t_in_body) {
    body(0, n, 0);
    return;
  }
#if SPARROW_HAVE_OPENMP
#pragma omp parallel num_threads(parts)
  {
    const InBody in_body;
    const int t = omp_get_thread_num();
    size_t begin, end;
    ChunkRange(n, grain, parts, t, &begin, &end);
    if (begin < end) body(begin, end, t);
  }
#else
  std::unique_ptr<Pool>& pool = GlobalPool();
  if (!pool || pool->size() != ThreadCount()) {
    pool = std::make_unique<Pool>(ThreadCount() - 1);
  }
  const std::function<void(int)> job = [&](int t) {
    if (t >= parts) return;
    const InBody in_body;
    size_t begin, end;
    ChunkRange(n, grain, parts, t, &begin, &end);
    if (begin < end) body(begin, end, t);
  };
  pool->Run(job);
#endif
}

}  // namespace sparrow
