#include "base/threads.h"

#include <doctest/doctest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

using sparrow::ParallelFor;
using sparrow::SetThreadCount;

TEST_CASE("ParallelFor covers the range exactly once in grain-aligned chunks") {
  for (int threads : {1, 2, 3, 8}) {
    SetThreadCount(threads);
    for (size_t n : {0u, 1u, 5u, 64u, 1000u, 1001u}) {
      for (size_t grain : {1u, 4u, 64u}) {
        std::vector<std::atomic<int>> hits(n);
        std::mutex mu;
        std::set<int> thread_ids;
        ParallelFor(n, grain, [&](size_t begin, size_t end, int t) {
          CHECK(begin < end);
          CHECK(begin % grain == 0);
          {
            std::lock_guard<std::mutex> lock(mu);
            CHECK(thread_ids.insert(t).second);  // one range per thread
          }
          for (size_t i = begin; i < end; ++i) hits[i]++;
        });
        for (size_t i = 0; i < n; ++i) CHECK(hits[i].load() == 1);
        CHECK(thread_ids.size() <= static_cast<size_t>(threads));
      }
    }
  }
  SetThreadCount(0);
}

TEST_CASE("ThreadCount follows SetThreadCount") {
  SetThreadCount(3);
  CHECK(sparrow::ThreadCount() == 3);
  SetThreadCount(0);
  CHECK(sparrow::ThreadCount() >= 1);
}

// A ParallelFor inside another's body (a kernel called from a parallel
// loop) runs its whole range on the calling thread: with OpenMP the inner
// region gets one thread, which must still see every index, not only the
// first part's.
TEST_CASE("a nested ParallelFor covers its whole range on the calling thread") {
  for (int threads : {2, 3}) {
    SetThreadCount(threads);
    const size_t outer = 6, inner = 1000;
    std::vector<std::atomic<int>> hits(outer * inner);
    ParallelFor(outer, 1, [&](size_t begin, size_t end, int) {
      for (size_t o = begin; o < end; ++o) {
        ParallelFor(inner, 4, [&](size_t b, size_t e, int t) {
          CHECK(t == 0);
          for (size_t i = b; i < e; ++i) hits[o * inner + i]++;
        });
      }
    });
    for (size_t i = 0; i < outer * inner; ++i) REQUIRE(hits[i].load() == 1);
  }
  SetThreadCount(0);
}

// A body that throws: the other ranges still run, and the caller gets the
// exception once they are done (the pool stays usable).
TEST_CASE("an exception from a body reaches the caller after every range ran") {
  SetThreadCount(2);
  std::atomic<int> ran{0};
  CHECK_THROWS_AS(ParallelFor(2, 1,
                              [&](size_t begin, size_t, int) {
                                ran++;
                                if (begin == 1) throw std::runtime_error("range 1");
                              }),
                  std::runtime_error);
  CHECK(ran.load() == 2);
  std::atomic<int> after{0};
  ParallelFor(100, 1,
              [&](size_t begin, size_t end, int) { after += static_cast<int>(end - begin); });
  CHECK(after.load() == 100);
  SetThreadCount(0);
}

// Two threads' loops at once: one holds the pool, the other runs its
// ranges itself; each covers its range exactly once, with indices below
// the thread count.
TEST_CASE("ParallelFor from two threads at once covers both ranges") {
  SetThreadCount(2);
  const size_t n = 4000;
  std::vector<std::atomic<int>> hits_a(n), hits_b(n);
  auto loop = [&](std::vector<std::atomic<int>>& hits) {
    for (int rep = 0; rep < 200; ++rep) {
      ParallelFor(n, 8, [&](size_t begin, size_t end, int t) {
        CHECK(t < 2);
        for (size_t i = begin; i < end; ++i) hits[i]++;
      });
    }
  };
  std::thread other([&] { loop(hits_b); });
  loop(hits_a);
  other.join();
  for (size_t i = 0; i < n; ++i) {
    REQUIRE(hits_a[i].load() == 200);
    REQUIRE(hits_b[i].load() == 200);
  }
  SetThreadCount(0);
}
