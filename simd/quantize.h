// Conversion between f32 and the stored weight types (F32, F16, BF16, Q8_0,
// Q4_0, Q4_K, Q6_K), bit-compatible with GGUF/ggml block layouts. Used for
// embedding lookups, dequantized panels for batched matmul, and writing
// synthetic models and bundles.
#pragma once

#include <cstddef>
#include <cstdint>

#include "formats/tensor_type.h"

namespace sparrow::simd {

// Types DequantizeRow / QuantizeRow handle.
bool CanConvert(TensorType type);

// `n` elements (a whole number of blocks) from `src` in `type` to f32.
void DequantizeRow(TensorType type, const void* src, size_t n, float* dst);
// f32 to `type`; writes exactly the type's byte size for `n` elements.
// Rounding and scale choice follow ggml's reference quantizers so files we
// write load in llama.cpp with the same values.
void QuantizeRow(TensorType type, const float* src, size_t n, void* dst);

// Scalar versions, the reference the Highway paths are tested against.
void DequantizeRowReference(TensorType type, const void* src, size_t n,
                           float* dst);

// IEEE half and bfloat16 scalar conversions (round to nearest even).
float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);
float BF16ToF32(uint16_t b);
uint16_t F32ToBF16(float f);

}  // namespace sparrow::simd
