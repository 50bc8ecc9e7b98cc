// `sparrow simulate`: replays a streaming trace (what each decode token
// needed, hit, loaded and read, per unit group) against a device profile and
// predicts decode tokens/s with the I/O / memory management / compute split,
// like the hardware simulator of Dynamic Input Pruning (Federici et al., §6
// "HW Simulator": only the Flash and DRAM transfers are timed, since decode
// is bound by them) with LLM in a flash's three-way latency split (§3:
// I/O, memory management, compute).
//
// The model of one decode token (trace records with tokens == 1; prompt
// batches are counted and reported but not replayed: a batch reuses each
// weight for many tokens, so its compute is not DRAM-bound as decode is).
// Units: GB = 1e9 bytes, MB = 1e6 bytes.
//
// For each unit group g (one layer's input columns, output columns, rows...)
// with needed_g, loaded_g, bytes_g = bytes read, reads_g = read calls:
//
//   I/O        io_g = bytes_g / T(s_g) + L            (reads_g > 0; else 0)
//              s_g  = bytes_g / reads_g, the group's mean read size
//              T(s) = the profile's random-read throughput at read size s with
//                     many reads in flight: log-linear interpolation between
//                     the curve's points in log(read size); below the first
//                     point a constant IOPS (T proportional to s), above the
//                     last the last value. A custom profile's flat curve is
//                     T(s) = s / (s / B + L / Q): its transfer rate B plus the
//                     per-read latency L spread over Q = kReadsInFlight
//                     reads in flight.
//              L    = the per-read latency, paid once per group: the group's
//                     units are only known once its input is, so its first
//                     read's latency (LLM in a flash §2.2's "latency to first
//                     byte") is not hidden by the queue.
//   memory     mem_g = loaded_g * record_bytes_g * 2 / DRAM
//                     each loaded record is read from the staging buffer
//                     (checksum + copy) and written into the cache row.
//   compute    comp_g = needed_g * payload_bytes_g / C
//              comp_resident = resident_bytes / C
//              C = min(DRAM, threads * core_gemv_gbps) (the core bound only
//                  when the profile gives one): decode GEMV streams each
//                  weight once, so it runs at memory speed unless too few
//                  cores cannot keep up.
//
//   serial     token = sum_g (io_g + mem_g + comp_g) + comp_resident
//                      (how the engine runs today: it waits for each read)
//   pipelined  token = sum_g max(io_g, mem_g + comp_g) + comp_resident
//                      (a group's reads overlap copying and computing its
//                      cached rows; nothing crosses a group boundary, and the
//                      resident weights never overlap the reads, since the
//                      units a group needs depend on them)
//
// A record's prediction is the sum over its groups; the reported figure is
// the mean over decode records, and tok/s = 1 / mean token time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/runtime/trace_reader.h"

namespace sparrow {

// Reads in flight assumed by a custom profile's curve (the engine's reader
// threads keep about this many; LLM in a flash uses 32).
constexpr double kReadsInFlight = 16;

struct FlashPoint {
  uint64_t read_bytes = 0;
  double mb_per_s = 0;  // random reads of this size, many in flight
};

struct DeviceProfile {
  std::string name;         // a18, sd8g3, m1max, custom, local
  std::string description;  // one line
  double dram_gbps = 0;     // DRAM bandwidth the CPU reaches, GB/s
  // Random-read throughput by read size, ascending; empty means the flat
  // curve (flat_mbps and read_latency_us, see above).
  std::vector<FlashPoint> flash_curve;
  double flat_mbps = 0;
  double read_latency_us = 0;
  int cores = 1;              // cores worth running on (performance cores)
  double core_gemv_gbps = 0;  // weight bytes/s one core's GEMV sustains; 0 = no bound
  uint64_t dram_budget_bytes = 0;  // what an app can use (0 = no limit worth checking)
  std::string source;         // where the figures come from
};

// The built-in names, in order (a18, sd8g3, m1max).
std::vector<std::string> BuiltinProfileNames();
// `name` is a built-in name, custom:key=value,... or local:FILE,dram_gbps=X.
// InputError for an unknown name (listing the valid ones), unknown or
// malformed keys, or an unreadable local CSV.
DeviceProfile LookupProfile(const std::string& name);
// Reads probe-io's CSV: the best mb_per_s per read size across thread counts
// and, as the per-read latency, the lowest mean latency at the smallest size.
// `dram_gbps` completes the profile.
DeviceProfile ProfileFromProbeCsv(const std::string& path, double dram_gbps);

// T(s) in bytes per second (see above).
double FlashBytesPerSecond(const DeviceProfile& profile, double read_bytes);

enum class Overlap { kSerial, kPipelined };

struct SimulationOptions {
  Overlap overlap = Overlap::kSerial;
  int threads = 0;  // 0 = the profile's cores
};

// Means per decode token.
struct TokenSplit {
  double io_seconds = 0, memory_seconds = 0, compute_seconds = 0;
  double token_seconds = 0;  // serial: the sum; pipelined: less
};

struct SimulationResult {
  std::string device;
  Overlap overlap = Overlap::kSerial;
  int threads = 0;
  double compute_gbps = 0;  // C above

  uint64_t decode_records = 0;
  uint64_t prompt_records = 0, prompt_tokens = 0;  // not replayed
  double prompt_wall_seconds = 0;                  // measured, all batches

  TokenSplit predicted;
  double predicted_tokens_per_second = 0;

  // From the trace, means over decode records.
  double bytes_read_per_token = 0, read_calls_per_token = 0;
  double mean_read_bytes = 0;  // bytes / calls over all decode records; 0 if none
  double hit_rate = -1;        // hit / needed; -1 if nothing was needed
  TokenSplit measured;         // token_seconds = wall_seconds
  double measured_select_seconds = 0;
  double measured_tokens_per_second = 0;

  // The run's DRAM (resident weights + unit caches) against the device's
  // budget: a trace from a roomier run has a hit rate the device cannot reach.
  uint64_t trace_dram_bytes = 0;
  bool exceeds_device_budget = false;
};

// InputError if the trace has no decode records or the threads are invalid.
SimulationResult Simulate(const Trace& trace, const DeviceProfile& profile,
                          const SimulationOptions& options);

}  // namespace sparrow
