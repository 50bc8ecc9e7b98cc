#include "base/threads.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#include <pthread.h>

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
void ChunkRange(size_t n, size_t grain, int parts, int t, size_t* begin, size_t* end) {
  const size_t units = (n + grain - 1) / grain;
  const size_t per = units / parts;
  const size_t extra = units % parts;
  const size_t first = t * per + std::min<size_t>(t, extra);
  const size_t count = per + (static_cast<size_t>(t) < extra ? 1 : 0);
  *begin = std::min(n, first * grain);
  *end = std::min(n, (first + count) * grain);
}

// A hint to the core that this thread is spinning.
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

using Clock = std::chrono::steady_clock;
// How long a worker spins for the next job before it sleeps: steps of a
// token follow each other within microseconds, so workers that slept
// between them would add a wake-up to every step; a pool left idle (a
// server between requests) stops using the CPU after this.
constexpr auto kWorkerSpin = std::chrono::microseconds(50);
// How long the caller spins for the last parts before it sleeps.
constexpr auto kCallerSpin = std::chrono::microseconds(50);

// Set while a thread runs a ParallelFor body: a ParallelFor called from
// there runs on that thread alone.
thread_local bool t_in_body = false;

struct InBody {
  InBody() { t_in_body = true; }
  ~InBody() { t_in_body = false; }
};

// Runs part t of `parts` over [0, n) (nothing if it is empty).
void RunPart(size_t n, size_t grain, int parts, int t,
             const std::function<void(size_t, size_t, int)>& body) {
  size_t begin, end;
  ChunkRange(n, grain, parts, t, &begin, &end);
  if (begin < end) {
    const InBody in_body;
    body(begin, end, t);
  }
}

// The pool behind ParallelFor: the caller and ThreadCount() - 1 workers.
//
// Why not an OpenMP parallel region (as before): a region ends at a
// barrier every thread of the team must reach, and OpenMP's waiting
// workers spin. Where other programs keep a core busy, the worker that
// shares it is descheduled for whole time slices, and every parallel step
// then waits for it: on a 2 vCPU VM with one busy process, generation at
// two threads fell to a third of one thread's speed (README: `-t`). Here
// the parts of a step are claimed one at a time by whichever thread is
// free, and the caller returns when every part is done, not when every
// worker has turned up: a descheduled worker holds a step up only while it
// holds one of its parts. The parts are the same fixed ranges as before,
// each run with its own index, so results do not depend on which thread
// ran what.
class Pool {
 public:
  explicit Pool(int threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_.store(true);
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
  }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs the `parts` parts; false (nothing run) if another thread's job
  // holds the pool.
  bool TryRun(size_t n, size_t grain, int parts,
              const std::function<void(size_t, size_t, int)>& body) {
    std::unique_lock<std::mutex> busy(run_mu_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    body_ = &body;
    n_ = n;
    grain_ = grain;
    error_ = nullptr;
    done_.store(0, std::memory_order_relaxed);
    const uint64_t gen = (Generation(claim_.load(std::memory_order_relaxed)) + 1) & kGenMask;
    claim_.store(gen << kGenShift | static_cast<uint64_t>(parts) << kPartsShift,
                 std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      wake_.notify_all();
    }
    RunParts(gen);
    const auto start = Clock::now();
    for (unsigned spins = 0; done_.load(std::memory_order_acquire) < parts; ++spins) {
      CpuRelax();
      if (spins % 64 == 63 && Clock::now() - start > kCallerSpin) {
        // Sleep instead: the worker holding the last part may have been
        // descheduled to make room for another program on its core, and
        // an idle core here is what lets the kernel move it over.
        std::unique_lock<std::mutex> lock(mu_);
        caller_sleeping_.store(true, std::memory_order_seq_cst);
        done_cv_.wait(lock, [&] { return done_.load(std::memory_order_seq_cst) >= parts; });
        caller_sleeping_.store(false, std::memory_order_relaxed);
        break;
      }
    }
    body_ = nullptr;
    if (error_) std::rethrow_exception(error_);
    return true;
  }

 private:
  // claim_ packs the job's generation, its part count and the next part to
  // hand out, so that one compare-and-swap claims a part of that job only.
  static constexpr int kPartsShift = 20;
  static constexpr int kGenShift = 40;
  static constexpr uint64_t kFieldMask = (uint64_t{1} << 20) - 1;
  static constexpr uint64_t kGenMask = (uint64_t{1} << 24) - 1;
  static uint64_t Generation(uint64_t c) { return c >> kGenShift; }

  // Claims and runs parts of job `gen` until none is left.
  void RunParts(uint64_t gen) {
    uint64_t c = claim_.load(std::memory_order_acquire);
    for (;;) {
      if (Generation(c) != gen) return;
      const uint64_t next = c & kFieldMask;
      const uint64_t parts = (c >> kPartsShift) & kFieldMask;
      if (next >= parts) return;
      if (!claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel,
                                        std::memory_order_acquire)) {
        continue;  // c now holds the current word
      }
      // The job cannot finish (and its fields change) before this part is
      // counted done.
      try {
        RunPart(n_, grain_, static_cast<int>(parts), static_cast<int>(next), *body_);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
      }
      if (done_.fetch_add(1, std::memory_order_seq_cst) + 1 == static_cast<int>(parts) &&
          caller_sleeping_.load(std::memory_order_seq_cst)) {
        std::lock_guard<std::mutex> lock(mu_);
        done_cv_.notify_one();
      }
      c = claim_.load(std::memory_order_acquire);
    }
  }

