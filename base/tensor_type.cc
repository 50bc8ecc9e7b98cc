#include "base/tensor_type.h"

#include <array>
#include <cctype>

#include "base/checked_math.h"

namespace sparrow {
namespace {

constexpr uint32_t kConvert = static_cast<uint32_t>(TypeAbility::kConvert);
constexpr uint32_t kGemv = static_cast<uint32_t>(TypeAbility::kGemv);
constexpr uint32_t kGather = static_cast<uint32_t>(TypeAbility::kGather);
constexpr uint32_t kPack = static_cast<uint32_t>(TypeAbility::kPack);
constexpr uint32_t kRecord = static_cast<uint32_t>(TypeAbility::kRecord);
constexpr uint32_t kWholeRowLayout = static_cast<uint32_t>(TypeAbility::kWholeRowLayout);

// GGUF's types, then Sparrow's own, in id order: name, block geometry, and
// what Sparrow does with each (0: readable in a GGUF file, but no kernel
// takes it).
constexpr std::array kTypes = {
    TensorTypeInfo{TensorType::kF32, "f32", 1, 4, kConvert | kGemv | kGather | kRecord},
    TensorTypeInfo{TensorType::kF16, "f16", 1, 2, kConvert | kGemv | kGather | kRecord},
    TensorTypeInfo{TensorType::kQ4_0, "q4_0", 32, 18, kConvert | kGemv | kGather | kPack | kRecord},
    TensorTypeInfo{TensorType::kQ4_1, "q4_1", 32, 20, 0},
    TensorTypeInfo{TensorType::kQ5_0, "q5_0", 32, 22, 0},
    TensorTypeInfo{TensorType::kQ5_1, "q5_1", 32, 24, 0},
    TensorTypeInfo{TensorType::kQ8_0, "q8_0", 32, 34, kConvert | kGemv | kGather | kPack | kRecord},
    TensorTypeInfo{TensorType::kQ8_1, "q8_1", 32, 36, 0},
    TensorTypeInfo{TensorType::kQ2_K, "q2_K", 256, 84, 0},
    TensorTypeInfo{TensorType::kQ3_K, "q3_K", 256, 110, 0},
    TensorTypeInfo{TensorType::kQ4_K, "q4_K", 256, 144, kConvert | kGemv | kPack},
    TensorTypeInfo{TensorType::kQ5_K, "q5_K", 256, 176, 0},
    TensorTypeInfo{TensorType::kQ6_K, "q6_K", 256, 210, kConvert | kGemv},
    TensorTypeInfo{TensorType::kQ8_K, "q8_K", 256, 292, 0},
    TensorTypeInfo{TensorType::kIQ2_XXS, "iq2_xxs", 256, 66, 0},
    TensorTypeInfo{TensorType::kIQ2_XS, "iq2_xs", 256, 74, 0},
    TensorTypeInfo{TensorType::kIQ3_XXS, "iq3_xxs", 256, 98, 0},
    TensorTypeInfo{TensorType::kIQ1_S, "iq1_s", 256, 50, 0},
    TensorTypeInfo{TensorType::kIQ4_NL, "iq4_nl", 32, 18, 0},
    TensorTypeInfo{TensorType::kIQ3_S, "iq3_s", 256, 110, 0},
    TensorTypeInfo{TensorType::kIQ2_S, "iq2_s", 256, 82, 0},
    TensorTypeInfo{TensorType::kIQ4_XS, "iq4_xs", 256, 136, 0},
    TensorTypeInfo{TensorType::kI8, "i8", 1, 1, 0},
    TensorTypeInfo{TensorType::kI16, "i16", 1, 2, 0},
    TensorTypeInfo{TensorType::kI32, "i32", 1, 4, 0},
    TensorTypeInfo{TensorType::kI64, "i64", 1, 8, 0},
    TensorTypeInfo{TensorType::kF64, "f64", 1, 8, 0},
    TensorTypeInfo{TensorType::kIQ1_M, "iq1_m", 256, 56, 0},
    TensorTypeInfo{TensorType::kBF16, "bf16", 1, 2, kConvert | kGemv | kGather},
    TensorTypeInfo{TensorType::kTQ1_0, "tq1_0", 256, 54, 0},
    TensorTypeInfo{TensorType::kTQ2_0, "tq2_0", 256, 66, 0},
    TensorTypeInfo{TensorType::kMXFP4, "mxfp4", 32, 17, 0},
    TensorTypeInfo{TensorType::kQ4_0S, "q4_0s", 32, 18,
                   kConvert | kGemv | kGather | kRecord | kWholeRowLayout, /*gguf=*/false},
};

// A record is computed by the gather kernels and written by the quantizer;
// every computed type converts, and a packed type is also computed unpacked.
constexpr bool AbilitiesConsistent() {
  for (const TensorTypeInfo& info : kTypes) {
    const uint32_t a = info.abilities;
    if ((a & kRecord) && !((a & kGather) && (a & kConvert))) return false;
    if ((a & (kGemv | kGather | kPack)) && !(a & kConvert)) return false;
    if ((a & kPack) && !(a & kGemv)) return false;
  }
  return true;
}
static_assert(AbilitiesConsistent());

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

}  // namespace

const TensorTypeInfo* FindTensorType(uint32_t id) {
  for (const TensorTypeInfo& info : kTypes) {
    if (static_cast<uint32_t>(info.type) == id) return &info;
  }
  return nullptr;
}

const TensorTypeInfo* FindGgufTensorType(uint32_t id) {
  const TensorTypeInfo* info = FindTensorType(id);
  return info != nullptr && info->gguf ? info : nullptr;
}

const TensorTypeInfo& GetTensorTypeInfo(TensorType type) {
  return *FindTensorType(static_cast<uint32_t>(type));
}

std::string_view TensorTypeName(TensorType type) {
  const TensorTypeInfo* info = FindTensorType(static_cast<uint32_t>(type));
  return info != nullptr ? info->name : std::string_view("unknown");
}

std::span<const TensorTypeInfo> AllTensorTypes() { return kTypes; }

bool TensorTypeCan(TensorType type, TypeAbility ability) {
  const TensorTypeInfo* info = FindTensorType(static_cast<uint32_t>(type));
  return info != nullptr && (info->abilities & static_cast<uint32_t>(ability)) != 0;
}

std::string TensorTypeNames(TypeAbility ability, bool gguf_only) {
  std::string names;
  for (const TensorTypeInfo& info : kTypes) {
    if (!TensorTypeCan(info.type, ability) || (gguf_only && !info.gguf)) continue;
    if (!names.empty()) names += ", ";
    names += info.name;
  }
  return names;
}

std::optional<TensorType> ParseTensorType(std::string_view name) {
  for (const TensorTypeInfo& info : kTypes) {
    if (EqualsIgnoreCase(info.name, name)) return info.type;
  }
  return std::nullopt;
}

bool TensorTypeBytes(TensorType type, uint64_t elems, uint64_t* bytes) {
  const TensorTypeInfo* info = FindTensorType(static_cast<uint32_t>(type));
  if (info == nullptr || elems % info->block_elems != 0) return false;
  return CheckedMul(elems / info->block_elems, info->block_bytes, bytes);
}

}  // namespace sparrow
