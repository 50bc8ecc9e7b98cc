// The read planner against an independent reference: a byte map of the
// disk with every widened record marked and every short enough hole between
// marks filled; its marked runs are the extents, cut into max_read_bytes
// reads and laid out in staging by the documented rule. Plans are also
// executed against a simulated disk to check that every PlannedRecord
// points at its own record's bytes.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <stdexcept>
#include <vector>

#include <doctest/doctest.h>

#include "src/runtime/read_planner.h"

namespace sparrow {
namespace {

uint64_t Down(uint64_t v, uint64_t a) { return v - v % a; }
uint64_t Up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

struct ExpectedRead {
  uint64_t offset;
  uint64_t length;
  uint64_t staging_at;  // dest - staging base
};

struct Expected {
  std::vector<ExpectedRead> reads;
  uint64_t staging_end = 0;
};

// Options here are already normalized: max_read a multiple of alignment,
// max_gap < max_read.
Expected BruteForce(const std::vector<uint64_t>& offsets, uint64_t record, uint64_t max_read,
                    uint64_t max_gap, uint64_t alignment) {
  Expected e;
  if (offsets.empty()) return e;
  uint64_t disk_end = 0;
  for (uint64_t o : offsets) disk_end = std::max(disk_end, Up(o + record, alignment));
  std::vector<uint8_t> mark(disk_end + 1, 0);
  for (uint64_t o : offsets) {
    for (uint64_t b = Down(o, alignment); b < Up(o + record, alignment); ++b) mark[b] = 1;
  }
  // Fill holes (unmarked runs with marks on both sides) up to max_gap.
  uint64_t i = 0;
  while (i < disk_end && !mark[i]) ++i;
  while (i < disk_end) {
    while (i < disk_end && mark[i]) ++i;
    const uint64_t hole = i;
    while (i < disk_end && !mark[i]) ++i;
    if (i < disk_end && i - hole <= max_gap) std::fill(mark.begin() + hole, mark.begin() + i, 1);
  }
  const uint64_t extent_alignment = std::max<uint64_t>(alignment, 64);
  uint64_t cursor = 0;
  for (uint64_t b = 0; b < disk_end;) {
    if (!mark[b]) {
      ++b;
      continue;
    }
    uint64_t end = b;
    while (end < disk_end && mark[end]) ++end;
    const uint64_t at = Up(cursor, extent_alignment);
    for (uint64_t p = b; p < end; p += max_read) {
      e.reads.push_back(ExpectedRead{p, std::min(max_read, end - p), at + (p - b)});
    }
    cursor = at + (end - b);
    b = end;
  }
  e.staging_end = Up(cursor, extent_alignment);  // every extent's length rounded up
  return e;
}

// Fills each op's destination from `disk` (bytes past it read as zero).
void Execute(const std::vector<ReadOp>& ops, const std::vector<uint8_t>& disk) {
  for (const ReadOp& op : ops) {
    for (uint64_t k = 0; k < op.length; ++k) {
      const uint64_t at = op.offset + k;
      op.dest[k] = at < disk.size() ? disk[at] : 0;
    }
  }
}

struct Case {
  std::vector<uint64_t> offset_of;  // by unit
  uint32_t record = 0;
  ReadPlanOptions options;
  uint64_t staging = 0;
};

// Plans `units` with the planner (looping until all are planned) and checks
// each call against the brute force and the simulated disk.
void CheckPlans(const Case& c, const std::vector<uint32_t>& units, const std::vector<uint8_t>& disk) {
  ReadPlanner planner(c.staging, c.options);
  auto offset = [&c](uint32_t u) { return c.offset_of[u]; };
  std::vector<uint32_t> rest = units;
  std::vector<ReadOp> ops;
  std::vector<PlannedRecord> records;
  std::multiset<uint32_t> seen;
  int calls = 0;
  while (!rest.empty()) {
    REQUIRE(++calls <= static_cast<int>(units.size()));
    const size_t n = planner.Plan(rest, c.record, offset, &ops, &records);
    REQUIRE(n >= 1);
    REQUIRE(n <= rest.size());
    std::vector<uint64_t> planned;
    for (size_t k = 0; k < n; ++k) planned.push_back(c.offset_of[rest[k]]);
    const uint64_t a = c.options.alignment;
    const Expected want =
        BruteForce(planned, c.record, c.options.max_read_bytes, c.options.max_gap_bytes, a);
    CHECK(want.staging_end <= c.staging);
    if (n < rest.size()) {
      std::vector<uint64_t> one_more = planned;
      one_more.push_back(c.offset_of[rest[n]]);
      CHECK(BruteForce(one_more, c.record, c.options.max_read_bytes, c.options.max_gap_bytes, a)
                .staging_end > c.staging);
    }
    REQUIRE(ops.size() == want.reads.size());
    const uint8_t* base = ops.front().dest;
    for (size_t k = 0; k < ops.size(); ++k) {
      CHECK(ops[k].offset == want.reads[k].offset);
      CHECK(ops[k].length == want.reads[k].length);
      CHECK(static_cast<uint64_t>(ops[k].dest - base) == want.reads[k].staging_at);
      CHECK(ops[k].offset % a == 0);
      CHECK(ops[k].length % a == 0);
      CHECK(reinterpret_cast<uintptr_t>(ops[k].dest) % a == 0);
      CHECK(ops[k].length <= c.options.max_read_bytes);
    }
    // Records: exactly the planned units, in disk order, each pointing at
    // its own bytes once the reads are done.
    Execute(ops, disk);
    REQUIRE(records.size() == n);
    std::multiset<uint32_t> got;
    for (size_t k = 0; k < records.size(); ++k) {
      got.insert(records[k].unit);
      if (k > 0) CHECK(c.offset_of[records[k - 1].unit] <= c.offset_of[records[k].unit]);
      const uint64_t o = c.offset_of[records[k].unit];
      CHECK(records[k].data >= base);
      CHECK(records[k].data + c.record <= base + c.staging);
      CHECK(std::memcmp(records[k].data, disk.data() + o, c.record) == 0);
    }
    CHECK(got == std::multiset<uint32_t>(rest.begin(), rest.begin() + static_cast<long>(n)));
    seen.insert(got.begin(), got.end());
    rest.erase(rest.begin(), rest.begin() + static_cast<long>(n));
  }
  CHECK(seen == std::multiset<uint32_t>(units.begin(), units.end()));
}

std::vector<uint8_t> RandomDisk(uint64_t bytes, std::mt19937_64& rng) {
  std::vector<uint8_t> disk(bytes);
  for (uint8_t& b : disk) b = static_cast<uint8_t>(rng());
  return disk;
}

// Runs one planner call and returns the ops (and records through *out).
std::vector<ReadOp> PlanAll(ReadPlanner& planner, const std::vector<uint32_t>& units,
                            uint32_t record, const std::vector<uint64_t>& offset_of,
                            std::vector<PlannedRecord>* out, size_t* planned = nullptr) {
  std::vector<ReadOp> ops;
  std::vector<PlannedRecord> records;
  const size_t n = planner.Plan(units, record, [&](uint32_t u) { return offset_of[u]; }, &ops,
                                out != nullptr ? out : &records);
  if (planned != nullptr) *planned = n;
  return ops;
}

}  // namespace

TEST_CASE("read planner: adjacent records, given in any order, become one read") {
  std::vector<uint64_t> offset_of(10);
  for (uint32_t u = 0; u < 10; ++u) offset_of[u] = 1000 + 100ull * u;
  ReadPlanner planner(1 << 16, ReadPlanOptions{});
  std::vector<PlannedRecord> records;
  size_t n = 0;
  const auto ops = PlanAll(planner, {7, 2, 9, 0, 1, 8, 3, 6, 5, 4}, 100, offset_of, &records, &n);
  CHECK(n == 10);
  REQUIRE(ops.size() == 1);
  CHECK(ops[0].offset == 1000);
  CHECK(ops[0].length == 1000);
  REQUIRE(records.size() == 10);
  for (uint32_t k = 0; k < 10; ++k) {
    CHECK(records[k].unit == k);
    CHECK(records[k].data == ops[0].dest + 100 * k);
  }
}

TEST_CASE("read planner: gaps within max_gap_bytes are read, wider ones split the read") {
  // Records of 100 bytes at 0, 100 (adjacent) and 250 (a 50-byte gap).
  const std::vector<uint64_t> offset_of = {0, 100, 250};
  ReadPlanOptions o;
  o.max_gap_bytes = 50;
  ReadPlanner within(1 << 16, o);
  auto ops = PlanAll(within, {0, 1, 2}, 100, offset_of, nullptr);
  REQUIRE(ops.size() == 1);
  CHECK(ops[0].offset == 0);
  CHECK(ops[0].length == 350);
  o.max_gap_bytes = 49;
  ReadPlanner over(1 << 16, o);
  ops = PlanAll(over, {0, 1, 2}, 100, offset_of, nullptr);
  REQUIRE(ops.size() == 2);
  CHECK(ops[0].offset == 0);
  CHECK(ops[0].length == 200);
  CHECK(ops[1].offset == 250);
  CHECK(ops[1].length == 100);
  CHECK(ops[1].dest == ops[0].dest + 256);  // next extent at the next 64-byte boundary
}

TEST_CASE("read planner: max_read_bytes splits long runs; records straddle reads contiguously") {
  std::vector<uint64_t> offset_of(10);
  for (uint32_t u = 0; u < 10; ++u) offset_of[u] = 100ull * u;
  ReadPlanOptions o;
  o.max_read_bytes = 256;
  ReadPlanner planner(1 << 16, o);
  std::vector<PlannedRecord> records;
  const auto ops = PlanAll(planner, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 100, offset_of, &records);
  REQUIRE(ops.size() == 4);
  const uint64_t lengths[] = {256, 256, 256, 232};
  for (size_t k = 0; k < 4; ++k) {
    CHECK(ops[k].offset == 256 * k);
    CHECK(ops[k].length == lengths[k]);
    CHECK(ops[k].dest == ops[0].dest + 256 * k);
  }
  CHECK(records[2].data == ops[0].dest + 200);  // spans reads 0 and 1
}

TEST_CASE("read planner: widening to the alignment merges extents that come to touch or overlap") {
  ReadPlanOptions o;
  o.alignment = 4096;
  ReadPlanner planner(1 << 20, o);
  // 3000 bytes apart on disk, but widened they touch: [0,4096) + [4096,8192).
  auto ops = PlanAll(planner, {0, 1}, 1000, {1000, 5000}, nullptr);
  REQUIRE(ops.size() == 1);
  CHECK(ops[0].offset == 0);
  CHECK(ops[0].length == 8192);
  // Two records in one block share one block read.
  ops = PlanAll(planner, {0, 1}, 100, {100, 2000}, nullptr);
  REQUIRE(ops.size() == 1);
  CHECK(ops[0].length == 4096);
  // A whole block between them: separate reads with max_gap 0...
  ops = PlanAll(planner, {0, 1}, 1000, {1000, 9000}, nullptr);
  REQUIRE(ops.size() == 2);
  CHECK(ops[1].offset == 8192);
  CHECK(ops[1].dest == ops[0].dest + 4096);
  // ...and one read when a block's gap is allowed.
  o.max_gap_bytes = 4096;
  ReadPlanner gap(1 << 20, o);
  ops = PlanAll(gap, {0, 1}, 1000, {1000, 9000}, nullptr);
  REQUIRE(ops.size() == 1);
  CHECK(ops[0].length == 12288);
}

TEST_CASE("read planner: a full staging buffer plans a prefix and the caller loops") {
  // Ten 4 KiB records far apart; staging for three.
  std::vector<uint64_t> offset_of(10);
  for (uint32_t u = 0; u < 10; ++u) offset_of[u] = 65536ull * (9 - u);
  ReadPlanOptions o;
  o.alignment = 4096;
  ReadPlanner planner(3 * 4096, o);
  std::vector<uint32_t> units = {4, 0, 9, 2, 7, 1, 3, 8, 6, 5};
  std::vector<PlannedRecord> records;
  size_t n = 0;
  auto ops = PlanAll(planner, units, 4096, offset_of, &records, &n);
  CHECK(n == 3);
  REQUIRE(records.size() == 3);
  // Disk order: unit 9 is at the lowest offset.
  CHECK(records[0].unit == 9);
  CHECK(records[1].unit == 4);
  CHECK(records[2].unit == 0);
  // Looping plans everything exactly once.
  std::vector<uint32_t> rest = units;
  std::multiset<uint32_t> all;
  while (!rest.empty()) {
    ops = PlanAll(planner, rest, 4096, offset_of, &records, &n);
    REQUIRE(n >= 1);
    for (const PlannedRecord& r : records) all.insert(r.unit);
    rest.erase(rest.begin(), rest.begin() + static_cast<long>(n));
  }
  CHECK(all == std::multiset<uint32_t>(units.begin(), units.end()));
}

TEST_CASE("read planner: MinStagingBytes holds one record wherever it lies; less holds none") {
  std::mt19937_64 rng(7);
  for (size_t alignment : {size_t{1}, size_t{512}, size_t{4096}}) {
    for (int trial = 0; trial < 200; ++trial) {
      const uint32_t record = 1 + static_cast<uint32_t>(rng() % 10000);
      const uint64_t offset = rng() % 100000;
      ReadPlanOptions o;
      o.alignment = alignment;
      ReadPlanner probe(0, o);
      const uint64_t min = probe.MinStagingBytes(record);
      ReadPlanner enough(min, o);
      size_t n = 0;
      PlanAll(enough, {0}, record, {offset}, nullptr, &n);
      CHECK(n == 1);
      const uint64_t need = Up(Up(offset + record, alignment) - Down(offset, alignment),
                               std::max<uint64_t>(alignment, 64));
      ReadPlanner short_by_one(need - 1, o);
      std::vector<PlannedRecord> records;
      std::vector<ReadOp> ops = PlanAll(short_by_one, {0}, record, {offset}, &records, &n);
      CHECK(n == 0);
      CHECK(ops.empty());
      CHECK(records.empty());
    }
  }
}

TEST_CASE("read planner: options are normalized, a bad alignment is refused") {
  ReadPlanOptions o;
  o.alignment = 3000;
  CHECK_THROWS_AS(ReadPlanner(4096, o), std::invalid_argument);
  o.alignment = 4096;
  o.max_read_bytes = 10000;  // -> 8192
  o.max_gap_bytes = 1 << 20;  // -> below one read
  ReadPlanner planner(1 << 20, o);
  CHECK(planner.options().max_read_bytes == 8192);
  CHECK(planner.options().max_gap_bytes < 8192);
  o.max_read_bytes = 100;  // -> one block
  CHECK(ReadPlanner(4096, o).options().max_read_bytes == 4096);
}

TEST_CASE("read planner: random layouts and options match the brute force") {
  std::mt19937_64 rng(20240611);
  const size_t alignments[] = {1, 64, 512, 4096};
  for (int trial = 0; trial < 300; ++trial) {
    Case c;
    c.options.alignment = alignments[rng() % 4];
    const uint64_t a = c.options.alignment;
    c.record = 1 + static_cast<uint32_t>(rng() % 3000);
    const uint32_t n_units = 1 + static_cast<uint32_t>(rng() % 40);
    c.offset_of.resize(n_units);
    if (rng() % 2 == 0) {
      // A bundle section: fixed-size records back to back, permuted.
      const uint64_t base = rng() % 5000;
      std::vector<uint32_t> slot(n_units);
      std::iota(slot.begin(), slot.end(), 0);
      std::shuffle(slot.begin(), slot.end(), rng);
      for (uint32_t u = 0; u < n_units; ++u) c.offset_of[u] = base + uint64_t{slot[u]} * c.record;
    } else {
      // Anywhere, with random gaps between records.
      uint64_t at = rng() % 3000;
      std::vector<uint64_t> places;
      for (uint32_t u = 0; u < n_units; ++u) {
        places.push_back(at);
        at += c.record + (rng() % 3 == 0 ? 0 : rng() % 2000);
      }
      std::shuffle(places.begin(), places.end(), rng);
      c.offset_of = places;
    }
    const uint64_t blocks = 1 + rng() % 8;
    c.options.max_read_bytes = std::max<uint64_t>(a, Down(blocks * 2048, a));
    c.options.max_gap_bytes = rng() % 2 == 0 ? 0 : rng() % c.options.max_read_bytes;
    ReadPlanner sizing(0, c.options);
    const uint64_t min = sizing.MinStagingBytes(c.record);
    const uint64_t spread = rng() % 2 == 0 ? 4 * min : 100000;  // sequenced: repeatable
    c.staging = min + rng() % spread;

    std::vector<uint32_t> units;
    for (uint32_t u = 0; u < n_units; ++u) {
      if (rng() % 4 != 0) units.push_back(u);
    }
    if (units.empty()) units.push_back(0);
    std::shuffle(units.begin(), units.end(), rng);

    uint64_t disk_end = 0;
    for (uint64_t o : c.offset_of) disk_end = std::max(disk_end, o + c.record);
    const std::vector<uint8_t> disk = RandomDisk(disk_end, rng);
    CAPTURE(trial);
    CAPTURE(a);
    CAPTURE(c.record);
    CAPTURE(c.staging);
    CheckPlans(c, units, disk);
  }
}

}  // namespace sparrow

