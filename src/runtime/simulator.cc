#include "src/runtime/simulator.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>

#include "base/error.h"
#include "base/read_file.h"

namespace sparrow {
namespace {

constexpr uint64_t kKiB = 1024, kMiB = 1024 * kKiB, kGiB = 1024 * kMiB;

// The built-in device profiles. Every figure is approximate; where each comes
// from (README.md, "Device profiles", says the same):
//
// a18 — Apple A18-class phone (iPhone 16), LPDDR5X, Apple's NVMe-class flash.
//   DRAM 60 GB/s: Dynamic Input Pruning's A18 setting (Federici et al., §6:
//     "Apple A18 with DRAM I/O speed of 60 GB/s"), which is also LPDDR5X-7500
//     on a 64-bit bus (7.5 GT/s x 8 B).
//   Flash 1000 MB/s from 256 KiB reads up: the same paper's "Flash read speed
//     of 1 GB/s". The smaller sizes (250 MB/s at 4 KiB, ~60k IOPS; 600 at
//     16 KiB; 900 at 64 KiB) are estimates shaped like LLM in a flash's
//     Figure 2b, not measurements. Latency 100 us: an estimate for mobile NVMe.
//   2 cores: the A18's two performance cores (Apple: 6-core CPU, 2P + 4E).
//     25 GB/s of weights per core: an estimate. Budget 4 GiB: half of the
//     iPhone 16's 8 GB (an estimate of what one app may hold).
// sd8g3 — Snapdragon 8 Gen 3 phone (e.g. Galaxy S24 Ultra), LPDDR5X, UFS 4.0.
//   DRAM 68 GB/s: LPDDR5X-8533 on a 64-bit bus (8.533 GT/s x 8 B, peak, as
//     shipped in the S24 Ultra; Qualcomm's product brief allows up to 4800 MHz,
//     76.8 GB/s). Sustained CPU bandwidth is lower.
//   Flash: Samsung's UFS 4.0 announcement (2022): 4200 MB/s sequential read
//     and 63,000 random-read IOPS at 4 KiB (258 MB/s). 4000 MB/s at 1 MiB is
//     near the sequential figure; 800 / 2000 / 3500 MB/s at 16 / 64 /
//     256 KiB are interpolated estimates. Latency 100 us: an estimate.
//   6 cores: the Cortex-X4 and five Cortex-A720 (Qualcomm: 1 + 5 + 2
//     Cortex-A520). 12 GB/s per core: an estimate. Budget 6 GiB: half of 12 GB.
// m1max — M1 Max laptop (LLM in a flash's test machine), LPDDR5, Apple SSD.
//   DRAM 400 GB/s: Apple's spec (LPDDR5-6400, 512-bit: 409.6 GB/s). The CPU
//     cores alone reach about 240 GB/s (AnandTech's M1 Max review, 2021,
//     measured ~243 GB/s from all CPU cores, ~100 GB/s from one): modelled
//     by 8 cores x 30 GB/s (the per-core figure is chosen to match, not
//     measured).
//   Flash: LLM in a flash, Table 2 (M1 Max, 32 threads): 6.10 GB/s for the
//     dense read (1 MiB point), 1.25 GB/s for OPT-6.7B fp16 rows (8 KiB) and
//     2.25 GB/s bundled (16 KiB). 700 MB/s at 4 KiB and 4000 / 5500 MB/s at
//     64 / 256 KiB are estimates between them. Latency 80 us: an estimate.
//   Budget: none (32-64 GB of RAM).
struct BuiltinProfile {
  const char* name;
  const char* description;
  double dram_gbps;
  FlashPoint curve[8];  // ascending; read_bytes == 0 ends it
  double read_latency_us;
  int cores;
  double core_gemv_gbps;
  uint64_t dram_budget_bytes;
  const char* source;
};

const BuiltinProfile kBuiltinProfiles[] = {
    {"a18", "Apple A18-class phone: LPDDR5X, NVMe-class flash", 60.0,
     {{4 * kKiB, 250}, {16 * kKiB, 600}, {64 * kKiB, 900}, {256 * kKiB, 1000}, {kMiB, 1000}},
     100.0, 2, 25.0, 4 * kGiB,
     "DRAM and 1 GB/s flash: Dynamic Input Pruning's A18 setting; small-read throughput, "
     "latency, per-core GEMV and budget: estimates"},
    {"sd8g3", "Snapdragon 8 Gen 3 phone: LPDDR5X-8533, UFS 4.0", 68.0,
     {{4 * kKiB, 258}, {16 * kKiB, 800}, {64 * kKiB, 2000}, {256 * kKiB, 3500}, {kMiB, 4000}},
     100.0, 6, 12.0, 6 * kGiB,
     "DRAM: LPDDR5X-8533 x 64 bit (peak); flash: Samsung UFS 4.0 spec (4200 MB/s seq, 63k IOPS "
     "4K); mid sizes, latency, per-core GEMV and budget: estimates"},
    {"m1max", "Apple M1 Max laptop: 400 GB/s LPDDR5, Apple SSD", 400.0,
     {{4 * kKiB, 700}, {8 * kKiB, 1250}, {16 * kKiB, 2250}, {64 * kKiB, 4000}, {256 * kKiB, 5500},
      {kMiB, 6100}},
     80.0, 8, 30.0, 0,
     "DRAM: Apple spec; CPU ~240 GB/s: AnandTech; flash 8K/16K/1M: LLM in a flash Table 2; "
     "other sizes and latency: estimates"},
};

DeviceProfile FromBuiltin(const BuiltinProfile& b) {
  DeviceProfile p;
  p.name = b.name;
  p.description = b.description;
  p.dram_gbps = b.dram_gbps;
  for (const FlashPoint& point : b.curve) {
    if (point.read_bytes == 0) break;
    p.flash_curve.push_back(point);
  }
  p.read_latency_us = b.read_latency_us;
  p.cores = b.cores;
  p.core_gemv_gbps = b.core_gemv_gbps;
  p.dram_budget_bytes = b.dram_budget_bytes;
  p.source = b.source;
  return p;
}

std::string ValidNames() {
  std::string names;
  for (const BuiltinProfile& b : kBuiltinProfiles) names += StrCat(b.name, ", ");
  return names + "custom:dram_gbps=X,flash_mbps=X,read_latency_us=X,cores=N[,core_gbps=X], "
                 "local:PROBE.csv,dram_gbps=X[,cores=N][,core_gbps=X][,read_latency_us=X]";
}

// The whole of `text` as a finite number; InputError naming `what` otherwise.
double ParseNumber(const std::string& text, const std::string& what) {
  if (text.empty()) ThrowInputError(what, ": empty value");
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || errno != 0 || !std::isfinite(v) ||
      text.find_first_of("xXnN") != std::string::npos) {
    ThrowInputError(what, ": '", text, "' is not a number");
  }
  return v;
}

// "k=v,k=v" into a map; InputError on a malformed or repeated key or one not
// in `allowed`.
std::map<std::string, std::string> ParseKeys(const std::string& text, const std::string& spec,
                                             const std::vector<std::string>& allowed) {
  std::map<std::string, std::string> out;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t comma = text.find(',', begin);
    const std::string item =
        text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      ThrowInputError("--device ", spec, ": '", item, "' is not key=value");
    }
    const std::string key = item.substr(0, eq);
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      std::string list;
      for (const std::string& a : allowed) list += (list.empty() ? "" : ", ") + a;
      ThrowInputError("--device ", spec, ": unknown key '", key, "' (keys: ", list, ")");
    }
    if (!out.emplace(key, item.substr(eq + 1)).second) {
      ThrowInputError("--device ", spec, ": '", key, "' given twice");
    }
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return out;
}

