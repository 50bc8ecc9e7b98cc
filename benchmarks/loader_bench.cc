// Loader benchmark: the --io modes reading fixed-size records at random
// record-aligned places of a file, in batches, as the streamed FFN does.
// Each mode reads a fresh random permutation of the file's record slots,
// so no record is read twice in a run (buffered modes gain nothing from
// the page cache within a run); --drop-caches empties the page cache
// before each mode (needs root).
//
//   loader_bench FILE [--modes pread,direct,mmap,uring] [--record 64K]
//                [--threads 32] [--batch 256] [--bytes 1G] [--drop-caches]
//                [--planner]
//
// Prints, per mode: MB/s (10^6 bytes/s), records/s, read calls per record,
// mean time per batch, CPU seconds (user + system, all threads) per GB,
// and how much of the file the page cache holds afterwards (mincore),
// which shows what each mode leaves behind.
//
// With --planner the batch's records go through the ReadPlanner first
// (sorted, adjacent ones coalesced, up to 1 MiB per read), as at run time.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cxxopts.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/error.h"
#include "base/timer.h"
#include "benchmarks/bench_util.h"
#include "src/runtime/loader.h"
#include "src/runtime/loader_internal.h"
#include "src/runtime/read_planner.h"

namespace sparrow::bench {
namespace {

uint64_t ParseSize(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  uint64_t scale = 1;
  if (*end == 'K' || *end == 'k') scale = 1ull << 10;
  if (*end == 'M' || *end == 'm') scale = 1ull << 20;
  if (*end == 'G' || *end == 'g') scale = 1ull << 30;
  if (v <= 0 || end == text.c_str()) ThrowInputError("bad size '", text, "'");
  return static_cast<uint64_t>(v * static_cast<double>(scale));
}

// User + system CPU seconds of this process so far (all its threads).
double CpuSeconds() {
  rusage u {};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

bool DropCaches() {
  ::sync();
  const int fd = ::open("/proc/sys/vm/drop_caches", O_WRONLY);
  if (fd < 0) return false;
  const bool ok = ::write(fd, "3\n", 2) == 2;
  ::close(fd);
  return ok;
}

// Share of the file's pages in the page cache.
double CachedFraction(const std::string& path, uint64_t size) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0 || size == 0) return -1;
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return -1;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> vec((size + page - 1) / page);
  double fraction = -1;
  if (::mincore(p, size, vec.data()) == 0) {
    uint64_t resident = 0;
    for (unsigned char v : vec) resident += v & 1;
    fraction = static_cast<double>(resident) / static_cast<double>(vec.size());
  }
  ::munmap(p, size);
  return fraction;
}

int Main(int argc, char** argv) {
  cxxopts::Options options("loader_bench", "Throughput of the --io modes on random records");
  options.positional_help("FILE");
  options.add_options()
      ("file", "File to read", cxxopts::value<std::string>())
      ("modes", "Modes to compare", cxxopts::value<std::string>()->default_value("pread,direct,mmap,uring"))
      ("record", "Record size", cxxopts::value<std::string>()->default_value("64K"))
      ("threads", "I/O threads (queue depth for uring)", cxxopts::value<int>()->default_value("32"))
      ("batch", "Records per ReadAll", cxxopts::value<int>()->default_value("256"))
      ("bytes", "Bytes to read per mode", cxxopts::value<std::string>()->default_value("1G"))
      ("drop-caches", "sync and drop the page cache before each mode (root)")
      ("planner", "Coalesce each batch with the ReadPlanner (1 MiB reads)")
      ("h,help", "Show this help");
  options.parse_positional({"file"});
  const auto args = options.parse(argc, argv);
  if (args.count("help") || !args.count("file")) {
    std::cout << options.help() << std::endl;
    return args.count("help") ? 0 : 2;
  }
  const std::string path = args["file"].as<std::string>();
  const uint64_t record = ParseSize(args["record"].as<std::string>());
  const int threads = args["threads"].as<int>();
  const size_t batch = static_cast<size_t>(std::max(1, args["batch"].as<int>()));
  const uint64_t want_bytes = ParseSize(args["bytes"].as<std::string>());
  if (record % 4096 != 0) ThrowInputError("--record must be a multiple of 4 KiB");

  uint64_t file_size = 0;
  {
    io::FileDescriptor fd = io::OpenOrThrow(path, 0);
    file_size = io::FileSizeOf(fd.get(), path);
  }
  const uint64_t slots = file_size / record;
  if (slots == 0) ThrowInputError("file smaller than one record");
  const uint64_t records_per_mode = std::min<uint64_t>(slots, want_bytes / record);

  std::printf("loader_bench: %s (%.2f GiB), %llu-byte records, %d threads, %zu records per "
              "batch, %llu records (%.0f MiB) per mode%s%s\n",
              path.c_str(), static_cast<double>(file_size) / (1ull << 30),
              static_cast<unsigned long long>(record), threads, batch,
              static_cast<unsigned long long>(records_per_mode),
              static_cast<double>(records_per_mode * record) / (1 << 20),
              args.count("drop-caches") ? ", page cache dropped before each mode" : "",
              args.count("planner") ? ", through the read planner" : "");
  std::printf("%-8s %-8s %9s %11s %11s %10s %12s %9s %10s\n", "mode", "actual", "MB/s",
              "records/s", "calls/rec", "batch_ms", "bytes_read", "cpu_s/GB", "cached");

  AlignedBuffer<uint8_t> buffer(batch * record, 4096);
  std::memset(buffer.data(), 0, buffer.size());  // fault the pages in before timing
  for (const std::string& name : Split(args["modes"].as<std::string>())) {
    IoMode mode;
    try {
      mode = ParseIoMode(name);
    } catch (const InputError& e) {
      std::printf("%-8s skipped: %s\n", name.c_str(), e.what());
      continue;
    }
    if (args.count("drop-caches") && !DropCaches()) {
      std::fprintf(stderr, "warning: cannot drop caches (not root?)\n");
    }
    std::vector<uint64_t> order(slots);
    std::iota(order.begin(), order.end(), 0);
    std::mt19937_64 rng(42);
    std::shuffle(order.begin(), order.end(), rng);

    std::unique_ptr<Loader> loader = MakeLoader(mode, path, threads);
    ReadPlanOptions plan;
    plan.alignment = loader->alignment();
    ReadPlanner planner(batch * record + 2 * 4096 + batch * 64, plan);
    AlignedBuffer<uint8_t>& dest = buffer;
    std::vector<ReadOp> ops;
    std::vector<uint32_t> units;
    std::vector<PlannedRecord> planned;
    ReadTotals totals;
    uint64_t batches = 0;
    const double cpu_start = CpuSeconds();
    const double start = NowSeconds();
    for (uint64_t done = 0; done < records_per_mode;) {
      const uint64_t n = std::min<uint64_t>(batch, records_per_mode - done);
      ops.clear();
      if (args.count("planner")) {
        units.assign(order.begin() + static_cast<long>(done), order.begin() + static_cast<long>(done + n));
        size_t left = units.size();
        while (left > 0) {
          const size_t got = planner.Plan(units, static_cast<uint32_t>(record),
                                          [record](uint32_t u) { return uint64_t{u} * record; },
                                          &ops, &planned);
          const ReadTotals t = loader->ReadAll(ops);
          totals.bytes += t.bytes;
          totals.calls += t.calls;
          units.erase(units.begin(), units.begin() + static_cast<long>(got));
          left = units.size();
        }
      } else {
        for (uint64_t k = 0; k < n; ++k) {
          ops.push_back(ReadOp{order[done + k] * record, record, dest.data() + k * record});
        }
        const ReadTotals t = loader->ReadAll(ops);
        totals.bytes += t.bytes;
        totals.calls += t.calls;
      }
      done += n;
      ++batches;
    }
    const double seconds = NowSeconds() - start;
    const double cpu = CpuSeconds() - cpu_start;
    const double cached = CachedFraction(path, file_size);
    std::printf("%-8s %-8s %9.1f %11.0f %11.3f %10.3f %12llu %9.3f %9.1f%%\n", name.c_str(),
                IoModeName(loader->mode()).c_str(),
                static_cast<double>(records_per_mode * record) / seconds / 1e6,
                static_cast<double>(records_per_mode) / seconds,
                static_cast<double>(totals.calls) / static_cast<double>(records_per_mode),
                seconds * 1e3 / static_cast<double>(batches),
                static_cast<unsigned long long>(totals.bytes),
                cpu / (static_cast<double>(records_per_mode * record) / 1e9), cached * 100);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace sparrow::bench

int main(int argc, char** argv) {
  try {
    return sparrow::bench::Main(argc, argv);
  } catch (const sparrow::InputError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
