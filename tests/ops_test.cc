#include "src/ops/ops.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "simd/gemv.h"
#include "simd/quantize.h"
#include "src/ops/panel.h"
#include "sparrow_config.h"
#include "base/threads.h"

using namespace sparrow;

namespace {

struct QuantizedMatrix {
  std::vector<uint8_t> bytes;
  ops::MatrixView view;
};

QuantizedMatrix MakeMatrix(TensorType type, size_t rows, size_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  uint64_t row_bytes = 0;
  REQUIRE(TensorTypeBytes(type, cols, &row_bytes));
  QuantizedMatrix m;
  m.bytes.resize(rows * row_bytes);
  std::vector<float> row(cols);
  for (size_t r = 0; r < rows; ++r) {
    for (float& v : row) v = dist(rng);
    simd::QuantizeRow(type, row.data(), cols, m.bytes.data() + r * row_bytes);
  }
  m.view = {type, m.bytes.data(), rows, cols, static_cast<size_t>(row_bytes)};
  return m;
}

std::vector<float> RandomVector(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Largest |a-b| relative to the largest |b|.
double MaxRelError(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::abs(double(a[i]) - b[i]));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return err / scale;
}

// The GEMV and gather kernels' error against the reference, relative to
// the largest output: ~1e-4 with 16-bit activations; Q4_0 on targets that
// give it 8-bit ones (simd/gemv.h) measured 4.6e-3 to 5.1e-3 here.
double KernelBound(TensorType type) {
  return simd::GemvActivationMax(type) == simd::kInt8ActivationMax ? 1e-2 : 1e-3;
}

// The ways large batches can multiply here: f32 always, bf16 where oneDNN
// has a kernel for this CPU's bf16 instructions (not on Arm, where the
// arm64 check runs these tests under qemu without oneDNN).
std::vector<ops::PromptGemm> LargeBatchPaths() {
  std::vector<ops::PromptGemm> paths = {ops::PromptGemm::kF32};
  if (ops::PromptGemmBf16Available()) paths.push_back(ops::PromptGemm::kBf16);
  return paths;
}

}  // namespace

TEST_CASE("batched MatMul equals MatVec per token, and the reference path, for every type") {
  const TensorType types[] = {TensorType::kF32, TensorType::kF16, TensorType::kBF16, TensorType::kQ8_0,
                              TensorType::kQ4_0, TensorType::kQ4_K, TensorType::kQ6_K};
  // Both large-batch paths (kAuto is one of them): f32, and bf16 where
  // this CPU has bf16 instructions oneDNN uses.
  for (ops::PromptGemm gemm : LargeBatchPaths())
  for (int threads : {1, 2}) {
    ops::SetPromptGemm(gemm);
    CAPTURE(ops::PromptGemmUsesBf16());
    SetThreadCount(threads);
    for (TensorType type : types) {
      CAPTURE(TensorTypeName(type));
      const size_t rows = 300, cols = 512;
      const QuantizedMatrix w = MakeMatrix(type, rows, cols, 1);
      // 9 tokens: below every type's GEMM threshold (matmul.cc), so the
      // batched GEMV kernels, bit for bit MatVec's per token; 40: above
      // every plain matrix's, so oneDNN where it is built in.
      for (size_t n : {size_t{9}, size_t{40}}) {
        CAPTURE(n);
        const std::vector<float> x = RandomVector(n * cols, 2);
        std::vector<float> batched(n * rows), single(n * rows), reference(n * rows);
        ops::SetKernelMode(ops::KernelMode::kFast);
        ops::MatMul(w.view, x.data(), n, batched.data());
        for (size_t t = 0; t < n; ++t) ops::MatVec(w.view, x.data() + t * cols, single.data() + t * rows);
        ops::SetKernelMode(ops::KernelMode::kReference);
        ops::MatMul(w.view, x.data(), n, reference.data());
        ops::SetKernelMode(ops::KernelMode::kFast);
        CHECK(MaxRelError(single, reference) < KernelBound(type));
        if (n == 9 || !SPARROW_HAVE_ONEDNN) {
          CHECK(batched == single);
        } else if (type == TensorType::kF32 || !ops::PromptGemmUsesBf16()) {
          // oneDNN multiplies dequantized f32 weights by f32 activations,
          // like the reference; GEMV may quantize activations to 16 bits,
          // costing ~1e-4 of the largest output.
          CHECK(MaxRelError(batched, reference) < 1e-5);
        } else {
          // oneDNN in bf16 (weights and activations rounded to 8 significant
          // bits, sums in f32): measured 1.7e-3 to 2.7e-3 of the largest
          // output over these types.
          CHECK(MaxRelError(batched, reference) < 5e-3);
        }
      }
    }
  }
  ops::SetPromptGemm(ops::PromptGemm::kAuto);
  SetThreadCount(0);
}