namespace sparrow {

TEST_CASE("read planner: thousands of units in sorted, reversed and random order") {
  // More than 4096 units, so the planner's two-level bit index spans
  // several summary words; small records keep the brute force cheap.
  std::mt19937_64 rng(31);
  const uint32_t n_units = 9000;
  for (int order = 0; order < 3; ++order) {
    for (size_t alignment : {size_t{1}, size_t{64}}) {
      Case c;
      c.record = 24;
      c.options.alignment = alignment;
      c.options.max_read_bytes = 4096;
      c.options.max_gap_bytes = order == 2 ? 40 : 0;
      c.offset_of.resize(n_units);
      uint64_t at = 0;
      for (uint32_t u = 0; u < n_units; ++u) {
        c.offset_of[u] = at;
        at += c.record + (rng() % 4 == 0 ? rng() % 100 : 0);
      }
      std::vector<uint32_t> units;
      for (uint32_t u = 0; u < n_units; ++u) {
        if (rng() % 3 != 0) units.push_back(u);
      }
      if (order == 1) std::reverse(units.begin(), units.end());
      if (order == 2) std::shuffle(units.begin(), units.end(), rng);
      // Worst case for neighbour searches: far ends first.
      if (order == 1) std::swap(units.front(), units[units.size() / 2]);
      c.staging = 40000;
      const std::vector<uint8_t> disk = RandomDisk(at + 4096, rng);
      CAPTURE(order);
      CAPTURE(alignment);
      CheckPlans(c, units, disk);
    }
  }
}

}  // namespace sparrow
