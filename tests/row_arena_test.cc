// RowArena (src/runtime/row_arena.h): slots, the memory it says it takes,
// and unit caches kept in it.
#include "src/runtime/row_arena.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>

#include "base/huge_pages.h"
#include "src/runtime/unit_cache.h"

namespace sparrow {
namespace {

// Kibibytes of the calling process's mapping that starts at `p`, on huge
// pages (smaps' AnonHugePages), or -1 where /proc has no smaps.
long HugeKibAt(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  if (!smaps) return -1;
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &begin, &end) == 2 && line.find(':') > 8) {
      inside = at >= begin && at < end;
    } else if (inside && line.rfind("AnonHugePages:", 0) == 0) {
      return std::stol(line.substr(14));
    }
  }
  return -1;
}

TEST_CASE("RowArena: 64-byte aligned slots in order, and no more than the room given") {
  RowArena arena(64 + 128 + 64);
  uint8_t* a = arena.Take(1);
  uint8_t* b = arena.Take(65);
  uint8_t* c = arena.Take(64);
  CHECK(reinterpret_cast<uintptr_t>(a) % 64 == 0);
  CHECK(b == a + 64);
  CHECK(c == b + 128);
  CHECK(arena.taken() == 256);
  for (int i = 0; i < 256; ++i) REQUIRE(a[i] == 0);  // zeroed
  CHECK_THROWS_AS(arena.Take(1), std::logic_error);
  RowArena empty(0);
  CHECK(RowArena::MemoryBytes(0) == 0);
  CHECK_THROWS_AS(empty.Take(1), std::logic_error);
}

TEST_CASE("RowArena: MemoryBytes is its slots to a whole page, or huge page in always mode") {
  const uint64_t page = TransparentHugePagesAlways() ? kHugePageBytes : PageBytes();
  CHECK(RowArena::MemoryBytes(1) == page);
  CHECK(RowArena::MemoryBytes(page) == page);
  CHECK(RowArena::MemoryBytes(5 * page + 1) == 6 * page);
}

TEST_CASE("RowArena: its whole 2 MiB pages are on huge pages where the system has them") {
  const uint64_t bytes = 3 * kHugePageBytes + 12345;
  RowArena arena(RowArena::SlotBytes(bytes));
  uint8_t* rows = arena.Take(bytes);
  std::memset(rows, 1, bytes);  // as a cache touches its rows
  const long huge_kib = HugeKibAt(rows);
  if (!TransparentHugePagesAvailable() || huge_kib < 0) return;
  // The kernel may refuse a huge page (fragmented memory), but it never
  // gives one to the unadvised tail, short of "always" mode.
  CHECK(huge_kib <= 3 * 2048 + (TransparentHugePagesAlways() ? 2048 : 0));
  MESSAGE("huge pages under the arena: ", huge_kib, " KiB of ", 3 * 2048);
}

TEST_CASE("UnitCache: rows in storage the caller gives") {
  const uint64_t matrix = UnitCache::MatrixBytes(100, 37, 10);
  CHECK(matrix == 384);  // 370 to 64 bytes
  CHECK(UnitCache::MemoryBytes(100, 37, 10) == matrix + 100 * 4 + 10 * 5);
  RowArena arena(matrix + UnitCache::MatrixBytes(10, 12, 4));
  uint8_t* first = arena.Take(matrix);
  std::memset(first, 0xAB, matrix);
  UnitCache cache(100, 37, 10, 0, first);
  CHECK(cache.data() == first);
  CHECK(first[0] == 0);  // zeroed (touched) at construction, as its own rows
  CHECK(first[369] == 0);
  std::string record(37, 'x');
  const uint32_t row = cache.Append(7);
  cache.Store(row, reinterpret_cast<const uint8_t*>(record.data()));
  CHECK(cache.Row(row) == first);
  CHECK(first[36] == 'x');

  uint8_t* second = arena.Take(UnitCache::MatrixBytes(10, 12, 4));
  UnitCache split(10, 12, 4, 8, second);
  CHECK(split.Tail(0) == second + 4 * 8);
  CHECK(second >= first + matrix);  // the two caches' rows do not overlap
  CHECK_THROWS_AS(UnitCache(10, 12, 4, 8, second + 1), std::invalid_argument);  // misaligned
}

}  // namespace
}  // namespace sparrow