TEST_CASE("GetRow dequantizes one row") {
  const QuantizedMatrix w = MakeMatrix(TensorType::kQ8_0, 10, 64, 5);
  std::vector<float> row(64), expect(64);
  ops::GetRow(w.view, 7, row.data());
  simd::DequantizeRowReference(TensorType::kQ8_0, w.view.row(7), 64, expect.data());
  CHECK(row == expect);
}

TEST_CASE("packed Q4_0, Q4_K and Q8_0 matrices give the plain matrices' products, rows and batches") {
  const size_t rows = 300 + 5, cols = 512, n = 9;  // 38 groups of 8 and 1 plain row
  for (TensorType type : {TensorType::kQ4_0, TensorType::kQ4_K, TensorType::kQ8_0}) {
    CAPTURE(TensorTypeName(type));
    const QuantizedMatrix plain = MakeMatrix(type, rows, cols, 3);
    QuantizedMatrix packed = MakeMatrix(type, rows, cols, 3);
    ops::PackForDecode(packed.view, packed.bytes.data());
    if (!ops::WantsPacking(plain.view)) {
      CHECK(!packed.view.packed);  // this CPU keeps the plain kernels
      continue;
    }
    REQUIRE(packed.view.packed);
    CHECK(packed.bytes != plain.bytes);
    CHECK(!ops::WantsPacking(packed.view));
    const std::vector<float> x = RandomVector(n * cols, 4);
    for (int threads : {1, 2}) {
      SetThreadCount(threads);
      std::vector<float> got(n * rows), want(n * rows), single(rows), want_single(rows);
      // The reference path unpacks: bit-equal to the plain matrix's.
      ops::SetKernelMode(ops::KernelMode::kReference);
      ops::MatMul(packed.view, x.data(), n, got.data());
      ops::MatMul(plain.view, x.data(), n, want.data());
      CHECK(got == want);
      ops::SetKernelMode(ops::KernelMode::kFast);
      ops::MatVec(packed.view, x.data(), single.data());
      ops::MatVec(plain.view, x.data(), want_single.data());
      // int8 activations (packed) against int16 ones (plain): a few 1e-3 of
      // the largest output at most.
      CHECK(MaxRelError(single, want_single) < 1e-2);
      CHECK(MaxRelError(single, std::vector<float>(want.begin(), want.begin() + rows)) < 1e-2);
      CHECK(single[rows - 1] == want_single[rows - 1]);  // the tail row runs the plain kernel
      // Few tokens: the packed kernel per token, bit for bit.
      ops::MatMul(packed.view, x.data(), n, got.data());
      CHECK(std::equal(single.begin(), single.end(), got.begin()));
      for (size_t t = 1; t < n; ++t) {
        ops::MatVec(packed.view, x.data() + t * cols, single.data());
        CHECK(std::equal(single.begin(), single.end(), got.begin() + t * rows));
      }
      // A prompt-sized batch through the batched kernels (the multi-token
      // packed kernels, up to eight tokens per unpacked block, and odd ones
      // left over) stays bit for bit per token too. (MatMul sends batches
      // this large to oneDNN where it has native bf16; without, it keeps
      // them on these kernels.)
      const size_t prompt = 261;
      const std::vector<float> xp = RandomVector(prompt * cols, 6);
      std::vector<float> got_prompt(prompt * rows);
      ops::MatVecs(packed.view, xp.data(), prompt, got_prompt.data());
      for (size_t t : {size_t{0}, size_t{7}, size_t{8}, size_t{259}, prompt - 1}) {
        ops::MatVec(packed.view, xp.data() + t * cols, single.data());
        CHECK(std::equal(single.begin(), single.end(), got_prompt.begin() + t * rows));
      }
#if SPARROW_HAVE_ONEDNN
      // More than the packed kernels take: oneDNN on the unpacked panels,
      // like the plain matrix. (Without oneDNN every batch stays on the
      // kernels the prompt above ran, and 1030 tokens took most of this
      // test's minute and a half under qemu.)
      const size_t many = 1030;
      const std::vector<float> xm = RandomVector(many * cols, 5);
      std::vector<float> got_many(many * rows), want_many(many * rows);
      ops::MatMul(packed.view, xm.data(), many, got_many.data());
      ops::MatMul(plain.view, xm.data(), many, want_many.data());
      CHECK(MaxRelError(got_many, want_many) < 1e-6);
#endif
    }
    SetThreadCount(0);
    for (size_t r : {size_t{0}, size_t{13}, rows - 1}) {
      std::vector<float> row(cols), expect(cols);
      ops::GetRow(packed.view, r, row.data());
      ops::GetRow(plain.view, r, expect.data());
      CHECK(row == expect);
    }
  }
}

