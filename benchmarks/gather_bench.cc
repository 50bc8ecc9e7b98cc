// Gather-kernel micro-benchmark: bandwidth of simd::DotRows and
// simd::AxpyRows over the rows of a compacted neuron cache, as GB/s of row
// bytes streamed and as a percentage of a stream-read probe
// (stream_probe.h) run in the same process just before, with the same
// thread count.
//
// The cache is shaped like the neuron layout's: `count` records of three
// parts [gate | up | down], each d_model elements of the record type.
// DotRows reads the gate and up parts of each selected record as two
// consecutive rows of its list (as the streamed FFN's neuron layout does:
// one pass over gate and up), AxpyRows the down part (the down
// projection). --layout split (the default) keeps them as the engine's
// unit cache does (src/runtime/unit_cache.h): every record's [gate | up]
// packed in one matrix and its [down] in another, so each pass over
// consecutive records reads one contiguous span; --layout records keeps
// whole records back to back, as they are read from flash (the staging a
// record not admitted to the cache is computed in), so each pass skips a
// third of every record. With --parts 2 the records are a dip layout's
// input records ([gate | up]: one column of each projection per input
// channel), which the axpy kernels sum whole, each part in its own
// columns (AxpyIntAdd's `parts`; read-int reads them whole too), and
// DotRows and `read` take as two rows (the float AxpyRows and its read
// pattern do not run there). The
// selection is every record in order, a random quarter of them in random
// order (a token's working set in a cache that is not ordered by need), or
// the same quarter in order (as the streamed FFN passes a token's cached
// rows: src/runtime/streamed_ffn.cc, UnitRows::Slice). Each repetition
// uses another copy of the cache, the copies together being several times
// the last-level cache, so rows come from DRAM: the copies are taken in
// turn across every case of a shape (CopyRotation), so a case does not
// reread the copies the case before it has just left in the last-level
// cache. (When each case started again at copy 1, the integer sums' read
// order over a random quarter of rows 768 wide, run right after the same
// order over every row, read 12-25 GB/s; from copies in turn, 11. Zen 4
// VM, 32 MiB L3, `--kernels read-int --shapes 768x3072`.)
// One repetition is what src/ops/row_ops.cc does for one call: for DotRows
// prepare the activations and split the row list over ParallelFor, for
// AxpyRows split the columns (each thread adds every row to its columns).
// Before each repetition, and once after the last, the probe reads as many
// bytes as the repetition's rows hold (StreamProbe: from its own buffer,
// never cached); the percentage compares each repetition with the passes
// beside it (MedianPairedRatio), so both sides see the same machine
// conditions.
//
//   gather_bench [--types q8_0,q4_0,f16,f32] [--shapes 2048x5632,4096x11008]
//                [--threads 1,2] [--tokens 1] [--reps 15] [--rotate-mib 768]
//                [--probe-mib 1024] [--parts 3|2|1] [--layout split|records]
//                [--clock wall|cpu] [--pages huge|small]
//                [--kernels dot,axpy,axpy-int,read,read-axpy,read-int]
//
// `read` is not a kernel of the engine: it loads the rows DotRows reads,
// with the same grouping and prefetching, and does no arithmetic, so its
// line is a reference for what a kernel could reach on that selection
// (ReadRows says why it is not a bound).
// `read-axpy` does the same in AxpyRows' order: four consecutive entries
// of the list at a time (the order its sums must keep), line by line
// across the four, prefetching as its kernels do; with rows in order these
// are four short streams side by side, which the hardware prefetchers do
// not run ahead of as they do DotRows' four long ones. `read-int` does the
// same in the order of AxpyRows' integer form (axpy-int): sixteen entries
// side by side, one from each sixteenth of the list
// (simd::AxpyIntPassOrder), each of the sixteen streams led by software
// prefetches as far ahead as its kernel's (simd::AxpyIntPrefetchDistance).
//
// Shapes are D_MODELxCOUNT. With --tokens N > 1 the figures are for a
// prompt batch (each row read once for all N tokens; compute-bound).
//
// --clock cpu times the kernels and the probe by CPU time instead of wall
// time: the serial part of a call on the calling thread plus the longest
// CPU time any thread spent in its share of the parallel part. On a machine
// shared with busy neighbours, wall time mostly measures the scheduler,
// while CPU time still measures how fast the code streams when it runs
// (though not its share of caches and DRAM bandwidth).

#include <cxxopts.hpp>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <iterator>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/huge_pages.h"
#include "base/timer.h"
#include "benchmarks/bench_util.h"
#include "benchmarks/stream_probe.h"
#include "base/tensor_type.h"
#include "simd/axpy_int.h"
#include "simd/gather.h"
#include "simd/gemv.h"
#include "simd/quantize.h"
#include "simd/row_prefetch.h"
#include "simd/targets.h"
#include "simd/vector_ops.h"
#include "base/threads.h"

