// Dispatch, packing, the activation input and the scalar reference of the
// packed Q4_0 GEMV (packed_q4_0.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "simd/packed_q4_0.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "simd/packed_q4_0-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sparrow::simd {
namespace HWY_NAMESPACE {

bool PackedPreferredT() { return PackedPreferredImpl(); }

void QuantizeInt8T(const float* x, size_t n, int8_t* q, float* scales, float* sums) {
  QuantizeInt8Impl(x, n, q, scales, sums);
}

void PackedQ4_0GemvT(const uint8_t* data, size_t cols, const int8_t* xq, const float* sx,
                     const float* sums, size_t group_begin, size_t group_end, float* y) {
  PackedQ4_0GemvImpl(data, cols, xq, sx, sums, group_begin, group_end, y);
}

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include <cstring>
#include <stdexcept>
#include <vector>

#include "base/error.h"
#include "formats/tensor_type.h"
#include "simd/packed_q4_0.h"
#include "simd/quant_blocks.h"
#include "simd/gemv.h"

namespace sparrow::simd {

HWY_EXPORT(PackedPreferredT);
HWY_EXPORT(QuantizeInt8T);
HWY_EXPORT(PackedQ4_0GemvT);

namespace {

constexpr size_t kBlockBytes = sizeof(BlockQ4_0);  // 18
constexpr size_t kNibbleBytes = 16;

}  // namespace

void PackQ4_0Group(const uint8_t* rows, size_t row_bytes, size_t cols, uint8_t* out) {
  const size_t nblocks = cols / 32;
  for (size_t b = 0; b < nblocks; ++b) {
    uint8_t* o = out + b * kPackedRows * kBlockBytes;
    for (size_t r = 0; r < kPackedRows; ++r) {
      const uint8_t* block = rows + r * row_bytes + b * kBlockBytes;
      std::memcpy(o + 2 * r, block, 2);
      for (size_t k = 0; k < 4; ++k) {
        std::memcpy(o + 16 + 32 * k + 4 * r, block + 2 + 4 * k, 4);
      }
    }
  }
}

void UnpackQ4_0Row(const uint8_t* group, size_t cols, size_t r, uint8_t* row) {
  const size_t nblocks = cols / 32;
  for (size_t b = 0; b < nblocks; ++b) {
    const uint8_t* g = group + b * kPackedRows * kBlockBytes;
    uint8_t* block = row + b * kBlockBytes;
    std::memcpy(block, g + 2 * r, 2);
    for (size_t k = 0; k < 4; ++k) {
      std::memcpy(block + 2 + 4 * k, g + 16 + 32 * k + 4 * r, 4);
    }
  }
  static_assert(2 + kNibbleBytes == kBlockBytes);
}

void PackQ4_0Matrix(uint8_t* data, size_t rows, size_t cols) {
  const size_t row_bytes = cols / 32 * kBlockBytes;
  const size_t group_bytes = kPackedRows * row_bytes;
  std::vector<uint8_t> scratch(group_bytes);
  for (size_t g = 0; g < rows / kPackedRows; ++g) {
    uint8_t* group = data + g * group_bytes;
    PackQ4_0Group(group, row_bytes, cols, scratch.data());
    std::memcpy(group, scratch.data(), group_bytes);
  }
}

bool PackedQ4_0Preferred() { return HWY_DYNAMIC_DISPATCH(PackedPreferredT)(); }

void PackedQ4_0Input::Prepare(const float* x, size_t n) {
  if (n % 32 != 0) {
    ThrowInputError("packed Q4_0 input of ", n, " elements is not a whole number of blocks of 32");
  }
  n_ = n;
  const size_t blocks = n / 32;
  if (q_.size() < n) q_.Reset(n);
  if (scales_.size() < blocks) scales_.Reset(blocks);
  if (sums_.size() < blocks) sums_.Reset(blocks);
  HWY_DYNAMIC_DISPATCH(QuantizeInt8T)(x, n, q_.data(), scales_.data(), sums_.data());
}

void PackedQ4_0Gemv(const uint8_t* data, size_t cols, const PackedQ4_0Input& x,
                    size_t group_begin, size_t group_end, float* y) {
  if (x.size() != cols || cols % 32 != 0) {
    throw std::invalid_argument(StrCat("PackedQ4_0Gemv: input prepared for ", x.size(),
                                       " elements, used with ", cols, " columns"));
  }
  if (group_begin >= group_end) return;
  HWY_DYNAMIC_DISPATCH(PackedQ4_0GemvT)(data, cols, x.quantized(), x.scales(), x.sums(),
                                        group_begin, group_end, y);
}

void PackedQ4_0GemvReference(const uint8_t* data, size_t cols, const float* x,
                             size_t group_begin, size_t group_end, float* y) {
  const size_t row_bytes = cols / 32 * kBlockBytes;
  std::vector<uint8_t> row(row_bytes);
  for (size_t g = group_begin; g < group_end; ++g) {
    for (size_t r = 0; r < kPackedRows; ++r) {
      UnpackQ4_0Row(data + g * kPackedRows * row_bytes, cols, r, row.data());
      GemvReference(TensorType::kQ4_0, row.data(), row_bytes, cols, x, 0, 1,
                    y + kPackedRows * g + r);
    }
  }
}

}  // namespace sparrow::simd

#endif  // HWY_ONCE
