// Loaders against the file's bytes as std::ifstream reads them: every mode,
// with many threads, random ranges (aligned where the mode needs it), the
// O_DIRECT refusal fallback (simulated, since tmpfs now takes O_DIRECT),
// errors past the end of the file and after truncation, the RSS the mmap
// mode leaves behind, and the I/O probe.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include "base/aligned_buffer.h"
#include "base/error.h"
#include "base/read_file.h"
#include "src/runtime/loader.h"
#include "src/runtime/loader_internal.h"
#include "src/runtime/probe_io.h"
#include "tests/temp_dir.h"

namespace sparrow {
namespace {

using testing::TempDir;

void WriteRandomFile(const std::string& path, uint64_t bytes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<char> data(bytes);
  for (char& c : data) c = static_cast<char>(rng());
  std::ofstream out(path, std::ios::binary);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  REQUIRE(out.good());
}

std::vector<uint8_t> ReadWholeFile(const std::string& path) {
  return ReadWholeFileBytes(path, "test file");
}

// Runs `body` with stderr redirected to a file; returns what it printed.
template <typename Body>
std::string CaptureStderr(TempDir& dir, Body body) {
  const std::string path = dir.File("stderr.txt");
  std::fflush(stderr);
  const int saved = ::dup(2);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  REQUIRE(fd >= 0);
  ::dup2(fd, 2);
  ::close(fd);
  try {
    body();
  } catch (...) {
    std::fflush(stderr);
    ::dup2(saved, 2);
    ::close(saved);
    throw;
  }
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  const std::vector<uint8_t> bytes = ReadWholeFile(path);
  return std::string(bytes.begin(), bytes.end());
}

// The message of the InputError `body` throws ("" when it throws none).
template <typename Body>
std::string InputErrorOf(Body body) {
  try {
    body();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

size_t CountLines(const std::string& text) { return static_cast<size_t>(std::count(text.begin(), text.end(), '\n')); }

struct Batch {
  std::vector<ReadOp> ops;
  AlignedBuffer<uint8_t> buffer;
};

// Random ops aligned to `alignment` within [0, readable_end), each with its
// own destination; a few are large (to be split across threads).
Batch RandomBatch(std::mt19937_64& rng, size_t count, size_t alignment, uint64_t file_size,
                  uint64_t readable_end) {
  Batch b;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  uint64_t total = 0;
  for (size_t i = 0; i < count; ++i) {
    const uint64_t max_len = rng() % 8 == 0 ? (3u << 20) : (200u << 10);
    uint64_t offset = rng() % readable_end;
    // Now and then a range at the very end of the file.
    if (rng() % 10 == 0) offset = readable_end - std::min<uint64_t>(readable_end, 1 + rng() % 20000);
    offset = offset / alignment * alignment;
    uint64_t length = 1 + rng() % std::min<uint64_t>(max_len, readable_end - offset);
    length = (length + alignment - 1) / alignment * alignment;
    length = std::min(length, readable_end - offset);
    ranges.emplace_back(offset, length);
    total += (length + 4095) / 4096 * 4096;
  }
  (void)file_size;
  b.buffer.Reset(std::max<uint64_t>(total, 1), 4096);
  std::memset(b.buffer.data(), 0xAA, b.buffer.size());
  uint64_t at = 0;
  for (const auto& [offset, length] : ranges) {
    b.ops.push_back(ReadOp{offset, length, b.buffer.data() + at});
    at += (length + 4095) / 4096 * 4096;
  }
  return b;
}

// Checks that every op's destination holds the file's bytes (zeros past
// its end) and that the totals count the bytes that exist.
void CheckBatch(const Batch& b, const std::vector<uint8_t>& file, const ReadTotals& totals) {
  uint64_t expected_bytes = 0;
  for (const ReadOp& op : b.ops) {
    const uint64_t in_file = op.offset >= file.size() ? 0 : std::min<uint64_t>(op.length, file.size() - op.offset);
    expected_bytes += in_file;
    bool same = std::memcmp(op.dest, file.data() + op.offset, in_file) == 0;
    for (uint64_t k = in_file; k < op.length; ++k) same = same && op.dest[k] == 0;
    CAPTURE(op.offset);
    CAPTURE(op.length);
    CHECK(same);
  }
  CHECK(totals.bytes == expected_bytes);
  CHECK(totals.calls >= 1);
}

std::vector<IoMode> AllModes() {
  std::vector<IoMode> modes = {IoMode::kPread, IoMode::kDirect, IoMode::kMmap};
#if SPARROW_IO_HAVE_URING
  modes.push_back(IoMode::kUring);
#endif
  return modes;
}

// RssFile from /proc/self/status, in bytes: file pages mapped into us.
uint64_t RssFileBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("RssFile:", 0) == 0) return std::strtoull(line.c_str() + 8, nullptr, 10) * 1024;
  }
  return 0;
}

// File size not a multiple of 4096, so O_DIRECT tail reads are exercised.
constexpr uint64_t kFileBytes = (12u << 20) + 777;

}  // namespace

