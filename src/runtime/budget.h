// The DRAM accountant: every byte Sparrow allocates for a streamed model
// (resident weights, KV cache, scratch, staging, unit caches) is charged
// here first, and --dram-budget is a hard limit on the total. What is left
// after the fixed parts sizes the unit caches.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sparrow {

class MemoryBudget {
 public:
  // limit 0 means unlimited.
  explicit MemoryBudget(uint64_t limit_bytes) : limit_(limit_bytes) {}

  // Charges `bytes` for `what`. When the limit would be exceeded:
  // InputError "--dram-budget 512 MiB is too small: <what> needs X more
  // (Y charged so far: ...); the minimum for this model is Z".
  // `minimum_hint` (0 = unknown) is the smallest workable budget.
  void Charge(uint64_t bytes, const std::string& what, uint64_t minimum_hint = 0);

  uint64_t limit() const { return limit_; }
  uint64_t used() const { return used_; }
  uint64_t remaining() const;  // UINT64_MAX when unlimited
  bool unlimited() const { return limit_ == 0; }
  // "resident 310.2 MiB, kv cache 44.0 MiB, ..." for messages and stats.
  std::string Breakdown() const;

 private:
  uint64_t limit_;
  uint64_t used_ = 0;
  std::vector<std::pair<std::string, uint64_t>> items_;
};

// Parses "512M", "1.5G", "2GiB", "300000000", "750MB" (binary units: K, M,
// G, T, with optional i/B) or "60%" of `reference_bytes`. InputError for
// anything else or zero.
uint64_t ParseByteSize(const std::string& text, uint64_t reference_bytes,
                       const std::string& flag);

}  // namespace sparrow
