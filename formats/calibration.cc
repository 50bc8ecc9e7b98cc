// The calibration trailer: a strict parser (every length and count checked
// against the bytes that are there before anything is allocated, every value
// checked for range), its encoder, and the atomic rewrite of a bundle file
// with a new trailer.
#include "formats/calibration.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include "base/checked_math.h"
#include "base/crc32c.h"
#include "base/error.h"
#include "base/output_file.h"
#include "formats/bundle.h"

namespace sparrow::bundle {
namespace {

constexpr size_t kFramingBytes = 16;  // magic, version, body length
constexpr size_t kCrcBytes = 4;
// density, f_in, two perplexities; policy, ctx, chunks; tokens; name length.
constexpr size_t kMinEntryBytes = 4 * 8 + 3 * 4 + 8 + 4;
// A split's f_out may exceed 1 by this much (the low end of f_in, computed).
constexpr double kSplitSlack = 1e-9;

uint32_t LoadLE32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) |
         (uint32_t{p[3]} << 24);
}

uint64_t LoadLE64(const uint8_t* p) {
  return uint64_t{LoadLE32(p)} | (uint64_t{LoadLE32(p + 4)} << 32);
}

void AppendLE(std::vector<uint8_t>& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void AppendF64(std::vector<uint8_t>& out, double v) {
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(bits));
  AppendLE(out, bits, 8);
}

std::string Hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

// Bounds-checked little-endian reads from the body; InputError on a read
// past its end.
class BodyReader {
 public:
  BodyReader(const uint8_t* data, size_t size, const std::string& where)
      : p_(data), end_(data + size), where_(where) {}

  size_t remaining() const { return static_cast<size_t>(end_ - p_); }
  uint32_t U32(const char* what) { return LoadLE32(Take(4, what)); }
  uint64_t U64(const char* what) { return LoadLE64(Take(8, what)); }
  double F64(const char* what) {
    const uint64_t bits = U64(what);
    double v = 0.0;
    std::memcpy(&v, &bits, sizeof(v));
    return v;
  }
  std::string Bytes(size_t n, const char* what) {
    const uint8_t* p = Take(n, what);
    return std::string(reinterpret_cast<const char*>(p), n);
  }

 private:
  const uint8_t* Take(size_t n, const char* what) {
    if (n > remaining()) {
      ThrowInputError(where_, ": calibration section is corrupted: its body ends inside ", what);
    }
    const uint8_t* p = p_;
    p_ += n;
    return p;
  }
  const uint8_t* p_;
  const uint8_t* end_;
  const std::string& where_;
};

// Checks the framing (magic, version, length, CRC, padding) and returns the
// body's [offset, length) within the trailer.
std::pair<size_t, size_t> CheckFraming(const uint8_t* data, size_t size,
                                       const std::string& where) {
  if (size < sizeof(kCalibrationMagic) ||
      std::memcmp(data, kCalibrationMagic, sizeof(kCalibrationMagic)) != 0) {
    ThrowInputError(where, ": the ", size, " bytes after the bundle's end are not a "
                    "calibration section (no SPRWCALB magic)");
  }
  if (size < kFramingBytes + kCrcBytes) {
    ThrowInputError(where, ": truncated: the calibration section is cut short at ", size,
                    " bytes");
  }
  const uint32_t version = LoadLE32(data + 8);
  if (version != kCalibrationVersion) {
    ThrowInputError(where, ": calibration section version ", version,
                    " is not supported (this build reads version ", kCalibrationVersion, ")");
  }
  const uint32_t body = LoadLE32(data + 12);
  if (body > kMaxCalibrationBodyBytes) {
    ThrowInputError(where, ": calibration section body length ", body,
                    " is out of bounds (at most ", kMaxCalibrationBodyBytes, ")");
  }
  const size_t crc_at = kFramingBytes + body;
  const size_t padded = (crc_at + kCrcBytes + kCalibrationAlignment - 1) /
                        kCalibrationAlignment * kCalibrationAlignment;
  if (size < crc_at + kCrcBytes) {
    ThrowInputError(where, ": truncated: the calibration section needs ", crc_at + kCrcBytes,
                    " bytes but only ", size, " follow the bundle");
  }
  const uint32_t stored = LoadLE32(data + crc_at);
  const uint32_t crc = Crc32c(data, crc_at);
  if (stored != crc) {
    ThrowInputError(where, ": calibration section checksum mismatch (stored ", Hex32(stored),
                    ", computed ", Hex32(crc), "): it is corrupted");
  }
  if (size < padded) {
    ThrowInputError(where, ": truncated: the calibration section's padding ends at ", size,
                    " bytes instead of ", padded);
  }
  if (size > padded) {
    ThrowInputError(where, ": ", size - padded, " unexpected bytes follow the calibration section");
  }
  for (size_t i = crc_at + kCrcBytes; i < padded; ++i) {
    if (data[i] != 0) {
      ThrowInputError(where, ": calibration section padding byte ", i, " is not zero");
    }
  }
  return {kFramingBytes, body};
}

