#include "src/runtime/read_planner.h"

#include <algorithm>
#include <stdexcept>

#include "base/error.h"

namespace sparrow {
namespace {

// Extents start at cache-line boundaries in staging even for buffered
// reads: the copies out of staging run faster from aligned rows.
constexpr uint64_t kMinExtentAlignment = 64;

uint64_t AlignDown(uint64_t v, uint64_t a) { return v / a * a; }
uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

ReadPlanOptions Normalize(ReadPlanOptions o) {
  if (o.alignment == 0 || (o.alignment & (o.alignment - 1)) != 0) {
    throw std::invalid_argument(StrCat("read alignment ", o.alignment, " is not a power of two"));
  }
  o.max_read_bytes = std::max<uint64_t>(o.alignment, AlignDown(o.max_read_bytes, o.alignment));
  // A gap as long as a read would make some reads pure gap.
  o.max_gap_bytes = std::min(o.max_gap_bytes, o.max_read_bytes - 1);
  return o;
}

}  // namespace

ReadPlanner::ReadPlanner(uint64_t staging_bytes, const ReadPlanOptions& options)
    : options_(Normalize(options)) {
  staging_.Reset(staging_bytes, std::max<size_t>(4096, options_.alignment));
}

uint64_t ReadPlanner::MinStagingBytes(uint32_t record_bytes) const {
  const uint64_t a = options_.alignment;
  return AlignUp(uint64_t{record_bytes} + a - 1, a);
}

uint64_t ReadPlanner::Layout(const std::vector<Item>& items, size_t count, uint32_t record_bytes,
                             std::vector<ReadOp>* ops, std::vector<PlannedRecord>* records) {
  const uint64_t a = options_.alignment;
  const uint64_t extent_alignment = std::max<uint64_t>(a, kMinExtentAlignment);
  sorted_.assign(items.begin(), items.begin() + static_cast<std::ptrdiff_t>(count));
  std::sort(sorted_.begin(), sorted_.end(), [](const Item& x, const Item& y) {
    return x.offset != y.offset ? x.offset < y.offset : x.unit < y.unit;
  });
  if (ops != nullptr) {
    ops->clear();
    records->clear();
  }
  uint64_t used = 0;  // end of the last extent in staging
  size_t i = 0;
  while (i < sorted_.size()) {
    // Grow one extent [begin, end) of widened records while the next one
    // overlaps, touches, or lies within max_gap_bytes of it.
    const size_t first = i;
    const uint64_t begin = AlignDown(sorted_[i].offset, a);
    uint64_t end = begin;
    for (; i < sorted_.size(); ++i) {
      const uint64_t o = sorted_[i].offset;
      if (o > UINT64_MAX - record_bytes - a) {
        throw std::invalid_argument(StrCat("record offset ", o, " out of range"));
      }
      const uint64_t b = AlignDown(o, a);
      if (i > first && b > end && b - end > options_.max_gap_bytes) break;
      end = std::max(end, AlignUp(o + record_bytes, a));
    }
    const uint64_t at = AlignUp(used, extent_alignment);
    used = at + (end - begin);
    if (ops == nullptr) continue;
    uint8_t* base = staging_.data() + at;
    for (uint64_t done = 0; done < end - begin; done += options_.max_read_bytes) {
      const uint64_t n = std::min(options_.max_read_bytes, end - begin - done);
      ops->push_back(ReadOp{begin + done, n, base + done});
    }
    for (size_t k = first; k < i; ++k) {
      records->push_back(PlannedRecord{sorted_[k].unit, base + (sorted_[k].offset - begin)});
    }
  }
  return used;
}

size_t ReadPlanner::PlanSorted(std::vector<Item>& items, uint32_t record_bytes,
                               std::vector<ReadOp>* ops, std::vector<PlannedRecord>* records) {
  ops->clear();
  records->clear();
  const size_t n = items.size();
  if (n == 0 || record_bytes == 0) return 0;
  const uint64_t capacity = staging_bytes();
  size_t fits = n;
  if (Layout(items, n, record_bytes, nullptr, nullptr) > capacity) {
    // Largest prefix that fits, by bisection: `lo` fits, `hi` does not.
    // (Staging need almost always grows with the prefix; where splitting
    // or a bridged gap makes it dip, this still returns a prefix that
    // fits and one more that does not.)
    size_t lo = 0;
    size_t hi = n;
    while (hi - lo > 1) {
      const size_t mid = lo + (hi - lo) / 2;
      if (Layout(items, mid, record_bytes, nullptr, nullptr) <= capacity) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    fits = lo;
  }
  if (fits == 0) return 0;
  Layout(items, fits, record_bytes, ops, records);
  return fits;
}

}  // namespace sparrow
