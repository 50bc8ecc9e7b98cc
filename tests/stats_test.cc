#include "src/runtime/stats.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/error.h"
#include "tests/temp_dir.h"

namespace sparrow {
namespace {

using testing::TempDir;

std::string ReadAll(std::istream& in) {
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return ReadAll(in);
}

// A minimal JSON reader, enough to prove the output is well-formed JSON and
// to read it back: values are null, numbers, arrays and objects (strings
// only as keys). Throws std::runtime_error on anything malformed.
struct Json {
  enum Kind { kNull, kNumber, kString, kArray, kObject } kind = kNull;
  double number = 0;
  std::string text;
  std::vector<Json> items;
  // An object's members in file order: keys[i] names members[i]. (Two
  // vectors, not pairs: std::pair of a still incomplete Json is refused by
  // clang 14 with libstdc++, the sanitizer build's pairing.)
  std::vector<std::string> keys;
  std::vector<Json> members;

  const Json& operator[](const std::string& key) const {
    for (size_t i = 0; i < keys.size(); ++i) {
      if (keys[i] == key) return members[i];
    }
    throw std::runtime_error("no key " + key);
  }
};

class JsonReader {
 public:
  explicit JsonReader(const std::string& text) : text_(text) {}
  Json ReadDocument() {
    Json value = ReadValue();
    SkipSpace();
    if (pos_ != text_.size()) Fail("trailing text");
    return value;
  }

 private:
  [[noreturn]] void Fail(const std::string& why) {
    throw std::runtime_error(why + " at offset " + std::to_string(pos_));
  }
  void SkipSpace() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool Take(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void Expect(char c) {
    if (!Take(c)) Fail(std::string("expected ") + c);
  }
  std::string ReadKey() {
    Expect('"');
    const size_t begin = pos_;
    while (pos_ < text_.size() && text_[pos_] != '"') {
      if (text_[pos_] == '\\') Fail("escapes are not expected in keys");
      ++pos_;
    }
    if (pos_ == text_.size()) Fail("unterminated string");
    return text_.substr(begin, pos_++ - begin);
  }
  Json ReadValue() {
    SkipSpace();
    Json value;
    if (pos_ >= text_.size()) Fail("unexpected end");
    const char c = text_[pos_];
    if (c == '[') {
      ++pos_;
      value.kind = Json::kArray;
      if (Take(']')) return value;
      do value.items.push_back(ReadValue()); while (Take(','));
      Expect(']');
    } else if (c == '{') {
      ++pos_;
      value.kind = Json::kObject;
      if (Take('}')) return value;
      do {
        std::string key = ReadKey();
        Expect(':');
        value.keys.push_back(std::move(key));
        value.members.push_back(ReadValue());
      } while (Take(','));
      Expect('}');
    } else if (c == '"') {
      ++pos_;
      value.kind = Json::kString;
      while (pos_ < text_.size() && text_[pos_] != '"') {
        if (static_cast<unsigned char>(text_[pos_]) < 0x20) Fail("control character in a string");
        if (text_[pos_] == '\\') {
          if (++pos_ >= text_.size()) break;
          const char e = text_[pos_];
          if (e != '"' && e != '\\' && e != '/') Fail("only \\\" \\\\ \\/ escapes are expected");
        }
        value.text += text_[pos_++];
      }
      if (pos_ >= text_.size()) Fail("unterminated string");
      ++pos_;
    } else if (text_.compare(pos_, 4, "null") == 0) {
      pos_ += 4;
    } else {
      // JSON number grammar: -?(0|[1-9]d*)(.d+)?([eE][+-]?d+)?
      const size_t begin = pos_;
      auto digits = [&] {
        const size_t start = pos_;
        while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
        if (pos_ == start) Fail("expected digits");
      };
      if (text_[pos_] == '-') ++pos_;
      if (pos_ < text_.size() && text_[pos_] == '0') {
        ++pos_;
      } else {
        digits();
      }
      if (pos_ < text_.size() && text_[pos_] == '.') {
        ++pos_;
        digits();
      }
      if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
        ++pos_;
        if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
        digits();
      }
      value.kind = Json::kNumber;
      value.number = std::stod(text_.substr(begin, pos_ - begin));
    }
    return value;
  }