bool PositiveFinite(double v) { return std::isfinite(v) && v > 0.0; }

// One entry, its values checked; `previous` is the density before it.
CalibrationEntry ReadEntry(BodyReader& in, size_t index, std::optional<double> previous,
                           const std::string& where) {
  const auto fail = [&](const auto&... what) {
    ThrowInputError(where, ": calibration entry ", index, ": ", what...);
  };
  CalibrationEntry e;
  e.density = in.F64("an entry's density");
  e.input_fraction = in.F64("an entry's input fraction");
  e.perplexity = in.F64("an entry's perplexity");
  e.default_perplexity = in.F64("an entry's default perplexity");
  const uint32_t policy = in.U32("an entry's policy");
  e.ctx = in.U32("an entry's context size");
  e.chunks = in.U32("an entry's chunk count");
  e.text_tokens = in.U64("an entry's token count");
  const uint32_t name_bytes = in.U32("an entry's text name length");
  if (name_bytes > kMaxCalibrationNameBytes) {
    fail("text name length ", name_bytes, " is out of bounds (at most ",
         kMaxCalibrationNameBytes, ")");
  }
  e.text_name = in.Bytes(name_bytes, "an entry's text name");

  if (!(e.density > 0.0 && e.density < 1.0)) fail("density ", e.density, " is not in (0, 1)");
  if (previous && !(e.density > *previous)) {
    fail("density ", e.density, " does not follow ", *previous, " (densities must increase)");
  }
  if (!IsFeasibleSplit(e.density, e.input_fraction)) {
    fail("input fraction ", e.input_fraction, " cannot split density ", e.density);
  }
  if (!PositiveFinite(e.perplexity) || !PositiveFinite(e.default_perplexity)) {
    fail("perplexities ", e.perplexity, " and ", e.default_perplexity,
         " must be finite and positive");
  }
  if (policy > static_cast<uint32_t>(CalibrationPolicy::kDipCa)) fail("unknown policy ", policy);
  e.policy = static_cast<CalibrationPolicy>(policy);
  uint64_t scored = 0;
  if (e.ctx < 4 || e.chunks < 1 || !CheckedMul(e.ctx, e.chunks, &scored) ||
      e.text_tokens < scored) {
    fail(e.chunks, " chunks of ", e.ctx, " tokens do not fit a text of ", e.text_tokens,
         " tokens");
  }
  for (char c : e.text_name) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) fail("text name holds a control character");
  }
  return e;
}

}  // namespace

std::string_view CalibrationPolicyName(CalibrationPolicy policy) {
  return policy == CalibrationPolicy::kDipCa ? "dip-ca" : "dip";
}

bool IsFeasibleSplit(double density, double input_fraction) {
  const double f_out = 3.0 * density - 2.0 * input_fraction;
  return density > 0.0 && density <= 1.0 && input_fraction > 0.0 && input_fraction <= 1.0 &&
         f_out > 0.0 && f_out <= 1.0 + kSplitSlack;
}

double ClampSplit(double density, double input_fraction) {
  const double lo = std::max(0.0, (3.0 * density - 1.0) / 2.0);
  const double hi = std::min(1.0, 1.5 * density);
  const double f = lo <= hi ? std::clamp(input_fraction, lo, hi) : input_fraction;
  return IsFeasibleSplit(density, f) ? f : density;
}

std::optional<double> Calibration::InputFractionFor(double density) const {
  if (entries.empty() || !(density >= entries.front().density) ||
      !(density <= entries.back().density)) {
    return std::nullopt;
  }
  const auto hi = std::lower_bound(
      entries.begin(), entries.end(), density,
      [](const CalibrationEntry& e, double d) { return e.density < d; });
  if (hi->density == density) return hi->input_fraction;
  const auto lo = hi - 1;  // density > front, so hi is not the first
  const double t = (density - lo->density) / (hi->density - lo->density);
  return ClampSplit(density, lo->input_fraction + t * (hi->input_fraction - lo->input_fraction));
}

