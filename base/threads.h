// The engine's thread pool: a persistent pool of std::threads whose
// loops end when every part is done, not at a barrier every thread must
// reach (threads.cc says why). OpenMP, where the compiler has it, is left
// to oneDNN; SetThreadCount sizes both.
#pragma once

#include <cstddef>
#include <functional>

namespace sparrow {

// Number of worker threads parallel loops use; n <= 0 means all cores.
void SetThreadCount(int n);
int ThreadCount();

// Splits [0, n) into ThreadCount() contiguous ranges of whole multiples of
// `grain` (except the last) and calls body(begin, end, thread_index) for each
// non-empty range; returns when all are done. thread_index is the range's
// index (below ThreadCount(), for per-thread scratch): each range runs once,
// on whichever thread claims it first (one thread may run several). Ranges
// depend only on n, grain and the thread count, so results are repeatable.
// A ParallelFor inside a body runs its whole range on that thread, as one
// range with index 0; one called while another thread's holds the pool
// runs its ranges one after another on the calling thread. An exception
// from a body is rethrown here once every range has run.
void ParallelFor(size_t n, size_t grain,
                 const std::function<void(size_t, size_t, int)>& body);

// Code that runs OpenMP parallel regions of its own (oneDNN) calls this
// after each: for a few milliseconds ParallelFor then runs its ranges on
// OpenMP's threads too, which are spinning for their next region, rather
// than on the pool's, which would compete with them for the cores.
void NoteOpenMpRegion();

}  // namespace sparrow
