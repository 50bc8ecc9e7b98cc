// Conversion between f32 and the stored weight types (F32, F16, BF16, Q8_0,
// Q4_0, Q4_K, Q6_K), bit-compatible with GGUF/ggml block layouts. Used for
// embedding lookups, dequantized panels for batched matmul, and writing
// synthetic models and bundles.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/tensor_type.h"

namespace sparrow::simd {

// Types DequantizeRow / QuantizeRow handle (TypeAbility::kConvert in
// base/tensor_type.cc: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, Q4_0S).
bool CanConvert(TensorType type);

// `n` elements (a whole number of blocks) from `src` in `type` to f32. For
// every type but Q4_0S (whose layout depends on the row's length:
// quant_blocks.h) any run of whole blocks may be converted; Q4_0S one
// whole row per call, here and in QuantizeRow.
void DequantizeRow(TensorType type, const void* src, size_t n, float* dst);
// f32 to `type`; writes exactly the type's byte size for `n` elements, in
// ggml's block layout, so llama.cpp reads the same values we do.
// F16/BF16 round to nearest even (NaN stays NaN). Q8_0 and Q4_0 choose the
// block scale like ggml's reference quantizers (absmax / 127; the signed
// extreme maps to -8) and round the same way. Q4_K and Q6_K search a few
// candidate scales (and mins) per sub-block for the least squared error,
// weighting large elements more, then quantize the sub-block scales to 6 or
// 8 bits; close to ggml's choice in quality, not bit-for-bit equal to it.
// Not fast (tens of ns per element for the K types) but fine for writing
// whole models. Non-finite inputs give unspecified (but valid) blocks.
void QuantizeRow(TensorType type, const float* src, size_t n, void* dst);
// DequantizeRow's values rounded to bfloat16 bits (F32ToBF16 of each, bit
// for bit): the weight panels of bf16 matrix products (ops/matmul.cc).
// QuantizeRow(kBF16, ...) after DequantizeRow gives the same, at scalar speed.
void DequantizeRowToBF16(TensorType type, const void* src, size_t n, uint16_t* dst);

// The largest |f16 block scale| of a row of `n` elements (a whole row for
// Q4_0S) in Q8_0, Q4_0 or Q4_0S; 0 for other types. NaN scales are
// skipped; an infinite one is returned.
float LargestBlockScale(TensorType type, const void* row, size_t n);

// Scalar versions, the reference the Highway paths are tested against.
void DequantizeRowReference(TensorType type, const void* src, size_t n,
                           float* dst);

// F32ToF16 of each of n values, with the CPU's conversion instruction where
// Highway has it (x86 F16C, Arm), bit for bit the scalar results.
void F32ToF16Row(const float* src, size_t n, uint16_t* dst);

// IEEE half and bfloat16 scalar conversions (round to nearest even).
float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);
float BF16ToF32(uint16_t b);
uint16_t F32ToBF16(float f);

}  // namespace sparrow::simd