// The budget charges a panel for the widest, tallest matrix (panel.h) and
// MatMul/RowDots allocate each matrix's own: that is only safe if a panel's
// buffer never shrinks as the matrix grows, and always holds its rows.
TEST_CASE("panel buffers hold their rows and grow with the matrix, so one charge bounds all") {
  std::mt19937 rng(5);
  std::uniform_int_distribution<size_t> dim(1, 40000);
  for (int i = 0; i < 20000; ++i) {
    const size_t cols = dim(rng), rows = dim(rng);
    for (const bool bf16 : {false, true}) {
      const size_t elem = bf16 ? 2 : 4;
      const ops::Panel p = bf16 ? ops::Bf16Panel(cols, rows) : ops::F32Panel(cols, rows);
      CAPTURE(cols);
      CAPTURE(rows);
      REQUIRE(p.rows >= 1);
      REQUIRE(p.rows <= rows);
      REQUIRE((p.rows == rows || p.rows % 16 == 0));
      REQUIRE(uint64_t{p.rows} * cols * elem <= p.bytes);
      const size_t wider = cols + dim(rng) % 5000, taller = rows + dim(rng) % 5000;
      const ops::Panel q = bf16 ? ops::Bf16Panel(wider, taller) : ops::F32Panel(wider, taller);
      REQUIRE(q.bytes >= p.bytes);
      // More rows of the same width: never fewer panel rows (RowDots'
      // result buffer, n x rows, is charged for the most rows).
      const ops::Panel r = bf16 ? ops::Bf16Panel(cols, taller) : ops::F32Panel(cols, taller);
      REQUIRE(r.rows >= p.rows);
    }
  }
}

// RowDots and RowAxpys over gathered rows (an index, as a unit cache
// hands them): small batches on the gather kernels, large ones on oneDNN's
// panels of the rows (ops::RowProductsUsePanels; bf16 where this CPU has it
// natively, else f32); both against
// the reference path, the weighted sums added to what y held.
// The weighted sums give each element the one-thread chain: the same bits
// at one and two threads, and whether a set comes in one call or in parts
// (the streamed FFN computes cached rows while misses load); under
// --prompt-gemm f32 for large batches too.
TEST_CASE("RowAxpys on gathered rows: the same bits for any thread count and any split into calls") {
  ops::SetPromptGemm(ops::PromptGemm::kF32);
  for (TensorType type : {TensorType::kF32, TensorType::kF16, TensorType::kQ8_0, TensorType::kQ4_0,
                          TensorType::kQ4_0S}) {
    CAPTURE(TensorTypeName(type));
    // 1088 columns: 17 of RowAxpys' 64-column units, so two threads split
    // them (a Q4_0S row's second half is not a pointer into it).
    const size_t pool = 300, cols = 1088;
    const QuantizedMatrix w = MakeMatrix(type, pool, cols, 9);
    std::vector<uint32_t> index;
    for (size_t r = 0; r < pool; r += 2) index.push_back(static_cast<uint32_t>((r * 7) % pool));
    for (size_t n : {size_t{1}, size_t{6}, size_t{40}}) {
      CAPTURE(n);
      const std::vector<float> y0 = RandomVector(n * cols, 12);
      const std::vector<float> all = RandomVector(n * index.size(), 13);  // the coefficients
      std::vector<float> want;
      for (int threads : {1, 2}) {
        SetThreadCount(threads);
        for (size_t split : {size_t{0}, size_t{37}, size_t{101}}) {
          CAPTURE(threads);
          CAPTURE(split);
          std::vector<float> y = y0;
          auto call = [&](size_t first, size_t count) {
            ops::RowSet set;
            set.type = type;
            set.base = w.bytes.data();
            set.stride = w.view.row_bytes;
            set.cols = cols;
            set.index = index.data() + first;
            set.count = count;
            std::vector<float> a(n * count);
            for (size_t t = 0; t < n; ++t) {
              for (size_t k = 0; k < count; ++k) a[t * count + k] = all[t * index.size() + first + k];
            }
            ops::RowAxpys(set, a.data(), n, y.data());
          };
          if (split == 0) {
            call(0, index.size());
          } else {
            call(0, split);
            call(split, index.size() - split);
          }
          if (want.empty()) want = y;
          CHECK(y == want);
        }
      }
    }
  }
  SetThreadCount(0);
  ops::SetPromptGemm(ops::PromptGemm::kAuto);
}

