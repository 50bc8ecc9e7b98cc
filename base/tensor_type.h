// Tensor element types as GGUF numbers them (ggml's type ids), with the block
// geometry needed to size and validate tensor data. Kernels for the types we
// compute with live in simd/; this header only knows bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace sparrow {

enum class TensorType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
  // Sparrow's own types, from 1024 on: never in a GGUF file.
  // Q4_0 with a row's f16 block scales stored together before its nibbles
  // (simd/quant_blocks.h: Q4_0Layout); a bundle record type.
  kQ4_0S = 1024,
};

// What Sparrow can do with a type. Every layer asks TensorTypeCan (the one
// table in tensor_type.cc) instead of keeping a list of its own, so a new
// type is one row there plus its kernels; simd/type_abilities_test.cc checks
// that each kernel family accepts exactly the types the table gives it.
enum class TypeAbility : uint32_t {
  kConvert = 1u << 0,  // rows quantize from / dequantize to f32 (simd/quantize.h)
  kGemv = 1u << 1,     // decode matrix-vector kernel (simd/gemv.h)
  kGather = 1u << 2,   // products over rows picked by pointer (simd/gather.h)
  kPack = 1u << 3,     // load-time eight-row interleave (simd/packed_gemv.h)
  kRecord = 1u << 4,   // a bundle's feed-forward record type (formats/bundle.h)
  // Not an ability but a warning: the layout spans the whole row (Q4_0S
  // keeps all of a row's scales in front of its nibbles), so consecutive
  // rows do not read as one longer row and a row cannot be cut at a block.
  kWholeRowLayout = 1u << 5,
};

struct TensorTypeInfo {
  TensorType type;
  std::string_view name;  // lower case, as llama.cpp prints it ("q4_K")
  uint32_t block_elems;   // elements per block (1 for plain types)
  uint32_t block_bytes;   // bytes per block
  uint32_t abilities;     // TypeAbility bits
  bool gguf = true;       // a GGUF type (false: Sparrow's own, bundles only)
};

// nullptr when `id` is not a type GGUF or Sparrow defines.
const TensorTypeInfo* FindTensorType(uint32_t id);
// nullptr when `id` is not a type GGUF defines (GGUF readers and writers).
const TensorTypeInfo* FindGgufTensorType(uint32_t id);
// Info for a known type (never null for an enumerator above).
const TensorTypeInfo& GetTensorTypeInfo(TensorType type);
std::string_view TensorTypeName(TensorType type);
// Every type GGUF defines, then Sparrow's own, in id order.
std::span<const TensorTypeInfo> AllTensorTypes();
// Whether the table gives `type` that ability (false for unknown ids).
bool TensorTypeCan(TensorType type, TypeAbility ability);
// The names of the types with that ability, for messages: "f32, f16, q8_0";
// with `gguf_only`, only GGUF's types.
std::string TensorTypeNames(TypeAbility ability, bool gguf_only = false);
// Case-insensitive lookup by name ("f16", "Q8_0", "q4_k").
std::optional<TensorType> ParseTensorType(std::string_view name);

// Bytes taken by `elems` elements stored as `type`. False when `elems` is not
// a whole number of blocks or the size overflows 64 bits.
[[nodiscard]] bool TensorTypeBytes(TensorType type, uint64_t elems,
                                   uint64_t* bytes);

}  // namespace sparrow
