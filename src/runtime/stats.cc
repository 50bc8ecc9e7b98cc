#include "src/runtime/stats.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "base/error.h"
#include "base/output_file.h"
#include "src/runtime/budget.h"

namespace sparrow {
namespace {

std::string Fixed(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.*f", decimals, value);
  return text;
}

std::string Percent(double part, double whole) {
  if (!(whole > 0)) return "-";
  return Fixed(100.0 * part / whole, 1) + "%";
}

// 0.0123 s -> "12.3 ms"; keeps per-token times readable.
std::string Duration(double seconds) {
  if (seconds >= 1.0) return Fixed(seconds, 3) + " s";
  if (seconds >= 1e-3) return Fixed(seconds * 1e3, 2) + " ms";
  return Fixed(seconds * 1e6, 1) + " us";
}

double TotalSeconds(const TokenStats& s) {
  return s.io_seconds + s.memory_seconds + s.compute_seconds + s.select_seconds;
}

std::string MeanReadSize(const TokenStats& s) {
  if (s.read_calls == 0) return "-";
  return FormatByteSize(s.bytes_read / s.read_calls);
}

std::string HitRate(const TokenStats& s) {
  return Percent(static_cast<double>(s.units_hit), static_cast<double>(s.units_needed));
}

std::string PerToken(uint64_t value, uint64_t tokens) {
  return Fixed(static_cast<double>(value) / static_cast<double>(tokens), 1);
}

std::string BytesPerToken(uint64_t bytes, uint64_t tokens) {
  return FormatByteSize(bytes / tokens);
}

void Row(std::FILE* out, const std::string& label, const std::string& a,
         const std::string& b, const std::string& c, bool third) {
  if (third) {
    std::fprintf(out, "  %-16s %14s %14s %16s\n", label.c_str(), a.c_str(), b.c_str(), c.c_str());
  } else {
    std::fprintf(out, "  %-16s %14s %14s\n", label.c_str(), a.c_str(), b.c_str());
  }
}

// JSON numbers: finite doubles with enough digits to round-trip a timing,
// anything else as null (JSON has no NaN or infinity).
std::string JsonDouble(double value) {
  if (!std::isfinite(value)) return "null";
  char text[40];
  std::snprintf(text, sizeof(text), "%.9g", value);
  return text;
}

std::string JsonString(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\u%04x", c);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string JsonHeader(const StreamStats::TraceHeader& h) {
  std::string text = StrCat(
      "\"model\":{\"layout\":", JsonString(h.layout), ",\"record_type\":", JsonString(h.record_type),
      ",\"n_layers\":", h.n_layers, ",\"d_model\":", h.d_model, ",\"d_ff\":", h.d_ff,
      ",\"resident_bytes\":", h.resident_bytes, ",\"ffn_bytes\":", h.ffn_bytes,
      ",\"cache_bytes\":", h.cache_bytes, ",\"dram_budget\":", h.dram_budget,
      ",\"threads\":", h.threads, ",\"io\":", JsonString(h.io), ",\"policy\":", JsonString(h.policy),
      ",\"mlp_density\":", JsonDouble(h.mlp_density), ",\"gamma\":", JsonDouble(h.gamma), "},\n\"groups\":[");
  for (size_t i = 0; i < h.groups.size(); ++i) {
    const StreamStats::TraceGroup& g = h.groups[i];
    text += StrCat(i == 0 ? "\n  " : ",\n  ", "{\"layer\":", g.layer, ",\"kind\":", JsonString(g.kind),
                   ",\"n_units\":", g.n_units, ",\"record_bytes\":", g.record_bytes,
                   ",\"payload_bytes\":", g.payload_bytes, ",\"capacity\":", g.capacity, "}");
  }
  return text + (h.groups.empty() ? "]" : "\n]");
}

std::string JsonGroups(const std::vector<GroupTokenStats>& groups) {
  std::string text;
  for (size_t i = 0; i < groups.size(); ++i) {
    const GroupTokenStats& g = groups[i];
    text += StrCat(i == 0 ? "[" : ",[", g.needed, ",", g.hit, ",", g.loaded, ",", g.bytes_read, ",",
                   g.read_calls, "]");
  }
  return text;
}

std::string JsonRecord(size_t index, const TokenStats& s) {
  const std::string mean_read =
      s.read_calls == 0 ? "null"
                        : JsonDouble(static_cast<double>(s.bytes_read) /
                                     static_cast<double>(s.read_calls));
  const std::string hit_rate =
      s.units_needed == 0 ? "null"
                          : JsonDouble(static_cast<double>(s.units_hit) /
                                       static_cast<double>(s.units_needed));
  return StrCat("{\"record\":", index, ",\"tokens\":", s.tokens,
                ",\"bytes_read\":", s.bytes_read, ",\"read_calls\":", s.read_calls,
                ",\"mean_read_bytes\":", mean_read, ",\"units_needed\":", s.units_needed,
                ",\"units_hit\":", s.units_hit, ",\"hit_rate\":", hit_rate,
                ",\"units_loaded\":", s.units_loaded, ",\"units_evicted\":", s.units_evicted,
                ",\"units_streamed\":", s.units_streamed,
                ",\"io_seconds\":", JsonDouble(s.io_seconds),
                ",\"memory_seconds\":", JsonDouble(s.memory_seconds),
                ",\"compute_seconds\":", JsonDouble(s.compute_seconds),
                ",\"select_seconds\":", JsonDouble(s.select_seconds),
                ",\"wall_seconds\":", JsonDouble(s.wall_seconds),
                ",\"read_seconds\":", JsonDouble(s.read_seconds),
                ",\"checksum_seconds\":", JsonDouble(s.checksum_seconds),
                ",\"prefetched_units\":", s.prefetched_units, ",\"prefetch_used\":", s.prefetch_used,
                ",\"overlap_units\":", s.overlap_units, ",\"overlap_kept\":", s.overlap_kept,
                ",\"groups\":[", JsonGroups(s.groups), "]}");
}

}  // namespace

void TokenStats::Add(const TokenStats& other) {
  bytes_read += other.bytes_read;
  read_calls += other.read_calls;
  units_needed += other.units_needed;
  units_hit += other.units_hit;
  units_loaded += other.units_loaded;
  units_evicted += other.units_evicted;
  units_streamed += other.units_streamed;
  io_seconds += other.io_seconds;
  memory_seconds += other.memory_seconds;
  compute_seconds += other.compute_seconds;
  select_seconds += other.select_seconds;
  wall_seconds += other.wall_seconds;
  read_seconds += other.read_seconds;
  checksum_seconds += other.checksum_seconds;
  prefetched_units += other.prefetched_units;
  prefetch_used += other.prefetch_used;
  overlap_units += other.overlap_units;
  overlap_kept += other.overlap_kept;
  tokens += other.tokens;
  if (groups.size() < other.groups.size()) groups.resize(other.groups.size());
  for (size_t i = 0; i < other.groups.size(); ++i) {
    groups[i].needed += other.groups[i].needed;
    groups[i].hit += other.groups[i].hit;
    groups[i].loaded += other.groups[i].loaded;
    groups[i].bytes_read += other.groups[i].bytes_read;
    groups[i].read_calls += other.groups[i].read_calls;
  }
}

void StreamStats::BeginToken(uint64_t tokens_in_batch) {
  if (open_) throw std::logic_error("StreamStats::BeginToken: a record is already open");
  if (tokens_in_batch == 0) throw std::logic_error("StreamStats::BeginToken: zero tokens");
  current_ = TokenStats();
  current_.tokens = tokens_in_batch;
  current_.groups.resize(group_count_);
  opened_at_ = NowSeconds();
  open_ = true;
}

void StreamStats::EndToken() {
  if (!open_) throw std::logic_error("StreamStats::EndToken: no record is open");
  current_.wall_seconds = NowSeconds() - opened_at_;
  history_.push_back(current_);
  open_ = false;
}

TokenStats StreamStats::Total() const {
  TokenStats total;
  total.tokens = 0;
  for (const TokenStats& record : history_) total.Add(record);
  return total;
}

void StreamStats::PrintSummary(std::FILE* out) const {
  const TokenStats all = Total();
  if (all.tokens == 0) {
    std::fprintf(out, "streamed FFN: no tokens recorded\n");
    return;
  }
  TokenStats decode;
  decode.tokens = 0;
  for (const TokenStats& record : history_) {
    if (record.tokens == 1) decode.Add(record);
  }
  // A third column only says something new when batches and single tokens mix.
  const bool third = decode.tokens != 0 && decode.tokens != all.tokens;
  const uint64_t n = all.tokens;
  const uint64_t d = third ? decode.tokens : 1;

  std::fprintf(out, "streamed FFN: %llu tokens in %zu records\n",
               static_cast<unsigned long long>(n), history_.size());
  Row(out, "", "total", "per token", "per decode token", third);
  Row(out, "bytes read", FormatByteSize(all.bytes_read), BytesPerToken(all.bytes_read, n),
      BytesPerToken(decode.bytes_read, d), third);
  Row(out, "read calls", std::to_string(all.read_calls), PerToken(all.read_calls, n),
      PerToken(decode.read_calls, d), third);
  Row(out, "mean read size", MeanReadSize(all), "", MeanReadSize(decode), third);
  Row(out, "cache hit rate", HitRate(all), "", HitRate(decode), third);
  Row(out, "units needed", std::to_string(all.units_needed), PerToken(all.units_needed, n),
      PerToken(decode.units_needed, d), third);
  Row(out, "units loaded", std::to_string(all.units_loaded), PerToken(all.units_loaded, n),
      PerToken(decode.units_loaded, d), third);
  Row(out, "units evicted", std::to_string(all.units_evicted), PerToken(all.units_evicted, n),
      PerToken(decode.units_evicted, d), third);
  Row(out, "units not cached", std::to_string(all.units_streamed), PerToken(all.units_streamed, n),
      PerToken(decode.units_streamed, d), third);
  if (all.prefetched_units > 0) {
    // Units read ahead for the next group that it used.
    Row(out, "units prefetched", std::to_string(all.prefetched_units),
        PerToken(all.prefetched_units, n), PerToken(decode.prefetched_units, d), third);
    Row(out, "prefetch accuracy",
        Percent(static_cast<double>(all.prefetch_used), static_cast<double>(all.prefetched_units)), "",
        Percent(static_cast<double>(decode.prefetch_used), static_cast<double>(decode.prefetched_units)),
        third);
  }
  if (all.overlap_units > 0) {
    // Decode tokens only: the share of a token's chosen units that the
    // previous token chose too.
    const std::string overlap =
        Percent(static_cast<double>(all.overlap_kept), static_cast<double>(all.overlap_units));
    Row(out, "top-K overlap", overlap, "", overlap, third);
  }

  const double total_seconds = TotalSeconds(all);
  std::fprintf(out, "  %-16s %14s %8s %14s%s\n", "time", "seconds", "share", "per token",
               third ? "   per decode token" : "");
  const struct {
    const char* label;
    double TokenStats::*field;
  } kParts[] = {{"I/O wait", &TokenStats::io_seconds},
                {"memory mgmt", &TokenStats::memory_seconds},
                {"compute", &TokenStats::compute_seconds},
                {"top-K select", &TokenStats::select_seconds}};
  // One row of the time table: total, share, per token, per decode token.
  auto time_row = [&](const char* label, double seconds, const std::string& share, double decode_seconds) {
    std::fprintf(out, "  %-16s %14s %8s %14s", label, Fixed(seconds, 3).c_str(), share.c_str(),
                 Duration(seconds / static_cast<double>(n)).c_str());
    if (third) std::fprintf(out, " %18s", Duration(decode_seconds / static_cast<double>(d)).c_str());
    std::fprintf(out, "\n");
  };
  for (const auto& part : kParts) {
    time_row(part.label, all.*part.field, Percent(all.*part.field, total_seconds), decode.*part.field);
  }
  time_row("total", total_seconds, total_seconds > 0 ? "100.0%" : "-", TotalSeconds(decode));
  // The token's wall time against what the reads alone take: 1.00x means
  // everything else is hidden behind the device. Checksums run on the read
  // pipeline's thread, beside the compute.
  const struct {
    const char* label;
    double TokenStats::*field;
  } kOverlap[] = {{"wall", &TokenStats::wall_seconds},
                  {"reads alone", &TokenStats::read_seconds},
                  {"checksums", &TokenStats::checksum_seconds}};
  for (const auto& part : kOverlap) time_row(part.label, all.*part.field, "", decode.*part.field);
  const TokenStats& basis = third ? decode : all;
  if (basis.read_seconds > 0) {
    std::fprintf(out, "  wall / reads alone: %.2fx%s\n", basis.wall_seconds / basis.read_seconds,
                 third ? " (decode tokens)" : "");
  }
}

void StreamStats::WriteJson(const std::string& path) const {
  std::string text = "{\"format\":\"sparrow-trace\",\"version\":1,\n" + JsonHeader(header_) +
                     ",\n\"tokens\":[";
  for (size_t i = 0; i < history_.size(); ++i) {
    text += i == 0 ? "\n  " : ",\n  ";
    text += JsonRecord(i, history_[i]);
  }
  text += history_.empty() ? "]}\n" : "\n]}\n";
  WriteFileAtomically(path, text, "stats JSON");
}

}  // namespace sparrow