namespace {

// `records` records of two parts of `part_cols` elements each (the matrix's
// rows 2r and 2r + 1), every other one picked in a scrambled order, as
// RowSet sees a dip layout's input records in a cache: Parts() lists each
// record's first part as a row of part_cols elements.
struct TwoPartRecords {
  QuantizedMatrix w;
  std::vector<uint32_t> index;
  size_t part_cols = 0;

  TwoPartRecords(TensorType type, size_t cols, size_t records, uint32_t seed)
      : w(MakeMatrix(type, 2 * records, cols, seed)), part_cols(cols) {
    for (size_t r = 0; r < records; r += 2) {
      index.push_back(static_cast<uint32_t>((r * 13) % records));
    }
  }
  size_t part_bytes() const { return w.view.row_bytes; }
  ops::RowSet Parts() const {
    ops::RowSet set;
    set.type = w.view.type;
    set.base = w.bytes.data();
    set.stride = 2 * part_bytes();
    set.cols = part_cols;
    set.index = index.data();
    set.count = index.size();
    return set;
  }
};

}  // namespace

// A record's two parts summed as one row (RowSet::row_parts = 2, as the dip
// layout's up and gate): the sums of one set per part, each part a row of
// its own (Q4_0S keeps each part's scales in front of it, so reading the
// two as one longer row gave NaN perplexity on a dip bundle), at one and two
// threads (which split the columns) and on both batch paths.
TEST_CASE("RowAxpys over records of two parts equals one call per part") {
  for (ops::PromptGemm gemm : LargeBatchPaths()) {
    ops::SetPromptGemm(gemm);
    for (TensorType type : {TensorType::kF32, TensorType::kQ8_0, TensorType::kQ4_0,
                            TensorType::kQ4_0S, TensorType::kQ4_K}) {
      CAPTURE(TensorTypeName(type));
      const size_t part_cols = 768;  // two threads split 1536 columns
      const TwoPartRecords records(type, part_cols, 70, 31);
      const size_t part_bytes = records.part_bytes();
      const ops::RowSet one = records.Parts();
      for (size_t n : {size_t{1}, size_t{5}, size_t{40}}) {
        CAPTURE(n);
        const size_t count = one.count;
        const std::vector<float> a = RandomVector(n * count, 32);
        std::vector<float> up(n * part_cols, 0.0f), gate(n * part_cols, 0.0f);
        ops::RowAxpys(one, a.data(), n, up.data());
        ops::RowSet second = one;
        second.offset = part_bytes;
        ops::RowAxpys(second, a.data(), n, gate.data());
        ops::RowSet record = one;
        record.cols = 2 * part_cols;
        record.row_parts = 2;
        for (int threads : {1, 2}) {
          CAPTURE(threads);
          SetThreadCount(threads);
          std::vector<float> both(n * 2 * part_cols, 0.0f);
          ops::RowAxpys(record, a.data(), n, both.data());
          // The gather kernels give the same bits; oneDNN's panels (40
          // tokens under bf16) may round a sum differently. (NaN fails both.)
          const double tolerance = n < 32 || gemm == ops::PromptGemm::kF32 ? 0.0 : 1e-2;
          size_t bad = 0;
          for (size_t t = 0; t < n; ++t) {
            const float* b = both.data() + t * 2 * part_cols;
            for (size_t i = 0; i < part_cols; ++i) {
              bad += !(std::fabs(double(b[i]) - up[t * part_cols + i]) <= tolerance);
              bad += !(std::fabs(double(b[part_cols + i]) - gate[t * part_cols + i]) <= tolerance);
            }
          }
          CHECK(bad == 0);
        }
        SetThreadCount(0);
      }
    }
  }
  ops::SetPromptGemm(ops::PromptGemm::kAuto);
}

