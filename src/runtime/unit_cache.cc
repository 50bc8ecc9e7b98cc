#include "src/runtime/unit_cache.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "base/error.h"

namespace sparrow {
namespace {

constexpr uint64_t kRowAlignment = 64;

uint32_t ClampCapacity(uint32_t n_units, uint32_t capacity) {
  return capacity < n_units ? capacity : n_units;
}

}  // namespace

UnitCache::UnitCache(uint32_t n_units, uint32_t row_bytes, uint32_t capacity, uint32_t split,
                     uint8_t* storage)
    : n_units_(n_units),
      row_bytes_(row_bytes),
      capacity_(ClampCapacity(n_units, capacity)),
      head_bytes_(split == 0 ? row_bytes : split) {
  if (n_units == 0 || n_units > static_cast<uint32_t>(std::numeric_limits<int32_t>::max())) {
    throw std::invalid_argument(StrCat("UnitCache: bad unit count ", n_units));
  }
  if (row_bytes == 0 || capacity == 0) {
    throw std::invalid_argument(
        StrCat("UnitCache: row_bytes ", row_bytes, " and capacity ", capacity, " must be >= 1"));
  }
  if (split >= row_bytes) {
    throw std::invalid_argument(StrCat("UnitCache: split ", split, " not inside rows of ",
                                       row_bytes, " bytes"));
  }
  const uint64_t matrix_bytes = bytes();
  if (matrix_bytes > std::numeric_limits<size_t>::max() - kRowAlignment) throw std::bad_alloc();
  if (storage != nullptr) {
    if (reinterpret_cast<uintptr_t>(storage) % kRowAlignment != 0) {
      throw std::invalid_argument("UnitCache: storage not 64-byte aligned");
    }
    rows_ = storage;
  } else {
    own_rows_.Reset(static_cast<size_t>(matrix_bytes), kRowAlignment);
    rows_ = own_rows_.data();
  }
  // Touch every page now: the budget charged for these bytes, and a page
  // fault in the middle of a token would be billed to memory management.
  std::memset(rows_, 0, static_cast<size_t>(matrix_bytes));
  row_of_unit_.assign(n_units_, kAbsent);
  unit_of_row_.assign(capacity_, 0);
  row_marked_.assign(capacity_, 0);
}

uint64_t UnitCache::MatrixBytes(uint32_t n_units, uint32_t row_bytes, uint32_t capacity) {
  const uint64_t matrix = uint64_t{ClampCapacity(n_units, capacity)} * row_bytes;
  return (matrix + kRowAlignment - 1) / kRowAlignment * kRowAlignment;
}

uint64_t UnitCache::MemoryBytes(uint32_t n_units, uint32_t row_bytes, uint32_t capacity) {
  const uint64_t rows = ClampCapacity(n_units, capacity);
  return MatrixBytes(n_units, row_bytes, capacity) + uint64_t{n_units} * sizeof(int32_t) +
         rows * (sizeof(uint32_t) + sizeof(uint8_t));
}

uint64_t UnitCache::memory_bytes() const {
  return MemoryBytes(n_units_, row_bytes_, capacity_);
}

void UnitCache::Store(uint32_t row, const uint8_t* record) {
  if (row >= size_) throw std::logic_error(StrCat("UnitCache::Store: row ", row, " is not in use"));
  std::memcpy(rows_ + HeadOffset(row), record, head_bytes_);
  if (tail_bytes() != 0) {
    std::memcpy(rows_ + TailOffset(row), record + head_bytes_, tail_bytes());
  }
}

void UnitCache::MoveRow(uint32_t from, uint32_t to) {
  uint8_t* base = rows_;
  std::memcpy(base + HeadOffset(to), base + HeadOffset(from), head_bytes_);
  if (tail_bytes() != 0) {
    std::memcpy(base + TailOffset(to), base + TailOffset(from), tail_bytes());
  }
}

void UnitCache::CheckUnit(uint32_t unit, const char* operation) const {
  if (unit >= n_units_) {
    throw std::logic_error(
        StrCat("UnitCache::", operation, ": unit ", unit, " out of range (", n_units_, " units)"));
  }
}

uint32_t UnitCache::Append(uint32_t unit) {
  CheckUnit(unit, "Append");
  if (row_of_unit_[unit] != kAbsent) {
    throw std::logic_error(StrCat("UnitCache::Append: unit ", unit, " is already cached"));
  }
  if (full()) {
    throw std::logic_error(StrCat("UnitCache::Append: cache is full (", capacity_, " rows)"));
  }
  const uint32_t row = size_++;
  unit_of_row_[row] = unit;
  row_of_unit_[unit] = static_cast<int32_t>(row);
  return row;
}

void UnitCache::Remove(uint32_t unit) {
  CheckUnit(unit, "Remove");
  const int32_t found = row_of_unit_[unit];
  if (found == kAbsent) {
    throw std::logic_error(StrCat("UnitCache::Remove: unit ", unit, " is not cached"));
  }
  const uint32_t row = static_cast<uint32_t>(found);
  const uint32_t last = size_ - 1;
  if (row != last) {
    const uint32_t moved = unit_of_row_[last];
    MoveRow(last, row);
    unit_of_row_[row] = moved;
    row_of_unit_[moved] = static_cast<int32_t>(row);
  }
  row_of_unit_[unit] = kAbsent;
  size_ = last;
}

void UnitCache::RemoveMany(const std::vector<uint32_t>& units) {
  // Validate and mark first, so that a bad list changes nothing.
  for (size_t i = 0; i < units.size(); ++i) {
    const uint32_t unit = units[i];
    const char* problem = nullptr;
    if (unit >= n_units_) {
      problem = "out of range";
    } else if (row_of_unit_[unit] == kAbsent) {
      problem = "not cached";
    } else if (row_marked_[static_cast<uint32_t>(row_of_unit_[unit])]) {
      problem = "listed twice";
    }
    if (problem != nullptr) {
      for (size_t j = 0; j < i; ++j) row_marked_[static_cast<uint32_t>(row_of_unit_[units[j]])] = 0;
      throw std::logic_error(StrCat("UnitCache::RemoveMany: unit ", unit, " is ", problem));
    }
    row_marked_[static_cast<uint32_t>(row_of_unit_[unit])] = 1;
  }

  // Holes are marked rows below new_size; donors are unmarked rows at or
  // above it, and there are exactly as many of each.
  const uint32_t new_size = size_ - static_cast<uint32_t>(units.size());
  uint32_t donor = new_size;
  for (const uint32_t unit : units) {
    const uint32_t hole = static_cast<uint32_t>(row_of_unit_[unit]);
    row_of_unit_[unit] = kAbsent;
    if (hole >= new_size) continue;  // its mark is cleared by the donor scan
    row_marked_[hole] = 0;
    while (row_marked_[donor]) row_marked_[donor++] = 0;
    const uint32_t moved = unit_of_row_[donor];
    MoveRow(donor, hole);
    unit_of_row_[hole] = moved;
    row_of_unit_[moved] = static_cast<int32_t>(hole);
    ++donor;
  }
  for (; donor < size_; ++donor) row_marked_[donor] = 0;
  size_ = new_size;
}

void UnitCache::Clear() {
  for (uint32_t row = 0; row < size_; ++row) row_of_unit_[unit_of_row_[row]] = kAbsent;
  size_ = 0;
}

}  // namespace sparrow
