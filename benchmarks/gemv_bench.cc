// GEMV micro-benchmark: weight bandwidth of simd::Gemv per type and shape,
// with 1 and 2 threads, as GB/s of weight bytes streamed and as a percentage
// of a stream-read probe (stream_probe.h) measured in the same process, with
// the same threads, interleaved with the GEMV repetitions.
//
// Decoding reads every weight once per token, so the figure that matters is
// bytes per second from DRAM. Each repetition multiplies a different copy of
// the matrix, the copies together being several times the last-level cache,
// taken in turn across thread counts (CopyRotation), so the weights never
// come from cache. A repetition is the whole product:
// GemvInput::Prepare plus Gemv over all rows through ParallelFor, as in
// ops::MatVec. Before each repetition, and once after the last, the probe
// reads as many bytes as the matrix holds from its own buffer (never cached
// either). GB/s are medians over the repetitions; the percentage of the
// probe is the median of each repetition's rate over the passes beside it
// (MedianPairedRatio), so a machine that is busy for a while weighs on both
// sides alike.
//
// Two probes: the plain one (each thread sums its part front to back: one
// stream per thread, the usual stream-read figure), and one reading four
// parts side by side per thread, which hardware prefetchers serve faster
// (the GEMV kernels also read four rows at once, from four parts of their
// row range). The table gives the percentage of both; the second is the
// stricter yardstick.
//
// Types q8_0x8, q4_0x8 and q4_Kx8 are Q8_0, Q4_0 and Q4_K repacked in groups
// of 8 rows for the packed kernels (simd/packed_gemv.h), which the engine
// uses on x86 and on Arm with sdot.
//
//   gemv_bench [--types q4_0,q4_0x8,q4_K,q4_Kx8,q8_0,f16] [--shapes 4096x11008] [--threads 1,2]
//              [--reps 21] [--rotate-mib 512] [--probe-mib 1024] [--pages huge|small]
//              [--clock wall|cpu] [--read] [--quantize-speed]
//
// --read adds, after each packed type, a line reading its matrix in the
// packed kernels' order with their prefetches and no arithmetic
// (ReadPacked): a reference for what a kernel could reach, as gather_bench's
// read lines are for the gather kernels.
//
// --clock cpu: on a machine shared with busy neighbours, wall time mostly
// measures the scheduler. With this option each repetition is timed by CPU
// time instead (Prepare on the calling thread plus the slowest thread's
// rows; the probe likewise), which still counts every stall on memory but
// not the time spent descheduled. Neighbours still share the caches and the
// DRAM bandwidth, so figures are at worst pessimistic.
//
// Shapes are COLSxROWS, ggml's order (ne0 x ne1): 4096x11008 is 11008 rows
// of 4096 elements (a 7B model's FFN up/gate projection), 11008x4096 its
// transpose (the down projection).

#include <cxxopts.hpp>
#include <hwy/cache_control.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "base/timer.h"
#include "benchmarks/bench_util.h"
#include "benchmarks/stream_probe.h"
#include "base/huge_pages.h"
#include "base/tensor_type.h"
#include "simd/gemv.h"
#include "simd/packed_gemv.h"
#include "simd/quantize.h"
#include "simd/targets.h"
#include "base/threads.h"

