// Overflow-checked unsigned arithmetic for sizes and offsets read from files.
// Every count, length and offset that comes from disk goes through these
// before it is used to index memory.
#pragma once

#include <cstdint>

namespace sparrow {

// Each returns false (and leaves *out unspecified) when the exact result does
// not fit in 64 bits.
[[nodiscard]] inline bool CheckedAdd(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}

[[nodiscard]] inline bool CheckedMul(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}

// Rounds `value` up to a multiple of `alignment` (a power of two or any
// positive number); false on overflow or a zero alignment.
[[nodiscard]] inline bool CheckedAlignUp(uint64_t value, uint64_t alignment,
                                         uint64_t* out) {
  if (alignment == 0) return false;
  const uint64_t rem = value % alignment;
  if (rem == 0) {
    *out = value;
    return true;
  }
  return CheckedAdd(value, alignment - rem, out);
}

}  // namespace sparrow