namespace sparrow::bench {
namespace {

struct Shape {
  size_t d_model, count;
};

bool g_cpu_clock = false;

// Times one call with the selected clock (--clock). With the CPU clock, the
// call's serial parts (Serial) and the longest CPU time of the bodies that
// ParallelFor runs (Body) add up; time spent waiting at the end of the
// parallel region (spinning while a descheduled worker catches up) does not
// count.
class CallTimer {
 public:
  void Start() {
    serial_ = 0;
    longest_body_ = 0;
    wall_ = NowSeconds();
  }
  template <class F>
  void Serial(const F& f) {
    const double c0 = g_cpu_clock ? ThreadCpuSeconds() : 0.0;
    f();
    if (g_cpu_clock) serial_ += ThreadCpuSeconds() - c0;
  }
  template <class F>
  void Body(const F& body) {
    if (!g_cpu_clock) return body();
    const double c0 = ThreadCpuSeconds();
    body();
    const double c = ThreadCpuSeconds() - c0;
    std::lock_guard<std::mutex> lock(mu_);
    longest_body_ = std::max(longest_body_, c);
  }
  double Seconds() const {
    return g_cpu_clock ? serial_ + longest_body_ : NowSeconds() - wall_;
  }

 private:
  std::mutex mu_;
  double wall_ = 0, serial_ = 0, longest_body_ = 0;
};

// The probe: StreamProbe passes (wall clock), or with the CPU clock the same
// reads (StreamSum over the thread's part) timed like the kernels.
class Probe {
 public:
  // On huge pages where the rows are (StreamProbe says why).
  Probe(size_t buffer_bytes, bool huge_pages) {
    if (!g_cpu_clock) {
      wall_.emplace(buffer_bytes, huge_pages);
      return;
    }
    bytes_ = std::max(kGrain, buffer_bytes / kGrain * kGrain);
    buffer_ = MapWithWholeHugePages(bytes_, huge_pages);
    for (size_t i = 0; i < bytes_; i += 64) {
      std::memset(buffer_.data() + i, static_cast<int>(i >> 6), 64);
    }
  }
  size_t buffer_bytes() const { return wall_ ? wall_->buffer_bytes() : bytes_; }
  void set_streams(size_t streams) {
    if (wall_) wall_->set_streams(streams);
    streams_ = streams;
  }
  // Reads the next `bytes` of the buffer; returns GB/s.
  double Pass(size_t bytes) {
    if (wall_) return wall_->Pass(bytes);
    bytes = std::max(kGrain, std::min(bytes, bytes_) / kGrain * kGrain);
    if (position_ + bytes > bytes_) position_ = 0;
    const uint8_t* start = buffer_.data() + position_;
    position_ += bytes;
    std::atomic<uint64_t> sink{0};
    CallTimer timer;
    timer.Start();
    ParallelFor(bytes, kGrain, [&](size_t begin, size_t end, int) {
      timer.Body([&] {
        sink.fetch_add(StreamSum(start + begin, end - begin, streams_), std::memory_order_relaxed);
      });
    });
    const double seconds = timer.Seconds();
    if (sink.load() == 1) std::fputc(' ', stderr);  // keeps the sum alive
    return static_cast<double>(bytes) / seconds / 1e9;
  }

