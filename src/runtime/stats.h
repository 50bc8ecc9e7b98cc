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

// One unit group's share of a record (for traces the simulator replays).
struct GroupTokenStats {
  uint64_t needed = 0;
  uint64_t hit = 0;
  uint64_t loaded = 0;
  uint64_t bytes_read = 0;
  uint64_t read_calls = 0;
};

struct TokenStats {
  uint64_t bytes_read = 0;
  uint64_t read_calls = 0;
  uint64_t units_needed = 0;
  uint64_t units_hit = 0;
  uint64_t units_loaded = 0;
  uint64_t units_evicted = 0;
  // Of the units loaded, those computed in the read's staging without
  // entering the cache (no room that this pass did not need).
  uint64_t units_streamed = 0;
  double io_seconds = 0;       // the compute thread waiting for reads
  double memory_seconds = 0;   // copies into the cache, eviction, read planning
  double compute_seconds = 0;  // FFN kernels over cached rows
  double select_seconds = 0;   // the sparsity policy's ranking (top-K), apart from the three above
  double wall_seconds = 0;     // from the record's first layer to its last
  // Off the compute thread (the read pipeline's): the loader's own time for
  // the bytes read (what the device alone takes: the floor for the token's
  // time), and the records' checksums.
  double read_seconds = 0;
  double checksum_seconds = 0;
  // Units read ahead for the next group (dense policy) and how many of
  // them it used (the prefetch's accuracy).
  uint64_t prefetched_units = 0;
  uint64_t prefetch_used = 0;
  // Decode tokens of a pruning policy: units chosen, and how many of them
  // the previous token chose too (top-K overlap of consecutive tokens).
  uint64_t overlap_units = 0;
  uint64_t overlap_kept = 0;
  uint64_t tokens = 1;         // tokens this record covers (a prompt batch: n)
  std::vector<GroupTokenStats> groups;  // per unit group, in bundle order

  // Adds every counter and time of `other`, tokens included.
  void Add(const TokenStats& other);
};

class StreamStats {
 public:
  // What a trace needs besides the records to be replayed (sparrow
  // simulate): the model's shape, the run's settings, and the unit groups.
  struct TraceGroup {
    uint32_t layer = 0;
    std::string kind;
    uint32_t n_units = 0, record_bytes = 0, payload_bytes = 0, capacity = 0;
  };
  struct TraceHeader {
    std::string layout, record_type, io, policy;
    uint32_t n_layers = 0, d_model = 0, d_ff = 0;
    uint64_t resident_bytes = 0;  // weights read per token outside the FFN
    uint64_t ffn_bytes = 0, cache_bytes = 0, dram_budget = 0;
    int threads = 0;
    double mlp_density = 1.0, gamma = 0.0;
    std::vector<TraceGroup> groups;
  };
  TraceHeader& trace_header() { return header_; }
  const TraceHeader& trace_header() const { return header_; }
  // Records opened from now on carry this many per-group entries.
  void set_group_count(size_t n) { group_count_ = n; }

  // Opens a record covering `tokens_in_batch` tokens (>= 1). BeginToken
  // while a record is open, or EndToken with none open, is a caller bug:
  // std::logic_error.
  void BeginToken(uint64_t tokens_in_batch = 1);
  TokenStats& current() { return current_; }
  void EndToken();
  // Drops the open record, if any (its pass was abandoned).
  void AbandonToken() { open_ = false; }
  bool open() const { return open_; }

  // Closed records, in order.
  const std::vector<TokenStats>& per_token() const { return history_; }
  // Sum of the closed records (tokens = all tokens they cover).
  TokenStats Total() const;
  // Totals and per-token means in a small table: bytes read, read calls,
  // mean read size, cache hit rate, units loaded/evicted, and seconds and
  // share of I/O wait / memory management / compute on the compute thread,
  // then the wall time beside the reads' own time (how close the run is to
  // the device's limit) and the checksums. Means are per token covered
  // (a prompt batch of n counts n); when batches and single tokens are
  // mixed, a third column gives the means over single-token (decode)
  // records alone.
  void PrintSummary(std::FILE* out) const;
  // The trace: a JSON object {"format": "sparrow-trace", "version": 1,
  // "model": {header fields}, "groups": [{layer, kind, n_units,
  // record_bytes, payload_bytes, capacity}], "tokens": [...]} with one
  // object per closed record, in order: the counters above plus "record",
  // "mean_read_bytes" and "hit_rate" (null when nothing was read / needed)
  // and "groups": [[needed, hit, loaded, bytes_read, read_calls] per
  // group]. Written to a temporary file beside `path`,
  // flushed to disk, then renamed over `path`, so readers see the old file
  // or the new one, never part of one. InputError naming the path if it
  // cannot be written (the temporary file is removed).
  void WriteJson(const std::string& path) const;

 private:
  TokenStats current_;
  std::vector<TokenStats> history_;
  bool open_ = false;
  double opened_at_ = 0;
  size_t group_count_ = 0;
  TraceHeader header_;
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