double PositiveKey(const std::map<std::string, std::string>& keys, const std::string& key,
                   const std::string& spec, bool allow_zero = false) {
  const double v = ParseNumber(keys.at(key), StrCat("--device ", spec, ": ", key));
  if (allow_zero ? v < 0 : v <= 0) {
    ThrowInputError("--device ", spec, ": ", key, " must be ", allow_zero ? ">= 0" : "> 0");
  }
  return v;
}

int CoresKey(const std::map<std::string, std::string>& keys, const std::string& spec) {
  const double v = PositiveKey(keys, "cores", spec);
  if (v != std::floor(v) || v > 4096) {
    ThrowInputError("--device ", spec, ": cores must be a whole number in [1, 4096]");
  }
  return static_cast<int>(v);
}

void Require(const std::map<std::string, std::string>& keys, const std::vector<std::string>& need,
             const std::string& spec) {
  for (const std::string& k : need) {
    if (!keys.count(k)) ThrowInputError("--device ", spec, ": missing ", k, "=");
  }
}

DeviceProfile CustomProfile(const std::string& spec) {
  const std::string body = spec.substr(std::strlen("custom:"));
  const auto keys = ParseKeys(body, spec,
                              {"dram_gbps", "flash_mbps", "read_latency_us", "cores", "core_gbps"});
  Require(keys, {"dram_gbps", "flash_mbps", "read_latency_us", "cores"}, spec);
  DeviceProfile p;
  p.name = "custom";
  p.description = spec;
  p.dram_gbps = PositiveKey(keys, "dram_gbps", spec);
  p.flat_mbps = PositiveKey(keys, "flash_mbps", spec);
  p.read_latency_us = PositiveKey(keys, "read_latency_us", spec, /*allow_zero=*/true);
  p.cores = CoresKey(keys, spec);
  if (keys.count("core_gbps")) p.core_gemv_gbps = PositiveKey(keys, "core_gbps", spec);
  p.source = "given on the command line";
  return p;
}

