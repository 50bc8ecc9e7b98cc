// Software prefetches of rows, shared by the gather kernels' Prefetcher
// (gather-inl.h) and gather_bench's read patterns, which measure the
// ceiling of those kernels' accesses and so must prefetch as they do.
#pragma once

#include <cstddef>
#include <cstdint>

#include <hwy/base.h>
#include <hwy/cache_control.h>

namespace sparrow::simd {

// How far ahead of its current position a kernel prefetches in each row
// (at most one row: past its end, the same bytes of a later group's rows,
// LeadGroups below). Enough to cover DRAM latency at full bandwidth with
// four rows in flight; measured with gather_bench (1024 loses up to a
// fifth of the bandwidth; 2048 and one row ahead are about equal for 4 KiB
// rows).
inline constexpr size_t kPrefetchAhead = 2048;

// Groups of rows (of four) ahead of the one being read that the gather
// kernels' prefetches run into, for rows of which each reads `row_bytes`:
// as many as hold about kLeadBytes of each row's stream, at least one. The
// distance within a row is at most the row (kPrefetchAhead), so with one
// group ahead a short row kept too few lines in flight: 768-wide Q4_0S
// rows (432 bytes) two groups ahead read 86-87% of the four-stream probe
// in DotRows instead of 80-81%, plain Q4_0 85-87% instead of 79%, a random
// quarter of them 59-60% instead of 52-55%; rows 2048 wide (1152 bytes),
// one group ahead, read 87-93%, and 85-86% two groups ahead (2 vCPU Intel
// Emerald Rapids VM, AVX3_DL, three alternated rounds of `gather_bench
// --types q4_0s,q4_0 --shapes 768x3072,2048x5632 --kernels dot --threads 1
// --clock cpu`). AxpyRows' float chain over the same Q4_0S rows, dispatch
// forced to AVX3 (four rounds): 6.9-8.6 -> 8.7-9.4 GB/s. Two threads'
// AxpyRows, which split the columns (Q8_0 rows 2048 wide: 544 bytes a
// thread, now two groups ahead), stayed within the noise.
inline constexpr size_t kLeadBytes = 1024;
inline constexpr size_t kMaxLeadGroups = 8;
inline size_t LeadGroups(size_t row_bytes) {
  const size_t groups = row_bytes == 0 ? kMaxLeadGroups : (kLeadBytes + row_bytes / 2) / row_bytes;
  return groups < 1 ? 1 : groups > kMaxLeadGroups ? kMaxLeadGroups : groups;
}

// Where rows have more than this many bytes in flight (rows times the
// prefetch distance), they are prefetched into L2 instead of L1. A prefetch
// into L1 holds one of the core's few L1 miss buffers until its line
// arrives: with 2 KiB ahead in four rows those buffers, not DRAM, set the
// pace, while L2 has many more. Short rows (a 768-wide Q4_0 row is 432
// bytes, and the distance is at most a row) keep their lines in flight
// within L1's buffers, and there L1 won: a 125M-shaped Q4_0 neuron bundle,
// whose rows come mostly from L3, decoded 4% slower with every prefetch
// into L2. Measured on a 2 vCPU Zen 4 VM (AVX3_DL), one thread, three
// alternated rounds of `gather_bench --types q4_0s,q4_0,q8_0,f16 --shapes
// 2048x5632 --threads 1 --kernels dot,axpy --clock cpu` (GB/s). AxpyRows,
// rows in order: Q8_0 13.0-13.2 -> 19.3-20.1, Q4_0S 10.7-11.1 -> 13.2-15.0,
// F16 13.9-14.7 -> 21.5-24.1, plain Q4_0 (bound by its arithmetic)
// 10.6-11.1 -> 10.0-11.4. A random quarter of the rows: AxpyRows Q8_0
// 10.6-10.8 -> 12.8-13.7, DotRows Q8_0 11.6-11.9 -> 13.1-14.3, Q4_0
// 9.9-10.2 -> 11.3-11.5, F16 13.6-14.6 -> 15.5-17.5. DotRows over rows in
// order, which it leaves to the hardware prefetchers here, is unchanged.
// Engine figures: README.
inline constexpr size_t kL1PrefetchBytes = 2048;

inline bool PrefetchIntoL2(size_t rows, size_t ahead) { return rows * ahead > kL1PrefetchBytes; }

// Where rows are prefetched into L2, how far ahead DotRows also prefetches
// the lines of the rows it reads into L1 (gather-inl.h: NearLines says why).
// DotRows over Q4_0S rows 2048 wide read alike with 384, 512 and 768 bytes
// (four alternated rounds), and gained less with 128 and 192 (three).
inline constexpr size_t kL1NearBytes = 512;

// Prefetches the line at p into L2 (GCC and Clang emit prefetcht1 on x86
// and PRFM PLDL2KEEP on Arm; Highway 1.0.3's Prefetch has no such hint) or
// into L1. Always inlined: as a plain inline function, GCC 12 dropped
// every call to it from the kernels (objdump found no prefetch left in
// them, and AxpyRows Q8_0 fell from 19 to 6.5 GB/s). Called from a lambda
// inside a kernel, with or without HWY_ATTR, it was dropped too (the
// integer sums' AVX2 form read Q4_0S rows at 5.2-5.3 GB/s instead of 7.9):
// call it from functions.
HWY_INLINE void PrefetchLine(const uint8_t* p, bool into_l2) {
  if (into_l2) {
    __builtin_prefetch(p, 0, 2);
  } else {
    hwy::Prefetch(p);
  }
}

}  // namespace sparrow::simd