  const std::string& text_;
  size_t pos_ = 0;
};

TokenStats Record(uint64_t bytes, uint64_t calls, uint64_t needed, uint64_t hit,
                  uint64_t loaded, uint64_t evicted, double io, double memory,
                  double compute) {
  TokenStats s;
  s.bytes_read = bytes;
  s.read_calls = calls;
  s.units_needed = needed;
  s.units_hit = hit;
  s.units_loaded = loaded;
  s.units_evicted = evicted;
  s.io_seconds = io;
  s.memory_seconds = memory;
  s.compute_seconds = compute;
  return s;
}

void Push(StreamStats& stats, const TokenStats& record, uint64_t tokens = 1) {
  stats.BeginToken(tokens);
  CHECK(stats.current().tokens == tokens);
  CHECK(stats.current().bytes_read == 0);  // a fresh record
  const uint64_t keep = stats.current().tokens;
  stats.current() = record;
  stats.current().tokens = keep;
  stats.EndToken();
}

StreamStats Sample() {
  StreamStats stats;
  Push(stats, Record(1 << 20, 16, 100, 0, 100, 0, 0.5, 0.1, 0.4), 4);  // prompt batch
  Push(stats, Record(1 << 20, 10, 100, 50, 50, 50, 0.2, 0.05, 0.25));
  Push(stats, Record(0, 0, 100, 100, 0, 0, 0.0, 0.01, 0.2));
  return stats;
}

TEST_CASE("StreamStats: records and totals") {
  StreamStats stats = Sample();
  REQUIRE(stats.per_token().size() == 3);
  CHECK(stats.per_token()[0].tokens == 4);
  CHECK(stats.per_token()[1].units_hit == 50);
  const TokenStats total = stats.Total();
  CHECK(total.tokens == 6);
  CHECK(total.bytes_read == 2u << 20);
  CHECK(total.read_calls == 26);
  CHECK(total.units_needed == 300);
  CHECK(total.units_hit == 150);
  CHECK(total.units_loaded == 150);
  CHECK(total.units_evicted == 50);
  CHECK(total.io_seconds == doctest::Approx(0.7));
  CHECK(total.memory_seconds == doctest::Approx(0.16));
  CHECK(total.compute_seconds == doctest::Approx(0.85));

  CHECK(StreamStats().Total().tokens == 0);
  StreamStats misuse;
  CHECK_THROWS_AS(misuse.EndToken(), std::logic_error);
  CHECK_THROWS_AS(misuse.BeginToken(0), std::logic_error);
  misuse.BeginToken();
  CHECK(misuse.open());
  CHECK_THROWS_AS(misuse.BeginToken(), std::logic_error);
  misuse.EndToken();
  CHECK(misuse.Total().tokens == 1);
}

TEST_CASE("ScopedSeconds adds elapsed time") {
  double sink = 1.0;
  {
    ScopedSeconds timer(&sink);
    ::usleep(2000);
  }
  CHECK(sink >= 1.0015);
  CHECK(sink < 2.0);
}

std::string Summary(const StreamStats& stats) {
  std::FILE* file = std::tmpfile();
  REQUIRE(file != nullptr);
  stats.PrintSummary(file);
  std::rewind(file);
  std::string text;
  char buffer[512];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file)) > 0) text.append(buffer, n);
  std::fclose(file);
  return text;
}

std::string LineWith(const std::string& text, const std::string& label) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.find(label) != std::string::npos) return line;
  }
  return "";
}

std::string LineStarting(const std::string& text, const std::string& start) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(start, 0) == 0) return line;
  }
  return "";
}

