// ReturnLargeBlocksOnFree: after a large block has been freed (which would
// raise glibc's default, dynamic mapping threshold above the blocks below),
// blocks of a few MiB freed between live small ones still leave the
// process's resident set. (Without it, glibc 2.36 keeps all 64 MiB here.)
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "base/heap_release.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SPARROW_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define SPARROW_TEST_ASAN 1
#endif

namespace sparrow {
namespace {

#if defined(__GLIBC__) && defined(__linux__) && !defined(SPARROW_TEST_ASAN)
// Resident bytes of this process, from /proc/self/statm.
size_t ResidentBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  REQUIRE(f != nullptr);
  unsigned long size = 0, resident = 0;
  REQUIRE(std::fscanf(f, "%lu %lu", &size, &resident) == 2);
  std::fclose(f);
  return resident * 4096;
}

TEST_CASE("ReturnLargeBlocksOnFree: freed large blocks leave the resident set") {
  ReturnLargeBlocksOnFree();
  // A freed 24 MiB block: by default glibc would now serve blocks up to
  // that size from its heap.
  void* big = std::malloc(24u << 20);
  REQUIRE(big != nullptr);
  std::memset(big, 1, 24u << 20);
  std::free(big);

  constexpr size_t kBlocks = 32;
  constexpr size_t kBlockBytes = 2u << 20;
  std::vector<void*> blocks, pins;
  for (size_t i = 0; i < kBlocks; ++i) {
    blocks.push_back(std::malloc(kBlockBytes));
    pins.push_back(std::malloc(64));  // keeps the block off the heap's top
    REQUIRE(blocks.back() != nullptr);
    std::memset(blocks.back(), 1, kBlockBytes);
  }
  const size_t with_blocks = ResidentBytes();
  // Every other block first: each leaves a hole between two live blocks.
  for (size_t i = 0; i < kBlocks; i += 2) std::free(blocks[i]);
  for (size_t i = 1; i < kBlocks; i += 2) std::free(blocks[i]);
  const size_t after = ResidentBytes();
  for (void* p : pins) std::free(p);
  // 64 MiB was touched and freed; allow for the allocator's bookkeeping.
  CHECK(with_blocks >= after + kBlocks * kBlockBytes * 3 / 4);
}
#else
TEST_CASE("ReturnLargeBlocksOnFree: callable where it does nothing") {
  ReturnLargeBlocksOnFree();
  CHECK(kLargeBlockBytes == 128 * 1024);
}
#endif

}  // namespace
}  // namespace sparrow