 private:
  static constexpr size_t kGrain = 64 << 10;  // bytes per thread chunk unit
  std::optional<StreamProbe> wall_;
  HugePageBuffer buffer_;
  size_t bytes_ = 0, position_ = 0, streams_ = 1;
};

Shape ParseShape(const std::string& s) {
  const size_t x = s.find('x');
  char* end = nullptr;
  Shape shape{};
  if (x != std::string::npos) {
    shape.d_model = std::strtoull(s.c_str(), &end, 10);
    const bool first_ok = end == s.c_str() + x;
    shape.count = std::strtoull(s.c_str() + x + 1, &end, 10);
    if (first_ok && *end == '\0' && shape.d_model > 0 && shape.count > 0) return shape;
  }
  ThrowInputError("bad shape '", s, "' (want D_MODELxCOUNT, e.g. 4096x11008)");
}

// `copies` identical caches of `count` records in one allocation. Records
// cycle through a few distinct random ones (the kernels' speed does not
// depend on the values).
struct Caches {
  HugePageBuffer data;
  size_t part_bytes = 0, record_bytes = 0, cache_bytes = 0, copies = 0;
  const uint8_t* copy(size_t i) const { return data.data() + (i % copies) * cache_bytes; }
};

Caches MakeCaches(TensorType type, Shape shape, size_t parts, size_t rotate_bytes,
                  bool huge_pages, std::mt19937& rng) {
  Caches c;
  uint64_t part = 0;
  if (!TensorTypeBytes(type, shape.d_model, &part)) {
    ThrowInputError(shape.d_model, " is not a whole number of ", TensorTypeName(type), " blocks");
  }
  c.part_bytes = part;
  c.record_bytes = parts * c.part_bytes;
  c.cache_bytes = c.record_bytes * shape.count;
  c.copies = std::max<size_t>(2, (rotate_bytes + c.cache_bytes - 1) / c.cache_bytes);
  // Huge pages as the engine's unit caches have them (src/runtime/row_arena.h:
  // whole 2 MiB pages advised, before the first touch).
  c.data = MapWithWholeHugePages(c.copies * c.cache_bytes, huge_pages);
  constexpr size_t kDistinct = 31;
  std::vector<uint8_t> records(kDistinct * c.record_bytes);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> values(shape.d_model);
  for (size_t r = 0; r < parts * kDistinct; ++r) {
    for (float& v : values) v = normal(rng);
    simd::QuantizeRow(type, values.data(), shape.d_model, records.data() + r * c.part_bytes);
  }
  for (size_t r = 0; r < shape.count; ++r) {
    std::memcpy(c.data.data() + r * c.record_bytes,
                records.data() + (r % kDistinct) * c.record_bytes, c.record_bytes);
  }
  for (size_t i = 1; i < c.copies; ++i) {
    std::memcpy(c.data.data() + i * c.cache_bytes, c.data.data(), c.cache_bytes);
  }
  return c;
}

// Rows per ParallelFor grain: at least ~64 KiB of row data per chunk.
size_t Grain(size_t row_bytes) { return std::max<size_t>(4, (64 * 1024) / row_bytes); }

// One DotRows call as the ops layer makes it.
void Dots(TensorType type, const std::vector<const uint8_t*>& rows, size_t cols,
          const float* x, size_t n, std::vector<simd::GemvInput>& inputs, float* out,
          size_t row_bytes, CallTimer& timer) {
  timer.Serial([&] {
    for (size_t t = 0; t < n; ++t) inputs[t].Prepare(type, x + t * cols, cols);
  });
  const size_t count = rows.size();
  ParallelFor(count, Grain(row_bytes), [&](size_t begin, size_t end, int) {
    timer.Body([&] {
      simd::DotRows(type, rows.data() + begin, end - begin, cols, inputs.data(), n,
                    out + begin, count);
    });
  });
}

// One AxpyRows call as the ops layer makes it (ops::RowAxpys for the
// gather types): the threads split the columns, 64 at a time, and each adds
// every row's terms to its columns of y.
void Axpys(TensorType type, const std::vector<const uint8_t*>& rows, size_t cols,
           const float* a, size_t n, float* y, CallTimer& timer) {
  const size_t count = rows.size();
  constexpr size_t kUnit = 64;  // columns: whole blocks of every gather type
  ParallelFor((cols + kUnit - 1) / kUnit, 512 / kUnit, [&](size_t begin, size_t end, int) {
    timer.Body([&] {
      const size_t c0 = begin * kUnit;
      simd::AxpyRowColumns(type, rows.data(), count, cols, c0, std::min(cols, end * kUnit) - c0, a,
                           count, n, y + c0, cols);
    });
  });
}

// The integer form of one AxpyRows call (simd/axpy_int.h) as
// ops::RowAxpysInt and RowAxpyIntSums do it (src/ops/row_ops.cc): the
// threads split the rows (in whole passes of sixteen), each adds its rows
// over every column into its own sums, which are then added up and
// finished into y. `step` is the one an engine would pick (IntegerStep).
void AxpyInts(TensorType type, const std::vector<const uint8_t*>& rows, size_t cols, size_t parts,
              const float* a, size_t n, float step, std::vector<int32_t>& sums, float* y,
              CallTimer& timer) {
  // Each row of `parts` parts of `cols` columns, summed in one call
  // (part p's sums at p * AxpyIntSumsInts(cols)).
  const size_t count = rows.size(), per_token = parts * simd::AxpyIntSumsInts(cols);
  const size_t threads = static_cast<size_t>(std::max(1, ThreadCount()));
  uint64_t row_bytes = 0;
  if (!TensorTypeBytes(type, cols, &row_bytes)) ThrowInputError("rows of no byte size");
  timer.Serial([&] { sums.assign(threads * n * per_token, 0); });
  const size_t grain = (Grain(row_bytes) + 15) / 16 * 16;
  ParallelFor(count, grain, [&](size_t begin, size_t end, int range) {
    timer.Body([&] {
      int32_t* mine = sums.data() + static_cast<size_t>(range) * n * per_token;
      for (size_t t = 0; t < n; ++t) {
        simd::AxpyIntAdd(type, rows.data() + begin, end - begin, cols, 0, cols,
                         a + t * count + begin, 1.0f / step, mine + t * per_token, 0, parts);
      }
    });
  });
  timer.Serial([&] {
    for (size_t range = 1; range < threads; ++range) {
      const int32_t* other = sums.data() + range * n * per_token;
      for (size_t i = 0; i < n * per_token; ++i) sums[i] += other[i];
    }
    for (size_t t = 0; t < n; ++t) {
      for (size_t p = 0; p < parts; ++p) {
        simd::AxpyIntFinish(cols, sums.data() + t * per_token + p * simd::AxpyIntSumsInts(cols),
                            step, y + (t * parts + p) * cols);
      }
    }
  });
}

// The step an engine would pick: from the largest |a| over the tokens'
// coefficients and the largest block scale over the rows.
float IntegerStep(TensorType type, const std::vector<const uint8_t*>& rows, size_t cols,
                  size_t parts, size_t part_bytes, const float* a, size_t n) {
  float largest_scale = 0.0f, largest_a = 0.0f;
  for (const uint8_t* row : rows) {
    for (size_t p = 0; p < parts; ++p) {
      largest_scale =
          std::max(largest_scale, simd::LargestBlockScale(type, row + p * part_bytes, cols));
    }
  }
  for (size_t i = 0; i < n * rows.size(); ++i) largest_a = std::max(largest_a, std::fabs(a[i]));
  return simd::AxpyIntStep(largest_a, largest_scale);
}

// A reference for an access pattern: the rows a kernel reads, in its order
// and with its prefetching, but one 8-byte load per 64-byte line and no
// arithmetic. Where this line is below the probe too, the gap is the
// memory system's (rows at scattered addresses keep fewer lines in flight
// than sequential streams, which the hardware prefetchers run ahead of),
// not the kernels'. The orders:
//  - DotRows': groups of four, group i holding entries i, i + q, i + 2q and
//    i + 3q (q = count / 4), then the rest; each row's bytes one group
//    ahead, or several for short rows (simd::Prefetcher, LeadGroups), and
//    where those go into L2, the group's own rows simd::kL1NearBytes ahead
//    into L1 (simd::NearLines);
//  - AxpyRows': four consecutive entries at a time, each row prefetched
//    kPrefetchAhead bytes ahead, running on into the rows of the four
//    LeadGroups ahead;
//  - the integer sums' (simd/axpy_int-inl.h, the quad form): sixteen
//    entries at a time, the next of each of the list's sixteen parts
//    (simd::AxpyIntPassOrder), line by line across the sixteen, each of
//    the sixteen streams prefetched into L2 `int_distance` bytes ahead
//    (simd::AxpyIntPrefetchDistance), its first `int_distance` bytes
//    before the first line is read.
enum class ReadOrder { kDot, kAxpy, kAxpyInt };

// Rows shorter than a load (an F32 row of one element): each row's bytes,
// without prefetches.
uint64_t ReadShortRows(const uint8_t* const* rows, size_t count, size_t row_bytes) {
  uint64_t sum = 0;
  for (size_t k = 0; k < count; ++k) {
    uint64_t v = 0;
    std::memcpy(&v, rows[k], row_bytes);
    sum += v;
  }
  return sum;
}

uint64_t ReadRows(const uint8_t* const* list, size_t count, size_t row_bytes, ReadOrder order,
                  size_t int_distance) {
  thread_local std::vector<const uint8_t*> reordered;
  const uint8_t* const* rows = list;
  if (order == ReadOrder::kDot) {
    reordered.clear();
    const size_t q = count / 4;
    for (size_t i = 0; i < q; ++i) {
      for (size_t r = 0; r < 4; ++r) reordered.push_back(list[i + r * q]);
    }
    for (size_t k = 4 * q; k < count; ++k) reordered.push_back(list[k]);
    rows = reordered.data();
  } else if (order == ReadOrder::kAxpyInt) {
    reordered.resize(count);
    simd::AxpyIntPassOrder passes(count, nullptr, rows);
    size_t index[simd::AxpyIntPassOrder::kParts];
    for (size_t k = 0, n; (n = passes.Next(index, simd::AxpyIntPassOrder::kParts)) > 0; k += n) {
      for (size_t r = 0; r < n; ++r) reordered[k + r] = list[index[r]];
    }
    rows = reordered.data();
  }
  const size_t group = order == ReadOrder::kAxpyInt ? 16 : 4;
  // Prefetch distance from the line being read, in bytes of a row: past
  // the row it lands in a later group's rows, at the same offset.
  const size_t ahead = order == ReadOrder::kAxpy  ? std::min(simd::kPrefetchAhead, row_bytes)
                       : order == ReadOrder::kDot ? row_bytes
                                                  : int_distance;
  const bool into_l2 = order == ReadOrder::kAxpyInt || simd::PrefetchIntoL2(4, ahead);
  const bool near_l1 = into_l2 && order == ReadOrder::kDot;
  // Groups ahead that a position past the row's end maps to: the integer
  // sums' streams run on into the next group's rows, the others
  // LeadGroups ahead.
  const size_t lead = order == ReadOrder::kAxpyInt ? 1 : simd::LeadGroups(row_bytes);
  // What no group prefetches is prefetched before the first is read: the
  // integer sums' streams up to `ahead`, the others' groups before the one
  // the first group prefetches. (Plain loops: with the prefetches in a
  // lambda this order read at half the speed.)
  if (order == ReadOrder::kAxpyInt) {
    for (size_t p = 0; p < ahead; p += 64) {
      const size_t first = p / row_bytes * group;
      for (size_t r = first; r < std::min(first + group, count); ++r) {
        simd::PrefetchLine(rows[r] + p % row_bytes, into_l2);
      }
    }
  } else {
    for (size_t r = group; r < std::min(lead * group, count); ++r) {
      for (size_t o = 0; o < row_bytes; o += 64) simd::PrefetchLine(rows[r] + o, into_l2);
    }
  }
  // The loop below keeps its own work per line small, since that work
  // costs bandwidth here: with a division per line and each load copied
  // through a memcpy of variable length (a byte loop with stores, for rows
  // shorter than 8 bytes), a quarter of Q4_0S rows 2048 wide in order read
  // at 67-68% of the four-stream probe in DotRows' order, 65-66% in
  // AxpyRows' and 70% in the integer sums', against 73-76%, 74-76% and
  // 80-81% with this loop (before DotRows' near prefetches); every row,
  // 79-87%, 81-82% and 83-87% against 89-93%, 92% and 91-93% (Emerald
  // Rapids VM, three alternated rounds of
  // `gather_bench --types q4_0s --shapes 2048x5632 --parts 1 --kernels
  // read,read-axpy,read-int --clock cpu`, slow rounds left out). So these
  // lines are what such a loop reaches, not a hard bound: one with the
  // four rows' pointers in registers and no loop over them read DotRows'
  // order at 85-95% over that quarter.
  if (row_bytes < sizeof(uint64_t)) return ReadShortRows(rows, count, row_bytes);
  uint64_t sum = 0;
  for (size_t k = 0; k < count; k += group) {
    const size_t m = std::min(group, count - k);
    // The prefetched position, `ahead` bytes past the line being read:
    // `wraps` rows past it, `line` bytes into the row there, which is
    // `lead` groups on for each row.
    size_t wraps = ahead / row_bytes, line = ahead % row_bytes;
    // The rows read and the rows prefetched, in locals.
    const uint8_t* cur[16];
    const uint8_t* next[16];
    for (size_t r = 0; r < m; ++r) cur[r] = rows[k + r];
    size_t prefetched = 0;  // rows in next[]
    const auto aim = [&] {
      const size_t first = std::min(k + wraps * lead * group, count);
      prefetched = std::min(first + group, count) - first;
      for (size_t r = 0; r < prefetched; ++r) next[r] = rows[first + r];
    };
    aim();
    // Where the rows go into L2, DotRows also prefetches the rows it reads
    // simd::kL1NearBytes ahead into L1 (gather-inl.h: NearLines).
    const size_t near = near_l1 ? std::min(simd::kL1NearBytes, row_bytes) : 0;
    for (size_t r = 0; r < m; ++r) {
      for (size_t b = 0; b < near; b += 64) hwy::Prefetch(cur[r] + b);
    }
    for (size_t o = 0; o < row_bytes; o += 64) {
      if (o + near < row_bytes && near != 0) {
        for (size_t r = 0; r < m; ++r) hwy::Prefetch(cur[r] + o + near);
      }
      for (size_t r = 0; r < prefetched; ++r) simd::PrefetchLine(next[r] + line, into_l2);
      if ((line += 64) >= row_bytes) {
        for (; line >= row_bytes; line -= row_bytes) ++wraps;
        aim();
      }
      // The line's first 8 bytes, or the row's last ones.
      const size_t at = std::min(o, row_bytes - sizeof(uint64_t));
      for (size_t r = 0; r < m; ++r) {
        uint64_t v;
        std::memcpy(&v, cur[r] + at, sizeof(v));
        sum += v;
      }
    }
  }
  return sum;
}

std::atomic<uint64_t> g_read_sink{0};  // keeps ReadRows' loads

void Reads(const std::vector<const uint8_t*>& rows, size_t row_bytes, ReadOrder order,
           CallTimer& timer, size_t int_distance = 0) {
  ParallelFor(rows.size(), Grain(row_bytes), [&](size_t begin, size_t end, int) {
    timer.Body([&] {
      g_read_sink.fetch_add(
          ReadRows(rows.data() + begin, end - begin, row_bytes, order, int_distance),
          std::memory_order_relaxed);
    });
  });
}

struct Result {
  std::string type, kernel, selection;
  Shape shape;
  int threads;
  size_t tokens;
  double mb, ms, gbs, best_gbs, probe_gbs;
  double pct;  // % of the probe: MedianPairedRatio
};

int Main(int argc, char** argv) {
  cxxopts::Options options("gather_bench",
                           "DotRows/AxpyRows row bandwidth over a neuron-layout cache, "
                           "and as a percentage of a stream-read probe.");
  // clang-format off
  options.add_options()
      ("types", "Record types", cxxopts::value<std::string>()->default_value("q8_0,q4_0s,q4_0,f16,f32"))
      ("shapes", "Shapes D_MODELxCOUNT",
       cxxopts::value<std::string>()->default_value("2048x5632,4096x11008"))
      ("threads", "Thread counts", cxxopts::value<std::string>()->default_value("1,2"))
      ("tokens", "Tokens per call (batch)", cxxopts::value<size_t>()->default_value("1"))
      ("kernels", "dot,axpy,axpy-int,read,read-axpy,read-int (axpy-int: AxpyRows' sums in "
       "integers, simd/axpy_int.h, Q4_0S and Q4_0; read: the rows DotRows loads, without "
       "arithmetic, the pattern's reference; read-axpy and read-int: the same in AxpyRows' order "
       "and in the integer sums')",
       cxxopts::value<std::string>()->default_value("dot,axpy,read"))
      ("reps", "Timed repetitions per case (median reported)",
       cxxopts::value<int>()->default_value("15"))
      ("rotate-mib", "Total size of the cache copies that repetitions rotate through",
       cxxopts::value<size_t>()->default_value("768"))
      ("probe-mib", "Stream probe buffer size", cxxopts::value<size_t>()->default_value("1024"))
      ("parts", "Parts per record: 3 (neuron layout), 2 (dip input records, summed whole) or 1 "
       "(a plain matrix)",
       cxxopts::value<size_t>()->default_value("3"))
      ("layout", "With 3 parts: split ([gate | up] and [down] in two matrices, as the unit "
       "cache holds them) or records (whole records, as read from flash)",
       cxxopts::value<std::string>()->default_value("split"))
      ("pages", "huge (the caches' whole 2 MiB pages advised for transparent huge pages, as "
       "the engine's unit caches are) or small",
       cxxopts::value<std::string>()->default_value("huge"))
      ("clock", "wall or cpu (see the top of gather_bench.cc)",
       cxxopts::value<std::string>()->default_value("wall"))
      ("hide-cpu-extensions", "Measure the forms kernels take on CPUs without the "
       "extensions they check at run time (x86 VNNI and BF16, Arm dotprod and i8mm)",
       cxxopts::value<bool>()->default_value("false"))
      ("h,help", "Show this help");
  // clang-format on
  const auto opts = options.parse(argc, argv);
  if (opts.count("help")) {
    std::cout << options.help() << "\n";
    return 0;
  }
  std::vector<TensorType> types;
  for (const std::string& name : Split(opts["types"].as<std::string>(), ',')) {
    const auto t = ParseTensorType(name);
    if (!t || !simd::GatherSupports(*t)) ThrowInputError("no gather kernel for type '", name, "'");
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
  // The kernels, by --kernels name: what the table calls them and whether
  // they read a record's down part (as the down projection does) rather
  // than its gate part.
  enum class Kernel { kDot, kAxpy, kAxpyInt, kRead, kReadAxpy, kReadInt };
  struct KernelInfo {
    Kernel kernel;
    const char* name;
    const char* label;
    bool reads_down;
  };
  static constexpr KernelInfo kKernels[] = {
      {Kernel::kDot, "dot", "DotRows", false},
      {Kernel::kAxpy, "axpy", "AxpyRows", true},
      {Kernel::kAxpyInt, "axpy-int", "AxpyRows in integers", true},
      {Kernel::kRead, "read", "read (loads only)", false},
      {Kernel::kReadAxpy, "read-axpy", "read (AxpyRows' order)", true},
      {Kernel::kReadInt, "read-int", "read (integer sums' order)", true},
  };
  bool run_kernel[std::size(kKernels)] = {};
  for (const std::string& k : Split(opts["kernels"].as<std::string>(), ',')) {
    const auto* it = std::find_if(std::begin(kKernels), std::end(kKernels),
                                  [&](const KernelInfo& info) { return k == info.name; });
    if (it == std::end(kKernels))
      ThrowInputError("unknown kernel '", k,
                      "' (want dot, axpy, axpy-int, read, read-axpy, read-int)");
    run_kernel[it - std::begin(kKernels)] = true;
  }
  const size_t n = std::max<size_t>(1, opts["tokens"].as<size_t>());
  const int reps = std::max(1, opts["reps"].as<int>());
  const size_t rotate_bytes = opts["rotate-mib"].as<size_t>() << 20;
  const size_t probe_bytes = opts["probe-mib"].as<size_t>() << 20;
  const std::string clock_name = opts["clock"].as<std::string>();
  if (clock_name != "wall" && clock_name != "cpu") {
    ThrowInputError("unknown clock '", clock_name, "' (want wall, cpu)");
  }
  g_cpu_clock = clock_name == "cpu";
  const size_t parts = opts["parts"].as<size_t>();
  const bool huge_pages = HugePagesFromFlag(opts["pages"].as<std::string>());
  if (parts < 1 || parts > 3) ThrowInputError("--parts must be 1, 2 or 3");
  const std::string layout = opts["layout"].as<std::string>();
  if (layout != "split" && layout != "records") {
    ThrowInputError("unknown layout '", layout, "' (want split, records)");
  }
  const bool split = parts == 3 && layout == "split";

  const bool hide_extensions = opts["hide-cpu-extensions"].as<bool>();
  simd::HideCpuExtensionsForTest(hide_extensions);
  simd::ApplyTargetFromEnvironment();  // SPARROW_SIMD_TARGET, as for the CLI
  std::printf("SIMD target: %s (cpu: %s)%s\n", simd::CurrentTargetName().c_str(),
              simd::CpuFeatures().c_str(),
              hide_extensions ? "; run-time extensions hidden" : "");
  std::printf("load average at start: %s\n", LoadAverage().c_str());
  std::printf(
      "records of %zu part(s)%s%s; tokens per call: %zu; %s clock; median of %d "
      "repetitions; caches rotate through >= %zu MiB of copies; probe buffer %zu MiB, one "
      "pass of the rows' size before each repetition\n",
      parts,
      parts == 1   ? ""
      : parts == 2 ? ", dip input records [gate | up]"
      : split      ? ", split [gate | up] + [down]"
                   : ", whole",
      huge_pages ? " on huge pages" : "", n, g_cpu_clock ? "CPU" : "wall", reps, rotate_bytes >> 20,
      probe_bytes >> 20);
  // 1 or 4 streams per thread, whichever reads faster here (as gemv_bench).
  Probe probe(probe_bytes, huge_pages);
  SetThreadCount(thread_counts.front());
  probe.Pass(probe.buffer_bytes());  // warm-up: page tables, thread pool
  double best_rate = 0;
  size_t probe_streams = 1;
  for (size_t streams : {1, 4, 1, 4}) {
    probe.set_streams(streams);
    const double rate = probe.Pass(probe.buffer_bytes());
    if (rate > best_rate) {
      best_rate = rate;
      probe_streams = streams;
    }
  }
  probe.set_streams(probe_streams);
  std::printf("probe: %zu stream%s per thread (%.2f GB/s whole buffer, %d thread%s)\n\n",
              probe_streams, probe_streams == 1 ? "" : "s", best_rate, thread_counts.front(),
              thread_counts.front() == 1 ? "" : "s");

  std::mt19937 rng(42);
  std::vector<Result> table;
  for (TensorType type : types) {
    for (Shape shape : shapes) {
      const Caches caches = MakeCaches(type, shape, parts, rotate_bytes, huge_pages, rng);
      CopyRotation rotation(caches.copies);
      const size_t cols = shape.d_model;
      // Selections: all records in order; a random quarter in random
      // order, and the same quarter in order.
      std::vector<size_t> all(shape.count);
      std::iota(all.begin(), all.end(), size_t{0});
      std::vector<size_t> quarter = all;
      std::shuffle(quarter.begin(), quarter.end(), rng);
      quarter.resize(std::max<size_t>(1, shape.count / 4));
      std::vector<size_t> sorted_quarter = quarter;
      std::sort(sorted_quarter.begin(), sorted_quarter.end());
      const std::pair<const char*, const std::vector<size_t>*> selections[] = {
          {"all, in order", &all},
          {"25%, random order", &quarter},
          {"25%, in order", &sorted_quarter}};

      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::vector<float> x(n * cols);
      for (float& v : x) v = normal(rng);
      std::vector<float> coeff(n * shape.count);
      for (float& v : coeff) {
        v = normal(rng);
        if (v == 0.0f) v = 0.5f;  // every row is used
      }
      // Two rows per record at most; y: two parts' columns at most.
      std::vector<float> out(2 * n * shape.count), y(2 * n * cols);
      std::vector<int32_t> sums;
      std::vector<simd::GemvInput> inputs(n);

      for (int threads : thread_counts) {
        SetThreadCount(threads);
        for (size_t ki = 0; ki < std::size(kKernels); ++ki) {
          if (!run_kernel[ki]) continue;
          const KernelInfo& kernel = kKernels[ki];
          if (kernel.kernel == Kernel::kAxpyInt && !simd::AxpyIntSupports(type)) continue;
          // Dip input records: the float AxpyRows has no form that sums them whole.
          if (parts == 2 &&
              (kernel.kernel == Kernel::kAxpy || kernel.kernel == Kernel::kReadAxpy)) {
            continue;
          }
          const size_t part = kernel.reads_down && parts == 3 ? 2 : 0;  // down or gate
          // Gate and up, or the down part alone; dip input records summed
          // whole (row_parts).
          const size_t rows_per_record = parts > 1 && !kernel.reads_down ? 2 : 1;
          const size_t row_parts = parts == 2 && kernel.reads_down ? 2 : 1;
          for (const auto& selection : selections) {
            // Plain names, not a structured binding: Clang 14's lambdas
            // cannot capture one.
            const auto& label = selection.first;
            const auto& picked = selection.second;
            auto rows_of = [&](size_t copy) {
              std::vector<const uint8_t*> rows;
              rows.reserve(picked->size() * rows_per_record);
              // Split: the [gate | up] matrix, then the [down] one.
              const size_t down_matrix = 2 * caches.part_bytes * shape.count;
              for (size_t unit : *picked) {
                const uint8_t* first =
                    !split ? caches.copy(copy) + unit * caches.record_bytes + part * caches.part_bytes
                    : part == 2 ? caches.copy(copy) + down_matrix + unit * caches.part_bytes
                                : caches.copy(copy) + unit * 2 * caches.part_bytes;
                for (size_t p = 0; p < rows_per_record; ++p) {
                  rows.push_back(first + p * caches.part_bytes);
                }
              }
              return rows;
            };
            const size_t count = picked->size() * rows_per_record;
            const float step = kernel.kernel == Kernel::kAxpyInt
                                   ? IntegerStep(type, rows_of(0), cols, row_parts,
                                                 caches.part_bytes, coeff.data(), n)
                                   : 0.0f;
            CallTimer timer;
            auto run = [&](const std::vector<const uint8_t*>& rows) {
              timer.Start();
              switch (kernel.kernel) {
                case Kernel::kDot:
                  Dots(type, rows, cols, x.data(), n, inputs, out.data(), caches.part_bytes,
                       timer);
                  break;
                case Kernel::kAxpy:
                  Axpys(type, rows, cols, coeff.data(), n, y.data(), timer);
                  break;
                case Kernel::kAxpyInt:
                  AxpyInts(type, rows, cols, row_parts, coeff.data(), n, step, sums, y.data(),
                           timer);
                  break;
                case Kernel::kRead:
                  Reads(rows, caches.part_bytes, ReadOrder::kDot, timer);
                  break;
                case Kernel::kReadAxpy:
                  Reads(rows, caches.part_bytes, ReadOrder::kAxpy, timer);
                  break;
                case Kernel::kReadInt:
                  Reads(rows, row_parts * caches.part_bytes, ReadOrder::kAxpyInt, timer,
                        simd::AxpyIntPrefetchDistance(type == TensorType::kQ4_0S, cols / 32));
                  break;
              }
              return timer.Seconds();
            };
            // Sanity check on the first rows before timing anything.
            {
              const std::vector<const uint8_t*> rows = rows_of(0);
              const size_t check = std::min<size_t>(count, 8);
              std::vector<const uint8_t*> few(rows.begin(), rows.begin() + check);
              std::vector<float> got(check), ref(check), w(cols);
              simd::GemvInput in;
              in.Prepare(type, x.data(), cols);
              simd::DotRows(type, few.data(), check, cols, &in, 1, got.data(), check);
              simd::DotRowsReference(type, few.data(), check, cols, x.data(), 1, ref.data(), check);
              for (size_t k = 0; k < check; ++k) {
                simd::DequantizeRowReference(type, few[k], cols, w.data());
                double magnitude = 0;
                for (size_t i = 0; i < cols; ++i) magnitude += std::fabs(double(w[i]) * x[i]);
                // int8 activations (Q4_0 on some targets: gemv.h) round
                // more coarsely than int16 ones.
                const bool int8 = simd::GemvActivationMax(type) == simd::kInt8ActivationMax;
                if (!(std::fabs(double(got[k]) - ref[k]) <= (int8 ? 5e-3 : 1e-4) * magnitude)) {
                  std::fprintf(stderr, "gather_bench: DotRows row %zu: got %g, reference %g\n", k,
                               got[k], ref[k]);
                  return 1;
                }
              }
            }
            run(rows_of(rotation.Next()));  // warm-up (thread pool, buffers)
            std::vector<double> seconds, probe_rates, rates;
            const size_t pass_bytes = count * row_parts * caches.part_bytes;
            const double bytes = static_cast<double>(pass_bytes);
            for (int r = 0; r < reps; ++r) {
              const std::vector<const uint8_t*> rows = rows_of(rotation.Next());
              std::fill(y.begin(), y.end(), 0.0f);
              probe_rates.push_back(probe.Pass(pass_bytes));
              seconds.push_back(run(rows));
              rates.push_back(bytes / seconds.back() / 1e9);
            }
            probe_rates.push_back(probe.Pass(pass_bytes));  // (MedianPairedRatio)
            const double pct = 100 * MedianPairedRatio(rates, probe_rates);
            std::sort(seconds.begin(), seconds.end());
            std::sort(probe_rates.begin(), probe_rates.end());
            const double median = seconds[seconds.size() / 2];
            Result res{std::string(TensorTypeName(type)), kernel.label, label, shape, threads, n,
                       bytes / 1e6, median * 1e3, bytes / median / 1e9,
                       bytes / seconds.front() / 1e9, probe_rates[probe_rates.size() / 2], pct};
            std::fprintf(stderr,
                         "%-5s %-8s %4zux%-5zu %-18s t=%d: %6.2f GB/s (probe %.2f, %.0f%%; the "
                         "ratio of the medians %.0f%%)\n",
                         res.type.c_str(), res.kernel.c_str(), shape.d_model, shape.count, label,
                         threads, res.gbs, res.probe_gbs, pct, 100 * res.gbs / res.probe_gbs);
            table.push_back(res);
          }
        }
      }
    }
  }

  std::printf("| type | kernel | d_model x rows | selection | threads | row MB | median ms | "
              "GB/s | best GB/s | probe GB/s | %% of probe |\n");
  std::printf("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Result& r : table) {
    std::printf("| %s | %s | %zux%zu | %s | %d | %.1f | %.3f | %.2f | %.2f | %.2f | %.0f%% |\n",
                r.type.c_str(), r.kernel.c_str(), r.shape.d_model, r.shape.count,
                r.selection.c_str(), r.threads, r.mb, r.ms, r.gbs, r.best_gbs, r.probe_gbs, r.pct);
  }
  if (n > 1) {
    std::printf("\n(batch of %zu tokens: multiply GB/s by %zu for the multiply-adds' weight "
                "throughput)\n", n, n);
  }
  std::printf("\nload average at end: %s\n", LoadAverage().c_str());
  return 0;
}

}  // namespace
}  // namespace sparrow::bench

int main(int argc, char** argv) {
  try {
    return sparrow::bench::Main(argc, argv);
  } catch (const sparrow::InputError& e) {
    std::fprintf(stderr, "gather_bench: %s\n", e.what());
    return 2;
  } catch (const cxxopts::exceptions::exception& e) {
    std::fprintf(stderr, "gather_bench: %s\n", e.what());
    return 2;
  }
}
