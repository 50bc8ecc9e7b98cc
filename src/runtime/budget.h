// The DRAM accountant: every byte Sparrow allocates for a streamed model
// (resident weights, KV cache, scratch, staging, unit caches) is charged
// here first, and --dram-budget is a hard limit on the total. What is left
// after the fixed parts sizes the unit caches.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/byte_size.h"  // FormatByteSize, for the budget's users

namespace sparrow {

class MemoryBudget {
 public:
  // limit 0 means unlimited.
  explicit MemoryBudget(uint64_t limit_bytes) : limit_(limit_bytes) {}

  // Charges `bytes` for `what`; charges with the same `what` add up into one
  // entry of the breakdown. When the limit would be exceeded nothing is
  // charged and this throws a one-line InputError:
  //   "--dram-budget 512.0 MiB is too small: unit cache needs 300.0 MiB but
  //    only 158.0 MiB is left (354.0 MiB charged so far: resident 310.0 MiB,
  //    kv cache 44.0 MiB); the minimum for this model is 1.2 GiB"
  // `minimum_hint` (0 = unknown, then that last clause is left out) is the
  // smallest workable budget.
  void Charge(uint64_t bytes, const std::string& what, uint64_t minimum_hint = 0);

  uint64_t limit() const { return limit_; }
  uint64_t used() const { return used_; }
  uint64_t remaining() const;  // UINT64_MAX when unlimited
  bool unlimited() const { return limit_ == 0; }
  // "resident 310.2 MiB, kv cache 44.0 MiB, ..." (in charge order) for
  // messages and stats; "nothing" when nothing was charged.
  std::string Breakdown() const;
  const std::vector<std::pair<std::string, uint64_t>>& items() const { return items_; }

 private:
  uint64_t limit_;
  uint64_t used_ = 0;
  std::vector<std::pair<std::string, uint64_t>> items_;
};

// Parses a size given by the user for `flag` (used in messages):
//   plain bytes            "300000000"
//   binary units           "512K", "512M", "1.5G", "2T", each with optional
//                          "i" and/or "B" ("2GiB", "750MB", "4Gi"); letters
//                          are case-insensitive; a fraction is rounded down
//                          to whole bytes; a space may separate number and
//                          unit; "B" alone means bytes
//   a share of a reference "60%", "12.5%" of `reference_bytes` (rounded
//                          down; InputError when reference_bytes is 0)
// InputError for anything else (signs, exponents, empty, "1.5" plain bytes
// with a fraction, unknown units), for a size of zero, and for a size that
// does not fit in 64 bits.
uint64_t ParseByteSize(const std::string& text, uint64_t reference_bytes,
                       const std::string& flag);

}  // namespace sparrow