// The integer form over records of two Q4_0S or Q4_0 parts (the dip
// layout's up and gate columns): each token's bits whether it comes alone or in a
// batch, whatever the split of the rows into calls and the thread count
// (two threads split a call's rows: the whole set in one call, 200 rows,
// is more than one range of ParallelFor); within the rounding of its
// multiples of the float sums.
TEST_CASE("RowAxpysInt: each token's bits alone or in a batch, any split and thread count") {
  for (TensorType type : {TensorType::kQ4_0S, TensorType::kQ4_0}) {
    CAPTURE(TensorTypeName(type));
    const size_t part_cols = 768, n_records = 400;
    const TwoPartRecords records(type, part_cols, n_records, 41);
    float largest_scale = 0.0f;
    for (size_t r = 0; r < 2 * n_records; ++r) {
      largest_scale = std::max(
          largest_scale, simd::LargestBlockScale(
                             type, records.w.bytes.data() + r * records.part_bytes(), part_cols));
    }
    ops::RowSet all = records.Parts();
    all.cols = 2 * part_cols;
    all.row_parts = 2;
    const size_t n = 3, count = all.count, cols = all.cols;
    std::vector<float> a = RandomVector(n * count, 42);
    a[5] = 0.0f;  // a row one token does not use
    std::vector<float> steps(n);
    for (size_t t = 0; t < n; ++t) {
      float largest = 0.0f;
      for (size_t k = 0; k < count; ++k) largest = std::max(largest, std::fabs(a[t * count + k]));
      steps[t] = ops::RowAxpyIntSums::Step(largest, largest_scale);
    }
    const std::vector<float> y0 = RandomVector(n * cols, 43);

    // The batch, in one call, one thread.
    SetThreadCount(1);
    ops::RowAxpyIntSums sums;
    std::vector<float> batch = y0;
    sums.Begin(cols, 2, n, steps.data());
    ops::RowAxpysInt(all, a.data(), n, sums);
    sums.Finish(batch.data());

    for (int threads : {1, 2}) {
      SetThreadCount(threads);
      {
        CAPTURE(threads);
        std::vector<float> again = y0;
        sums.Begin(cols, 2, n, steps.data());
        ops::RowAxpysInt(all, a.data(), n, sums);
        sums.Finish(again.data());
        CHECK(again == batch);
      }
      for (size_t t = 0; t < n; ++t) {
        CAPTURE(threads);
        CAPTURE(t);
        std::vector<float> y(y0.begin() + t * cols, y0.begin() + (t + 1) * cols);
        sums.Begin(cols, 2, 1, &steps[t]);
        for (size_t first : {size_t{0}, size_t{17}, size_t{30}}) {  // three calls
          const size_t end = first == 0 ? 17 : first == 17 ? 30 : count;
          ops::RowSet part = all;
          part.index = records.index.data() + first;
          part.count = end - first;
          ops::RowAxpysInt(part, a.data() + t * count + first, 1, sums);
        }
        sums.Finish(y.data());
        CHECK(std::equal(y.begin(), y.end(), batch.begin() + t * cols));
      }
    }
    SetThreadCount(0);

    // Against the float sums: each multiple is off by at most half a step,
    // times |q - 8| <= 8, per row.
    std::vector<float> floats = y0;
    ops::RowAxpys(all, a.data(), n, floats.data());
    for (size_t t = 0; t < n; ++t) {
      CAPTURE(t);
      double worst = 0.0;
      for (size_t i = 0; i < cols; ++i) {
        worst = std::max(worst, std::fabs(double(batch[t * cols + i]) - floats[t * cols + i]));
      }
      CHECK(worst > 0.0);  // the integer form, not the float one
      CHECK(worst <= count * 4.0 * steps[t] + 1e-4);
    }
  }
}