DeviceProfile LocalProfile(const std::string& spec) {
  const std::string body = spec.substr(std::strlen("local:"));
  const size_t comma = body.find(',');
  const std::string path = body.substr(0, comma);
  if (path.empty()) ThrowInputError("--device ", spec, ": missing the probe-io CSV file");
  if (comma == std::string::npos) {
    ThrowInputError("--device ", spec, ": missing dram_gbps= (e.g. local:", path,
                    ",dram_gbps=20; stream_probe measures it)");
  }
  const auto keys =
      ParseKeys(body.substr(comma + 1), spec, {"dram_gbps", "cores", "core_gbps", "read_latency_us"});
  Require(keys, {"dram_gbps"}, spec);
  DeviceProfile p = ProfileFromProbeCsv(path, PositiveKey(keys, "dram_gbps", spec));
  p.description = spec;
  if (keys.count("cores")) p.cores = CoresKey(keys, spec);
  if (keys.count("core_gbps")) p.core_gemv_gbps = PositiveKey(keys, "core_gbps", spec);
  if (keys.count("read_latency_us")) {
    p.read_latency_us = PositiveKey(keys, "read_latency_us", spec, /*allow_zero=*/true);
  }
  return p;
}

std::vector<std::string> SplitCsvLine(const std::string& line) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (true) {
    const size_t comma = line.find(',', begin);
    out.push_back(line.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin));
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return out;
}

}  // namespace

std::vector<std::string> BuiltinProfileNames() {
  std::vector<std::string> names;
  for (const BuiltinProfile& b : kBuiltinProfiles) names.push_back(b.name);
  return names;
}

DeviceProfile LookupProfile(const std::string& name) {
  for (const BuiltinProfile& b : kBuiltinProfiles) {
    if (name == b.name) return FromBuiltin(b);
  }
  if (name.rfind("custom:", 0) == 0) return CustomProfile(name);
  if (name.rfind("local:", 0) == 0) return LocalProfile(name);
  ThrowInputError("--device: unknown device '", name, "' (valid: ", ValidNames(), ")");
}

