// Per-token accounting of the streamed feed-forward: what was read, what
// hit the cache, and where the time went (the I/O / memory management /
// compute split of LLM in a flash's Table 3). --stats prints it, and
// --stats-json writes one record per token.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace sparrow {

struct TokenStats {
  uint64_t bytes_read = 0;
  uint64_t read_calls = 0;
  uint64_t units_needed = 0;
  uint64_t units_hit = 0;
  uint64_t units_loaded = 0;
  uint64_t units_evicted = 0;
  double io_seconds = 0;       // waiting for reads
  double memory_seconds = 0;   // checksums, copies into the cache, bookkeeping
  double compute_seconds = 0;  // FFN kernels over cached rows
  uint64_t tokens = 1;         // tokens this record covers (a prompt batch: n)
};

class StreamStats {
 public:
  void BeginToken(uint64_t tokens_in_batch = 1);
  TokenStats& current() { return current_; }
  void EndToken();

  const std::vector<TokenStats>& per_token() const { return history_; }
  TokenStats Total() const;
  // Human-readable totals and per-token means.
  void PrintSummary(std::FILE* out) const;
  // JSON array of per-token records; written to a temporary file and renamed.
  void WriteJson(const std::string& path) const;

 private:
  TokenStats current_;
  std::vector<TokenStats> history_;
  bool open_ = false;
};

}  // namespace sparrow
