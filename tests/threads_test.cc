#include "base/threads.h"

#include <doctest/doctest.h>

#include <atomic>
#include <mutex>
#include <set>
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
