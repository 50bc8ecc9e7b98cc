#include "src/runtime/unit_cache.h"

#include "base/sort_unique.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <vector>

namespace sparrow {
namespace {

using Bytes = std::vector<uint8_t>;

// The simple model the cache must agree with: which units are cached and
// the bytes each one's row must hold.
using Reference = std::map<uint32_t, Bytes>;

Bytes RandomBytes(std::mt19937_64& rng, uint32_t n) {
  Bytes bytes(n);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  return bytes;
}

// Every row against the model, and both maps against each other.
void CheckAgainst(const UnitCache& cache, const Reference& ref) {
  REQUIRE(cache.size() == ref.size());
  CHECK(cache.full() == (ref.size() == cache.capacity()));
  std::set<uint32_t> seen;
  for (uint32_t row = 0; row < cache.size(); ++row) {
    const uint32_t unit = cache.UnitAt(row);
    CHECK(cache.units_by_row()[row] == unit);
    REQUIRE(unit < cache.n_units());
    CHECK(seen.insert(unit).second);  // no unit in two rows
    CHECK(cache.RowOf(unit) == static_cast<int32_t>(row));
    auto it = ref.find(unit);
    REQUIRE(it != ref.end());
    // Head and tail (a split cache's two matrices) hold the row's bytes.
    CHECK(std::memcmp(cache.Row(row), it->second.data(), cache.head_bytes()) == 0);
    if (cache.tail_bytes() != 0) {
      CHECK(std::memcmp(cache.Tail(row), it->second.data() + cache.head_bytes(),
                        cache.tail_bytes()) == 0);
    }
  }
  for (uint32_t unit = 0; unit < cache.n_units(); ++unit) {
    const bool cached = ref.count(unit) != 0;
    CHECK(cache.Contains(unit) == cached);
    if (!cached) CHECK(cache.RowOf(unit) == UnitCache::kAbsent);
  }
}

uint32_t AppendFilled(UnitCache& cache, Reference& ref, uint32_t unit, std::mt19937_64& rng) {
  const uint32_t row = cache.Append(unit);
  Bytes bytes = RandomBytes(rng, cache.row_bytes());
  cache.Store(row, bytes.data());
  ref[unit] = std::move(bytes);
  return row;
}

TEST_CASE("UnitCache: construction, capacity and memory") {
  UnitCache cache(100, 37, 10);
  CHECK(cache.n_units() == 100);
  CHECK(cache.row_bytes() == 37);
  CHECK(cache.capacity() == 10);
  CHECK(cache.size() == 0);
  CHECK(cache.bytes() == 370);
  CHECK(reinterpret_cast<uintptr_t>(cache.data()) % 64 == 0);
  CHECK(cache.memory_bytes() == UnitCache::MemoryBytes(100, 37, 10));
  CHECK(cache.memory_bytes() >= 370 + 100 * 4 + 10 * 4);
  for (uint32_t unit = 0; unit < 100; ++unit) CHECK_FALSE(cache.Contains(unit));
  // Rows are zeroed (touched) at construction.
  for (uint32_t i = 0; i < cache.bytes(); ++i) REQUIRE(cache.data()[i] == 0);

  // More rows than units cannot be used: the capacity is lowered.
  UnitCache small(5, 8, 50);
  CHECK(small.capacity() == 5);
  CHECK(small.bytes() == 40);
  CHECK(UnitCache::MemoryBytes(5, 8, 50) == small.memory_bytes());

  CHECK_THROWS_AS(UnitCache(0, 8, 1), std::invalid_argument);
  CHECK_THROWS_AS(UnitCache(10, 0, 1), std::invalid_argument);
  CHECK_THROWS_AS(UnitCache(10, 8, 0), std::invalid_argument);
  CHECK_THROWS_AS(UnitCache(0x80000000u, 8, 1), std::invalid_argument);
}

TEST_CASE("UnitCache: append fills rows in order; full and misuse are caught") {
  std::mt19937_64 rng(1);
  UnitCache cache(8, 5, 3);
  Reference ref;
  CHECK(AppendFilled(cache, ref, 6, rng) == 0);
  CHECK(AppendFilled(cache, ref, 2, rng) == 1);
  CHECK_THROWS_AS(cache.Append(6), std::logic_error);  // already cached
  CHECK_THROWS_AS(cache.Append(8), std::logic_error);  // out of range
  CHECK(AppendFilled(cache, ref, 0, rng) == 2);
  CHECK(cache.full());
  CHECK_THROWS_AS(cache.Append(1), std::logic_error);  // full
  CHECK_THROWS_AS(cache.Remove(1), std::logic_error);  // absent
  CHECK_THROWS_AS(cache.Remove(9), std::logic_error);  // out of range
  CheckAgainst(cache, ref);
}

TEST_CASE("UnitCache: Remove moves exactly the last row into the hole (Figure 6)") {
  std::mt19937_64 rng(2);
  UnitCache cache(10, 16, 5);
  Reference ref;
  for (uint32_t unit : {4u, 7u, 1u, 9u, 3u}) AppendFilled(cache, ref, unit, rng);
  // rows: 4 7 1 9 3
  cache.Remove(7);
  ref.erase(7);
  // rows: 4 3 1 9
  CHECK(cache.UnitAt(0) == 4);
  CHECK(cache.UnitAt(1) == 3);
  CHECK(cache.UnitAt(2) == 1);
  CHECK(cache.UnitAt(3) == 9);
  CheckAgainst(cache, ref);
  cache.Remove(9);  // the last row: nothing moves
  ref.erase(9);
  CHECK(cache.UnitAt(0) == 4);
  CHECK(cache.UnitAt(1) == 3);
  CHECK(cache.UnitAt(2) == 1);
  CheckAgainst(cache, ref);
  // New units append after the last used row.
  CHECK(AppendFilled(cache, ref, 7, rng) == 3);
  CheckAgainst(cache, ref);
  cache.Clear();
  ref.clear();
  CheckAgainst(cache, ref);
  CHECK(AppendFilled(cache, ref, 9, rng) == 0);
  CheckAgainst(cache, ref);
}

TEST_CASE("UnitCache: RemoveMany keeps survivors below the new size in place") {
  std::mt19937_64 rng(3);
  UnitCache cache(20, 8, 8);
  Reference ref;
  for (uint32_t unit : {10u, 11u, 12u, 13u, 14u, 15u, 16u, 17u}) AppendFilled(cache, ref, unit, rng);
  // Remove rows 1, 6 and 3: new size 5; holes 1 and 3 get rows 5 and 7.
  cache.RemoveMany({11, 16, 13});
  for (uint32_t unit : {11u, 16u, 13u}) ref.erase(unit);
  CheckAgainst(cache, ref);
  CHECK(cache.UnitAt(0) == 10);
  CHECK(cache.UnitAt(2) == 12);
  CHECK(cache.UnitAt(4) == 14);
  std::set<uint32_t> moved = {cache.UnitAt(1), cache.UnitAt(3)};
  CHECK(moved == std::set<uint32_t>{15, 17});

  // A bad list changes nothing.
  const Bytes before(cache.data(), cache.data() + cache.bytes());
  CHECK_THROWS_AS(cache.RemoveMany({10, 11}), std::logic_error);  // 11 absent
  CHECK_THROWS_AS(cache.RemoveMany({10, 12, 10}), std::logic_error);  // repeat
  CHECK_THROWS_AS(cache.RemoveMany({10, 99}), std::logic_error);  // out of range
  CheckAgainst(cache, ref);
  CHECK(Bytes(cache.data(), cache.data() + cache.bytes()) == before);
  // ...and leaves no marks behind: removing everything still works.
  cache.RemoveMany({10, 12, 14, 15, 17});
  ref.clear();
  CheckAgainst(cache, ref);
  cache.RemoveMany({});
  CheckAgainst(cache, ref);
}

// Long random sequences of appends, single removes, batch removes and
// clears against the reference map; every row and both maps after every
// step; the row matrix never moves.
void RandomSequence(uint32_t n_units, uint32_t row_bytes, uint32_t capacity, uint64_t seed,
                    int steps, uint32_t split = 0) {
  CAPTURE(n_units);
  CAPTURE(row_bytes);
  CAPTURE(capacity);
  CAPTURE(split);
  std::mt19937_64 rng(seed);
  UnitCache cache(n_units, row_bytes, capacity, split);
  const uint8_t* const data = cache.data();
  Reference ref;
  std::vector<uint32_t> absent, present;
  size_t max_size = 0;
  for (int step = 0; step < steps; ++step) {
    CAPTURE(step);
    absent.clear();
    present.clear();
    for (uint32_t unit = 0; unit < n_units; ++unit) {
      (ref.count(unit) ? present : absent).push_back(unit);
    }
    // Alternate phases that fill the cache and phases that churn it.
    const bool growing = (step / 250) % 2 == 0;
    const int append_below = growing ? 85 : 45;
    const int remove_below = growing ? 97 : 75;
    const int remove_many_below = growing ? 100 : 97;  // the rest: Clear
    const int op = static_cast<int>(rng() % 100);
    if (op < append_below) {
      // Append up to a few units, as a token's misses would.
      const size_t want = 1 + rng() % 4;
      for (size_t i = 0; i < want && !cache.full() && !absent.empty(); ++i) {
        const size_t pick = rng() % absent.size();
        const uint32_t unit = absent[pick];
        absent.erase(absent.begin() + static_cast<ptrdiff_t>(pick));
        const uint32_t row = AppendFilled(cache, ref, unit, rng);
        CHECK(row == cache.size() - 1);
      }
      if (cache.full() && !absent.empty()) CHECK_THROWS_AS(cache.Append(absent[0]), std::logic_error);
    } else if (op < remove_below) {
      if (!present.empty()) {
        const uint32_t unit = present[rng() % present.size()];
        const int32_t row = cache.RowOf(unit);
        const uint32_t last_unit = cache.UnitAt(cache.size() - 1);
        cache.Remove(unit);
        ref.erase(unit);
        if (last_unit != unit) CHECK(cache.RowOf(last_unit) == row);
      }
    } else if (op < remove_many_below) {
      std::shuffle(present.begin(), present.end(), rng);
      present.resize(present.empty() ? 0 : rng() % (present.size() + 1));
      std::vector<int32_t> rows_before(n_units);
      for (uint32_t unit = 0; unit < n_units; ++unit) rows_before[unit] = cache.RowOf(unit);
      const uint32_t new_size = cache.size() - static_cast<uint32_t>(present.size());
      cache.RemoveMany(present);
      for (uint32_t unit : present) ref.erase(unit);
      // Survivors that were already below the new size did not move.
      for (const auto& [unit, bytes] : ref) {
        if (rows_before[unit] < static_cast<int32_t>(new_size)) {
          CHECK(cache.RowOf(unit) == rows_before[unit]);
        }
      }
    } else {
      cache.Clear();
      ref.clear();
    }
    max_size = std::max<size_t>(max_size, cache.size());
    CheckAgainst(cache, ref);
    REQUIRE(cache.data() == data);
    REQUIRE(cache.size() <= cache.capacity());
  }
  CHECK(max_size == cache.capacity());  // the sequence did reach the limit
}

TEST_CASE("UnitCache: random insert/evict sequences against a reference map") {
  RandomSequence(50, 13, 16, 11, 4000);    // odd row size: rows not aligned
  RandomSequence(300, 64, 100, 12, 3000);
  RandomSequence(20, 1, 20, 13, 3000);     // capacity == n_units
  RandomSequence(7, 4096, 3, 14, 2000);    // page-sized rows
  RandomSequence(1, 9, 1, 15, 500);        // a single unit
  // Split rows (neuron records: [gate | up] heads, [down] tails).
  RandomSequence(50, 13, 16, 16, 3000, 5);
  RandomSequence(300, 96, 100, 17, 3000, 64);
  RandomSequence(7, 4096, 3, 18, 1000, 1);
}

// A split cache keeps heads and tails in two packed matrices: consecutive
// rows' heads are one span, and so are their tails.
TEST_CASE("UnitCache: split rows are two packed matrices") {
  UnitCache cache(10, 12, 4, 8);
  CHECK(cache.head_bytes() == 8);
  CHECK(cache.tail_bytes() == 4);
  CHECK(cache.bytes() == 48);
  CHECK(cache.memory_bytes() == UnitCache::MemoryBytes(10, 12, 4));
  Bytes record(12);
  for (uint32_t unit = 0; unit < 3; ++unit) {
    for (uint32_t i = 0; i < 12; ++i) record[i] = static_cast<uint8_t>(16 * unit + i);
    cache.Store(cache.Append(unit), record.data());
  }
  CHECK(cache.Row(1) == cache.Row(0) + 8);
  CHECK(cache.Tail(0) == cache.data() + 4 * 8);
  CHECK(cache.Tail(2) == cache.Tail(0) + 8);
  CHECK(cache.Row(2)[7] == 16 * 2 + 7);
  CHECK(cache.Tail(2)[0] == 16 * 2 + 8);
  CHECK_THROWS_AS(cache.Store(3, record.data()), std::logic_error);  // row not in use
  CHECK_THROWS_AS(UnitCache(10, 12, 4, 12), std::invalid_argument);
}

}  // namespace
}  // namespace sparrow

// The streamed FFN's sort of distinct units and cache rows (base/sort_unique.h).
TEST_CASE("SortDistinctBelow sorts like std::sort, for any subset of [0, bound)") {
  std::mt19937 rng(8);
  std::vector<uint64_t> bits;
  for (uint32_t bound : {1u, 63u, 64u, 65u, 1000u, 5632u}) {
    for (double fraction : {0.0, 0.01, 0.5, 1.0}) {
      std::vector<uint32_t> all(bound);
      for (uint32_t i = 0; i < bound; ++i) all[i] = i;
      std::shuffle(all.begin(), all.end(), rng);
      std::vector<uint32_t> values(all.begin(),
                                   all.begin() + static_cast<size_t>(fraction * bound));
      std::vector<uint32_t> want = values;
      std::sort(want.begin(), want.end());
      sparrow::SortDistinctBelow(&values, bound, &bits);
      CHECK(values == want);
      CHECK(bits.size() * sizeof(uint64_t) == sparrow::SortDistinctScratchBytes(bound));
    }
  }
}
