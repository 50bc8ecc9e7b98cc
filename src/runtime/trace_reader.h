// Reads a streaming trace (`sparrow run/perplexity --stats-json FILE`) back
// into plain structs for `sparrow simulate`, validating it strictly.
//
// The format, version 1 (see StreamStats::WriteJson):
//   {"format": "sparrow-trace", "version": 1,
//    "model": {"layout", "record_type", "n_layers", "d_model", "d_ff",
//              "resident_bytes", "ffn_bytes", "cache_bytes", "dram_budget",
//              "threads", "io", "policy", "mlp_density", "gamma"},
//    "groups": [{"layer", "kind", "n_units", "record_bytes", "payload_bytes",
//                "capacity"}, ...],
//    "tokens": [{"record", "tokens", "bytes_read", "read_calls",
//                "units_needed", "units_hit", "units_loaded", "units_evicted",
//                "io_seconds", "memory_seconds", "compute_seconds",
//                "select_seconds", "wall_seconds", "mean_read_bytes" (number
//                or null), "hit_rate" (number or null),
//                "groups": [[needed, hit, loaded, bytes_read, read_calls],
//                           ... one per entry of "groups", same order]}, ...]}
//
// Every listed field is required and must have its type: counters are
// non-negative JSON integers, times and ratios finite non-negative numbers,
// names strings. Fields not listed (e.g. "overlap_units") are ignored. On top
// of the types, what cannot be true of a real run is refused: hit > needed,
// loaded > needed, bytes without read calls (or the reverse), a record whose
// totals differ from the sum of its groups, a group's layer outside the
// model, payload_bytes > record_bytes, capacity > n_units, records out of
// order. Anything wrong is an InputError naming the file and the place
// ("tokens[3].groups[5][1]") and what is wrong with it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sparrow {

struct TraceModel {
  std::string layout;        // dip, neuron or split
  std::string record_type;   // e.g. q8_0
  uint32_t n_layers = 0, d_model = 0, d_ff = 0;
  uint64_t resident_bytes = 0;  // weights read from DRAM per token outside the FFN
  uint64_t ffn_bytes = 0;       // all FFN records (on flash)
  uint64_t cache_bytes = 0;     // the unit caches (DRAM)
  uint64_t dram_budget = 0;     // 0 = none
  uint32_t threads = 0;
  std::string io, policy;
  double mlp_density = 1.0, gamma = 0.0;
};

struct TraceGroupInfo {
  uint32_t layer = 0;
  std::string kind;  // dip-input, dip-output, neuron, up-row, ...
  uint32_t n_units = 0, record_bytes = 0, payload_bytes = 0, capacity = 0;
};

struct TraceGroupCounts {
  uint64_t needed = 0, hit = 0, loaded = 0, bytes_read = 0, read_calls = 0;
};

struct TraceRecord {
  uint64_t tokens = 1;  // > 1: a prompt batch of that many tokens
  uint64_t bytes_read = 0, read_calls = 0;
  uint64_t units_needed = 0, units_hit = 0, units_loaded = 0, units_evicted = 0;
  double io_seconds = 0, memory_seconds = 0, compute_seconds = 0, select_seconds = 0,
         wall_seconds = 0;
  std::vector<TraceGroupCounts> groups;  // one per Trace::groups entry
};

struct Trace {
  TraceModel model;
  std::vector<TraceGroupInfo> groups;
  std::vector<TraceRecord> records;
};

// Traces larger than this are refused before reading (a long run writes a
// few hundred bytes per group per token: 1 GiB is millions of tokens).
constexpr uint64_t kMaxTraceBytes = 1ull << 30;

// Parses and validates `text`; `name` (the file) starts every message.
Trace ParseTrace(std::string_view text, const std::string& name);
// Reads `path` (at most kMaxTraceBytes) and parses it.
Trace ReadTrace(const std::string& path);

}  // namespace sparrow