Calibration MergeCalibration(const std::optional<Calibration>& old,
                             const std::vector<CalibrationEntry>& fresh) {
  Calibration out = old.value_or(Calibration{});
  for (const CalibrationEntry& e : fresh) {
    const auto same = std::find_if(out.entries.begin(), out.entries.end(),
                                   [&](const CalibrationEntry& o) { return o.density == e.density; });
    if (same != out.entries.end()) {
      *same = e;
    } else {
      out.entries.push_back(e);
    }
  }
  std::sort(out.entries.begin(), out.entries.end(),
            [](const CalibrationEntry& a, const CalibrationEntry& b) { return a.density < b.density; });
  return out;
}

std::vector<uint8_t> EncodeCalibration(const Calibration& calibration, uint32_t header_crc) {
  std::vector<uint8_t> body;
  AppendLE(body, header_crc, 4);
  AppendLE(body, calibration.entries.size(), 4);
  for (const CalibrationEntry& e : calibration.entries) {
    AppendF64(body, e.density);
    AppendF64(body, e.input_fraction);
    AppendF64(body, e.perplexity);
    AppendF64(body, e.default_perplexity);
    AppendLE(body, static_cast<uint32_t>(e.policy), 4);
    AppendLE(body, e.ctx, 4);
    AppendLE(body, e.chunks, 4);
    AppendLE(body, e.text_tokens, 8);
    AppendLE(body, e.text_name.size(), 4);
    body.insert(body.end(), e.text_name.begin(), e.text_name.end());
  }
  if (body.size() > kMaxCalibrationBodyBytes) {
    ThrowInputError("the calibration would take ", body.size(), " bytes (at most ",
                    kMaxCalibrationBodyBytes, ")");
  }
  std::vector<uint8_t> out(kCalibrationMagic, kCalibrationMagic + sizeof(kCalibrationMagic));
  AppendLE(out, kCalibrationVersion, 4);
  AppendLE(out, body.size(), 4);
  out.insert(out.end(), body.begin(), body.end());
  AppendLE(out, Crc32c(out.data(), out.size()), 4);
  out.resize((out.size() + kCalibrationAlignment - 1) / kCalibrationAlignment *
             kCalibrationAlignment);
  // What the reader would refuse is not written: the same checks, once.
  (void)ParseCalibration(out.data(), out.size(), header_crc, "the new calibration");
  return out;
}

Calibration ParseCalibration(const uint8_t* data, size_t size, uint32_t header_crc,
                             const std::string& where) {
  const auto [offset, length] = CheckFraming(data, size, where);
  BodyReader in(data + offset, length, where);
  const uint32_t owner = in.U32("the header CRC");
  if (owner != header_crc) {
    ThrowInputError(where, ": the calibration section belongs to another bundle (written for "
                    "header CRC32C ", Hex32(owner), ", this bundle's is ", Hex32(header_crc), ")");
  }
  const uint32_t n = in.U32("the entry count");
  if (n < 1 || n > kMaxCalibrationEntries) {
    ThrowInputError(where, ": calibration section holds ", n, " entries (1 to ",
                    kMaxCalibrationEntries, " allowed)");
  }
  if (uint64_t{n} * kMinEntryBytes > in.remaining()) {
    ThrowInputError(where, ": calibration section is corrupted: ", n, " entries cannot fit in ",
                    in.remaining(), " bytes");
  }
  Calibration c;
  c.entries.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    std::optional<double> previous;
    if (i > 0) previous = c.entries.back().density;
    c.entries.push_back(ReadEntry(in, i, previous, where));
  }
  if (in.remaining() != 0) {
    ThrowInputError(where, ": calibration section is corrupted: ", in.remaining(),
                    " bytes follow its last entry");
  }
  return c;
}

// ---- Writing --------------------------------------------------------------

namespace {

// A file descriptor closed on scope exit.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// The shared temporary file (base/output_file.h), with this writer's
// messages: they say the bundle is unchanged.
class CalibrationTemp {
 public:
  CalibrationTemp(const std::string& target, mode_t mode) : target_(target) {
    try {
      file_ = std::make_unique<TempFile>(target, O_WRONLY, mode);
    } catch (const InputError& e) {
      Fail(e.what());
    }
  }
  int fd() const { return file_->fd(); }
  const std::string& path() const { return file_->path(); }

  void Commit() {
    try {
      file_->Commit();
    } catch (const InputError& e) {
      Fail(e.what());
    }
  }

  [[noreturn]] void Fail(const std::string& what, int err) const {
    Fail(what + ": " + std::strerror(err));
  }
  [[noreturn]] void Fail(const std::string& what) const {
    ThrowInputError("cannot store the calibration in '", target_, "': ", what,
                    " (the bundle is unchanged)");
  }