TEST_CASE("loader: mode names parse and print; unknown modes are refused") {
  CHECK(ParseIoMode("pread") == IoMode::kPread);
  CHECK(ParseIoMode("direct") == IoMode::kDirect);
  CHECK(ParseIoMode("mmap") == IoMode::kMmap);
  for (IoMode m : AllModes()) CHECK(ParseIoMode(IoModeName(m)) == m);
  CHECK_THROWS_AS(ParseIoMode("odirect"), InputError);
  CHECK_THROWS_AS(ParseIoMode(""), InputError);
#if SPARROW_IO_HAVE_URING
  CHECK(ParseIoMode("uring") == IoMode::kUring);
#else
  CHECK_THROWS_WITH_AS(ParseIoMode("uring"), doctest::Contains("io_uring"), InputError);
#endif
}

TEST_CASE("loader: every mode reads random ranges exactly as the file holds them") {
  TempDir dir;
  const std::string path = dir.File("data.bin");
  WriteRandomFile(path, kFileBytes, 1);
  const std::vector<uint8_t> file = ReadWholeFile(path);
  REQUIRE(file.size() == kFileBytes);
  std::mt19937_64 rng(99);
  for (IoMode mode : AllModes()) {
    for (int threads : {1, 5, 32}) {
      CAPTURE(IoModeName(mode));
      CAPTURE(threads);
      std::unique_ptr<Loader> loader = MakeLoader(mode, path, threads);
      const size_t a = loader->alignment();
      const uint64_t readable_end = (kFileBytes + a - 1) / a * a;
      for (size_t count : {size_t{1}, size_t{3}, size_t{200}}) {
        Batch b = RandomBatch(rng, count, a, kFileBytes, readable_end);
        const ReadTotals totals = loader->ReadAll(b.ops);
        CheckBatch(b, file, totals);
        if (mode == IoMode::kPread || loader->mode() == IoMode::kPread) {
          CHECK(totals.calls >= b.ops.size());
        }
      }
      CHECK(loader->ReadAll({}).bytes == 0);
    }
  }
}

TEST_CASE("loader: `landed` hears of every byte once, with the bytes in place, and its error stops the batch") {
  TempDir dir;
  const std::string path = dir.File("landed.bin");
  WriteRandomFile(path, kFileBytes, 7);
  const std::vector<uint8_t> file = ReadWholeFile(path);
  std::mt19937_64 rng(123);
  for (IoMode mode : AllModes()) {
    for (int threads : {1, 4, 16}) {
      CAPTURE(IoModeName(mode));
      CAPTURE(threads);
      std::unique_ptr<Loader> loader = MakeLoader(mode, path, threads);
      const size_t a = loader->alignment();
      const uint64_t readable_end = (kFileBytes + a - 1) / a * a;
      Batch b = RandomBatch(rng, 40, a, kFileBytes, readable_end);
      std::mutex mu;
      std::vector<std::pair<const uint8_t*, uint64_t>> pieces;
      size_t wrong_bytes = 0;
      const ReadTotals totals = loader->ReadAll(b.ops, [&](const uint8_t* dest, uint64_t length) {
        std::lock_guard<std::mutex> lock(mu);
        pieces.emplace_back(dest, length);
        // The piece's bytes are already what the file holds there.
        for (const ReadOp& op : b.ops) {
          if (dest < op.dest || dest + length > op.dest + op.length) continue;
          const uint64_t at = op.offset + static_cast<uint64_t>(dest - op.dest);
          for (uint64_t k = 0; k < length; ++k) {
            const uint8_t want = at + k < file.size() ? file[at + k] : 0;
            wrong_bytes += dest[k] != want;
          }
        }
      });
      CheckBatch(b, file, totals);
      CHECK(wrong_bytes == 0);
      // The pieces tile the ops: sorted, they cover each op end to end.
      std::sort(pieces.begin(), pieces.end());
      std::vector<std::pair<const uint8_t*, uint64_t>> ops;
      for (const ReadOp& op : b.ops) ops.emplace_back(op.dest, op.length);
      std::sort(ops.begin(), ops.end());
      size_t p = 0;
      bool tiled = true;
      for (const auto& [dest, length] : ops) {
        const uint8_t* at = dest;
        while (p < pieces.size() && pieces[p].first == at && at < dest + length) {
          at += pieces[p].second;
          ++p;
        }
        tiled = tiled && at == dest + length;
      }
      CHECK(tiled);
      CHECK(p == pieces.size());
      // An exception from `landed` comes out of ReadAll, and the loader
      // still works afterwards.
      CHECK_THROWS_WITH_AS(loader->ReadAll(b.ops, [](const uint8_t*, uint64_t) {
        ThrowInputError("record checksum mismatch (test)");
      }), doctest::Contains("checksum mismatch"), InputError);
      CheckBatch(b, file, loader->ReadAll(b.ops));
    }
  }
}