TEST_CASE("StreamStats: summary table") {
  const std::string text = Summary(Sample());
  MESSAGE(text);
  CHECK(text.find("6 tokens in 3 records") != std::string::npos);
  // Columns: total, per token (6), per decode token (2 single-token records).
  CHECK(LineWith(text, "per token").find("per decode token") != std::string::npos);
  const std::string bytes = LineWith(text, "bytes read");
  CHECK(bytes.find("2.0 MiB") != std::string::npos);
  CHECK(bytes.find("341.3 KiB") != std::string::npos);  // 2 MiB / 6
  CHECK(bytes.find("512.0 KiB") != std::string::npos);  // 1 MiB / 2 decode tokens
  const std::string calls = LineWith(text, "read calls");
  CHECK(calls.find(" 26 ") != std::string::npos);
  CHECK(calls.find(" 4.3 ") != std::string::npos);  // 26 / 6
  CHECK(calls.find(" 5.0") != std::string::npos);   // 10 / 2
  CHECK(LineWith(text, "mean read size").find("78.8 KiB") != std::string::npos);   // 2 MiB / 26
  CHECK(LineWith(text, "mean read size").find("102.4 KiB") != std::string::npos);  // 1 MiB / 10
  CHECK(LineWith(text, "cache hit rate").find("50.0%") != std::string::npos);
  CHECK(LineWith(text, "cache hit rate").find("75.0%") != std::string::npos);
  CHECK(LineWith(text, "units loaded").find(" 150 ") != std::string::npos);
  CHECK(LineWith(text, "units loaded").find(" 25.0 ") != std::string::npos);
  CHECK(LineWith(text, "units evicted").find(" 50 ") != std::string::npos);
  // Time: 0.7 + 0.16 + 0.85 = 1.71 s.
  const std::string io = LineWith(text, "I/O");
  CHECK(io.find("0.700") != std::string::npos);
  CHECK(io.find("40.9%") != std::string::npos);
  CHECK(io.find("116.67 ms") != std::string::npos);  // 0.7 / 6
  CHECK(io.find("100.00 ms") != std::string::npos);  // 0.2 / 2
  CHECK(LineWith(text, "memory mgmt").find("9.4%") != std::string::npos);
  CHECK(LineWith(text, "compute").find("49.7%") != std::string::npos);
  const std::string total = LineStarting(text, "  total ");
  CHECK(total.find("1.710") != std::string::npos);
  CHECK(total.find("100.0%") != std::string::npos);
  CHECK(total.find("285.00 ms") != std::string::npos);  // 1.71 / 6
  CHECK(total.find("355.00 ms") != std::string::npos);  // 0.71 / 2

  // The overlap rows: wall time (measured by the records themselves)
  // against the loader's own time for the reads.
  StreamStats overlap;
  TokenStats piped = Record(1 << 20, 4, 10, 0, 10, 0, 0.05, 0.01, 0.02);
  piped.read_seconds = 0.2;
  piped.checksum_seconds = 0.01;
  piped.prefetched_units = 8;
  piped.prefetch_used = 6;
  Push(overlap, piped, 3);
  Push(overlap, piped);
  Push(overlap, piped);
  const std::string overlap_text = Summary(overlap);
  MESSAGE(overlap_text);
  CHECK(LineWith(overlap_text, "I/O wait").find("0.150") != std::string::npos);
  CHECK_FALSE(LineStarting(overlap_text, "  wall ").empty());
  CHECK(LineWith(overlap_text, "reads alone ").find("0.600") != std::string::npos);
  CHECK(LineWith(overlap_text, "reads alone ").find("120.00 ms") != std::string::npos);  // / 5
  CHECK(LineWith(overlap_text, "checksums").find("10.00 ms") != std::string::npos);  // decode
  CHECK(LineWith(overlap_text, "units prefetched").find(" 24 ") != std::string::npos);
  CHECK(LineWith(overlap_text, "prefetch accuracy").find("75.0%") != std::string::npos);
  CHECK(Summary(Sample()).find("prefetch") == std::string::npos);  // none: no rows
  double decode_wall = 0;
  for (const TokenStats& r : overlap.per_token()) {
    if (r.tokens == 1) decode_wall += r.wall_seconds;
  }
  char ratio[64];
  std::snprintf(ratio, sizeof(ratio), "wall / reads alone: %.2fx (decode tokens)", decode_wall / 0.4);
  CHECK(overlap_text.find(ratio) != std::string::npos);
  // No reads: no ratio.
  CHECK(Summary(Sample()).find("wall / reads alone") == std::string::npos);

  // Only single tokens: no third column.
  StreamStats decode;
  Push(decode, Record(4096, 1, 10, 5, 5, 0, 0.001, 0.0, 0.001));
  const std::string plain = Summary(decode);
  CHECK(plain.find("per decode token") == std::string::npos);
  CHECK(LineWith(plain, "mean read size").find("4.0 KiB") != std::string::npos);

  // Nothing recorded, or nothing needed/read: no division by zero.
  CHECK(Summary(StreamStats()).find("no tokens") != std::string::npos);
  StreamStats idle;
  Push(idle, TokenStats());
  const std::string idle_text = Summary(idle);
  CHECK(LineWith(idle_text, "cache hit rate").find('-') != std::string::npos);
  CHECK(idle_text.find("nan") == std::string::npos);
  CHECK(idle_text.find("inf") == std::string::npos);
}

