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
  uint64_t max_read_bytes = 1 << 20;  // largest single read
  // Records separated by at most this many bytes are read as one extent
  // (the gap is read and discarded: Ripple's access collapse). 0: only
  // exactly adjacent records coalesce.
  uint64_t max_gap_bytes = 0;
  size_t alignment = 1;  // from Loader::alignment()
};

class ReadPlanner {
 public:
  // `staging_bytes` of aligned staging memory is allocated once here.
  ReadPlanner(uint64_t staging_bytes, const ReadPlanOptions& options);

  // Plans reads for `units` (any order, no duplicates) of records at
  // offsets offset_of(unit) of `record_bytes` each, as many as fit in the
  // staging memory from the front of the list; returns how many were
  // planned (>= 1 if units is non-empty and one record fits). Fills `ops`
  // and `records` (in disk order).
  template <typename OffsetOf>
  size_t Plan(const std::vector<uint32_t>& units, uint32_t record_bytes,
              OffsetOf offset_of, std::vector<ReadOp>* ops,
              std::vector<PlannedRecord>* records);

  uint64_t staging_bytes() const { return staging_.size(); }
  const ReadPlanOptions& options() const { return options_; }

 private:
  struct Item {
    uint64_t offset;
    uint32_t unit;
  };
  size_t PlanSorted(std::vector<Item>& items, uint32_t record_bytes,
                    std::vector<ReadOp>* ops, std::vector<PlannedRecord>* records);

  ReadPlanOptions options_;
  AlignedBuffer<uint8_t> staging_;
  std::vector<Item> items_;
};

template <typename OffsetOf>
size_t ReadPlanner::Plan(const std::vector<uint32_t>& units,
                         uint32_t record_bytes, OffsetOf offset_of,
                         std::vector<ReadOp>* ops,
                         std::vector<PlannedRecord>* records) {
  items_.clear();
  for (uint32_t u : units) items_.push_back(Item{offset_of(u), u});
  return PlanSorted(items_, record_bytes, ops, records);
}

}  // namespace sparrow
