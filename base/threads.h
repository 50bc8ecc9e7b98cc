// The engine's thread pool: OpenMP where the compiler has it, a small
// persistent std::thread pool otherwise (the Android NDK may lack OpenMP).
#pragma once

#include <cstddef>
#include <functional>

namespace sparrow {

// Number of worker threads parallel loops use; n <= 0 means all cores.
void SetThreadCount(int n);
int ThreadCount();

// Splits [0, n) into ThreadCount() contiguous ranges of whole multiples of
// `grain` (except the last) and calls body(begin, end, thread_index) for each
// non-empty range, on different threads; returns when all are done. Ranges
// depend only on n, grain and the thread count, so results are repeatable.
void ParallelFor(size_t n, size_t grain,
                 const std::function<void(size_t, size_t, int)>& body);

}  // namespace sparrow