DeviceProfile ProfileFromProbeCsv(const std::string& path, double dram_gbps) {
  const std::string text = ReadWholeFile(path, "probe-io CSV", 16 * kMiB);

  std::vector<std::string> lines;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(begin, end - begin);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) lines.push_back(line);
    begin = end + 1;
  }
  if (lines.empty()) ThrowInputError("probe-io CSV '", path, "' is empty");
  const std::vector<std::string> header = SplitCsvLine(lines[0]);
  auto column = [&](const char* name, bool required) -> int {
    for (size_t i = 0; i < header.size(); ++i) {
      if (header[i] == name) return static_cast<int>(i);
    }
    if (required) {
      ThrowInputError("probe-io CSV '", path, "': no '", name,
                      "' column (write it with sparrow probe-io FILE --csv OUT)");
    }
    return -1;
  };
  const int c_size = column("read_bytes", true);
  const int c_mbps = column("mb_per_s", true);
  const int c_lat = column("mean_latency_us", false);

  std::map<uint64_t, double> best;      // read size -> best MB/s
  std::map<uint64_t, double> latency;   // read size -> lowest mean latency
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::vector<std::string> cells = SplitCsvLine(lines[i]);
    const std::string where = StrCat("probe-io CSV '", path, "' line ", i + 1);
    if (cells.size() != header.size()) {
      ThrowInputError(where, ": ", cells.size(), " fields, the header has ", header.size());
    }
    const double size = ParseNumber(cells[c_size], where + ": read_bytes");
    if (size < 1 || size > 1e12 || size != std::floor(size)) {
      ThrowInputError(where, ": read_bytes '", cells[c_size], "' is not a positive whole number");
    }
    const double mbps = ParseNumber(cells[c_mbps], where + ": mb_per_s");
    if (mbps < 0) ThrowInputError(where, ": mb_per_s is negative");
    const uint64_t s = static_cast<uint64_t>(size);
    best[s] = std::max(best[s], mbps);
    if (c_lat >= 0) {
      const double lat = ParseNumber(cells[c_lat], where + ": mean_latency_us");
      if (lat < 0) ThrowInputError(where, ": mean_latency_us is negative");
      if (lat > 0) {
        const auto it = latency.find(s);
        latency[s] = it == latency.end() ? lat : std::min(it->second, lat);
      }
    }
  }
  DeviceProfile p;
  p.name = "local";
  p.description = StrCat("measured by probe-io: ", path);
  p.dram_gbps = dram_gbps;
  for (const auto& [size, mbps] : best) {
    if (mbps <= 0) {
      ThrowInputError("probe-io CSV '", path, "': no positive mb_per_s at read size ", size);
    }
    p.flash_curve.push_back({size, mbps});
  }
  if (p.flash_curve.empty()) ThrowInputError("probe-io CSV '", path, "' has no measurements");
  if (!latency.empty()) p.read_latency_us = latency.begin()->second;
  const unsigned hw = std::thread::hardware_concurrency();
  p.cores = hw == 0 ? 1 : static_cast<int>(hw);
  p.source = StrCat("probe-io CSV ", path, " (best MB/s per read size over thread counts)");
  return p;
}

double FlashBytesPerSecond(const DeviceProfile& profile, double read_bytes) {
  if (profile.flash_curve.empty()) {
    const double per_read = read_bytes / (profile.flat_mbps * 1e6) +
                            profile.read_latency_us * 1e-6 / kReadsInFlight;
    return read_bytes / per_read;
  }
  const std::vector<FlashPoint>& c = profile.flash_curve;
  const double first = static_cast<double>(c.front().read_bytes);
  if (read_bytes <= first) return c.front().mb_per_s * 1e6 * (read_bytes / first);
  for (size_t i = 1; i < c.size(); ++i) {
    const double s1 = static_cast<double>(c[i].read_bytes);
    if (read_bytes <= s1) {
      const double s0 = static_cast<double>(c[i - 1].read_bytes);
      const double t = (std::log(read_bytes) - std::log(s0)) / (std::log(s1) - std::log(s0));
      return (c[i - 1].mb_per_s + t * (c[i].mb_per_s - c[i - 1].mb_per_s)) * 1e6;
    }
  }
  return c.back().mb_per_s * 1e6;
}

