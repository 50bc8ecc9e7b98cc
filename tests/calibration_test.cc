// The calibration trailer (formats/calibration.h): trailers built here byte
// by byte from the format description (independently of the encoder), the
// encoder checked against them, every kind of damage refused with one line
// naming the file, the split lookup, and the atomic rewrite of a bundle.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "base/crc32c.h"
#include "base/error.h"
#include "formats/bundle.h"
#include "formats/calibration.h"
#include "src/convert.h"
#include "src/runtime/unit_policy.h"
#include "tests/error_test_util.h"
#include "tests/gguf_test_util.h"

namespace sparrow {
namespace {

using bundle::Bundle;
using bundle::Calibration;
using bundle::CalibrationEntry;
using bundle::CalibrationPolicy;
using testing::Bytes;
using testing::PutLE;

constexpr uint32_t kHeaderCrc = 0x1234abcd;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- Trailers built from the format description ---------------------------

struct RawEntry {
  double density = 0.5, input_fraction = 0.55, perplexity = 5.0, default_perplexity = 5.5;
  uint32_t policy = 0, ctx = 64, chunks = 2;
  uint64_t text_tokens = 1000;
  std::string name = "text.txt";
};

void PutF64(Bytes& out, double v) {
  uint64_t bits = 0;
  std::memcpy(&bits, &v, 8);
  PutLE(out, bits, 8);
}

Bytes Body(const std::vector<RawEntry>& entries, uint32_t header_crc = kHeaderCrc) {
  Bytes b;
  PutLE(b, header_crc, 4);
  PutLE(b, entries.size(), 4);
  for (const RawEntry& e : entries) {
    PutF64(b, e.density);
    PutF64(b, e.input_fraction);
    PutF64(b, e.perplexity);
    PutF64(b, e.default_perplexity);
    PutLE(b, e.policy, 4);
    PutLE(b, e.ctx, 4);
    PutLE(b, e.chunks, 4);
    PutLE(b, e.text_tokens, 8);
    PutLE(b, e.name.size(), 4);
    b.insert(b.end(), e.name.begin(), e.name.end());
  }
  return b;
}

// Magic, version, length (the body's own unless given), body, CRC32C,
// zeros to 4096.
Bytes Frame(const Bytes& body, uint32_t version = 1, std::optional<uint32_t> length = {}) {
  Bytes t = {'S', 'P', 'R', 'W', 'C', 'A', 'L', 'B'};
  PutLE(t, version, 4);
  PutLE(t, length.value_or(static_cast<uint32_t>(body.size())), 4);
  t.insert(t.end(), body.begin(), body.end());
  PutLE(t, Crc32c(t.data(), t.size()), 4);
  t.resize((t.size() + 4095) / 4096 * 4096, 0);
  return t;
}

Calibration Parse(const Bytes& t, uint32_t header_crc = kHeaderCrc) {
  return bundle::ParseCalibration(t.data(), t.size(), header_crc, "cal.sparrow");
}

using testing::Contains;
using testing::ErrorOf;

// The message is one line that names the file and says `what`.
void CheckRefused(const Bytes& t, const std::string& what, uint32_t header_crc = kHeaderCrc) {
  const std::string msg = ErrorOf([&] { Parse(t, header_crc); });
  CHECK_MESSAGE(Contains(msg, what), msg);
  CHECK(Contains(msg, "cal.sparrow"));
  CHECK(msg.find('\n') == std::string::npos);
}

std::vector<RawEntry> TwoEntries() {
  RawEntry a;
  a.density = 0.3;
  a.input_fraction = 0.25;
  RawEntry b;
  b.density = 0.7;
  b.input_fraction = 0.8;
  b.policy = 1;
  b.name = "wiki.txt";
  return {a, b};
}

TEST_CASE("a trailer built from the format parses, and the encoder writes the same bytes") {
  const Bytes t = Frame(Body(TwoEntries()));
  CHECK(t.size() == 4096);
  const Calibration c = Parse(t);
  REQUIRE(c.entries.size() == 2);
  CHECK(c.entries[0].density == 0.3);
  CHECK(c.entries[0].input_fraction == 0.25);
  CHECK(c.entries[0].perplexity == 5.0);
  CHECK(c.entries[0].default_perplexity == 5.5);
  CHECK(c.entries[0].policy == CalibrationPolicy::kDip);
  CHECK(c.entries[0].ctx == 64);
  CHECK(c.entries[0].chunks == 2);
  CHECK(c.entries[0].text_tokens == 1000);
  CHECK(c.entries[0].text_name == "text.txt");
  CHECK(c.entries[1].policy == CalibrationPolicy::kDipCa);
  CHECK(c.entries[1].text_name == "wiki.txt");
  CHECK(c.entries[1].output_fraction() == doctest::Approx(0.5));
  CHECK(bundle::EncodeCalibration(c, kHeaderCrc) == t);

  // A body longer than one page pads to the next one.
  std::vector<RawEntry> many;
  for (int i = 0; i < 100; ++i) {
    RawEntry e;
    e.density = 0.005 * (i + 1);
    e.input_fraction = e.density;
    e.name = std::string(40, 'n');
    many.push_back(e);
  }
  const Bytes big = Frame(Body(many));
  CHECK(big.size() == 3 * 4096);  // 8 + 100 x 96 body bytes, 20 of framing
  CHECK(Parse(big).entries.size() == 100);
  CHECK(bundle::EncodeCalibration(Parse(big), kHeaderCrc) == big);
}

TEST_CASE("damaged trailers are refused with one line naming the file") {
  const Bytes good = Frame(Body(TwoEntries()));
  SUBCASE("bad magic, and bytes that are no trailer at all") {
    Bytes t = good;
    t[3] = 'X';
    CheckRefused(t, "not a calibration section");
    CheckRefused(Bytes(100, 0), "not a calibration section");
    CheckRefused(Bytes{'S', 'P', 'R'}, "not a calibration section");
    CheckRefused(Bytes{}, "not a calibration section");
  }
  SUBCASE("another version") {
    CheckRefused(Frame(Body(TwoEntries()), 2), "version 2 is not supported");
  }
  SUBCASE("truncated anywhere") {
    for (size_t n = 8; n < good.size(); n += (n < 200 ? 1 : 97)) {
      CAPTURE(n);
      const Bytes cut(good.begin(), good.begin() + static_cast<long>(n));
      CheckRefused(cut, "truncated");
    }
  }
  SUBCASE("checksum mismatch, wherever a bit flips") {
    const size_t covered = 16 + Body(TwoEntries()).size() + 4;
    for (size_t at = 8; at < covered; ++at) {
      CAPTURE(at);
      Bytes t = good;
      t[at] ^= 0x10;
      const std::string msg = ErrorOf([&] { Parse(t); });
      // Flips in the framing may be caught by its own checks first.
      CHECK((Contains(msg, "checksum mismatch") || Contains(msg, "version") ||
             Contains(msg, "length") || Contains(msg, "truncated")));
    }
  }
  SUBCASE("body lengths out of bounds") {
    CheckRefused(Frame(Body(TwoEntries()), 1, (1u << 20) + 1), "body length 1048577 is out of bounds");
    CheckRefused(Frame(Body(TwoEntries()), 1, 0xffffffffu), "out of bounds");
    CheckRefused(Frame(Body(TwoEntries()), 1, 5000), "truncated");
    // A body cut inside a field, its length and CRC consistent with that.
    const Bytes body = Body(TwoEntries());
    CheckRefused(Frame(Bytes(body.begin(), body.begin() + 6)), "body ends inside the entry count");
    CheckRefused(Frame(Bytes(body.begin(), body.end() - 3)), "body ends inside an entry's text name");
  }
  SUBCASE("entry counts") {
    CheckRefused(Frame(Body({})), "holds 0 entries");
    Bytes body = Body(TwoEntries());
    body[4] = 0x01;
    body[5] = 0x01;  // 257 entries
    CheckRefused(Frame(body), "holds 257 entries");
    body[5] = 0x00;
    body[4] = 200;  // fewer bytes than 200 entries need
    CheckRefused(Frame(body), "200 entries cannot fit");
  }
  SUBCASE("values out of range") {
    struct Case {
      const char* what;
      std::function<void(RawEntry&)> edit;
      const char* message;
    };
    const std::vector<Case> cases = {
        {"NaN density", [](RawEntry& e) { e.density = kNaN; }, "density nan"},
        {"density 0", [](RawEntry& e) { e.density = 0; }, "density 0 is not in (0, 1)"},
        {"density 1", [](RawEntry& e) { e.density = 1; }, "is not in (0, 1)"},
        {"negative density", [](RawEntry& e) { e.density = -0.5; }, "is not in (0, 1)"},
        {"NaN input fraction", [](RawEntry& e) { e.input_fraction = kNaN; }, "cannot split"},
        {"input fraction 0", [](RawEntry& e) { e.input_fraction = 0; }, "cannot split"},
        {"input fraction leaving no down columns",
         [](RawEntry& e) { e.input_fraction = 0.45; }, "cannot split density 0.3"},
        {"input fraction above 1", [](RawEntry& e) { e.input_fraction = 1.01; }, "cannot split"},
        {"NaN perplexity", [](RawEntry& e) { e.perplexity = kNaN; }, "finite and positive"},
        {"infinite default perplexity", [](RawEntry& e) { e.default_perplexity = kInf; },
         "finite and positive"},
        {"zero perplexity", [](RawEntry& e) { e.perplexity = 0; }, "finite and positive"},
        {"unknown policy", [](RawEntry& e) { e.policy = 7; }, "unknown policy 7"},
        {"context below 4", [](RawEntry& e) { e.ctx = 3; }, "chunks of 3 tokens"},
        {"no chunks", [](RawEntry& e) { e.chunks = 0; }, "0 chunks"},
        {"more tokens scored than the text has", [](RawEntry& e) { e.text_tokens = 127; },
         "do not fit a text of 127 tokens"},
        {"chunks times context overflowing", [](RawEntry& e) {
           e.ctx = 0xffffffffu;
           e.chunks = 0xffffffffu;
         }, "do not fit"},
        {"a control character in the name", [](RawEntry& e) { e.name = "a\nb"; },
         "control character"},
        {"a name too long", [](RawEntry& e) { e.name = std::string(1025, 'x'); },
         "text name length 1025 is out of bounds"},
    };
    for (const Case& c : cases) {
      CAPTURE(c.what);
      std::vector<RawEntry> entries = TwoEntries();
      c.edit(entries[0]);
      CheckRefused(Frame(Body(entries)), c.message);
    }
  }
  SUBCASE("densities unsorted or repeated") {
    std::vector<RawEntry> entries = TwoEntries();
    std::swap(entries[0], entries[1]);
    CheckRefused(Frame(Body(entries)), "densities must increase");
    entries = TwoEntries();
    entries[1].density = entries[0].density;
    entries[1].input_fraction = entries[0].input_fraction;
    CheckRefused(Frame(Body(entries)), "does not follow 0.3");
  }
  SUBCASE("a trailer from another bundle") {
    CheckRefused(good, "belongs to another bundle", kHeaderCrc + 1);
  }
  SUBCASE("bytes after the last entry, after the trailer, and in the padding") {
    Bytes body = Body(TwoEntries());
    body.push_back(0);
    CheckRefused(Frame(body), "1 bytes follow its last entry");
    Bytes t = good;
    t.push_back(0);
    CheckRefused(t, "1 unexpected bytes follow the calibration section");
    t = good;
    t.insert(t.end(), good.begin(), good.end());  // two trailers
    CheckRefused(t, "4096 unexpected bytes");
    t = good;
    t.back() = 1;
    CheckRefused(t, "padding byte 4095 is not zero");
  }
  SUBCASE("the encoder refuses what the reader would") {
    Calibration c = Parse(good);
    c.entries[1].density = 0.2;  // unsorted
    CHECK(Contains(ErrorOf([&] { bundle::EncodeCalibration(c, kHeaderCrc); }),
                   "densities must increase"));
    CHECK(Contains(ErrorOf([&] { bundle::EncodeCalibration(Calibration{}, kHeaderCrc); }),
                   "holds 0 entries"));
  }
}

// ---- The split a run uses -------------------------------------------------

CalibrationEntry Entry(double density, double input_fraction) {
  CalibrationEntry e;
  e.density = density;
  e.input_fraction = input_fraction;
  e.perplexity = 5.0;
  e.default_perplexity = 6.0;
  e.ctx = 64;
  e.chunks = 1;
  e.text_tokens = 64;
  return e;
}

TEST_CASE("the calibrated split: exact, interpolated, clamped, absent outside the range") {
  Calibration c;
  c.entries = {Entry(0.3, 0.2), Entry(0.5, 0.6), Entry(0.9, 0.85)};
  CHECK(*c.InputFractionFor(0.5) == 0.6);
  CHECK(*c.InputFractionFor(0.3) == 0.2);
  CHECK(*c.InputFractionFor(0.4) == doctest::Approx(0.4));
  // Between 0.5 and 0.9 the line passes 0.7 at 0.725, feasible (f_out 0.65).
  CHECK(*c.InputFractionFor(0.7) == doctest::Approx(0.725));
  CHECK_FALSE(c.InputFractionFor(0.2).has_value());
  CHECK_FALSE(c.InputFractionFor(0.95).has_value());
  CHECK_FALSE(c.InputFractionFor(kNaN).has_value());
  CHECK_FALSE(Calibration{}.InputFractionFor(0.5).has_value());
  for (double d = 0.3; d <= 0.9; d += 0.01) {
    CAPTURE(d);
    CHECK(bundle::IsFeasibleSplit(d, *c.InputFractionFor(d)));
  }

  // ClampSplit: into the range, or the default split when nothing is near.
  CHECK(bundle::ClampSplit(0.9, 0.5) == doctest::Approx(0.85));  // f_out would be 1.7
  CHECK(bundle::ClampSplit(0.5, 1.0) == 0.5);                    // f_out would be 0: default
  CHECK(bundle::ClampSplit(0.5, 0.6) == 0.6);

  // The engine's rule: only dip/dip-ca, only without an explicit split.
  SparsityOptions o;
  o.kind = SparsityKind::kDip;
  o.density = 0.5;
  const std::optional<Calibration> cal = c;
  SparsityOptions got = WithCalibratedSplit(o, cal);
  CHECK(got.input_fraction == 0.6);
  CHECK(got.split_source == SplitSource::kCalibrated);
  CHECK(DescribeSplit(got) == "input 0.6 / down 0.3 (calibrated)");
  o.kind = SparsityKind::kDipCa;
  o.density = 0.95;
  got = WithCalibratedSplit(o, cal);
  CHECK_FALSE(got.input_fraction.has_value());
  CHECK(DescribeSplit(got) == "input 0.95 / down 0.95 (default)");
  o.density = 0.5;
  o.input_fraction = 0.4;
  o.split_source = SplitSource::kExplicit;
  got = WithCalibratedSplit(o, cal);
  CHECK(got.input_fraction == 0.4);
  CHECK(DescribeSplit(got) == "input 0.4 / down 0.7 (explicit)");
  o = SparsityOptions{};
  o.kind = SparsityKind::kGlu;
  o.density = 0.8;
  CHECK_FALSE(WithCalibratedSplit(o, cal).input_fraction.has_value());
  CHECK(DescribeSplit(o).empty());
  o.input_fraction = 0.5;
  CHECK(Contains(ErrorOf([&] { CheckSparsity(o, bundle::Layout::kDip); }), "dip and dip-ca"));
}

TEST_CASE("merging: a density measured again replaces its entry, others stay") {
  Calibration old;
  old.entries = {Entry(0.3, 0.2), Entry(0.5, 0.6)};
  const Calibration m = bundle::MergeCalibration(old, {Entry(0.5, 0.55), Entry(0.4, 0.4)});
  REQUIRE(m.entries.size() == 3);
  CHECK(m.entries[0].density == 0.3);
  CHECK(m.entries[1].density == 0.4);
  CHECK(m.entries[2].input_fraction == 0.55);
  CHECK(bundle::MergeCalibration(std::nullopt, {Entry(0.5, 0.5)}).entries.size() == 1);
}

// ---- In a bundle file -----------------------------------------------------

std::string ConvertedBundle(const testing::TempDir& dir, const std::string& name,
                            TensorType type = TensorType::kF32) {
  const std::string path = dir.File(name);
  ConvertOptions options;
  options.layout = bundle::Layout::kDip;
  options.record_type = type;
  ConvertGgufToBundle(testing::ModelPath("stories260K.gguf"), path, options);
  return path;
}

Bytes Concat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST_CASE("WriteCalibration: written beside, renamed over, the bundle's bytes untouched") {
  testing::TempDir dir;
  const std::string path = ConvertedBundle(dir, "b.sparrow");
  const Bytes original = testing::ReadFile(path);
  ::chmod(path.c_str(), 0640);
  {
    const Bundle b = Bundle::Open(path);
    CHECK_FALSE(b.calibration().has_value());
    CHECK(b.bundle_bytes() == original.size());
    Calibration c;
    c.entries = {Entry(0.5, 0.55)};
    bundle::WriteCalibration(b, c);
  }
  const Bytes once = testing::ReadFile(path);
  REQUIRE(once.size() == original.size() + 4096);
  CHECK(Bytes(once.begin(), once.begin() + static_cast<long>(original.size())) == original);
  CHECK(dir.EntryCount() == 1);  // no temporary file left
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0640);
  {
    const Bundle b = Bundle::Open(path);
    REQUIRE(b.calibration().has_value());
    CHECK(b.calibration()->entries.size() == 1);
    CHECK(b.calibration()->entries[0].input_fraction == 0.55);
    CHECK(b.file_size() == once.size());
    b.LoadResident();
    b.VerifyAll();
    // A second calibration replaces the trailer and keeps other densities.
    bundle::WriteCalibration(
        b, bundle::MergeCalibration(b.calibration(), {Entry(0.7, 0.7), Entry(0.5, 0.45)}));
  }
  const Bundle b = Bundle::Open(path);
  REQUIRE(b.calibration()->entries.size() == 2);
  CHECK(b.calibration()->entries[0].input_fraction == 0.45);
  CHECK(testing::ReadFile(path).size() == original.size() + 4096);
  CHECK(dir.EntryCount() == 1);
}

TEST_CASE("Bundle::Open refuses what follows a bundle unless it is a valid trailer") {
  testing::TempDir dir;
  const std::string path = ConvertedBundle(dir, "b.sparrow");
  const std::string other = ConvertedBundle(dir, "other.sparrow", TensorType::kF16);
  const Bytes original = testing::ReadFile(path);
  const uint32_t crc = Bundle::Open(path).header_crc();
  CHECK(crc != Bundle::Open(other).header_crc());
  const std::string damaged = dir.File("damaged.sparrow");
  const auto refused = [&](const Bytes& bytes, const std::string& what) {
    testing::WriteFile(damaged, bytes);
    const std::string msg = ErrorOf([&] { Bundle::Open(damaged); });
    CHECK_MESSAGE(Contains(msg, what), msg);
    CHECK(Contains(msg, damaged));
    CHECK(msg.find('\n') == std::string::npos);
    // How to drop it: the bundle's own size.
    if (!Contains(what, "truncated: the file has")) {
      CHECK(Contains(msg, StrCat("truncate -s ", original.size())));
    }
  };
  refused(Concat(original, {'j', 'u', 'n', 'k'}), "not a calibration section");
  refused(Concat(original, Bytes(4096, 0)), "not a calibration section");
  refused(Concat(original, Bytes(3 << 20, 0)), "too many for a calibration section");
  const Bytes trailer = Frame(Body(TwoEntries(), crc));
  refused(Concat(original, Frame(Body(TwoEntries(), crc + 1))), "belongs to another bundle");
  Bytes flipped = Concat(original, trailer);
  flipped[original.size() + 30] ^= 1;
  refused(flipped, "checksum mismatch");
  refused(Concat(original, Bytes(trailer.begin(), trailer.begin() + 100)), "truncated");
  refused(Bytes(original.begin(), original.end() - 1), "truncated: the file has");

  // The same trailer on its own bundle is fine.
  testing::WriteFile(damaged, Concat(original, trailer));
  CHECK(Bundle::Open(damaged).calibration()->entries.size() == 2);
  // And a trailer written for one bundle is refused on another.
  {
    const Bundle b = Bundle::Open(path);
    Calibration c;
    c.entries = {Entry(0.5, 0.5)};
    bundle::WriteCalibration(b, c);
  }
  const Bytes with = testing::ReadFile(path);
  const Bytes other_bytes = testing::ReadFile(other);
  testing::WriteFile(damaged, Concat(other_bytes, Bytes(with.begin() + static_cast<long>(original.size()), with.end())));
  CHECK(Contains(ErrorOf([&] { Bundle::Open(damaged); }), "belongs to another bundle"));
}

TEST_CASE("WriteCalibration fails cleanly: full disk, a changed file, an unwritable bundle") {
  testing::TempDir dir;
  const std::string path = ConvertedBundle(dir, "b.sparrow");
  const Bytes original = testing::ReadFile(path);
  Calibration c;
  c.entries = {Entry(0.5, 0.55)};

  // The file size limit stands in for a full disk (ENOSPC takes the same
  // path): an error, the bundle as it was, no temporary file.
  {
    const Bundle b = Bundle::Open(path);
    struct rlimit old_limit {};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &old_limit) == 0);
    void (*old_handler)(int) = ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = old_limit;
    small.rlim_cur = 300 << 10;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
    std::string msg;
    try {
      bundle::WriteCalibration(b, c);
    } catch (const InputError& e) {
      msg = e.what();
    }
    ::setrlimit(RLIMIT_FSIZE, &old_limit);
    ::signal(SIGXFSZ, old_handler);
    CHECK_MESSAGE(Contains(msg, "the bundle is unchanged"), msg);
    CHECK(testing::ReadFile(path) == original);
    CHECK(dir.EntryCount() == 1);
  }
  // Replaced by another bundle between open and write.
  {
    const Bundle b = Bundle::Open(path);
    const std::string other = ConvertedBundle(dir, "other.sparrow", TensorType::kF16);
    const Bytes other_bytes = testing::ReadFile(other);
    testing::WriteFile(path, other_bytes);
    CHECK(Contains(ErrorOf([&] { bundle::WriteCalibration(b, c); }), "changed since it was opened"));
    CHECK(testing::ReadFile(path) == other_bytes);
    ::unlink(other.c_str());
    testing::WriteFile(path, original);
  }
  // No temporary file can be created beside it: its name, with the suffix,
  // is longer than a file name may be (a failure root meets too, unlike a
  // read-only directory, checked below for other users).
  {
    const std::string long_name = dir.File(std::string(250, 'b'));
    testing::WriteFile(long_name, original);
    const Bundle b = Bundle::Open(long_name);
    for (const std::string& msg : {ErrorOf([&] { bundle::WriteCalibration(b, c); }),
                                   ErrorOf([&] { bundle::CheckCalibrationWritable(b); })}) {
      CHECK_MESSAGE(Contains(msg, "cannot create"), msg);
      CHECK(Contains(msg, "the bundle is unchanged"));
    }
    CHECK(testing::ReadFile(long_name) == original);
    CHECK(dir.EntryCount() == 2);
    ::unlink(long_name.c_str());
  }
  if (::geteuid() != 0) {
    const Bundle b = Bundle::Open(path);
    REQUIRE(::chmod(dir.path().c_str(), 0555) == 0);
    const std::string msg = ErrorOf([&] { bundle::WriteCalibration(b, c); });
    ::chmod(dir.path().c_str(), 0755);
    CHECK(Contains(msg, "Permission denied"));
  }
  CHECK(testing::ReadFile(path) == original);
  CHECK(dir.EntryCount() == 1);
}

}  // namespace
}  // namespace sparrow
