// Turns the units a group is missing into few, large reads: records that
// sit next to each other on disk are coalesced into one read (up to
// max_read_bytes), and for O_DIRECT the extents are widened to the
// loader's alignment. The planner owns the staging memory reads land in.
#pragma once

#include <cstdint>
#include <vector>

#include "base/aligned_buffer.h"
#include "src/runtime/loader.h"

namespace sparrow {

struct PlannedRecord {
  uint32_t unit;
  const uint8_t* data;  // the record's bytes in staging after the reads
};

struct ReadPlanOptions {
  // Largest single read (rounded down to a multiple of `alignment`, and at
  // least `alignment`). A longer extent becomes several reads that land
  // back to back in staging, so a record may straddle two reads.
  uint64_t max_read_bytes = 1 << 20;
  // Records separated by at most this many bytes are read as one extent
  // (the gap is read and discarded: Ripple's access collapse). 0: only
  // exactly adjacent records coalesce. With alignment > 1 the gap is
  // measured between the widened extents (records in the same block always
  // share a read). Gaps of max_read_bytes or more are never read.
  uint64_t max_gap_bytes = 0;
  size_t alignment = 1;  // from Loader::alignment(); a power of two
};

class ReadPlanner {
 public:
  // `staging_bytes` of aligned staging memory is allocated once here.
  // std::invalid_argument if options.alignment is not a power of two.
  ReadPlanner(uint64_t staging_bytes, const ReadPlanOptions& options);

  // Plans reads for `units` (any order, no duplicates) of records at
  // offsets offset_of(unit) of `record_bytes` each, as many as fit in the
  // staging memory from the front of the list; returns how many were
  // planned (>= 1 if units is non-empty and staging_bytes() >=
  // MinStagingBytes(record_bytes)); the caller plans the rest of the list
  // in further calls. Fills `ops` (by offset; offset, length and dest
  // aligned to options().alignment, length <= max_read_bytes) and
  // `records` (in disk order). Both point into staging and are valid until
  // the next Plan.
  //
  // Staging layout: extents (runs of records merged by adjacency or gap)
  // in disk order, each starting at the next multiple of
  // max(alignment, 64) bytes. A plan fits when the sum of its extents'
  // lengths, each rounded up to that multiple, is at most staging_bytes().
  // Units are taken from the front of the list until the next one would
  // not fit, so the count returned is a prefix length n that fits while
  // n + 1 does not. Cost: one sort (skipped when the list is already in
  // disk order) and about one bit-scan per unit.
  template <typename OffsetOf>
  size_t Plan(const std::vector<uint32_t>& units, uint32_t record_bytes,
              OffsetOf offset_of, std::vector<ReadOp>* ops,
              std::vector<PlannedRecord>* records);

  uint64_t staging_bytes() const { return staging_.size(); }
  const uint8_t* staging() const { return staging_.data(); }
  // Staging that any one record needs, wherever it sits on disk.
  uint64_t MinStagingBytes(uint32_t record_bytes) const;
  const ReadPlanOptions& options() const { return options_; }

 private:
  struct Item {
    uint64_t offset;
    uint32_t unit;
    uint32_t index;  // position in the caller's list
  };
  size_t PlanSorted(std::vector<Item>& items, uint32_t record_bytes,
                    std::vector<ReadOp>* ops, std::vector<PlannedRecord>* records);
  // Emits the plan of the items marked in present_ (sorted_ order).
  void Emit(uint32_t record_bytes, std::vector<ReadOp>* ops,
            std::vector<PlannedRecord>* records);
  // Marked positions of sorted_ nearest below / above `x`; -1 if none.
  int64_t PrevMarked(size_t x) const;
  int64_t NextMarked(size_t x) const;
  void Mark(size_t x);

  ReadPlanOptions options_;
  AlignedBuffer<uint8_t> staging_;
  std::vector<Item> items_;        // the caller's order
  std::vector<Item> sorted_;       // disk order
  std::vector<uint32_t> rank_;     // caller index -> position in sorted_
  std::vector<uint64_t> present_;  // bit per sorted_ position: planned
  std::vector<uint64_t> summary_;  // bit per present_ word: non-zero
  // For the first planned position of an extent, its last; for the last,
  // its first (entries inside an extent are stale and never read).
  std::vector<uint32_t> mate_;
};

template <typename OffsetOf>
size_t ReadPlanner::Plan(const std::vector<uint32_t>& units,
                         uint32_t record_bytes, OffsetOf offset_of,
                         std::vector<ReadOp>* ops,
                         std::vector<PlannedRecord>* records) {
  items_.clear();
  for (uint32_t u : units) {
    items_.push_back(Item{offset_of(u), u, static_cast<uint32_t>(items_.size())});
  }
  return PlanSorted(items_, record_bytes, ops, records);
}

}  // namespace sparrow
