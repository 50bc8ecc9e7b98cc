// Plans are built by adding the caller's units one at a time, in list
// order, to a set of extents kept in disk order: a unit lands between its
// nearest planned neighbours on disk and either falls inside an extent (no
// change), extends one, joins two, or starts its own. Every record has the
// same length, so an extent's end is its last record's end, and whether two
// neighbours share an extent depends on those two alone. That keeps each
// step O(1) after finding the neighbours (a bit scan), and planning stops
// at the first unit whose staging would not fit.
#include "src/runtime/read_planner.h"

#include <algorithm>
#include <stdexcept>

#include "base/error.h"

namespace sparrow {
namespace {

// Extents start at cache-line boundaries in staging even for buffered
// reads: the copies out of staging run faster from aligned rows.
constexpr uint64_t kMinExtentAlignment = 64;

// `a` is a power of two (Normalize checks): masks, not divisions, which
// would dominate planning time.
uint64_t AlignDown(uint64_t v, uint64_t a) { return v & ~(a - 1); }
uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }

ReadPlanOptions Normalize(ReadPlanOptions o) {
  if (o.alignment == 0 || (o.alignment & (o.alignment - 1)) != 0) {
    throw std::invalid_argument(StrCat("read alignment ", o.alignment, " is not a power of two"));
  }
  o.max_read_bytes = std::max<uint64_t>(o.alignment, AlignDown(o.max_read_bytes, o.alignment));
  // A gap as long as a read would make some reads pure gap.
  o.max_gap_bytes = std::min(o.max_gap_bytes, o.max_read_bytes - 1);
  return o;
}

uint64_t LowBitsBelow(unsigned b) { return b == 0 ? 0 : ~0ull >> (64 - b); }
uint64_t HighBitsAbove(unsigned b) { return b == 63 ? 0 : ~0ull << (b + 1); }

}  // namespace

ReadPlanner::ReadPlanner(uint64_t staging_bytes, const ReadPlanOptions& options)
    : options_(Normalize(options)) {
  staging_.Reset(staging_bytes, std::max<size_t>(4096, options_.alignment));
}

uint64_t ReadPlanner::MinStagingBytes(uint32_t record_bytes) const {
  const uint64_t a = options_.alignment;
  return AlignUp(AlignUp(uint64_t{record_bytes} + a - 1, a), std::max<uint64_t>(a, kMinExtentAlignment));
}

int64_t ReadPlanner::PrevMarked(size_t x) const {
  size_t w = x >> 6;
  uint64_t m = present_[w] & LowBitsBelow(x & 63);
  if (m == 0) {
    size_t sw = w >> 6;
    uint64_t sm = summary_[sw] & LowBitsBelow(w & 63);
    while (sm == 0) {
      if (sw == 0) return -1;
      sm = summary_[--sw];
    }
    w = (sw << 6) | (63 - static_cast<size_t>(__builtin_clzll(sm)));
    m = present_[w];
  }
  return static_cast<int64_t>((w << 6) | (63 - static_cast<size_t>(__builtin_clzll(m))));
}

int64_t ReadPlanner::NextMarked(size_t x) const {
  size_t w = x >> 6;
  uint64_t m = present_[w] & HighBitsAbove(x & 63);
  if (m == 0) {
    size_t sw = w >> 6;
    uint64_t sm = summary_[sw] & HighBitsAbove(w & 63);
    while (sm == 0) {
      if (++sw >= summary_.size()) return -1;
      sm = summary_[sw];
    }
    w = (sw << 6) | static_cast<size_t>(__builtin_ctzll(sm));
    m = present_[w];
  }
  return static_cast<int64_t>((w << 6) | static_cast<size_t>(__builtin_ctzll(m)));
}

void ReadPlanner::Mark(size_t x) {
  present_[x >> 6] |= 1ull << (x & 63);
  summary_[x >> 12] |= 1ull << ((x >> 6) & 63);
}