TEST_CASE("loader: direct mode uses O_DIRECT where the filesystem takes it, or warns once") {
  TempDir dir;
  const std::string path = dir.File("direct.bin");
  WriteRandomFile(path, kFileBytes, 2);
  std::unique_ptr<Loader> loader;
  const std::string err = CaptureStderr(dir, [&] { loader = MakeLoader(IoMode::kDirect, path, 4); });
  if (loader->mode() == IoMode::kDirect) {
    // 512 where the device's logical block is (probed at open), else 4096;
    // the random-range test reads at whichever it is.
    CHECK((loader->alignment() == 512 || loader->alignment() == 4096));
    MESSAGE("O_DIRECT alignment here: " << loader->alignment());
    CHECK(err.empty());
  } else {
    MESSAGE("this filesystem refuses O_DIRECT: " << err);
    CHECK(loader->mode() == IoMode::kPread);
    CHECK(CountLines(err) == 1);
  }
}

TEST_CASE("loader: a refused O_DIRECT falls back to buffered reads with one warning line") {
  TempDir dir;
  const std::string path = dir.File("refused.bin");
  WriteRandomFile(path, kFileBytes, 3);
  const std::vector<uint8_t> file = ReadWholeFile(path);
  std::mt19937_64 rng(5);
  struct Restore {
    ~Restore() { io::SimulateDirectRefusalForTesting(io::DirectRefusal::kNone); }
  } restore;
  std::vector<IoMode> modes = {IoMode::kDirect};
#if SPARROW_IO_HAVE_URING
  modes.push_back(IoMode::kUring);
#endif
  for (io::DirectRefusal refusal : {io::DirectRefusal::kAtOpen, io::DirectRefusal::kAtFirstRead}) {
    for (IoMode mode : modes) {
      CAPTURE(static_cast<int>(refusal));
      CAPTURE(IoModeName(mode));
      io::SimulateDirectRefusalForTesting(refusal);
      std::unique_ptr<Loader> loader;
      const std::string err = CaptureStderr(dir, [&] { loader = MakeLoader(mode, path, 8); });
      io::SimulateDirectRefusalForTesting(io::DirectRefusal::kNone);
      CHECK(CountLines(err) == 1);
      CHECK(err.find("O_DIRECT") != std::string::npos);
      CHECK(err.find(path) != std::string::npos);
      CHECK(loader->alignment() == 1);
      CHECK(loader->mode() == (mode == IoMode::kDirect ? IoMode::kPread : mode));
      // Unaligned reads now work, and nothing more is printed.
      Batch b;
      std::string more = CaptureStderr(dir, [&] {
        b = RandomBatch(rng, 50, 1, kFileBytes, kFileBytes);
        CheckBatch(b, file, loader->ReadAll(b.ops));
      });
      CHECK(more.empty());
    }
  }
  // A missing file is reported as missing, not as an O_DIRECT refusal.
  io::SimulateDirectRefusalForTesting(io::DirectRefusal::kAtOpen);
  CHECK_THROWS_WITH_AS(MakeLoader(IoMode::kDirect, dir.path() + "/absent.bin", 2),
                       doctest::Contains("absent.bin"), InputError);
}

