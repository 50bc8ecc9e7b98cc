// The abilities table (base/tensor_type.cc) against the kernels themselves:
// each kernel family takes exactly the types the table gives it, and refuses
// the others with an error instead of computing garbage. A type added to the
// table without its kernel, or a kernel without its table row, fails here.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "base/tensor_type.h"
#include "simd/gather.h"
#include "simd/gemv.h"
#include "simd/packed_gemv.h"
#include "simd/quantize.h"

namespace sparrow::simd {
namespace {

constexpr size_t kCols = 256;  // a whole number of blocks of every type

std::vector<float> Wave(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::sin(0.37f * static_cast<float>(i)) + 0.1f;
  return v;
}

// kRows rows of `type` quantized from a smooth wave (or arbitrary bytes for a
// type nothing can quantize to: only the refusal is tested then).
std::vector<uint8_t> Rows(const TensorTypeInfo& info, size_t rows) {
  const size_t row_bytes = kCols / info.block_elems * info.block_bytes;
  std::vector<uint8_t> bytes(rows * row_bytes, 0x11);
  if (CanConvert(info.type)) {
    const std::vector<float> w = Wave(kCols);
    for (size_t r = 0; r < rows; ++r) QuantizeRow(info.type, w.data(), kCols, &bytes[r * row_bytes]);
  }
  return bytes;
}

TEST_CASE("every kernel family takes exactly the types the abilities table gives it") {
  const std::vector<float> x = Wave(kCols);
  for (const TensorTypeInfo& info : AllTensorTypes()) {
    CAPTURE(std::string(info.name));
    const size_t row_bytes = kCols / info.block_elems * info.block_bytes;
    const std::vector<uint8_t> rows = Rows(info, kPackedRows);
    const bool convert = TensorTypeCan(info.type, TypeAbility::kConvert);
    const bool gemv = TensorTypeCan(info.type, TypeAbility::kGemv);
    const bool gather = TensorTypeCan(info.type, TypeAbility::kGather);
    const bool pack = TensorTypeCan(info.type, TypeAbility::kPack);

    std::vector<float> out(kCols);
    if (convert) {
      CHECK_NOTHROW(DequantizeRow(info.type, rows.data(), kCols, out.data()));
      for (size_t i = 0; i < kCols; ++i) CHECK(std::fabs(out[i] - x[i]) < 0.2f);
    } else {
      CHECK_THROWS(DequantizeRow(info.type, rows.data(), kCols, out.data()));
      CHECK_THROWS(QuantizeRow(info.type, x.data(), kCols, out.data()));
    }

    GemvInput in;
    float y[kPackedRows] = {};
    if (gemv) {
      REQUIRE_NOTHROW(in.Prepare(info.type, x.data(), kCols));
      Gemv(info.type, rows.data(), row_bytes, kCols, in, 0, 1, y);
      float want = 0;
      GemvReference(info.type, rows.data(), row_bytes, kCols, x.data(), 0, 1, &want);
      CHECK(y[0] == doctest::Approx(want).epsilon(1e-3));
    } else {
      CHECK_THROWS(in.Prepare(info.type, x.data(), kCols));
    }

    const uint8_t* row_list[1] = {rows.data()};
    if (gather) {
      REQUIRE(gemv);  // DotRows takes a GemvInput
      DotRows(info.type, row_list, 1, kCols, &in, 1, y, 1);
      CHECK(std::isfinite(y[0]));
      std::vector<float> acc(kCols, 0.0f);
      const float a = 1.0f;
      AxpyRows(info.type, row_list, 1, kCols, &a, 1, 1, acc.data(), kCols);
      CHECK(acc[5] == doctest::Approx(out[5]).epsilon(1e-3));
    } else if (gemv) {
      CHECK_THROWS(DotRows(info.type, row_list, 1, kCols, &in, 1, y, 1));
    }

    std::vector<uint8_t> packed(rows.size());
    if (pack) {
      CHECK_NOTHROW(PackGroup(info.type, rows.data(), row_bytes, kCols, packed.data()));
    } else {
      CHECK_THROWS(PackGroup(info.type, rows.data(), row_bytes, kCols, packed.data()));
    }
  }
}

}  // namespace
}  // namespace sparrow::simd