  void WorkerLoop() {
    uint64_t seen = Generation(claim_.load(std::memory_order_acquire));
    for (;;) {
      const auto start = Clock::now();
      uint64_t gen = seen;
      for (unsigned spins = 0;; ++spins) {
        if (stop_.load(std::memory_order_relaxed)) return;
        gen = Generation(claim_.load(std::memory_order_acquire));
        if (gen != seen) break;
        CpuRelax();
        if (spins % 64 == 63 && Clock::now() - start > kWorkerSpin) {
          std::unique_lock<std::mutex> lock(mu_);
          sleepers_.fetch_add(1, std::memory_order_seq_cst);
          wake_.wait(lock, [&] {
            return stop_.load() || Generation(claim_.load(std::memory_order_seq_cst)) != seen;
          });
          sleepers_.fetch_sub(1, std::memory_order_seq_cst);
        }
      }
      seen = gen;
      RunParts(gen);
    }
  }

  // claim_ (read by spinning workers) and done_ (written by each part's
  // thread, read by the spinning caller) on cache lines of their own.
  alignas(64) std::atomic<uint64_t> claim_{0};
  alignas(64) std::atomic<int> done_{0};
  alignas(64) std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> caller_sleeping_{false};
  std::vector<std::thread> workers_;
  std::mutex run_mu_;                // one job at a time
  std::mutex mu_;                    // sleeping threads, error_
  std::condition_variable wake_;     // workers: a new job
  std::condition_variable done_cv_;  // the caller: the last part is done
  // The job, written before claim_ publishes it.
  const std::function<void(size_t, size_t, int)>* body_ = nullptr;
  size_t n_ = 0, grain_ = 1;
  std::exception_ptr error_;
};

// The current pool. Never destroyed: workers still waiting at exit end
// with the process (as OpenMP's do), and a loop run from another static
// object's destructor still finds a pool.
std::mutex& PoolMutex() {
  static std::mutex* mu = new std::mutex;
  return *mu;
}
std::shared_ptr<Pool>& CurrentPool() {
  static std::shared_ptr<Pool>* pool = new std::shared_ptr<Pool>;
  return *pool;
}

// A forked child has none of the parent's workers: it drops the pool
// (kept reachable, never joined) and makes its own on its first loop.
void ForgetPoolInChild() {
  static std::vector<std::shared_ptr<Pool>>* orphans = new std::vector<std::shared_ptr<Pool>>;
  new (&PoolMutex()) std::mutex;  // in case the fork came while it was held
  orphans->push_back(std::move(CurrentPool()));
}

std::shared_ptr<Pool> PoolFor(int threads) {
  static const bool registered = (pthread_atfork(nullptr, nullptr, ForgetPoolInChild), true);
  (void)registered;
  std::lock_guard<std::mutex> lock(PoolMutex());
  std::shared_ptr<Pool>& pool = CurrentPool();
  if (!pool || pool->size() != threads) {
    pool.reset();  // its workers stop once no loop holds it
    pool = std::make_shared<Pool>(threads);
  }
  return pool;
}

}  // namespace

void SetThreadCount(int n) {
  g_threads = n <= 0 ? HardwareThreads() : n;
#if SPARROW_HAVE_OPENMP
  omp_set_num_threads(g_threads);  // oneDNN sizes its own parallel regions by this
#endif
}

int ThreadCount() {
  if (g_threads == 0) SetThreadCount(0);
  return g_threads;
}

#if SPARROW_HAVE_OPENMP
namespace {
// Until when (steady clock, ns) ParallelFor uses OpenMP's threads. libgomp's
// idle threads spin for a while after each region (GOMP_SPINCOUNT, by
// default 300000 rounds, ~ms); measured on a 2 vCPU Zen 4 VM, stories260K's
// perplexity (whose batches alternate oneDNN products with ParallelFor
// steps) took 1.1-1.5 s on the pool against 0.8-1.0 s on OpenMP's threads.
std::atomic<int64_t> g_openmp_until{0};
constexpr int64_t kOpenMpWindowNs = 10'000'000;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}
}  // namespace

void NoteOpenMpRegion() {
  g_openmp_until.store(NowNs() + kOpenMpWindowNs, std::memory_order_relaxed);
}
#else
void NoteOpenMpRegion() {}
#endif

void ParallelFor(size_t n, size_t grain, const std::function<void(size_t, size_t, int)>& body) {
  if (n == 0) return;
  grain = std::max<size_t>(grain, 1);
  const size_t units = (n + grain - 1) / grain;
  const int parts = static_cast<int>(std::min<size_t>(ThreadCount(), units));
  if (parts <= 1 || t_in_body) {
    body(0, n, 0);
    return;
  }
#if SPARROW_HAVE_OPENMP
  if (NowNs() < g_openmp_until.load(std::memory_order_relaxed)) {
    // The same ranges, one per OpenMP thread; a body's exception is
    // rethrown here, as from the pool.
    std::exception_ptr error;
#pragma omp parallel num_threads(parts)
    {
      try {
        RunPart(n, grain, parts, omp_get_thread_num(), body);
      } catch (...) {
#pragma omp critical(sparrow_parallel_for_error)
        if (!error) error = std::current_exception();
      }
    }
    if (error) std::rethrow_exception(error);
    return;
  }
#endif
  const std::shared_ptr<Pool> pool = PoolFor(ThreadCount());
  if (pool->TryRun(n, grain, parts, body)) return;
  // Another thread's loop holds the pool: the same parts, one after another.
  for (int t = 0; t < parts; ++t) RunPart(n, grain, parts, t, body);
}

}  // namespace sparrow