TEST_CASE("loader: reading past the end of the file is an InputError naming file and offset") {
  TempDir dir;
  const std::string path = dir.File("short.bin");
  const uint64_t size = 100000;  // not a multiple of 4096
  WriteRandomFile(path, size, 4);
  const std::vector<uint8_t> file = ReadWholeFile(path);
  AlignedBuffer<uint8_t> buf(1 << 20, 4096);
  for (IoMode mode : AllModes()) {
    CAPTURE(IoModeName(mode));
    std::unique_ptr<Loader> loader = MakeLoader(mode, path, 4);
    const uint64_t a = loader->alignment();
    const uint64_t aligned_end = (size + a - 1) / a * a;
    // Starts inside, ends outside what can be read.
    const uint64_t start = (size - 5000) / a * a;
    const uint64_t length = (aligned_end - start) + a;
    std::vector<ReadOp> ops = {{0, a, buf.data()}, {start, length, buf.data() + 8192}};
    std::string error = InputErrorOf([&] { loader->ReadAll(ops); });
    CHECK(error.find(StrCat("offset ", start)) != std::string::npos);
    CHECK(error.find(path) != std::string::npos);
    // Entirely past the end.
    ops = {{aligned_end, a, buf.data()}};
    error = InputErrorOf([&] { loader->ReadAll(ops); });
    CHECK(error.find(StrCat("offset ", aligned_end)) != std::string::npos);
    CHECK(error.find(path) != std::string::npos);
    // The loader still works afterwards, up to the last byte.
    ops = {{start, aligned_end - start, buf.data()}};
    CheckBatch(Batch{ops, {}}, file, loader->ReadAll(ops));
  }
}

TEST_CASE("loader: a file truncated after opening fails with a clear error, not garbage") {
  TempDir dir;
  const std::string path = dir.File("shrinks.bin");
  // mmap too: the lost pages fault with SIGBUS, which must become this error.
  std::vector<IoMode> modes = {IoMode::kPread, IoMode::kDirect, IoMode::kMmap};
#if SPARROW_IO_HAVE_URING
  modes.push_back(IoMode::kUring);
#endif
  AlignedBuffer<uint8_t> buf(1 << 16, 4096);
  for (IoMode mode : modes) {
    CAPTURE(IoModeName(mode));
    WriteRandomFile(path, 1 << 20, 6);
    std::unique_ptr<Loader> loader = MakeLoader(mode, path, 4);
    REQUIRE(::truncate(path.c_str(), 1 << 19) == 0);
    std::vector<ReadOp> ops = {{(1 << 19) + 8192, 8192, buf.data()}};
    const std::string error = InputErrorOf([&] { loader->ReadAll(ops); });
    CHECK(error.find(path) != std::string::npos);
    CHECK(error.find(StrCat("offset ", (1 << 19) + 8192)) != std::string::npos);
    CHECK(error.find("truncated") != std::string::npos);
    // Several ops at once (the I/O threads, not the caller, fault), then a
    // read of what is still there: the loader keeps working.
    ops = {{(1 << 19) - 8192, 8192, buf.data()}, {(1 << 19) + 16384, 8192, buf.data() + 8192},
           {(1 << 19) + 32768, 8192, buf.data() + 16384}};
    CHECK(InputErrorOf([&] { loader->ReadAll(ops); }).find("truncated") != std::string::npos);
    ops = {{0, 8192, buf.data()}, {8192, 8192, buf.data() + 8192}};
    loader->ReadAll(ops);
  }
}

TEST_CASE("loader: misaligned ops to an O_DIRECT loader are a caller bug") {
  TempDir dir;
  const std::string path = dir.File("aligned.bin");
  WriteRandomFile(path, 1 << 20, 7);
  std::unique_ptr<Loader> loader = MakeLoader(IoMode::kDirect, path, 2);
  if (loader->alignment() == 1) return;  // fell back: anything goes
  AlignedBuffer<uint8_t> buf(1 << 16, 4096);
  std::vector<ReadOp> ops = {{100, 4096, buf.data()}};
  CHECK_THROWS_AS(loader->ReadAll(ops), std::invalid_argument);
  ops = {{4096, 4096, buf.data() + 1}};
  CHECK_THROWS_AS(loader->ReadAll(ops), std::invalid_argument);
}

