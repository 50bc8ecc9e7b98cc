// The DRAM budget counts a freed buffer as memory given back to the system.
// glibc's malloc breaks that by default: each time a block it had mapped
// (128 KiB and up) is freed, it raises its mapping threshold to that block's
// size (up to 32 MiB), so after one model is released, the next one's
// buffers come from the heap, whose freed holes stay resident. A `tradeoff`
// sweep of three points on a 1.1B-shaped bundle at --dram-budget 558M
// peaked at 604.5 MiB of RSS that way (GNU time), against 559.2 MiB with the
// threshold held.
#pragma once

namespace sparrow {

// Holds the C library's mapping threshold at its initial 128 KiB, so every
// block at least that large is mapped on allocation and unmapped on free.
// Call once at process start, before any large allocation. A no-op where the
// C library is not glibc (bionic and macOS return large blocks as they are
// freed) and under AddressSanitizer (its own allocator).
void ReturnLargeBlocksOnFree();

// The block size at and above which ReturnLargeBlocksOnFree() has frees
// unmap memory.
inline constexpr unsigned long kLargeBlockBytes = 128 * 1024;

}  // namespace sparrow
