// PrepareWeightsForDecode: matrices moved onto huge pages (where the system
// has them) keep their products, the source's pages are given back, and
// small models stay where they are.
#include <doctest/doctest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <vector>

#include "base/huge_pages.h"
#include "simd/quantize.h"
#include "src/model/weights.h"

namespace sparrow {
namespace {

// Anonymous memory of its own, so that released pages can be seen (they
// read as zeros afterwards).
struct Region {
  explicit Region(size_t n) : bytes(n) {
    data = static_cast<uint8_t*>(::mmap(nullptr, n, PROT_READ | PROT_WRITE,
                                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    REQUIRE(data != MAP_FAILED);
  }
  ~Region() { ::munmap(data, bytes); }
  size_t bytes;
  uint8_t* data;
};

// n_layers layers of Q4_0 attention matrices (d x d) back to back in
// `region`: rows drawn from a pool of 67 random quantized rows, each
// matrix starting at a different one, so that no two matrices are alike.
// (Quantizing every row from fresh normal samples took most of this file's
// time, and ~50 times that under qemu in the Arm check.)
ModelWeights MakeWeights(Region& region, size_t n_layers, size_t d) {
  const size_t row_bytes = d / 32 * 18;
  constexpr size_t kPool = 67;
  std::mt19937 rng(3);
  std::normal_distribution<float> dist;
  std::vector<float> row(d);
  std::vector<uint8_t> pool(kPool * row_bytes);
  for (size_t i = 0; i < kPool; ++i) {
    for (float& v : row) v = dist(rng);
    simd::QuantizeRow(TensorType::kQ4_0, row.data(), d, pool.data() + i * row_bytes);
  }
  ModelWeights w;
  w.layers.resize(n_layers);
  uint8_t* at = region.data + 100;  // not page aligned: partial pages at the ends
  size_t matrix = 0;
  for (LayerWeights& l : w.layers) {
    for (ops::MatrixView* m : {&l.wq, &l.wk, &l.wv, &l.wo}) {
      REQUIRE(at + d * row_bytes <= region.data + region.bytes);
      for (size_t r = 0; r < d; ++r) {
        std::memcpy(at + r * row_bytes, pool.data() + (r + 5 * matrix) % kPool * row_bytes,
                    row_bytes);
      }
      *m = {TensorType::kQ4_0, at, d, d, row_bytes};
      at += d * row_bytes;
      ++matrix;
    }
  }
  return w;
}

// Each matrix times x; with `pack_copies`, of a copy packed for decoding
// where the CPU wants that (what PrepareWeightsForDecode should give).
std::vector<float> Products(const ModelWeights& w, const std::vector<float>& x,
                            bool pack_copies) {
  std::vector<float> out, y(x.size());
  for (const LayerWeights& l : w.layers) {
    for (const ops::MatrixView* m : {&l.wq, &l.wk, &l.wv, &l.wo}) {
      std::vector<uint8_t> copy(m->data, m->data + m->rows * m->row_bytes);
      ops::MatrixView v = *m;
      if (pack_copies) {
        v.data = copy.data();
        if (ops::WantsPacking(v)) ops::PackForDecode(v, copy.data());
      }
      ops::MatVec(v, x.data(), y.data());
      out.insert(out.end(), y.begin(), y.end());
    }
  }
  return out;
}

}  // namespace

TEST_CASE("HugePageBuffer is 2 MiB aligned and sized; ReleaseWholePages keeps shared pages") {
  HugePageBuffer b(5);
  CHECK(b.size() == HugePageBufferBytes(5));
  CHECK(b.size() == (size_t{2} << 20));
  CHECK(reinterpret_cast<uintptr_t>(b.data()) % (uintptr_t{2} << 20) == 0);
  std::memset(b.data(), 7, b.size());
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  // [page/2, 3.5 pages): pages 1 and 2 are wholly inside, 0 and 3 are not.
  ReleaseWholePages(b.data() + page / 2, 3 * page);
  CHECK(b.data()[page / 2] == 7);
  CHECK(b.data()[page] == 0);
  CHECK(b.data()[3 * page - 1] == 0);
  CHECK(b.data()[3 * page] == 7);
}

TEST_CASE("PrepareWeightsForDecode moves large models' matrices and keeps their products") {
  const size_t d = 2048, layers = 5;  // 20 matrices of 2.25 MiB: above the 32 MiB floor
  Region region(layers * 4 * d * d / 32 * 18 + 4096);
  ModelWeights w = MakeWeights(region, layers, d);
  std::mt19937 rng(4);
  std::normal_distribution<float> dist;
  std::vector<float> x(d);
  for (float& v : x) v = dist(rng);
  ops::SetKernelMode(ops::KernelMode::kFast);
  const std::vector<float> before = Products(w, x, /*pack_copies=*/true);
  const uint8_t* first = w.layers[0].wq.data;
  PrepareWeightsForDecode(w);
  CHECK(Products(w, x, /*pack_copies=*/false) == before);
  const ops::MatrixView& wq = w.layers[0].wq;
  if (!TransparentHugePagesAvailable()) {
    CHECK(w.decode_matrices == nullptr);
    return;
  }
  REQUIRE(w.decode_matrices != nullptr);
  CHECK(wq.data == w.decode_matrices->data());
  CHECK(w.layers[layers - 1].wo.data + w.layers[layers - 1].wo.rows * w.layers[layers - 1].wo.row_bytes <=
        w.decode_matrices->data() + w.decode_matrices->size());
  for (const LayerWeights& l : w.layers) {
    for (const ops::MatrixView* m : {&l.wq, &l.wk, &l.wv, &l.wo}) {
      CHECK(reinterpret_cast<uintptr_t>(m->data) % 64 == 0);
    }
  }
  // The source's whole pages were given back (anonymous: zeros now); the
  // first page, shared with the bytes before the first matrix, was kept.
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  CHECK(region.data[page] == 0);
  CHECK(region.data[page + 12345] == 0);
  CHECK(first[0] == region.data[100]);
  // The charge bounds what was added.
  const uint64_t matrices_bytes = layers * 4 * d * d / 32 * 18;
  CHECK(w.decode_matrices->size() - matrices_bytes <=
        DecodeMatricesOverheadBytes(layers * 4, matrices_bytes));
}

TEST_CASE("PrepareWeightsForDecode leaves small models in place") {
  const size_t d = 512, layers = 2;
  Region region(layers * 4 * d * d / 32 * 18 + 4096);
  ModelWeights w = MakeWeights(region, layers, d);
  const uint8_t* first = w.layers[0].wq.data;
  ops::SetKernelMode(ops::KernelMode::kFast);
  PrepareWeightsForDecode(w);
  CHECK(w.decode_matrices == nullptr);
  CHECK(w.layers[0].wq.data == first);
  CHECK(DecodeMatricesOverheadBytes(8, uint64_t{1} << 20) == 0);
}

}  // namespace sparrow