TEST_CASE("loader: missing files and bad thread counts") {
  CHECK_THROWS_WITH_AS(MakeLoader(IoMode::kPread, "/nonexistent/x.sparrow", 2),
                       doctest::Contains("/nonexistent/x.sparrow"), InputError);
  CHECK_THROWS_AS(MakeLoader(IoMode::kMmap, "/nonexistent/x.sparrow", 2), InputError);
  TempDir dir;
  const std::string path = dir.File("t.bin");
  WriteRandomFile(path, 4096, 8);
  CHECK_THROWS_AS(MakeLoader(IoMode::kPread, path, 0), std::invalid_argument);
  CHECK_THROWS_AS(MakeLoader(IoMode::kPread, path, io::kMaxThreads + 1), std::invalid_argument);
}

TEST_CASE("loader: mmap mode does not leave the file's pages mapped in our RSS") {
  TempDir dir;
  const std::string path = dir.File("mapped.bin");
  const uint64_t size = 48u << 20;
  WriteRandomFile(path, size, 9);
  const std::vector<uint8_t> file = ReadWholeFile(path);  // also warms the page cache

  // The probe works: touching a mapping of the file shows up in RssFile.
  {
    const int fd = ::open(path.c_str(), O_RDONLY);
    REQUIRE(fd >= 0);
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    REQUIRE(p != MAP_FAILED);
    const uint64_t before = RssFileBytes();
    uint64_t sum = 0;
    for (uint64_t k = 0; k < size; k += 4096) sum += static_cast<const volatile uint8_t*>(p)[k];
    CHECK(sum > 0);
    const uint64_t touched = RssFileBytes();
    ::munmap(p, size);
    CHECK(touched > before + size / 2);
  }

  std::unique_ptr<Loader> loader = MakeLoader(IoMode::kMmap, path, 8);
  const uint64_t before = RssFileBytes();
  Batch b;
  b.buffer.Reset(size, 4096);
  for (uint64_t off = 0; off < size; off += 64 << 10) {
    b.ops.push_back(ReadOp{off, 64 << 10, b.buffer.data() + off});
  }
  const ReadTotals totals = loader->ReadAll(b.ops);
  const uint64_t after = RssFileBytes();
  CheckBatch(b, file, totals);
  MESSAGE("RssFile before " << before / 1024 << " KiB, after reading 48 MiB through mmap "
                            << after / 1024 << " KiB");
  CHECK(after < before + (2u << 20));
}

TEST_CASE("loader: the I/O thread pool runs every task once and passes errors back") {
  io::IoThreadPool pool(6);
  std::vector<std::atomic<int>> hits(1000);
  std::atomic<int> running{0};
  std::atomic<int> peak{0};
  pool.Run(hits.size(), [&](size_t i, int worker) {
    CHECK(worker >= 0);
    CHECK(worker < 6);
    const int now = ++running;
    int seen = peak.load();
    while (now > seen && !peak.compare_exchange_weak(seen, now)) {
    }
    hits[i].fetch_add(1);
    --running;
  });
  for (auto& h : hits) CHECK(h.load() == 1);
  CHECK(peak.load() <= 6);
  for (int round = 0; round < 3; ++round) {
    CHECK_THROWS_WITH_AS(pool.Run(500,
                                  [](size_t i, int) {
                                    if (i == 250) throw InputError("task 250 failed");
                                  }),
                         "task 250 failed", InputError);
  }
  std::atomic<int> count{0};
  pool.Run(37, [&](size_t, int) { ++count; });
  CHECK(count.load() == 37);
}

TEST_CASE("probe-io: measures reads of each size and thread count on a file") {
  TempDir dir;
  const std::string path = dir.File("probe.bin");
  WriteRandomFile(path, 4u << 20, 10);
  for (bool direct : {true, false}) {
    IoProbe probe(path, direct);
    CHECK(probe.file_size() == (4u << 20));
    for (uint64_t size : {uint64_t{4096}, uint64_t{65536}}) {
      for (int threads : {1, 3}) {
        const ProbeCell c = probe.Measure(size, threads, 0.05);
        CHECK(c.read_bytes == size);
        CHECK(c.threads == threads);
        CHECK(c.reads > 0);
        CHECK(c.bytes == c.reads * size);
        CHECK(c.seconds >= 0.05);
        CHECK(c.mb_per_s > 0);
        CHECK(c.mean_latency_us > 0);
        CHECK(c.p50_latency_us <= c.p99_latency_us);
      }
    }
    CHECK_THROWS_AS(probe.Measure(8u << 20, 1, 0.01), InputError);
    CHECK_THROWS_AS(probe.Measure(1000, 1, 0.01), InputError);
  }
}

}  // namespace sparrow
