#include "simd/axpy_int.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "simd/gather.h"
#include "simd/quantize.h"
#include "simd/targets.h"

namespace sparrow::simd {
namespace {

constexpr TensorType kTypes[] = {TensorType::kQ4_0S, TensorType::kQ4_0};

// A row of `type`: random nibbles, scales of random sign and size (f16),
// all in front (Q4_0S) or each at its block's start (Q4_0).
std::vector<uint8_t> RandomRow(TensorType type, size_t cols, std::mt19937& rng) {
  const size_t blocks = cols / 32;
  std::vector<uint8_t> row(blocks * 18);
  for (uint8_t& byte : row) byte = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> size(0.001f, 0.05f);
  std::bernoulli_distribution negative(0.3);
  for (size_t b = 0; b < blocks; ++b) {
    const uint16_t h = F32ToF16(negative(rng) ? -size(rng) : size(rng));
    std::memcpy(row.data() + (type == TensorType::kQ4_0S ? 2 : 18) * b, &h, 2);
  }
  return row;
}

struct Problem {
  TensorType type;
  size_t cols;
  std::vector<std::vector<uint8_t>> storage;
  std::vector<const uint8_t*> rows;
  std::vector<float> a;
  std::vector<float> y0;
};

Problem MakeProblem(TensorType type, size_t cols, size_t count, std::mt19937& rng) {
  Problem p;
  p.type = type;
  p.cols = cols;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::bernoulli_distribution zero(0.25);
  for (size_t k = 0; k < count; ++k) {
    p.storage.push_back(RandomRow(type, cols, rng));
    p.a.push_back(zero(rng) ? 0.0f : normal(rng));
  }
  for (const auto& r : p.storage) p.rows.push_back(r.data());
  for (size_t i = 0; i < cols; ++i) p.y0.push_back(normal(rng));
  return p;
}

// The step an engine would pick: the largest |a * d| over the rows is
// kAxpyIntMaxMultiple steps.
float StepFor(TensorType type, const std::vector<const uint8_t*>& rows, const std::vector<float>& a,
              size_t cols) {
  float largest = 0.0f;
  for (size_t k = 0; k < rows.size(); ++k) {
    largest = std::max(largest, std::fabs(a[k]) * LargestBlockScale(type, rows[k], cols));
  }
  return largest / kAxpyIntMaxMultiple;
}
float StepFor(const Problem& p) { return StepFor(p.type, p.rows, p.a, p.cols); }

// The kernels' result for columns [first, first + width): the rows in a
// shuffled order, split into `calls` calls.
std::vector<float> KernelSum(const Problem& p, size_t first, size_t width, float step, size_t calls,
                             std::mt19937& rng) {
  std::vector<size_t> order(p.rows.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<const uint8_t*> rows;
  std::vector<float> a;
  for (size_t k : order) {
    rows.push_back(p.rows[k]);
    a.push_back(p.a[k]);
  }
  std::vector<int32_t> sums(AxpyIntSumsInts(width), 0);
  const size_t per_call = (rows.size() + calls - 1) / calls;
  for (size_t k = 0; k < rows.size(); k += per_call) {
    const size_t n = std::min(per_call, rows.size() - k);
    AxpyIntAdd(p.type, rows.data() + k, n, p.cols, first, width, a.data() + k, 1.0f / step,
               sums.data());
  }
  std::vector<float> y(p.y0.begin() + first, p.y0.begin() + first + width);
  AxpyIntFinish(width, sums.data(), step, y.data());
  return y;
}

std::vector<float> ReferenceSum(const Problem& p, size_t first, size_t width, float step) {
  std::vector<float> y(p.y0.begin() + first, p.y0.begin() + first + width);
  AxpyIntReference(p.type, p.rows.data(), p.rows.size(), p.cols, first, width, p.a.data(),
                   1.0f / step, step, y.data());
  return y;
}

bool SameBits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

TEST_CASE("AxpyIntAdd and AxpyIntFinish give the reference's bits in any row order and split") {
  struct Shape {
    size_t cols, count;
  };
  // 96: blocks after the last whole chunk only; 160: one chunk and one
  // block; 16544: more than one span of blocks (kAxpyIntSpanBlocks, 512),
  // the second with a chunk and a block (whole rows); counts around the
  // passes' sixteen rows and the quads' four. The sixteen-row forms'
  // prefetches (AxpyIntPrefetchDistance) reach two passes ahead for 160 x
  // 17 (Q4_0S; three for Q4_0), more than there are, and would reach five
  // in the block form's Q4_0 rows 96 wide, over the passes of 96 x 90,
  // where kAxpyIntMaxPassesAhead stops them.
  const Shape shapes[] = {{96, 5},    {96, 90},   {160, 17},  {2048, 1},
                          {2048, 70}, {512, 150}, {4160, 21}, {16544, 18}};
  ForEachTargetAndCpuForm([&](const Target& target, bool hidden) {
    std::mt19937 rng(7);
    for (TensorType type : kTypes) {
      for (const Shape& shape : shapes) {
        const Problem p = MakeProblem(type, shape.cols, shape.count, rng);
        // Whole rows, and a window that starts and ends inside them.
        const size_t windows[][2] = {{0, shape.cols}, {32, shape.cols - 64}};
        // The engine's step, and one a quarter of it (multiples clamped).
        for (float step_scale : {1.0f, 0.25f}) {
          const float step = StepFor(p) * step_scale;
          for (const auto& w : windows) {
            const std::vector<float> want = ReferenceSum(p, w[0], w[1], step);
            for (size_t calls : {1, 3}) {
              INFO(target.name, hidden ? " (extensions hidden) " : " ", TensorTypeName(type),
                   " cols ", shape.cols, " rows ", shape.count, " window ", w[0], "+", w[1],
                   " step x", step_scale, " calls ", calls);
              CHECK(SameBits(KernelSum(p, w[0], w[1], step, calls, rng), want));
            }
          }
        }
      }
    }
  });
}

TEST_CASE("AxpyInt is within its rounding of the exact sum") {
  ForEachTargetAndCpuForm([&](const Target& target, bool hidden) {
    std::mt19937 rng(11);
    for (TensorType type : kTypes) {
      const size_t cols = 2048, count = 200;
      const Problem p = MakeProblem(type, cols, count, rng);
      const float step = StepFor(p);
      std::vector<float> exact = p.y0;
      AxpyRowsReference(type, p.rows.data(), count, cols, p.a.data(), count, 1, exact.data(), cols);
      const std::vector<float> got = KernelSum(p, 0, cols, step, 2, rng);
      // Each term's multiple is off by at most half a step, times |q - 8| <= 8;
      // the sums are exact, then rounded to float twice (the product, the add).
      for (size_t i = 0; i < cols; ++i) {
        INFO(target.name, hidden ? " (extensions hidden) " : " ", TensorTypeName(type), " column ",
             i);
        const double bound = count * 4.0 * step + 4e-7 * (std::fabs(exact[i]) + 1.0);
        CHECK(std::fabs(static_cast<double>(got[i]) - exact[i]) <= bound);
      }
    }
  });
}

TEST_CASE(
    "AxpyInt counts NaN coefficients as zero and does not read rows whose coefficient is zero") {
  ForEachTargetAndCpuForm([&](const Target& target, bool hidden) {
    std::mt19937 rng(3);
    for (TensorType type : kTypes) {
      Problem p = MakeProblem(type, 256, 9, rng);
      p.a[0] = 1.0f;
      const float step = StepFor(p);
      Problem zeroed = p;
      zeroed.a[4] = 0.0f;
      zeroed.rows[4] = nullptr;  // never read
      Problem nan = p;
      nan.a[4] = std::numeric_limits<float>::quiet_NaN();
      INFO(target.name, hidden ? " (extensions hidden) " : " ", TensorTypeName(type));
      CHECK(
          SameBits(KernelSum(nan, 0, 256, step, 1, rng), KernelSum(zeroed, 0, 256, step, 1, rng)));
    }
  });
}

TEST_CASE("AxpyIntAdd reads its rows `offset` bytes after their pointers") {
  ForEachTargetAndCpuForm([&](const Target& target, bool hidden) {
    std::mt19937 rng(5);
    for (TensorType type : kTypes) {
      const size_t cols = 640, count = 11, offset = 1170;  // a record's later part
      const Problem p = MakeProblem(type, cols, count, rng);
      std::vector<std::vector<uint8_t>> records;
      std::vector<const uint8_t*> starts;
      for (const auto& row : p.storage) {
        std::vector<uint8_t> record(offset, 0xAB);
        record.insert(record.end(), row.begin(), row.end());
        records.push_back(std::move(record));
      }
      for (const auto& r : records) starts.push_back(r.data());
      const float step = StepFor(p);
      std::vector<int32_t> sums(AxpyIntSumsInts(cols - 64), 0);
      AxpyIntAdd(type, starts.data(), count, cols, 32, cols - 64, p.a.data(), 1.0f / step,
                 sums.data(), offset);
      std::vector<float> y(p.y0.begin() + 32, p.y0.end() - 32);
      AxpyIntFinish(cols - 64, sums.data(), step, y.data());
      INFO(target.name, hidden ? " (extensions hidden) " : " ", TensorTypeName(type));
      CHECK(SameBits(y, ReferenceSum(p, 32, cols - 64, step)));
    }
  });
}

TEST_CASE("AxpyIntAdd over rows of several parts gives each part the sums of a call of its own") {
  struct Case {
    size_t cols, first, width, parts, count;
  };
  const Case cases[] = {
      {640, 32, 576, 3, 37},     // whole chunks and blocks after them, a window inside
      {96, 0, 96, 2, 5},         // blocks only (the natural form on every target)
      {2048, 0, 2048, 1, 70},    // one part
      {16544, 0, 16544, 2, 20},  // two spans a part: four segments in one sweep
      {33024, 0, 33024, 3, 18},  // three spans a part: nine segments, two sweeps
  };
  ForEachTargetAndCpuForm([&](const Target& target, bool hidden) {
    std::mt19937 rng(9);
    for (TensorType type : kTypes) {
      for (const Case& c : cases) {
        const size_t part_bytes = c.cols / 32 * 18, offset = 70;
        // One problem per part; record k holds row k of each, back to back,
        // `offset` bytes after its pointer.
        std::vector<Problem> problems;
        for (size_t p = 0; p < c.parts; ++p)
          problems.push_back(MakeProblem(type, c.cols, c.count, rng));
        std::vector<std::vector<uint8_t>> records(c.count, std::vector<uint8_t>(offset, 0xCD));
        std::vector<const uint8_t*> starts;
        for (size_t k = 0; k < c.count; ++k) {
          for (const Problem& p : problems) {
            records[k].insert(records[k].end(), p.storage[k].begin(), p.storage[k].end());
          }
          starts.push_back(records[k].data());
        }
        // Every part takes the first part's coefficients (a record has one).
        const Problem& lead = problems[0];
        float step = 0.0f;
        for (Problem& p : problems) {
          p.a = lead.a;
          step = std::max(step, StepFor(p));
        }
        const size_t ints = AxpyIntSumsInts(c.width);
        std::vector<int32_t> fused(c.parts * ints, 0), apart(c.parts * ints, 0);
        AxpyIntAdd(type, starts.data(), c.count, c.cols, c.first, c.width, lead.a.data(),
                   1.0f / step, fused.data(), offset, c.parts);
        for (size_t p = 0; p < c.parts; ++p) {
          AxpyIntAdd(type, starts.data(), c.count, c.cols, c.first, c.width, lead.a.data(),
                     1.0f / step, apart.data() + p * ints, offset + p * part_bytes);
        }
        INFO(target.name, hidden ? " (extensions hidden) " : " ", TensorTypeName(type), " ", c.cols,
             " columns, ", c.parts, " parts");
        CHECK(fused == apart);
        for (size_t p = 0; p < c.parts; ++p) {
          std::vector<float> y(problems[p].y0.begin() + c.first,
                               problems[p].y0.begin() + c.first + c.width);
          AxpyIntFinish(c.width, fused.data() + p * ints, step, y.data());
          CHECK(SameBits(y, ReferenceSum(problems[p], c.first, c.width, step)));
        }
      }
    }
  });
}

TEST_CASE("AxpyIntPassOrder takes every nonzero row once, one of each sixteenth a pass, in order") {
  constexpr size_t kParts = AxpyIntPassOrder::kParts;
  std::mt19937 rng(5);
  for (size_t count : {0, 1, 5, 15, 16, 17, 100, 333}) {
    // Which coefficients are zero: none, a random quarter, the first part
    // whole and one row in three after it, every one.
    for (int zeros = 0; zeros < 4; ++zeros) {
      std::vector<float> a(count, 1.0f);
      std::bernoulli_distribution quarter(0.25);
      for (size_t k = 0; k < count; ++k) {
        if ((zeros == 1 && quarter(rng)) || (zeros == 2 && (k < count / kParts || k % 3 == 0)) ||
            zeros == 3) {
          a[k] = 0.0f;
        }
      }
      const auto part_of = [&](size_t k) {
        size_t j = 0;
        while (k >= count * (j + 1) / kParts) ++j;
        return j;
      };
      for (size_t most : {kParts, size_t{4}}) {
        INFO("count ", count, " zeros ", zeros, " most ", most);
        AxpyIntPassOrder order(count, a.data(), nullptr);
        std::vector<size_t> taken(count, 0), last_in_part(kParts, SIZE_MAX);
        std::vector<size_t> index(most);
        std::vector<std::vector<size_t>> passes;
        for (size_t n; (n = order.Next(index.data(), most)) > 0;) {
          passes.emplace_back(index.begin(), index.begin() + n);
        }
        CHECK(order.Next(index.data(), most) == 0);
        for (size_t p = 0; p < passes.size(); ++p) {
          // Short only at the end.
          if (p + 1 < passes.size()) CHECK(passes[p].size() == most);
          for (size_t k : passes[p]) {
            REQUIRE(k < count);
            CHECK(a[k] != 0.0f);
            ++taken[k];
            // Each part is read in its own order, as one stream.
            const size_t j = part_of(k);
            CHECK((last_in_part[j] == SIZE_MAX || last_in_part[j] < k));
            last_in_part[j] = k;
          }
        }
        for (size_t k = 0; k < count; ++k) CHECK(taken[k] == (a[k] != 0.0f ? 1u : 0u));
        // With no zeros and sixteen rows a pass, pass p holds row p of each
        // part while every part has one.
        if (zeros == 0 && most == kParts && count >= kParts) {
          for (size_t p = 0; p < count / kParts; ++p) {
            for (size_t j = 0; j < kParts; ++j) CHECK(passes[p][j] == count * j / kParts + p);
          }
        }
      }
    }
  }
}

// Rows of 96 columns laid `stride` bytes apart in one buffer from a 4 KiB
// boundary, as a unit cache keeps them.
struct StridedRows {
  std::vector<uint8_t> buffer;
  std::vector<const uint8_t*> rows;
  std::vector<float> a, y0;
};
StridedRows MakeStridedRows(TensorType type, size_t count, size_t stride, std::mt19937& rng) {
  StridedRows s;
  s.buffer.resize(count * stride + 4096);
  const size_t skip = (4096 - reinterpret_cast<uintptr_t>(s.buffer.data()) % 4096) % 4096;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (size_t k = 0; k < count; ++k) {
    uint8_t* at = s.buffer.data() + skip + k * stride;
    const std::vector<uint8_t> row = RandomRow(type, 96, rng);
    std::memcpy(at, row.data(), row.size());
    s.rows.push_back(at);
    s.a.push_back(normal(rng));
  }
  for (size_t i = 0; i < 96; ++i) s.y0.push_back(normal(rng));
  return s;
}

TEST_CASE(
    "AxpyIntPassOrder staggers parts that start in one L1 set, and still takes each row once") {
  std::mt19937 rng(9);
  // 1024 rows 256 bytes apart: parts of 64 rows, 16 KiB, so every part
  // starts in the same set without a shift.
  const StridedRows s = MakeStridedRows(TensorType::kQ4_0S, 1024, 256, rng);
  CHECK(AxpyIntPassOrder::StartSets(1024, s.rows.data(), 0) == 1);
  const size_t shift = AxpyIntPassOrder::Shift(1024, s.rows.data());
  CHECK(shift > 0);
  CHECK(AxpyIntPassOrder::StartSets(1024, s.rows.data(), shift) == AxpyIntPassOrder::kParts);
  // A list of 512 of them, parts of 32 rows (8 KiB), is staggered by at
  // most MaxShift(512) = 2 rows; one under kParts * kParts rows never is.
  const size_t short_shift = AxpyIntPassOrder::Shift(512, s.rows.data());
  CHECK(AxpyIntPassOrder::StartSets(512, s.rows.data(), 0) == 1);
  CHECK(short_shift > 0);
  CHECK(short_shift <= 2);
  CHECK(AxpyIntPassOrder::StartSets(512, s.rows.data(), short_shift) == AxpyIntPassOrder::kParts);
  CHECK(AxpyIntPassOrder::Shift(255, s.rows.data()) == 0);
  CHECK(AxpyIntPassOrder::MaxShift(255) == 0);
  CHECK(AxpyIntPassOrder::MaxShift(256) == 1);
  CHECK(AxpyIntPassOrder::MaxShift(1 << 20) == AxpyIntPassOrder::kMaxShift);
  AxpyIntPassOrder order(1024, nullptr, s.rows.data());
  std::vector<size_t> taken(1024, 0), index(AxpyIntPassOrder::kParts);
  size_t passes = 0;
  for (size_t n; (n = order.Next(index.data(), index.size())) > 0; ++passes) {
    // The first pass is the parts' first rows.
    for (size_t r = 0; r < n; ++r) {
      if (passes == 0) CHECK(index[r] == AxpyIntPassOrder::Start(1024, r, shift));
      ++taken[index[r]];
    }
  }
  CHECK(passes == 1024 / AxpyIntPassOrder::kParts);
  for (size_t k = 0; k < 1024; ++k) CHECK(taken[k] == 1);
  // At its largest shift, every list's parts are in order, none empty
  // where the list has a row for each.
  for (size_t count = 1; count <= 1100; ++count) {
    const size_t most = AxpyIntPassOrder::MaxShift(count);
    INFO(count);
    for (size_t j = 0; j < AxpyIntPassOrder::kParts; ++j) {
      const size_t end =
          j + 1 == AxpyIntPassOrder::kParts ? count : AxpyIntPassOrder::Start(count, j + 1, most);
      CHECK(AxpyIntPassOrder::Start(count, j, most) <= end);
      if (count >= AxpyIntPassOrder::kParts) CHECK(AxpyIntPassOrder::Start(count, j, most) < end);
    }
  }
}

TEST_CASE("AxpyIntAdd gives the reference's bits over rows whose parts it staggers") {
  ForEachTargetAndCpuForm([&](const Target& target, bool hidden) {
    std::mt19937 rng(13);
    for (TensorType type : kTypes) {
      for (const size_t count : {size_t{512}, size_t{1024}}) {
        const StridedRows s = MakeStridedRows(type, count, 256, rng);
        REQUIRE(AxpyIntPassOrder::Shift(count, s.rows.data()) > 0);
        const float step = StepFor(type, s.rows, s.a, 96);
        std::vector<float> want = s.y0, got = s.y0;
        AxpyIntReference(type, s.rows.data(), count, 96, 0, 96, s.a.data(), 1.0f / step, step,
                         want.data());
        std::vector<int32_t> sums(AxpyIntSumsInts(96), 0);
        AxpyIntAdd(type, s.rows.data(), count, 96, 0, 96, s.a.data(), 1.0f / step, sums.data());
        AxpyIntFinish(96, sums.data(), step, got.data());
        INFO(target.name, hidden ? " (extensions hidden) " : " ", TensorTypeName(type), " ", count,
             " rows");
        CHECK(SameBits(got, want));
      }
    }
  });
}

TEST_CASE("AxpyIntFast is AVX3_DL and AVX2, with or without AVX-VNNI") {
  ForEachTargetAndCpuForm([&](const Target& target, bool hidden) {
    INFO(target.name, hidden ? " (extensions hidden)" : "");
    // AVX2's block form takes the VEX vpdpbusd where the CPU check finds
    // it and pmaddubsw where not (hiding the extensions makes it fail).
    CHECK(AxpyIntFast() == (target.name == "AVX3_DL" || target.name == "AVX2"));
    if (hidden) CHECK_FALSE(CpuHasX86Vnni(/*evex=*/false));
  });
}

TEST_CASE("AxpyInt rejects what it cannot do") {
  std::vector<uint8_t> row(18 * 4, 0);
  const uint8_t* rows[] = {row.data()};
  const float a[] = {1.0f};
  std::vector<int32_t> sums(AxpyIntSumsInts(128), 0);
  CHECK_THROWS_AS(AxpyIntAdd(TensorType::kQ8_0, rows, 1, 128, 0, 128, a, 1.0f, sums.data()),
                  std::invalid_argument);
  CHECK_THROWS_AS(AxpyIntAdd(TensorType::kQ4_0S, rows, 1, 128, 16, 64, a, 1.0f, sums.data()),
                  std::invalid_argument);
  CHECK_THROWS_AS(AxpyIntAdd(TensorType::kQ4_0S, rows, 1, 128, 96, 64, a, 1.0f, sums.data()),
                  std::invalid_argument);
  CHECK_THROWS_AS(AxpyIntAdd(TensorType::kQ4_0S, rows, 1, 100, 0, 96, a, 1.0f, sums.data()),
                  std::invalid_argument);
  CHECK_THROWS_AS(AxpyIntAdd(TensorType::kQ4_0S, rows, 1, 128, 0, 128, a, 1.0f, sums.data(), 0, 0),
                  std::invalid_argument);
  CHECK_FALSE(AxpyIntSupports(TensorType::kQ8_0));
  CHECK(AxpyIntSupports(TensorType::kQ4_0S));
  CHECK(AxpyIntSupports(TensorType::kQ4_0));
}

}  // namespace
}  // namespace sparrow::simd