size_t ReadPlanner::PlanSorted(std::vector<Item>& items, uint32_t record_bytes,
                               std::vector<ReadOp>* ops, std::vector<PlannedRecord>* records) {
  ops->clear();
  records->clear();
  const size_t n = items.size();
  if (n == 0 || record_bytes == 0) return 0;
  const uint64_t a = options_.alignment;
  for (const Item& item : items) {
    if (item.offset > UINT64_MAX - record_bytes - 2 * a - options_.max_gap_bytes) {
      throw std::invalid_argument(StrCat("record offset ", item.offset, " out of range"));
    }
  }
  auto disk_order = [](const Item& x, const Item& y) {
    return x.offset != y.offset ? x.offset < y.offset : x.unit < y.unit;
  };
  sorted_ = items;
  if (!std::is_sorted(sorted_.begin(), sorted_.end(), disk_order)) {
    std::sort(sorted_.begin(), sorted_.end(), disk_order);
  }
  rank_.resize(n);
  for (size_t p = 0; p < n; ++p) rank_[sorted_[p].index] = static_cast<uint32_t>(p);
  present_.assign((n + 63) / 64, 0);
  summary_.assign((present_.size() + 63) / 64, 0);
  mate_.resize(n);

  const uint64_t extent_alignment = std::max<uint64_t>(a, kMinExtentAlignment);
  auto begin_of = [&](size_t p) { return AlignDown(sorted_[p].offset, a); };
  auto end_of = [&](size_t p) { return AlignUp(sorted_[p].offset + record_bytes, a); };
  // Neighbours p < q share an extent when q starts within max_gap of p's end.
  auto linked = [&](size_t p, size_t q) { return begin_of(q) <= end_of(p) + options_.max_gap_bytes; };
  auto cost = [&](size_t first, size_t last) {
    return AlignUp(end_of(last) - begin_of(first), extent_alignment);
  };

  const uint64_t capacity = staging_bytes();
  uint64_t used = 0;
  size_t planned = 0;
  for (; planned < n; ++planned) {
    const size_t x = rank_[planned];
    const int64_t p = PrevMarked(x);
    const int64_t s = NextMarked(x);
    if (p >= 0 && s >= 0 && linked(static_cast<size_t>(p), static_cast<size_t>(s))) {
      Mark(x);  // inside an extent: it is read anyway
      continue;
    }
    // p (if any) ends extent A, s (if any) starts extent B.
    const bool joins_a = p >= 0 && linked(static_cast<size_t>(p), x);
    const bool joins_b = s >= 0 && linked(x, static_cast<size_t>(s));
    const size_t first = joins_a ? mate_[static_cast<size_t>(p)] : x;
    const size_t last = joins_b ? mate_[static_cast<size_t>(s)] : x;
    uint64_t next = used + cost(first, last);
    if (joins_a) next -= cost(first, static_cast<size_t>(p));
    if (joins_b) next -= cost(static_cast<size_t>(s), last);
    if (next > capacity) break;
    used = next;
    Mark(x);
    mate_[first] = static_cast<uint32_t>(last);
    mate_[last] = static_cast<uint32_t>(first);
  }
  if (planned > 0) Emit(record_bytes, ops, records);
  return planned;
}

void ReadPlanner::Emit(uint32_t record_bytes, std::vector<ReadOp>* ops,
                       std::vector<PlannedRecord>* records) {
  const uint64_t a = options_.alignment;
  const uint64_t extent_alignment = std::max<uint64_t>(a, kMinExtentAlignment);
  uint64_t at = 0;  // staging position of the next extent
  int64_t i = NextMarked(0);
  if ((present_[0] & 1) != 0) i = 0;
  while (i >= 0) {
    const size_t first = static_cast<size_t>(i);
    const uint64_t begin = AlignDown(sorted_[first].offset, a);
    size_t last = first;
    int64_t next = NextMarked(first);
    while (next >= 0 && AlignDown(sorted_[static_cast<size_t>(next)].offset, a) <=
                            AlignUp(sorted_[last].offset + record_bytes, a) + options_.max_gap_bytes) {
      last = static_cast<size_t>(next);
      next = NextMarked(last);
    }
    const uint64_t end = AlignUp(sorted_[last].offset + record_bytes, a);
    uint8_t* base = staging_.data() + at;
    for (uint64_t done = 0; done < end - begin; done += options_.max_read_bytes) {
      ops->push_back(ReadOp{begin + done, std::min(options_.max_read_bytes, end - begin - done),
                            base + done});
    }
    for (int64_t k = static_cast<int64_t>(first); k >= 0 && static_cast<size_t>(k) <= last;
         k = NextMarked(static_cast<size_t>(k))) {
      const Item& item = sorted_[static_cast<size_t>(k)];
      records->push_back(PlannedRecord{item.unit, base + (item.offset - begin)});
    }
    at = AlignUp(at + (end - begin), extent_alignment);
    i = next;
  }
}

}  // namespace sparrow
