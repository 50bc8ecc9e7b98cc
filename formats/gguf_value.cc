// Metadata values: names of the GGUF value types, convenience constructors
// and the never-throwing conversions the typed lookups build on.
#include <cstdint>
#include <limits>

#include "formats/gguf.h"

namespace sparrow::gguf {

std::string_view ValueTypeName(ValueType type) {
  switch (type) {
    case ValueType::kU8: return "u8";
    case ValueType::kI8: return "i8";
    case ValueType::kU16: return "u16";
    case ValueType::kI16: return "i16";
    case ValueType::kU32: return "u32";
    case ValueType::kI32: return "i32";
    case ValueType::kF32: return "f32";
    case ValueType::kBool: return "bool";
    case ValueType::kString: return "string";
    case ValueType::kArray: return "array";
    case ValueType::kU64: return "u64";
    case ValueType::kI64: return "i64";
    case ValueType::kF64: return "f64";
  }
  return "unknown";
}

bool IsKnownValueType(uint32_t id) { return id <= static_cast<uint32_t>(ValueType::kF64); }

bool IsUnsignedValueType(ValueType type) {
  return type == ValueType::kU8 || type == ValueType::kU16 ||
         type == ValueType::kU32 || type == ValueType::kU64;
}

bool IsSignedValueType(ValueType type) {
  return type == ValueType::kI8 || type == ValueType::kI16 ||
         type == ValueType::kI32 || type == ValueType::kI64;
}

bool IsFloatValueType(ValueType type) {
  return type == ValueType::kF32 || type == ValueType::kF64;
}

std::string TypeDescription(const Value& value) {
  std::string out(ValueTypeName(value.type));
  const Array* array = value.AsArray();
  if (array != nullptr) {
    out += " of ";
    out += ValueTypeName(array->element_type);
  }
  return out;
}

std::string Printable(std::string_view text, size_t max_bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  const size_t n = text.size() < max_bytes ? text.size() : max_bytes;
  out.reserve(n + 8);
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f || c == '\\') {
      // Control bytes would break the one-line rule for messages.
      out += '\\';
      if (c == '\\') {
        out += '\\';
      } else {
        out += 'x';
        out += kHex[c >> 4];
        out += kHex[c & 15];
      }
    } else {
      out += static_cast<char>(c);
    }
  }
  if (n < text.size()) out += "...";
  return out;
}

Value Value::StringArray(const std::vector<std::string>& v) {
  Array array{ValueType::kString, {}};
  array.elements.reserve(v.size());
  for (const std::string& s : v) array.elements.push_back(String(s));
  return {ValueType::kArray, std::move(array)};
}

Value Value::F32Array(const std::vector<float>& v) {
  Array array{ValueType::kF32, {}};
  array.elements.reserve(v.size());
  for (float f : v) array.elements.push_back(F32(f));
  return {ValueType::kArray, std::move(array)};
}

Value Value::I32Array(const std::vector<int32_t>& v) {
  Array array{ValueType::kI32, {}};
  array.elements.reserve(v.size());
  for (int32_t i : v) array.elements.push_back(I32(i));
  return {ValueType::kArray, std::move(array)};
}

std::optional<uint64_t> Value::AsUInt() const {
  if (IsUnsignedValueType(type)) {
    if (const auto* u = std::get_if<uint64_t>(&data)) return *u;
    return std::nullopt;
  }
  if (IsSignedValueType(type)) {
    const auto* i = std::get_if<int64_t>(&data);
    if (i != nullptr && *i >= 0) return static_cast<uint64_t>(*i);
  }
  return std::nullopt;
}

std::optional<int64_t> Value::AsInt() const {
  if (IsSignedValueType(type)) {
    if (const auto* i = std::get_if<int64_t>(&data)) return *i;
    return std::nullopt;
  }
  if (IsUnsignedValueType(type)) {
    const auto* u = std::get_if<uint64_t>(&data);
    if (u != nullptr && *u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return static_cast<int64_t>(*u);
    }
  }
  return std::nullopt;
}

std::optional<double> Value::AsFloat() const {
  if (!IsFloatValueType(type)) return std::nullopt;
  if (const auto* d = std::get_if<double>(&data)) return *d;
  return std::nullopt;
}

std::optional<bool> Value::AsBool() const {
  if (type != ValueType::kBool) return std::nullopt;
  if (const auto* b = std::get_if<bool>(&data)) return *b;
  return std::nullopt;
}

const std::string* Value::AsString() const {
  if (type != ValueType::kString) return nullptr;
  return std::get_if<std::string>(&data);
}

const Array* Value::AsArray() const {
  if (type != ValueType::kArray) return nullptr;
  return std::get_if<Array>(&data);
}

}  // namespace sparrow::gguf
