// Per-token accounting of the streamed feed-forward: what was read, what
// hit the cache, and where the time went (the I/O / memory management /
// compute split of LLM in a flash's Table 3). --stats prints it, and
// --stats-json writes one record per token.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "base/timer.h"

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

  // Adds every counter and time of `other`, tokens included.
  void Add(const TokenStats& other);
};

class StreamStats {
 public:
  // Opens a record covering `tokens_in_batch` tokens (>= 1). BeginToken
  // while a record is open, or EndToken with none open, is a caller bug:
  // std::logic_error.
  void BeginToken(uint64_t tokens_in_batch = 1);
  TokenStats& current() { return current_; }
  void EndToken();
  bool open() const { return open_; }

  // Closed records, in order.
  const std::vector<TokenStats>& per_token() const { return history_; }
  // Sum of the closed records (tokens = all tokens they cover).
  TokenStats Total() const;
  // Totals and per-token means in a small table: bytes read, read calls,
  // mean read size, cache hit rate, units loaded/evicted, and seconds and
  // share of I/O / memory management / compute. Means are per token covered
  // (a prompt batch of n counts n); when batches and single tokens are
  // mixed, a third column gives the means over single-token (decode)
  // records alone.
  void PrintSummary(std::FILE* out) const;
  // JSON array with one object per closed record, in order: the counters
  // above plus "record", "mean_read_bytes" and "hit_rate" (null when
  // nothing was read / needed). Written to a temporary file beside `path`,
  // flushed to disk, then renamed over `path`, so readers see the old file
  // or the new one, never part of one. InputError naming the path if it
  // cannot be written (the temporary file is removed).
  void WriteJson(const std::string& path) const;

 private:
  TokenStats current_;
  std::vector<TokenStats> history_;
  bool open_ = false;
};

// Adds the seconds from construction to destruction to *sink: wrap the I/O
// wait, the cache bookkeeping or the kernels of a token in one of these.
class ScopedSeconds {
 public:
  explicit ScopedSeconds(double* sink) : sink_(sink), start_(NowSeconds()) {}
  ~ScopedSeconds() { *sink_ += NowSeconds() - start_; }
  ScopedSeconds(const ScopedSeconds&) = delete;
  ScopedSeconds& operator=(const ScopedSeconds&) = delete;

 private:
  double* sink_;
  double start_;
};

}  // namespace sparrow
