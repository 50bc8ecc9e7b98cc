// sparrow probe-io FILE: random-read throughput of the user's own device by
// read size and parallelism (LLM in a flash, Figure 2b), as a table and CSV.
#include <cstdio>
#include <string>
#include <vector>

#include "base/byte_size.h"
#include "base/error.h"
#include "base/output_file.h"
#include "src/cli/commands.h"
#include "src/cli/common.h"
#include "src/runtime/budget.h"
#include "src/runtime/probe_io.h"

namespace sparrow::cli {
namespace {

constexpr uint64_t kSmallFileBytes = 1ull << 30;

std::vector<uint64_t> ParseSizeList(const std::string& text) {
  std::vector<uint64_t> out;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t comma = text.find(',', begin);
    const std::string item =
        text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    const uint64_t bytes = ParseByteSize(item, 0, "--sizes");
    if (bytes % 4096 != 0) {
      ThrowInputError("--sizes: '", item, "' is not a multiple of 4 KiB (O_DIRECT reads whole blocks)");
    }
    out.push_back(bytes);
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return out;
}

std::string SizeLabel(uint64_t bytes) {
  if (bytes % (1ull << 20) == 0) return StrCat(bytes >> 20, "M");
  if (bytes % 1024 == 0) return StrCat(bytes >> 10, "K");
  return StrCat(bytes);
}

std::string ProbeCsv(const std::string& mode, const std::vector<ProbeCell>& cells) {
  std::string out =
      "io,read_bytes,threads,seconds,reads,bytes,mb_per_s,iops,mean_latency_us,"
      "p50_latency_us,p99_latency_us\n";
  for (const ProbeCell& c : cells) {
    char line[512];
    std::snprintf(line, sizeof(line), "%s,%llu,%d,%.4f,%llu,%llu,%.2f,%.1f,%.2f,%.2f,%.2f\n",
                  mode.c_str(), static_cast<unsigned long long>(c.read_bytes), c.threads,
                  c.seconds, static_cast<unsigned long long>(c.reads),
                  static_cast<unsigned long long>(c.bytes), c.mb_per_s, c.iops,
                  c.mean_latency_us, c.p50_latency_us, c.p99_latency_us);
    out += line;
  }
  return out;
}

}  // namespace

int ProbeIoCommand(int argc, char** argv) {
  cxxopts::Options options(
      "sparrow probe-io",
      "Random-read throughput of FILE's device against read size and parallelism (each thread "
      "keeps one read in flight), with O_DIRECT unless --io pread.");
  options.positional_help("FILE");
  options.add_options()
      ("file", "File or block device to read (only read, never written)",
       cxxopts::value<std::string>())
      ("sizes", "Read sizes", cxxopts::value<std::string>()->default_value(
                                  "4K,8K,16K,32K,64K,128K,256K,512K,1M"))
      ("threads", "Parallel readers (queue depth)",
       cxxopts::value<std::string>()->default_value("1,2,4,8,16,32"))
      ("seconds", "Seconds per measurement", cxxopts::value<std::string>()->default_value("1"))
      ("csv", "Also write the results as CSV to this file", cxxopts::value<std::string>())
      ("io", "direct (O_DIRECT, bypasses the page cache) or pread (buffered)",
       cxxopts::value<std::string>()->default_value("direct"));
  options.parse_positional({"file"});
  cxxopts::ParseResult args;
  if (!Parse(options, argc, argv, &args)) return 0;

  if (!args.count("file")) ThrowInputError("probe-io: missing FILE (the file or device to read)");
  const std::string path = args["file"].as<std::string>();
  const std::string io = args["io"].as<std::string>();
  if (io != "direct" && io != "pread") {
    ThrowInputError("--io: '", io, "' is not direct or pread");
  }
  const std::vector<uint64_t> sizes = ParseSizeList(args["sizes"].as<std::string>());
  const std::vector<int> threads = ParseIntList(args["threads"].as<std::string>(), "--threads");
  for (int t : threads) {
    if (t < 1 || t > io::kMaxThreads) {
      ThrowInputError("--threads: ", t, " is outside [1, ", io::kMaxThreads, "]");
    }
  }
  const double seconds = RealOption(args, "seconds");
  if (!(seconds > 0 && seconds <= 3600)) ThrowInputError("--seconds: must be in (0, 3600]");

  if (args.count("csv")) CheckWritable(args["csv"].as<std::string>(), "--csv");
  IoProbe probe(path, io == "direct");
  for (uint64_t s : sizes) {
    if (s > probe.file_size()) {
      ThrowInputError("'", path, "' (", FormatByteSize(probe.file_size(), 2),
                      ") is smaller than one read of ", FormatByteSize(s, 2));
    }
  }
  const std::string mode = probe.direct() ? "direct" : "pread";
  if (probe.file_size() < kSmallFileBytes) {
    if (probe.direct()) {
      std::fprintf(stderr,
                   "warning: '%s' is only %s: O_DIRECT bypasses the page cache, but the device's "
                   "own cache may hold much of a file this small and flatter the results; probe a "
                   "file of several GiB\n",
                   path.c_str(), FormatByteSize(probe.file_size(), 2).c_str());
    }
  }
  if (!probe.direct()) {
    std::fprintf(stderr,
                 "warning: buffered reads: the page cache is dropped for the file before each "
                 "measurement, but pages read during one are served from memory on a repeat, "
                 "which flatters the results (the more, the smaller the file)\n");
  }

  std::printf("probe-io: %s (%s), %s reads at random 4 KiB-aligned offsets, %.3g s per cell\n",
              path.c_str(), FormatByteSize(probe.file_size(), 2).c_str(),
              probe.direct() ? "O_DIRECT" : "buffered", seconds);
  std::printf("%9s %7s %10s %10s %10s %10s %10s\n", "read", "threads", "MB/s", "IOPS",
              "mean_us", "p50_us", "p99_us");
  std::fflush(stdout);
  std::vector<ProbeCell> cells;
  for (uint64_t s : sizes) {
    for (int t : threads) {
      const ProbeCell c = probe.Measure(s, t, seconds);
      std::printf("%9s %7d %10.1f %10.0f %10.1f %10.1f %10.1f\n", SizeLabel(s).c_str(), t,
                  c.mb_per_s, c.iops, c.mean_latency_us, c.p50_latency_us, c.p99_latency_us);
      std::fflush(stdout);
      cells.push_back(c);
    }
  }

  // The same MB/s as a grid: the shape of the paper's Figure 2b.
  std::printf("\nMB/s (10^6 bytes/s), read size x threads:\n%9s", "read");
  for (int t : threads) std::printf(" %8d", t);
  std::printf("\n");
  size_t k = 0;
  for (uint64_t s : sizes) {
    std::printf("%9s", SizeLabel(s).c_str());
    for (size_t j = 0; j < threads.size(); ++j) std::printf(" %8.1f", cells[k++].mb_per_s);
    std::printf("\n");
  }
  if (args.count("csv")) {
    const std::string csv = args["csv"].as<std::string>();
    WriteFileAtomically(csv, ProbeCsv(mode, cells), "--csv");
    std::printf("wrote %s\n", csv.c_str());
  }
  return 0;
}

}  // namespace sparrow::cli