// A record's two parts as consecutive rows of one set (parts = 2, as the
// neuron layout's gate and up) give the bits of one set per part: gathered
// or contiguous records, both batch paths. (oneDNN's f32 and bf16 products
// do not depend on which rows share a panel: exact here too.)
TEST_CASE("RowDots over two parts per record equals one call per part") {
  for (ops::PromptGemm gemm : LargeBatchPaths()) {
    ops::SetPromptGemm(gemm);
    for (TensorType type : {TensorType::kF32, TensorType::kF16, TensorType::kQ8_0,
                            TensorType::kQ4_0, TensorType::kQ4_K}) {
      CAPTURE(TensorTypeName(type));
      const size_t cols = 256, records = 90;
      // Records of three parts (gate, up, down) as the rows of a matrix
      // three times as tall.
      const QuantizedMatrix w = MakeMatrix(type, 3 * records, cols, 21);
      const size_t part_bytes = w.view.row_bytes;
      std::vector<uint32_t> index;
      for (size_t r = 0; r < records; r += 2) index.push_back(static_cast<uint32_t>((r * 11) % records));
      for (bool gathered : {true, false}) {
        CAPTURE(gathered);
        ops::RowSet one;
        one.type = type;
        one.base = w.bytes.data();
        one.stride = 3 * part_bytes;
        one.cols = cols;
        one.index = gathered ? index.data() : nullptr;
        one.count = gathered ? index.size() : records;
        for (size_t n : {size_t{1}, size_t{5}, size_t{40}}) {
          CAPTURE(n);
          const size_t count = one.count;
          const std::vector<float> x = RandomVector(n * cols, 22);
          std::vector<float> gate(n * count), up(n * count), both(2 * n * count);
          ops::RowDots(one, x.data(), n, gate.data());
          ops::RowSet second = one;
          second.offset = part_bytes;
          ops::RowDots(second, x.data(), n, up.data());
          ops::RowSet pair = one;
          pair.parts = 2;
          pair.part_stride = part_bytes;
          pair.count = 2 * count;
          ops::RowDots(pair, x.data(), n, both.data());
          size_t differ = 0;
          for (size_t t = 0; t < n; ++t) {
            for (size_t k = 0; k < count; ++k) {
              differ += both[t * 2 * count + 2 * k] != gate[t * count + k];
              differ += both[t * 2 * count + 2 * k + 1] != up[t * count + k];
            }
          }
          CHECK(differ == 0);
        }
      }
    }
  }
  ops::SetPromptGemm(ops::PromptGemm::kAuto);
}

TEST_CASE("RowDots and RowAxpys on gathered rows match the reference, small and large batches") {
  const TensorType types[] = {TensorType::kF32, TensorType::kF16, TensorType::kQ8_0,
                              TensorType::kQ4_0, TensorType::kQ4_0S};
  for (ops::PromptGemm gemm : LargeBatchPaths())
  for (int threads : {1, 2}) {
    ops::SetPromptGemm(gemm);
    CAPTURE(ops::PromptGemmUsesBf16());
    SetThreadCount(threads);
    for (TensorType type : types) {
      CAPTURE(TensorTypeName(type));
      const size_t pool = 200, cols = 256;
      const QuantizedMatrix w = MakeMatrix(type, pool, cols, 7);
      std::vector<uint32_t> index;  // every third row, backwards
      for (size_t r = pool; r >= 3; r -= 3) index.push_back(static_cast<uint32_t>(r - 3));
      ops::RowSet set;
      set.type = type;
      set.base = w.bytes.data();
      set.stride = w.view.row_bytes;
      set.cols = cols;
      set.index = index.data();
      set.count = index.size();
      for (size_t n : {size_t{5}, size_t{40}}) {
        CAPTURE(n);
        const std::vector<float> x = RandomVector(n * cols, 3);
        const std::vector<float> a = RandomVector(n * set.count, 4);
        const std::vector<float> y0 = RandomVector(n * cols, 5);
        std::vector<float> dots(n * set.count), dots_ref(n * set.count);
        std::vector<float> sums = y0, sums_ref = y0;
        ops::SetKernelMode(ops::KernelMode::kFast);
        ops::RowDots(set, x.data(), n, dots.data());
        ops::RowAxpys(set, a.data(), n, sums.data());
        ops::SetKernelMode(ops::KernelMode::kReference);
        ops::RowDots(set, x.data(), n, dots_ref.data());
        ops::RowAxpys(set, a.data(), n, sums_ref.data());
        ops::SetKernelMode(ops::KernelMode::kFast);
        // As MatMul's bounds above: the gather kernels' activations
        // (KernelBound) or f32 oneDNN ~1e-4; bf16 oneDNN a few 1e-3.
        const bool panels = ops::RowProductsUsePanels(n);
        const bool rounded = panels && ops::PromptGemmUsesBf16() && type != TensorType::kF32;
        const double dot_bound = rounded ? 5e-3 : panels ? 1e-3 : KernelBound(type);
        CHECK(MaxRelError(dots, dots_ref) < dot_bound);
        CHECK(MaxRelError(sums, sums_ref) < (rounded ? 5e-3 : 1e-3));
      }
    }
  }
  ops::SetPromptGemm(ops::PromptGemm::kAuto);
  SetThreadCount(0);
}
