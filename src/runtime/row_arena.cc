#include "src/runtime/row_arena.h"

#include <limits>
#include <new>
#include <stdexcept>

#include "base/error.h"

namespace sparrow {

uint64_t RowArena::MemoryBytes(uint64_t slot_bytes) {
  if (slot_bytes == 0) return 0;
  // In "always" mode the last huge page, partly used, is backed whole.
  const uint64_t page = TransparentHugePagesAlways() ? kHugePageBytes : PageBytes();
  return (slot_bytes + page - 1) / page * page;
}

RowArena::RowArena(uint64_t slot_bytes) : room_(slot_bytes) {
  if (slot_bytes == 0) return;
  if (slot_bytes > std::numeric_limits<size_t>::max() / 2) throw std::bad_alloc();
  const size_t bytes = static_cast<size_t>(slot_bytes);
  buffer_ = MapWithWholeHugePages(bytes);
}

uint8_t* RowArena::Take(uint64_t bytes) {
  const uint64_t slot = SlotBytes(bytes);
  if (slot > room_ - taken_) {
    throw std::logic_error(
        StrCat("RowArena::Take: ", slot, " bytes asked, ", room_ - taken_, " of ", room_, " left"));
  }
  uint8_t* p = buffer_.data() + taken_;
  taken_ += slot;
  return p;
}

}  // namespace sparrow
