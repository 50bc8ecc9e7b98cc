// The compacted unit matrix of one unit group (LLM in a flash, Figure 6):
// `capacity` preallocated rows of `row_bytes`; rows [0, size) are in use;
// a pointer vector maps row -> unit and an index maps unit -> row. New
// units are appended; a deleted unit's row is overwritten by the last row
// (swap-with-last), so the used rows stay contiguous and nothing is ever
// reallocated while generating.
//
// A cache may keep each row in two pieces: its first `split` bytes (the
// head) in one matrix and the rest (the tail) in another, each packed. A
// neuron record is [gate | up | down], and the kernels read gate and up in
// one pass and down in another: split after up, the cached heads of
// consecutive rows are one contiguous span, and so are their tails, where
// whole records would make each pass skip a third of every record (the
// hardware prefetchers follow that pattern worse: gather_bench --layout
// records against --layout split).
//
// Costs: Append, Contains, RowOf O(1); Remove O(row_bytes) (one memcpy per
// piece);
// RemoveMany O(k * row_bytes) for k units, copying only the rows that must
// move; Clear O(size). Memory: capacity * row_bytes for the rows (64-byte
// aligned base; rows packed at row_bytes, or the heads packed at the split
// and the tails after them), 4 bytes per unit for the
// unit -> row index and 5 bytes per row for the row -> unit vector and
// RemoveMany's marks, all allocated and touched in the constructor (so the
// pages are resident from the start and no page fault lands in a token).
// The rows live in the cache's own buffer or in storage the caller gives
// (a RowArena slot of MatrixBytes, which then outlives the cache).
#pragma once

#include <cstdint>
#include <vector>

#include "base/aligned_buffer.h"

namespace sparrow {

class UnitCache {
 public:
  static constexpr int32_t kAbsent = -1;

  // n_units in [1, INT32_MAX], row_bytes >= 1, capacity >= 1, split 0 (rows
  // whole) or in [1, row_bytes); a capacity above n_units is lowered to
  // n_units (more rows could never be used). std::invalid_argument
  // otherwise; std::bad_alloc if memory runs out.
  // With `storage`, the rows are kept there: at least MatrixBytes(...)
  // bytes, 64-byte aligned, owned by the caller.
  UnitCache(uint32_t n_units, uint32_t row_bytes, uint32_t capacity, uint32_t split = 0,
            uint8_t* storage = nullptr);

  // Bytes a cache with these parameters holds (rows and maps), for charging
  // the budget before constructing it.
  static uint64_t MemoryBytes(uint32_t n_units, uint32_t row_bytes, uint32_t capacity);
  // The rows alone, rounded up to 64 bytes: what `storage` must hold (part
  // of MemoryBytes).
  static uint64_t MatrixBytes(uint32_t n_units, uint32_t row_bytes, uint32_t capacity);

  uint32_t n_units() const { return n_units_; }
  uint32_t row_bytes() const { return row_bytes_; }
  // A row's head (all of it when not split) and tail (0 when not split).
  uint32_t head_bytes() const { return head_bytes_; }
  uint32_t tail_bytes() const { return row_bytes_ - head_bytes_; }
  uint32_t capacity() const { return capacity_; }
  uint32_t size() const { return size_; }
  bool full() const { return size_ == capacity_; }
  // The row matrix alone.
  uint64_t bytes() const { return uint64_t{capacity_} * row_bytes_; }
  // Everything this cache holds (rows and maps): MemoryBytes(...).
  uint64_t memory_bytes() const;

  // Row of `unit`, or kAbsent.
  int32_t RowOf(uint32_t unit) const { return row_of_unit_[unit]; }
  bool Contains(uint32_t unit) const { return row_of_unit_[unit] != kAbsent; }
  // The unit -> row index itself (n_units entries, kAbsent when not
  // cached), for kernels that read the cache state of every unit at once.
  const int32_t* row_of_unit_data() const { return row_of_unit_.data(); }
  uint32_t UnitAt(uint32_t row) const { return unit_of_row_[row]; }
  // A row's head (the whole row when not split): head_bytes() apart.
  const uint8_t* Row(uint32_t row) const { return rows_ + HeadOffset(row); }
  // A row's tail, tail_bytes() apart; only when split.
  const uint8_t* Tail(uint32_t row) const { return rows_ + TailOffset(row); }
  // Fills `row` with the row_bytes() of `record`, split as this cache keeps
  // rows.
  void Store(uint32_t row, const uint8_t* record);
  // The matrices: the heads, then (when split) the tails.
  const uint8_t* data() const { return rows_; }
  // unit id of each row; entries [0, size) are the used rows, the rest
  // (up to capacity) are stale.
  const std::vector<uint32_t>& units_by_row() const { return unit_of_row_; }

  // Appends `unit` (must be absent, cache not full); returns its row, whose
  // bytes the caller fills (Store). std::logic_error if the preconditions fail.
  uint32_t Append(uint32_t unit);
  // Deletes `unit` (must be present): the last row's bytes and unit move
  // into its row. std::logic_error if absent.
  void Remove(uint32_t unit);
  // Deletes every unit in `units` (each present, no repeats; else
  // std::logic_error and nothing is changed): the freed rows below the new
  // size are filled from surviving rows above it, so a row that is itself
  // being deleted is never copied. Same end state as some sequence of
  // Remove calls, with fewer copies.
  void RemoveMany(const std::vector<uint32_t>& units);
  void Clear();

 private:
  void CheckUnit(uint32_t unit, const char* operation) const;
  // Copies row `from` over row `to`, head and tail.
  void MoveRow(uint32_t from, uint32_t to);
  uint64_t HeadOffset(uint32_t row) const { return uint64_t{row} * head_bytes_; }
  uint64_t TailOffset(uint32_t row) const {
    return uint64_t{capacity_} * head_bytes_ + uint64_t{row} * tail_bytes();
  }

  uint32_t n_units_;
  uint32_t row_bytes_;
  uint32_t capacity_;
  uint32_t head_bytes_;
  uint32_t size_ = 0;
  AlignedBuffer<uint8_t> own_rows_;  // empty when the caller gave storage
  uint8_t* rows_ = nullptr;
  std::vector<int32_t> row_of_unit_;
  std::vector<uint32_t> unit_of_row_;  // capacity entries, [0, size) valid
  std::vector<uint8_t> row_marked_;    // RemoveMany scratch, all 0 between calls
};

}  // namespace sparrow
