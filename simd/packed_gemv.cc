// Dispatch, packing, the activation input and the scalar reference of the
// packed GEMV (packed_gemv.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "simd/packed_gemv.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "simd/packed_gemv-inl.h"
#include "simd/packed_gemv.h"

HWY_BEFORE_NAMESPACE();
namespace sparrow::simd {
namespace HWY_NAMESPACE {

bool PackedPreferredT() { return PackedPreferredImpl(); }
const char* PackedDotFormT() {
#ifdef SPARROW_INT8_MMLA
  if (CpuHasArmI8mm()) {
    return HWY_HAVE_SCALABLE ? "sdot (SVE), smmla (i8mm) for pairs of Q4_0 tokens"
                             : "sdot (NEON dotprod), smmla (i8mm) for pairs of Q4_0 tokens";
  }
#endif
  return ByteDotFormName();
}

void QuantizeInt8T(const float* x, size_t n, int8_t* q, float* scales, float* sums) {
  QuantizeInt8Impl(x, n, q, scales, sums);
}

bool UnpackRowToBF16T(TensorType type, const uint8_t* group, size_t cols, size_t r,
                      uint16_t* dst) {
  return UnpackRowToBF16Impl(type, group, cols, r, dst);
}
bool UnpackGroupToBF16T(TensorType type, const uint8_t* group, size_t cols, uint16_t* dst,
                        size_t dst_stride) {
  return UnpackGroupToBF16Impl(type, group, cols, dst, dst_stride);
}

void PackedGemvT(TensorType type, const uint8_t* data, size_t cols, const PackedGemvInput* x,
                 size_t n, size_t group_begin, size_t group_end, float* y, size_t y_stride) {
  PackedGemvImpl(type, data, cols, x, n, group_begin, group_end, y, y_stride);
}

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include <cstring>
#include <stdexcept>
#include <vector>

#include "base/error.h"
#include "simd/gemv.h"
#include "simd/packed_gemv.h"
#include "simd/quant_blocks.h"
#include "simd/quantize.h"

namespace sparrow::simd {

HWY_EXPORT(PackedPreferredT);
HWY_EXPORT(PackedDotFormT);
HWY_EXPORT(QuantizeInt8T);
HWY_EXPORT(PackedGemvT);
HWY_EXPORT(UnpackRowToBF16T);
HWY_EXPORT(UnpackGroupToBF16T);

namespace {

// Elements and plain bytes of one block of the type.
struct BlockShape {
  size_t elems, bytes;
};

BlockShape ShapeOf(TensorType type) {
  if (type == TensorType::kQ4_K) return {256, sizeof(BlockQ4_K)};
  if (type == TensorType::kQ8_0) return {32, sizeof(BlockQ8_0)};
  return {32, sizeof(BlockQ4_0)};
}

// Q4_0 and Q8_0: an f16 scale, then `bytes - 2` quant bytes taken 4 at a
// time into 32-byte chunks (4 chunks for Q4_0, 8 for Q8_0).
void PackScaledBlock(const uint8_t* const* blocks, size_t bytes, uint8_t* out) {
  for (size_t r = 0; r < kPackedRows; ++r) {
    std::memcpy(out + 2 * r, blocks[r], 2);
    for (size_t k = 0; k < (bytes - 2) / 4; ++k) {
      std::memcpy(out + 16 + 32 * k + 4 * r, blocks[r] + 2 + 4 * k, 4);
    }
  }
}

void UnpackScaledBlock(const uint8_t* packed, size_t bytes, size_t r, uint8_t* block) {
  std::memcpy(block, packed + 2 * r, 2);
  for (size_t k = 0; k < (bytes - 2) / 4; ++k) {
    std::memcpy(block + 2 + 4 * k, packed + 16 + 32 * k + 4 * r, 4);
  }
}

constexpr size_t kQsK = offsetof(BlockQ4_K, qs);
constexpr size_t kScalesK = offsetof(BlockQ4_K, scales);

void PackQ4_KBlock(const uint8_t* const* blocks, uint8_t* out) {
  for (size_t r = 0; r < kPackedRows; ++r) {
    const uint8_t* b = blocks[r];
    std::memcpy(out + 2 * r, b, 2);
    std::memcpy(out + 16 + 2 * r, b + 2, 2);
    uint8_t sc[8], m[8];
    UnpackQ4KScales(b + kScalesK, sc, m);
    for (size_t s = 0; s < 8; ++s) out[32 + 8 * s + r] = static_cast<uint8_t>(sc[s] | (m[s] >> 4) << 6);
    for (size_t t = 0; t < 4; ++t) {
      out[96 + 8 * t + r] = static_cast<uint8_t>((m[2 * t] & 15) | (m[2 * t + 1] & 15) << 4);
    }
    for (size_t g = 0; g < 4; ++g) {
      for (size_t k = 0; k < 8; ++k) {
        std::memcpy(out + 128 + 256 * g + 32 * k + 4 * r, b + kQsK + 32 * g + 4 * k, 4);
      }
    }
  }
}

void UnpackQ4_KBlock(const uint8_t* packed, size_t r, uint8_t* block) {
  std::memcpy(block, packed + 2 * r, 2);
  std::memcpy(block + 2, packed + 16 + 2 * r, 2);
  uint8_t sc[8], m[8];
  for (size_t s = 0; s < 8; ++s) {
    const uint8_t b = packed[32 + 8 * s + r];
    const uint8_t low = packed[96 + 8 * (s / 2) + r];
    sc[s] = b & 63;
    m[s] = static_cast<uint8_t>(((s & 1) ? (low >> 4) : (low & 15)) | (b >> 6) << 4);
  }
  PackQ4KScales(sc, m, block + kScalesK);
  for (size_t g = 0; g < 4; ++g) {
    for (size_t k = 0; k < 8; ++k) {
      std::memcpy(block + kQsK + 32 * g + 4 * k, packed + 128 + 256 * g + 32 * k + 4 * r, 4);
    }
  }
}

void RequireSupported(TensorType type) {
  if (!PackedGemvSupports(type)) {
    throw std::invalid_argument(StrCat("packed GEMV: no kernel for ", TensorTypeName(type)));
  }
}

}  // namespace

bool PackedGemvSupports(TensorType type) { return TensorTypeCan(type, TypeAbility::kPack); }

void PackGroup(TensorType type, const uint8_t* rows, size_t row_bytes, size_t cols,
               uint8_t* out) {
  RequireSupported(type);
  const BlockShape shape = ShapeOf(type);
  for (size_t b = 0; b < cols / shape.elems; ++b) {
    const uint8_t* blocks[kPackedRows];
    for (size_t r = 0; r < kPackedRows; ++r) blocks[r] = rows + r * row_bytes + b * shape.bytes;
    uint8_t* o = out + b * kPackedRows * shape.bytes;
    if (type == TensorType::kQ4_K) {
      PackQ4_KBlock(blocks, o);
    } else {
      PackScaledBlock(blocks, shape.bytes, o);
    }
  }
}

void UnpackRow(TensorType type, const uint8_t* group, size_t cols, size_t r, uint8_t* row) {
  RequireSupported(type);
  const BlockShape shape = ShapeOf(type);
  if (type == TensorType::kQ4_0) {
    // The hot case (oneDNN's bf16 panels of packed matrices): word copies
    // through locals, which the compiler keeps in registers (memcpy into
    // the row's bytes would make it reload every pointer). `sparrow bench
    // -p 64`, 125M-shaped Q4_0, tok/s at 1 / 2 threads: 1182 / 1884 before,
    // 1202 / 1998 after (the per-block memcpy loop took 15% of the 2-thread
    // profile).
    const uint8_t* HWY_RESTRICT in = group + 2 * r;
    uint8_t* HWY_RESTRICT out = row;
    for (size_t b = 0; b < cols / 32; ++b, in += kPackedRows * 18, out += 18) {
      uint16_t d;
      uint32_t q[4];
      std::memcpy(&d, in, 2);
      for (size_t k = 0; k < 4; ++k) std::memcpy(&q[k], in - 2 * r + 16 + 32 * k + 4 * r, 4);
      std::memcpy(out, &d, 2);
      std::memcpy(out + 2, q, 16);
    }
    return;
  }
  for (size_t b = 0; b < cols / shape.elems; ++b) {
    const uint8_t* packed = group + b * kPackedRows * shape.bytes;
    if (type == TensorType::kQ4_K) {
      UnpackQ4_KBlock(packed, r, row + b * shape.bytes);
    } else {
      UnpackScaledBlock(packed, shape.bytes, r, row + b * shape.bytes);
    }
  }
}

void UnpackRowToBF16(TensorType type, const uint8_t* group, size_t cols, size_t r,
                     uint8_t* scratch, uint16_t* dst) {
  RequireSupported(type);
  if (HWY_DYNAMIC_DISPATCH(UnpackRowToBF16T)(type, group, cols, r, dst)) return;
  UnpackRow(type, group, cols, r, scratch);
  DequantizeRowToBF16(type, scratch, cols, dst);
}

void UnpackGroupToBF16(TensorType type, const uint8_t* group, size_t cols, uint8_t* scratch,
                       uint16_t* dst, size_t dst_stride) {
  RequireSupported(type);
  if (HWY_DYNAMIC_DISPATCH(UnpackGroupToBF16T)(type, group, cols, dst, dst_stride)) return;
  for (size_t r = 0; r < kPackedRows; ++r) {
    UnpackRowToBF16(type, group, cols, r, scratch, dst + r * dst_stride);
  }
}

void PackMatrix(TensorType type, uint8_t* data, size_t rows, size_t cols) {
  RequireSupported(type);
  const BlockShape shape = ShapeOf(type);
  const size_t row_bytes = cols / shape.elems * shape.bytes;
  const size_t group_bytes = kPackedRows * row_bytes;
  std::vector<uint8_t> scratch(group_bytes);
  for (size_t g = 0; g < rows / kPackedRows; ++g) {
    uint8_t* group = data + g * group_bytes;
    PackGroup(type, group, row_bytes, cols, scratch.data());
    std::memcpy(group, scratch.data(), group_bytes);
  }
}

bool PackedGemvPreferred() { return HWY_DYNAMIC_DISPATCH(PackedPreferredT)(); }
const char* PackedGemvDotForm() { return HWY_DYNAMIC_DISPATCH(PackedDotFormT)(); }

void PackedGemvInput::Prepare(const float* x, size_t n) {
  if (n % 32 != 0) {
    ThrowInputError("packed GEMV input of ", n, " elements is not a whole number of blocks of 32");
  }
  n_ = n;
  const size_t blocks = n / 32;
  if (q_.size() < n) q_.Reset(n);
  if (scales_.size() < blocks) scales_.Reset(blocks);
  if (sums_.size() < blocks) sums_.Reset(blocks);
  HWY_DYNAMIC_DISPATCH(QuantizeInt8T)(x, n, q_.data(), scales_.data(), sums_.data());
}

void PackedGemvBatch(TensorType type, const uint8_t* data, size_t cols,
                     const PackedGemvInput* x, size_t n, size_t group_begin, size_t group_end,
                     float* y, size_t y_stride) {
  RequireSupported(type);
  for (size_t t = 0; t < n; ++t) {
    if (x[t].size() != cols || cols % ShapeOf(type).elems != 0) {
      throw std::invalid_argument(StrCat("PackedGemv: input prepared for ", x[t].size(),
                                         " elements, used with ", cols, " ",
                                         TensorTypeName(type), " columns"));
    }
  }
  if (group_begin >= group_end || n == 0) return;
  HWY_DYNAMIC_DISPATCH(PackedGemvT)(type, data, cols, x, n, group_begin, group_end, y,
                                    y_stride);
}

void PackedGemv(TensorType type, const uint8_t* data, size_t cols, const PackedGemvInput& x,
                size_t group_begin, size_t group_end, float* y) {
  PackedGemvBatch(type, data, cols, &x, 1, group_begin, group_end, y, 0);
}

void PackedGemvReference(TensorType type, const uint8_t* data, size_t cols, const float* x,
                         size_t group_begin, size_t group_end, float* y) {
  RequireSupported(type);
  const BlockShape shape = ShapeOf(type);
  const size_t row_bytes = cols / shape.elems * shape.bytes;
  std::vector<uint8_t> row(row_bytes);
  for (size_t g = group_begin; g < group_end; ++g) {
    for (size_t r = 0; r < kPackedRows; ++r) {
      UnpackRow(type, data + g * kPackedRows * row_bytes, cols, r, row.data());
      GemvReference(type, row.data(), row_bytes, cols, x, 0, 1, y + kPackedRows * g + r);
    }
  }
}

}  // namespace sparrow::simd

#endif  // HWY_ONCE