 private:
  std::string target_;
  std::unique_ptr<TempFile> file_;
};

void WriteFully(const CalibrationTemp& out, const uint8_t* data, size_t n, uint64_t offset) {
  while (n > 0) {
    const ssize_t put = ::pwrite(out.fd(), data, n, static_cast<off_t>(offset));
    if (put < 0) {
      if (errno == EINTR) continue;
      out.Fail("cannot write '" + out.path() + "'", errno);
    }
    data += put;
    n -= static_cast<size_t>(put);
    offset += static_cast<uint64_t>(put);
  }
}

// Copies the first n bytes of `in` to `out`. copy_file_range lets the kernel
// (or the file system: reflinks, server-side copies) do it without a trip
// through user space; where it cannot (across file systems, old kernels,
// libcs without it) plain reads and writes take over where it stopped.
void CopyPrefix(int in, const CalibrationTemp& out, uint64_t n, const std::string& source) {
  uint64_t done = 0;
#if defined(__GLIBC__)
  while (done < n) {
    loff_t in_off = static_cast<loff_t>(done), out_off = static_cast<loff_t>(done);
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n - done, uint64_t{1} << 30));
    const ssize_t got = ::copy_file_range(in, &in_off, out.fd(), &out_off, chunk, 0);
    if (got > 0) {
      done += static_cast<uint64_t>(got);
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    const bool unsupported = got == 0 || errno == EXDEV || errno == EINVAL || errno == ENOSYS ||
                             errno == EOPNOTSUPP || errno == EPERM;
    if (!unsupported) out.Fail("cannot write '" + out.path() + "'", errno);
    break;
  }
#endif
  std::vector<uint8_t> buffer(std::min<uint64_t>(n - done, uint64_t{1} << 20));
  while (done < n) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(n - done, buffer.size()));
    const ssize_t got = ::pread(in, buffer.data(), want, static_cast<off_t>(done));
    if (got < 0) {
      if (errno == EINTR) continue;
      out.Fail("cannot read '" + source + "'", errno);
    }
    if (got == 0) {
      ThrowInputError("cannot store the calibration in '", source,
                      "': the file shrank while it was copied (the bundle is unchanged)");
    }
    WriteFully(out, buffer.data(), static_cast<size_t>(got), done);
    done += static_cast<uint64_t>(got);
  }
}

// The file at `path` must still be the bundle that was opened: at least as
// long as its declared size, with the same header checksum.
void CheckUnchanged(int fd, const Bundle& bundle) {
  struct stat st {};
  uint8_t fixed[kFixedHeaderBytes];
  const bool same =
      ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
      static_cast<uint64_t>(st.st_size) >= bundle.bundle_bytes() &&
      ::pread(fd, fixed, sizeof(fixed), 0) == static_cast<ssize_t>(sizeof(fixed)) &&
      std::memcmp(fixed, kMagic, sizeof(kMagic)) == 0 && LoadLE32(fixed + 60) == bundle.header_crc();
  if (!same) {
    ThrowInputError("cannot store the calibration in '", bundle.path(),
                    "': the file changed since it was opened (the bundle is unchanged)");
  }
}

}  // namespace

void CheckCalibrationWritable(const Bundle& bundle) {
  const std::string& path = bundle.path();
  // A read-only bundle (or file system) is left alone, though its
  // directory might allow replacing it.
  if (::access(path.c_str(), W_OK) != 0) {
    const int err = errno;
    ThrowInputError("cannot store the calibration in '", path, "': ", std::strerror(err),
                    " (the bundle is unchanged)");
  }
  const CalibrationTemp probe(path, 0600);  // removed again at once
}

void WriteCalibration(const Bundle& bundle, const Calibration& calibration) {
  const std::vector<uint8_t> trailer = EncodeCalibration(calibration, bundle.header_crc());
  const std::string& path = bundle.path();
  const Fd in(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (in.get() < 0) {
    const int err = errno;
    ThrowInputError("cannot open '", path, "': ", std::strerror(err));
  }
  CheckUnchanged(in.get(), bundle);
  CheckCalibrationWritable(bundle);
  struct stat st {};
  if (::fstat(in.get(), &st) != 0) {
    const int err = errno;
    ThrowInputError("cannot stat '", path, "': ", std::strerror(err));
  }

  CalibrationTemp out(path, st.st_mode & 0777);
  // The replacement keeps the bundle's mode and, where allowed, its owner
  // (a non-root user cannot give a file away; the mode is what matters).
  (void)::fchmod(out.fd(), st.st_mode & 07777);
  (void)::fchown(out.fd(), st.st_uid, st.st_gid);
  CopyPrefix(in.get(), out, bundle.bundle_bytes(), path);
  WriteFully(out, trailer.data(), trailer.size(), bundle.bundle_bytes());
  out.Commit();  // durable: the file and its directory are synced
}

}  // namespace sparrow::bundle