TEST_CASE("StreamStats: JSON parses back with every record") {
  TempDir dir;
  const std::string path = dir.path() + "/stats.json";
  StreamStats stats = Sample();
  stats.trace_header().layout = "dip";
  stats.trace_header().policy = "dip-ca \"quoted\"";
  stats.trace_header().n_layers = 1;
  stats.trace_header().groups.push_back({0, "dip-input", 8, 40, 36, 4});
  stats.trace_header().groups.push_back({0, "dip-output", 16, 20, 16, 8});
  stats.WriteJson(path);
  const std::string text = ReadFile(path);
  Json root;
  REQUIRE_NOTHROW(root = JsonReader(text).ReadDocument());
  REQUIRE(root.kind == Json::kObject);
  CHECK(root["format"].text == "sparrow-trace");
  CHECK(root["version"].number == 1);
  CHECK(root["model"]["layout"].text == "dip");
  CHECK(root["model"]["policy"].text == "dip-ca \"quoted\"");
  REQUIRE(root["groups"].items.size() == 2);
  CHECK(root["groups"].items[1]["kind"].text == "dip-output");
  CHECK(root["groups"].items[1]["capacity"].number == 8);
  const Json& doc = root["tokens"];
  REQUIRE(doc.kind == Json::kArray);
  REQUIRE(doc.items.size() == 3);
  const char* keys[] = {"record",         "tokens",          "bytes_read",     "read_calls",
                        "mean_read_bytes", "units_needed",   "units_hit",      "hit_rate",
                        "units_loaded",   "units_evicted",   "units_streamed", "io_seconds",
                        "memory_seconds",
                        "compute_seconds", "select_seconds", "wall_seconds",   "read_seconds",
                        "checksum_seconds", "prefetched_units", "prefetch_used", "overlap_units",
                        "overlap_kept",   "groups"};
  for (size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    const Json& record = doc.items[i];
    REQUIRE(record.kind == Json::kObject);
    CHECK(record.members.size() == std::size(keys));
    for (const char* key : keys) CHECK_NOTHROW(record[key]);
    const TokenStats& s = stats.per_token()[i];
    CHECK(record["record"].number == i);
    CHECK(record["tokens"].number == s.tokens);
    CHECK(record["bytes_read"].number == s.bytes_read);
    CHECK(record["read_calls"].number == s.read_calls);
    CHECK(record["units_needed"].number == s.units_needed);
    CHECK(record["units_hit"].number == s.units_hit);
    CHECK(record["units_loaded"].number == s.units_loaded);
    CHECK(record["units_evicted"].number == s.units_evicted);
    CHECK(record["io_seconds"].number == doctest::Approx(s.io_seconds));
    CHECK(record["prefetched_units"].number == s.prefetched_units);
    CHECK(record["prefetch_used"].number == s.prefetch_used);
    CHECK(record["memory_seconds"].number == doctest::Approx(s.memory_seconds));
    CHECK(record["compute_seconds"].number == doctest::Approx(s.compute_seconds));
    CHECK(record["groups"].kind == Json::kArray);
  }
  CHECK(doc.items[0]["hit_rate"].number == 0.0);
  CHECK(doc.items[1]["hit_rate"].number == 0.5);
  CHECK(doc.items[1]["mean_read_bytes"].number == 104857.6);
  CHECK(doc.items[2]["mean_read_bytes"].kind == Json::kNull);  // nothing read

  // Per-group entries: [needed, hit, loaded, bytes_read, read_calls].
  StreamStats grouped;
  grouped.set_group_count(2);
  grouped.BeginToken(1);
  grouped.current().groups[1] = {5, 4, 1, 4096, 1};
  grouped.current().overlap_units = 10;
  grouped.current().overlap_kept = 7;
  grouped.EndToken();
  grouped.WriteJson(path);
  const Json g = JsonReader(ReadFile(path)).ReadDocument()["tokens"].items[0];
  REQUIRE(g["groups"].items.size() == 2);
  CHECK(g["groups"].items[0].items.size() == 5);
  CHECK(g["groups"].items[0].items[0].number == 0);
  CHECK(g["groups"].items[1].items[0].number == 5);
  CHECK(g["groups"].items[1].items[3].number == 4096);
  CHECK(g["overlap_kept"].number == 7);
  CHECK(g["wall_seconds"].number >= 0);
  CHECK(grouped.Total().groups[1].hit == 4);
  CHECK(LineWith(Summary(grouped), "top-K overlap").find("70.0%") != std::string::npos);

  // Empty history: an empty array. Non-finite times become null.
  StreamStats empty;
  empty.WriteJson(path);
  Json none = JsonReader(ReadFile(path)).ReadDocument()["tokens"];
  CHECK(none.kind == Json::kArray);
  CHECK(none.items.empty());
  StreamStats odd;
  TokenStats bad;
  bad.io_seconds = std::nan("");
  bad.compute_seconds = INFINITY;
  Push(odd, bad);
  odd.WriteJson(path);
  Json parsed = JsonReader(ReadFile(path)).ReadDocument()["tokens"];
  CHECK(parsed.items[0]["io_seconds"].kind == Json::kNull);
  CHECK(parsed.items[0]["compute_seconds"].kind == Json::kNull);
  CHECK(parsed.items[0]["units_needed"].number == 0);
  CHECK(parsed.items[0]["hit_rate"].kind == Json::kNull);
  // The reader itself rejects broken JSON (so the checks above can fail).
  CHECK_THROWS(JsonReader("[{\"a\":1,}]").ReadDocument());
  CHECK_THROWS(JsonReader("[{\"a\":nan}]").ReadDocument());
  CHECK_THROWS(JsonReader("[1] x").ReadDocument());
}