namespace sparrow::bench {
namespace {

struct Shape {
  size_t cols, rows;
};

Shape ParseShape(const std::string& s) {
  const size_t x = s.find('x');
  char* end = nullptr;
  Shape shape{};
  if (x != std::string::npos) {
    shape.cols = std::strtoull(s.c_str(), &end, 10);
    const bool cols_ok = end == s.c_str() + x;
    shape.rows = std::strtoull(s.c_str() + x + 1, &end, 10);
    if (cols_ok && *end == '\0' && shape.cols > 0 && shape.rows > 0) return shape;
  }
  ThrowInputError("bad shape '", s, "' (want COLSxROWS, e.g. 4096x11008)");
}

// `copies` identical matrices in one allocation, so each repetition can read
// one that is not in cache. Rows cycle through a few distinct quantized
// random rows (the kernels' speed does not depend on the values; quantizing
// every row of every matrix would take longer than the benchmark).
struct Matrices {
  HugePageBuffer data;
  size_t row_bytes = 0, matrix_bytes = 0, copies = 0;
  const uint8_t* copy(size_t i) const { return data.data() + (i % copies) * matrix_bytes; }
};

Matrices MakeMatrices(TensorType type, Shape shape, size_t rotate_bytes, bool huge_pages,
                      std::mt19937& rng) {
  Matrices m;
  uint64_t row_bytes = 0;
  if (!TensorTypeBytes(type, shape.cols, &row_bytes)) {
    ThrowInputError(shape.cols, " columns are not a whole number of ",
                    TensorTypeName(type), " blocks");
  }
  m.row_bytes = row_bytes;
  m.matrix_bytes = m.row_bytes * shape.rows;
  m.copies = std::max<size_t>(2, (rotate_bytes + m.matrix_bytes - 1) / m.matrix_bytes);
  // Huge pages as the engine's resident matrices have them (models with 32
  // MiB of them or more: src/model/weights.h), before the first touch.
  m.data = MapWithWholeHugePages(m.copies * m.matrix_bytes, huge_pages);
  constexpr size_t kDistinct = 61;
  std::vector<uint8_t> rows(kDistinct * m.row_bytes);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> values(shape.cols);
  for (size_t r = 0; r < kDistinct; ++r) {
    for (float& v : values) v = normal(rng);
    simd::QuantizeRow(type, values.data(), shape.cols, rows.data() + r * m.row_bytes);
  }
  for (size_t r = 0; r < shape.rows; ++r) {
    std::memcpy(m.data.data() + r * m.row_bytes,
                rows.data() + (r % kDistinct) * m.row_bytes, m.row_bytes);
  }
  for (size_t c = 1; c < m.copies; ++c) {
    std::memcpy(m.data.data() + c * m.matrix_bytes, m.data.data(), m.matrix_bytes);
  }
  return m;
}

bool g_cpu_clock = false;  // --clock cpu

// A weight type as benchmarked: packed is Q4_0 in the packed layout.
// read: not a product but ReadPacked over the packed matrix.
struct Kind {
  TensorType type;
  bool packed;
  std::string name;
  bool read = false;
};

// A reference for the packed kernels' access pattern (simd/packed_gemv.h):
// `groups` groups of `group_bytes` in their order (kPackedStreams parts of
// the range side by side, each front to back, then what is left in pairs
// and alone), one 8-byte load per 64-byte line and no arithmetic, each line
// prefetched simd::kPackedPrefetchAhead bytes ahead as they do. Where a
// kernel reads less than this, the difference is what its own work costs;
// where this reads less than the probe, the pattern's.
template <size_t kStreams>
uint64_t ReadStreams(const uint8_t* w, size_t stream_bytes, bool prefetch) {
  uint64_t sum = 0;
  for (size_t o = 0; o < stream_bytes; o += 64) {
    for (size_t j = 0; j < kStreams; ++j) {
      const uint8_t* p = w + j * stream_bytes + o;
      if (prefetch) hwy::Prefetch(p + simd::kPackedPrefetchAhead);
      uint64_t v;
      std::memcpy(&v, p, sizeof(v));
      sum += v;
    }
  }
  return sum;
}
uint64_t ReadPacked(const uint8_t* w, size_t groups, size_t group_bytes, bool prefetch) {
  uint64_t sum = 0;
  simd::ForEachPackedStreamSet(0, groups, [&](size_t streams, size_t first, size_t part) {
    const uint8_t* at = w + first * group_bytes;
    const size_t bytes = part * group_bytes;
    switch (streams) {
      case simd::kPackedStreams:
        sum += ReadStreams<simd::kPackedStreams>(at, bytes, prefetch);
        break;
      case 2:
        sum += ReadStreams<2>(at, bytes, prefetch);
        break;
      default:
        sum += ReadStreams<1>(at, bytes, prefetch);
        break;
    }
  });
  return sum;
}
std::atomic<uint64_t> g_read_sink{0};  // keeps ReadPacked's loads (threads add to it)

// One full product, as ops::MatVec does it (or a ReadPacked pass); returns
// its time: wall time, or with --clock cpu the CPU time of Prepare plus the
// largest CPU time of any thread's rows.
double Product(const Kind& kind, const uint8_t* w, size_t row_bytes, Shape shape,
               const float* x, simd::GemvInput& input, simd::PackedGemvInput& packed_input,
               float* y) {
  const double wall0 = NowSeconds();
  const double cpu0 = g_cpu_clock ? ThreadCpuSeconds() : 0.0;
  if (kind.packed && !kind.read) {
    packed_input.Prepare(x, shape.cols);
  } else if (!kind.packed) {
    input.Prepare(kind.type, x, shape.cols);
  }
  const double prepare_cpu = g_cpu_clock ? ThreadCpuSeconds() - cpu0 : 0.0;
  const simd::GemvInput* prepared = &input;
  const simd::PackedGemvInput* packed_prepared = &packed_input;
  std::mutex mu;
  double rows_cpu = 0;
  const size_t items = kind.packed ? shape.rows / simd::kPackedRows : shape.rows;
  ParallelFor(items, kind.packed ? 1 : 4, [&](size_t begin, size_t end, int) {
    const double c0 = g_cpu_clock ? ThreadCpuSeconds() : 0.0;
    if (kind.read) {
      const size_t group_bytes = simd::kPackedRows * row_bytes;
      g_read_sink.fetch_add(ReadPacked(w + begin * group_bytes, end - begin, group_bytes,
                                       !simd::CpuStreamsRowsItself()),
                            std::memory_order_relaxed);
    } else if (kind.packed) {
      simd::PackedGemv(kind.type, w, shape.cols, *packed_prepared, begin, end, y);
    } else {
      simd::Gemv(kind.type, w, row_bytes, shape.cols, *prepared, begin, end, y);
    }
    if (g_cpu_clock) {
      const double c = ThreadCpuSeconds() - c0;
      std::lock_guard<std::mutex> lock(mu);
      rows_cpu = std::max(rows_cpu, c);
    }
  });
  return g_cpu_clock ? prepare_cpu + rows_cpu : NowSeconds() - wall0;
}

// Guards against timing a broken kernel: the first rows must agree with the
// scalar reference to 1e-4 of sum |w_i x_i| (the tests hold the kernels to a
// much tighter, derived bound); 1e-3 for the packed kernel's int8
// activations.
void CheckAgainstReference(const Kind& kind, const Matrices& m, Shape shape,
                           const std::vector<float>& x, const std::vector<float>& y) {
  const TensorType type = kind.type;
  const size_t rows = std::min<size_t>(8, shape.rows);
  std::vector<float> ref(rows), w(shape.cols);
  std::vector<uint8_t> plain(m.row_bytes);
  if (kind.packed) {
    simd::PackedGemvReference(type, m.copy(0), shape.cols, x.data(), 0, 1, ref.data());
  } else {
    simd::GemvReference(type, m.copy(0), m.row_bytes, shape.cols, x.data(), 0, rows,
                        ref.data());
  }
  for (size_t r = 0; r < rows; ++r) {
    const uint8_t* row = m.copy(0) + r * m.row_bytes;
    if (kind.packed) {
      simd::UnpackRow(type, m.copy(0), shape.cols, r, plain.data());
      row = plain.data();
    }
    simd::DequantizeRowReference(type, row, shape.cols, w.data());
    double magnitude = 0;
    for (size_t i = 0; i < shape.cols; ++i) magnitude += std::fabs(double(w[i]) * x[i]);
    // Packed kernels, and Q4_0 on targets that give it int8 activations
    // (gemv.h), round activations to int8: a coarser bound.
    const bool int8 = kind.packed || simd::GemvActivationMax(type) == simd::kInt8ActivationMax;
    if (!(std::fabs(double(y[r]) - ref[r]) <= (int8 ? 5e-3 : 1e-4) * magnitude)) {
      std::fprintf(stderr, "gemv_bench: %s row %zu: got %g, reference %g\n",
                   kind.name.c_str(), r, y[r], ref[r]);
      std::exit(1);
    }
  }
}

struct Row {
  std::string type;
  Shape shape;
  int threads;
  double mb, ms, gbs, best_gbs, probe1_gbs, probe4_gbs;
  double pct1, pct4;  // % of each probe: MedianPairedRatio
};

// QuantizeRow throughput (it writes synthetic models, so its speed decides
// how long `sparrow synth` takes for a big model): ns per element.
void PrintQuantizeSpeed(const std::vector<TensorType>& types) {
  constexpr size_t kCols = 4096, kRows = 64;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> values(kCols * kRows);
  for (float& v : values) v = normal(rng);
  std::printf("\n| type | QuantizeRow ns/element | DequantizeRow ns/element |\n|---|---:|---:|\n");
  for (TensorType type : types) {
    uint64_t row_bytes = 0;
    if (!TensorTypeBytes(type, kCols, &row_bytes)) continue;
    std::vector<uint8_t> out(row_bytes * kRows);
    std::vector<float> back(kCols);
    const double t0 = NowSeconds();
    for (size_t r = 0; r < kRows; ++r) {
      simd::QuantizeRow(type, values.data() + r * kCols, kCols, out.data() + r * row_bytes);
    }
    const double t1 = NowSeconds();
    for (int rep = 0; rep < 8; ++rep) {
      for (size_t r = 0; r < kRows; ++r) {
        simd::DequantizeRow(type, out.data() + r * row_bytes, kCols, back.data());
      }
    }
    const double t2 = NowSeconds();
    const double elems = static_cast<double>(kCols * kRows);
    std::printf("| %s | %.2f | %.3f |\n", std::string(TensorTypeName(type)).c_str(),
                (t1 - t0) * 1e9 / elems, (t2 - t1) * 1e9 / (8 * elems));
  }
}

int Main(int argc, char** argv) {
  cxxopts::Options options("gemv_bench",
                           "GEMV weight bandwidth per type and shape, and as a "
                           "percentage of a stream-read probe.");
  // clang-format off
  options.add_options()
      ("types", "Weight types", cxxopts::value<std::string>()->default_value(
          "f32,f16,bf16,q8_0,q8_0x8,q4_0,q4_0x8,q4_0s,q4_K,q4_Kx8,q6_K"))
      ("shapes", "Shapes COLSxROWS (ggml order)", cxxopts::value<std::string>()->default_value(
          "4096x4096,4096x11008,11008x4096,2048x5632"))
      ("threads", "Thread counts", cxxopts::value<std::string>()->default_value("1,2"))
      ("reps", "Timed repetitions per case (median reported)",
       cxxopts::value<int>()->default_value("21"))
      ("rotate-mib", "Total size of the matrix copies that repetitions rotate through",
       cxxopts::value<size_t>()->default_value("512"))
      ("probe-mib", "Stream probe buffer size", cxxopts::value<size_t>()->default_value("1024"))
      ("pages", "huge (the matrices' and the probe's whole 2 MiB pages advised for transparent "
       "huge pages, as the engine's resident matrices are) or small",
       cxxopts::value<std::string>()->default_value("huge"))
      ("clock", "wall, or cpu: per-thread CPU time (for a machine shared with "
       "busy neighbours; see the top comment)", cxxopts::value<std::string>()->default_value("wall"))
      ("hide-cpu-extensions", "Measure the forms kernels take on CPUs without the "
       "extensions they check at run time (x86 VNNI and BF16, Arm dotprod and i8mm)",
       cxxopts::value<bool>()->default_value("false"))
      ("read", "After each packed type, a reference: its matrix read in the packed kernels' "
       "order, with their prefetches, without arithmetic",
       cxxopts::value<bool>()->default_value("false"))
      ("quantize-speed", "Also time QuantizeRow/DequantizeRow per type",
       cxxopts::value<bool>()->default_value("false"))
      ("h,help", "Show this help");
  // clang-format on
  const auto opts = options.parse(argc, argv);
  if (opts.count("help")) {
    std::cout << options.help() << "\n";
    return 0;
  }
  std::vector<Kind> kinds;
  std::vector<TensorType> types;  // for --quantize-speed
  for (const std::string& name : Split(opts["types"].as<std::string>(), ',')) {
    if (name.size() > 2 && name.substr(name.size() - 2) == "x8") {  // packed: q4_0x8
      const auto t = ParseTensorType(name.substr(0, name.size() - 2));
      if (!t || !simd::PackedGemvSupports(*t)) ThrowInputError("no packed layout for '", name, "'");
      kinds.push_back(Kind{*t, true, name});
      if (opts["read"].as<bool>()) kinds.push_back(Kind{*t, true, name + " read", true});
      continue;
    }
    const auto t = ParseTensorType(name);
    if (!t || !simd::GemvSupports(*t)) ThrowInputError("no GEMV kernel for type '", name, "'");
    kinds.push_back(Kind{*t, false, name});
    types.push_back(*t);
  }
  std::vector<Shape> shapes;
  for (const std::string& s : Split(opts["shapes"].as<std::string>(), ',')) {
    shapes.push_back(ParseShape(s));
  }
  std::vector<int> thread_counts;
  for (const std::string& s : Split(opts["threads"].as<std::string>(), ',')) {
    const int t = std::atoi(s.c_str());
    if (t <= 0) ThrowInputError("bad thread count '", s, "'");
    thread_counts.push_back(t);
  }
  const std::string clock_name = opts["clock"].as<std::string>();
  if (clock_name != "wall" && clock_name != "cpu") {
    ThrowInputError("unknown clock '", clock_name, "' (want wall or cpu)");
  }
  g_cpu_clock = clock_name == "cpu";
  const int reps = std::max(1, opts["reps"].as<int>());
  const size_t rotate_bytes = opts["rotate-mib"].as<size_t>() << 20;
  const size_t probe_bytes = opts["probe-mib"].as<size_t>() << 20;
  const bool huge_pages = HugePagesFromFlag(opts["pages"].as<std::string>());

  const bool hide_extensions = opts["hide-cpu-extensions"].as<bool>();
  simd::HideCpuExtensionsForTest(hide_extensions);
  simd::ApplyTargetFromEnvironment();  // SPARROW_SIMD_TARGET, as for the CLI
  std::printf("SIMD target: %s (cpu: %s)%s\n", simd::CurrentTargetName().c_str(),
              simd::CpuFeatures().c_str(),
              hide_extensions ? "; run-time extensions hidden" : "");
  std::printf("machine: %s, %u hardware threads\n", CpuModel().c_str(),
              std::thread::hardware_concurrency());
  std::printf("load average at start: %s\n", LoadAverage().c_str());
  std::printf(
      "%s clock; median of %d repetitions; weights rotate through >= %zu MiB of "
      "copies; probe buffer %zu MiB, one pass of the matrix's size "
      "before each repetition; %s pages\n",
      g_cpu_clock ? "CPU" : "wall", reps, rotate_bytes >> 20, probe_bytes >> 20,
      huge_pages ? "huge" : "small");
  StreamProbe probe(probe_bytes, huge_pages);
  SetThreadCount(thread_counts.front());
  probe.Pass(probe.buffer_bytes());  // warm-up: page tables, thread pool
  for (size_t streams : {1, 4}) {
    probe.set_streams(streams);
    const double rate = probe.Pass(probe.buffer_bytes(), g_cpu_clock);
    std::printf("stream probe, whole buffer, %d thread%s, %zu stream%s per thread: %.2f GB/s\n",
                thread_counts.front(), thread_counts.front() == 1 ? "" : "s", streams,
                streams == 1 ? "" : "s", rate);
  }
  std::printf("\n");

  std::mt19937 rng(42);
  std::vector<Row> table;
  for (const Kind& kind : kinds) {
    for (Shape shape : shapes) {
      if (kind.packed && shape.rows % simd::kPackedRows != 0) {
        ThrowInputError(kind.name, " needs a multiple of 8 rows, not ", shape.rows);
      }
      Matrices m = MakeMatrices(kind.type, shape, rotate_bytes, huge_pages, rng);
      CopyRotation rotation(m.copies);
      if (kind.packed) {
        for (size_t c = 0; c < m.copies; ++c) {
          simd::PackMatrix(kind.type, m.data.data() + c * m.matrix_bytes, shape.rows, shape.cols);
        }
      }
      std::vector<float> x(shape.cols), y(shape.rows);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (float& v : x) v = normal(rng);
      simd::GemvInput input;
      simd::PackedGemvInput packed_input;
      for (int threads : thread_counts) {
        SetThreadCount(threads);
        Product(kind, m.copy(0), m.row_bytes, shape, x.data(), input, packed_input, y.data());
        if (!kind.read) CheckAgainstReference(kind, m, shape, x, y);
        std::vector<double> seconds, probe1_rates, probe4_rates;
        const auto probe_passes = [&] {
          probe.set_streams(1);
          probe1_rates.push_back(probe.Pass(m.matrix_bytes, g_cpu_clock));
          probe.set_streams(4);
          probe4_rates.push_back(probe.Pass(m.matrix_bytes, g_cpu_clock));
        };
        const double bytes = static_cast<double>(m.matrix_bytes);
        std::vector<double> rates;
        for (int r = 0; r < reps; ++r) {
          probe_passes();
          const uint8_t* w = m.copy(rotation.Next());
          seconds.push_back(
              Product(kind, w, m.row_bytes, shape, x.data(), input, packed_input, y.data()));
          rates.push_back(bytes / seconds.back() / 1e9);
        }
        probe_passes();  // after the last repetition (MedianPairedRatio)
        const double pct1 = 100 * MedianPairedRatio(rates, probe1_rates);
        const double pct4 = 100 * MedianPairedRatio(rates, probe4_rates);
        std::sort(seconds.begin(), seconds.end());
        std::sort(probe1_rates.begin(), probe1_rates.end());
        std::sort(probe4_rates.begin(), probe4_rates.end());
        const double median = seconds[seconds.size() / 2];
        Row row{kind.name,
                shape,
                threads,
                bytes / 1e6,
                median * 1e3,
                bytes / median / 1e9,
                bytes / seconds.front() / 1e9,
                probe1_rates[probe1_rates.size() / 2],
                probe4_rates[probe4_rates.size() / 2],
                pct1,
                pct4};
        std::fprintf(stderr,
                     "%-5s %5zux%-5zu t=%d: %6.2f GB/s (probes %.2f / %.2f: %.0f%% / %.0f%%; "
                     "ratios of the medians %.0f%% / %.0f%%)\n",
                     row.type.c_str(), shape.cols, shape.rows, threads, row.gbs, row.probe1_gbs,
                     row.probe4_gbs, pct1, pct4, 100 * row.gbs / row.probe1_gbs,
                     100 * row.gbs / row.probe4_gbs);
        table.push_back(row);
      }
    }
  }

  std::printf("| type | shape (cols x rows) | threads | weights MB | median ms | GB/s | best GB/s "
              "| probe GB/s (1 stream) | %% of probe | probe GB/s (4 streams) | %% of 4-stream probe |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Row& r : table) {
    std::printf(
        "| %s | %zux%zu | %d | %.1f | %.3f | %.2f | %.2f | %.2f | %.0f%% | %.2f | %.0f%% |\n",
        r.type.c_str(), r.shape.cols, r.shape.rows, r.threads, r.mb, r.ms, r.gbs, r.best_gbs,
        r.probe1_gbs, r.pct1, r.probe4_gbs, r.pct4);
  }
  if (opts["quantize-speed"].as<bool>()) PrintQuantizeSpeed(types);
  std::printf("\nload average at end: %s\n", LoadAverage().c_str());
  return 0;
}

}  // namespace
}  // namespace sparrow::bench

int main(int argc, char** argv) {
  try {
    return sparrow::bench::Main(argc, argv);
  } catch (const sparrow::InputError& e) {
    std::fprintf(stderr, "gemv_bench: %s\n", e.what());
    return 2;
  } catch (const cxxopts::exceptions::exception& e) {
    std::fprintf(stderr, "gemv_bench: %s\n", e.what());
    return 2;
  }
}
