// The compacted unit matrix of one unit group (LLM in a flash, Figure 6):
// `capacity` preallocated rows of `row_bytes`; rows [0, size) are in use;
// a pointer vector maps row -> unit and an index maps unit -> row. New
// units are appended; a deleted unit's row is overwritten by the last row
// (swap-with-last), so the used rows stay contiguous and nothing is ever
// reallocated while generating.
#pragma once

#include <cstdint>
#include <vector>

#include "base/aligned_buffer.h"

namespace sparrow {

class UnitCache {
 public:
  static constexpr int32_t kAbsent = -1;

  UnitCache(uint32_t n_units, uint32_t row_bytes, uint32_t capacity);

  uint32_t n_units() const { return n_units_; }
  uint32_t row_bytes() const { return row_bytes_; }
  uint32_t capacity() const { return capacity_; }
  uint32_t size() const { return size_; }
  bool full() const { return size_ == capacity_; }
  uint64_t bytes() const { return uint64_t{capacity_} * row_bytes_; }

  // Row of `unit`, or kAbsent.
  int32_t RowOf(uint32_t unit) const { return row_of_unit_[unit]; }
  bool Contains(uint32_t unit) const { return row_of_unit_[unit] != kAbsent; }
  uint32_t UnitAt(uint32_t row) const { return unit_of_row_[row]; }
  uint8_t* Row(uint32_t row) { return rows_.data() + uint64_t{row} * row_bytes_; }
  const uint8_t* Row(uint32_t row) const { return rows_.data() + uint64_t{row} * row_bytes_; }
  const uint8_t* data() const { return rows_.data(); }
  // unit id of each used row, rows [0, size).
  const std::vector<uint32_t>& units_by_row() const { return unit_of_row_; }

  // Appends `unit` (must be absent, cache not full); returns its row, whose
  // bytes the caller fills.
  uint32_t Append(uint32_t unit);
  // Deletes `unit` (must be present): the last row's unit moves into its row.
  void Remove(uint32_t unit);
  void Clear();

 private:
  uint32_t n_units_;
  uint32_t row_bytes_;
  uint32_t capacity_;
  uint32_t size_ = 0;
  AlignedBuffer<uint8_t> rows_;
  std::vector<int32_t> row_of_unit_;
  std::vector<uint32_t> unit_of_row_;  // capacity entries, [0, size) valid
};

}  // namespace sparrow