TEST_CASE("StreamStats: the JSON file is replaced atomically") {
  TempDir dir;
  const std::string path = dir.path() + "/stats.json";
  StreamStats first = Sample();
  first.WriteJson(path);
  const std::string first_text = ReadFile(path);
  struct stat before {};
  REQUIRE(::stat(path.c_str(), &before) == 0);

  // A reader that opened the old file keeps reading the whole old file: the
  // new one is a different inode renamed over the name, never a rewrite in
  // place.
  std::ifstream old_reader(path, std::ios::binary);
  REQUIRE(old_reader.good());
  StreamStats second;
  Push(second, Record(7, 1, 1, 1, 0, 0, 0.1, 0.1, 0.1));
  second.WriteJson(path);
  CHECK(ReadAll(old_reader) == first_text);
  struct stat after {};
  REQUIRE(::stat(path.c_str(), &after) == 0);
  CHECK(after.st_ino != before.st_ino);
  const Json doc = JsonReader(ReadFile(path)).ReadDocument()["tokens"];
  REQUIRE(doc.items.size() == 1);
  CHECK(doc.items[0]["bytes_read"].number == 7);
  // No temporary file is left behind.
  CHECK(dir.Entries() == std::vector<std::string>{"stats.json"});
}

TEST_CASE("StreamStats: unwritable paths are a clear InputError") {
  TempDir dir;
  StreamStats stats = Sample();
  const std::string missing = dir.path() + "/no/such/dir/stats.json";
  try {
    stats.WriteJson(missing);
    FAIL("expected InputError");
  } catch (const InputError& e) {
    const std::string message = e.what();
    CHECK(message.find(missing) != std::string::npos);
    CHECK(message.find("No such file or directory") != std::string::npos);
  }
  // A directory in the way: the rename fails; no temporary file remains.
  const std::string taken = dir.path() + "/taken";
  REQUIRE(::mkdir(taken.c_str(), 0755) == 0);
  CHECK_THROWS_AS(stats.WriteJson(taken), InputError);
  CHECK(dir.Entries() == std::vector<std::string>{"taken"});
}

}  // namespace
}  // namespace sparrow