SimulationResult Simulate(const Trace& trace, const DeviceProfile& profile,
                          const SimulationOptions& options) {
  SimulationResult r;
  r.device = profile.name;
  r.overlap = options.overlap;
  r.threads = options.threads == 0 ? profile.cores : options.threads;
  if (r.threads < 1 || r.threads > profile.cores) {
    ThrowInputError("--threads ", r.threads, ": the ", profile.name, " profile has ", profile.cores,
                    " cores");
  }
  const double dram = profile.dram_gbps * 1e9;
  double compute_bw = dram;
  if (profile.core_gemv_gbps > 0) {
    compute_bw = std::min(compute_bw, r.threads * profile.core_gemv_gbps * 1e9);
  }
  r.compute_gbps = compute_bw / 1e9;
  const double latency = profile.read_latency_us * 1e-6;
  const double resident_compute = static_cast<double>(trace.model.resident_bytes) / compute_bw;

  uint64_t needed = 0, hit = 0, bytes = 0, calls = 0;
  TokenSplit pred_sum, meas_sum;
  double select_sum = 0;
  for (const TraceRecord& rec : trace.records) {
    if (rec.tokens != 1) {
      ++r.prompt_records;
      r.prompt_tokens += rec.tokens;
      r.prompt_wall_seconds += rec.wall_seconds;
      continue;
    }
    ++r.decode_records;
    TokenSplit t;
    double token = resident_compute;
    t.compute_seconds = resident_compute;
    for (size_t i = 0; i < trace.groups.size(); ++i) {
      const TraceGroupInfo& info = trace.groups[i];
      const TraceGroupCounts& g = rec.groups[i];
      double io = 0;
      if (g.read_calls > 0) {
        const double b = static_cast<double>(g.bytes_read);
        const double mean = b / static_cast<double>(g.read_calls);
        io = b / FlashBytesPerSecond(profile, mean) + latency;
      }
      const double mem = static_cast<double>(g.loaded) * info.record_bytes * 2.0 / dram;
      const double comp = static_cast<double>(g.needed) * info.payload_bytes / compute_bw;
      t.io_seconds += io;
      t.memory_seconds += mem;
      t.compute_seconds += comp;
      token += options.overlap == Overlap::kSerial ? io + mem + comp : std::max(io, mem + comp);
    }
    t.token_seconds = token;
    pred_sum.io_seconds += t.io_seconds;
    pred_sum.memory_seconds += t.memory_seconds;
    pred_sum.compute_seconds += t.compute_seconds;
    pred_sum.token_seconds += t.token_seconds;
    meas_sum.io_seconds += rec.io_seconds;
    meas_sum.memory_seconds += rec.memory_seconds;
    meas_sum.compute_seconds += rec.compute_seconds;
    meas_sum.token_seconds += rec.wall_seconds;
    select_sum += rec.select_seconds;
    needed += rec.units_needed;
    hit += rec.units_hit;
    bytes += rec.bytes_read;
    calls += rec.read_calls;
  }
  if (r.decode_records == 0) {
    ThrowInputError("the trace has no decode records (tokens == 1), only ", r.prompt_records,
                    " prompt batches: generate some tokens (sparrow run -n N) or run perplexity "
                    "with -b 1");
  }
  const double n = static_cast<double>(r.decode_records);
  auto mean = [n](const TokenSplit& s) {
    return TokenSplit{s.io_seconds / n, s.memory_seconds / n, s.compute_seconds / n,
                      s.token_seconds / n};
  };
  r.predicted = mean(pred_sum);
  r.measured = mean(meas_sum);
  r.measured_select_seconds = select_sum / n;
  r.predicted_tokens_per_second =
      r.predicted.token_seconds > 0 ? 1.0 / r.predicted.token_seconds : 0.0;
  r.measured_tokens_per_second = r.measured.token_seconds > 0 ? 1.0 / r.measured.token_seconds : 0.0;
  r.bytes_read_per_token = static_cast<double>(bytes) / n;
  r.read_calls_per_token = static_cast<double>(calls) / n;
  r.mean_read_bytes = calls == 0 ? 0.0 : static_cast<double>(bytes) / static_cast<double>(calls);
  r.hit_rate = needed == 0 ? -1.0 : static_cast<double>(hit) / static_cast<double>(needed);
  r.trace_dram_bytes = trace.model.resident_bytes + trace.model.cache_bytes;
  r.exceeds_device_budget =
      profile.dram_budget_bytes > 0 && r.trace_dram_bytes > profile.dram_budget_bytes;
  return r;
}

}  // namespace sparrow
