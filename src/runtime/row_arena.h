// One mapping for the row matrices of all of a model's unit caches, its
// whole 2 MiB pages on transparent huge pages where Linux has them
// (`madvise` or `always` mode).
//
// Every token's FFN reads rows scattered through these matrices; on 4 KiB
// pages most rows cost a TLB miss, on 2 MiB pages few. One mapping for all
// the caches, rather than one each, leaves small pages only at its end (less
// than 2 MiB), and no cache smaller than a huge page without them (a
// 125M-shaped model's caches are 1.3 and 2.7 MB each). The tail is not
// advised, so the arena takes its slots rounded up to a page, not to a huge
// page. Measured on a 2 vCPU Zen 4 VM, `sparrow bench -p 0 -n 64 -r 2 -t 1`,
// alternated rounds (README: "Unit caches on huge pages").
#pragma once

#include <cstdint>

#include "base/huge_pages.h"

namespace sparrow {

class RowArena {
 public:
  // Slots start 64-byte aligned, as the kernels want their rows.
  static constexpr uint64_t kSlotAlignment = 64;
  static uint64_t SlotBytes(uint64_t bytes) {
    return (bytes + kSlotAlignment - 1) / kSlotAlignment * kSlotAlignment;
  }
  // The memory an arena for slots of `slot_bytes` in all (SlotBytes sums)
  // holds once its slots are written: whole huge pages where the system gives
  // them (the last one is backed whole once any of it is written), whole
  // pages otherwise (pages never written stay unbacked).
  static uint64_t MemoryBytes(uint64_t slot_bytes);

  RowArena() = default;
  // Maps room for `slot_bytes` (zeroed, not yet backed); std::bad_alloc if
  // the system refuses.
  explicit RowArena(uint64_t slot_bytes);

  // The next SlotBytes(bytes) of the arena, 64-byte aligned and zeroed;
  // std::logic_error past the room given to the constructor.
  uint8_t* Take(uint64_t bytes);
  uint64_t taken() const { return taken_; }

 private:
  HugePageBuffer buffer_;
  uint64_t room_ = 0, taken_ = 0;
};

}  // namespace sparrow
