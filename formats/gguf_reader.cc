// GGUF reader. The file is untrusted: every field is checked against the
// bytes that remain before it is used, every size is computed with checked
// arithmetic, and counts are bounded by what the remaining bytes could hold
// before anything is allocated, so a 40-byte file that claims 2^64 entries
// fails at once instead of asking for memory.
#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <utility>

#include "base/checked_math.h"
#include "base/error.h"
#include "formats/gguf.h"

namespace sparrow::gguf {
namespace {

// Smallest number of bytes one value of `type` can occupy in a file: the
// bound that keeps a claimed count honest before anything is reserved.
uint64_t MinEncodedSize(ValueType type) {
  switch (type) {
    case ValueType::kU8:
    case ValueType::kI8:
    case ValueType::kBool: return 1;
    case ValueType::kU16:
    case ValueType::kI16: return 2;
    case ValueType::kU32:
    case ValueType::kI32:
    case ValueType::kF32: return 4;
    case ValueType::kU64:
    case ValueType::kI64:
    case ValueType::kF64: return 8;
    case ValueType::kString: return 8;  // the length
    case ValueType::kArray: return 12;  // element type + length
  }
  return 1;
}

// Minimal sizes of a metadata entry (key length, type, 1-byte value) and of a
// tensor info (name length, rank, one dimension, type, offset).
constexpr uint64_t kMinKeyValueBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;

// Pre-GGUF magics (llama.cpp's GGML, GGMF, GGJT and LoRA files), as the
// little-endian u32 those formats stored.
constexpr uint32_t kOldMagics[] = {0x67676d6c, 0x67676d66, 0x67676a74, 0x67676c61};

class Parser {
 public:
  Parser(const uint8_t* data, uint64_t size, const std::string& name)
      : data_(data), size_(size), name_(name) {}

  template <typename... Args>
  [[noreturn]] void Fail(Args&&... args) const {
    ThrowInputError(name_, ": ", std::forward<Args>(args)...);
  }

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }
  // What is being read, for messages about a file that ends too soon.
  void SetContext(std::string context) { context_ = std::move(context); }

  void Need(uint64_t bytes) const {
    if (bytes > remaining()) {
      Fail("file ends inside ", context_, " (needs ", bytes, " bytes at offset ",
           pos_, ", file is ", size_, " bytes)");
    }
  }

  uint64_t ReadLE(int bytes) {
    Need(static_cast<uint64_t>(bytes));
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | data_[pos_ + i];
    pos_ += static_cast<uint64_t>(bytes);
    return v;
  }
  uint8_t U8() { return static_cast<uint8_t>(ReadLE(1)); }
  uint16_t U16() { return static_cast<uint16_t>(ReadLE(2)); }
  uint32_t U32() { return static_cast<uint32_t>(ReadLE(4)); }
  uint64_t U64() { return ReadLE(8); }

  std::string String() {
    const uint64_t length = U64();
    if (length > remaining()) {
      Fail("string length ", length, " in ", context_, " runs past the end of the file (",
           remaining(), " bytes left at offset ", pos_, ")");
    }
    std::string s(reinterpret_cast<const char*>(data_ + pos_), length);
    pos_ += length;
    return s;
  }

  ValueType Type(const char* what) {
    const uint32_t id = U32();
    if (!IsKnownValueType(id)) Fail("unknown ", what, " type id ", id, " in ", context_);
    return static_cast<ValueType>(id);
  }

  Value ReadValue(ValueType type, uint32_t depth) {
    switch (type) {
      case ValueType::kU8: return {type, uint64_t{U8()}};
      case ValueType::kU16: return {type, uint64_t{U16()}};
      case ValueType::kU32: return {type, uint64_t{U32()}};
      case ValueType::kU64: return {type, U64()};
      case ValueType::kI8: return {type, int64_t{static_cast<int8_t>(U8())}};
      case ValueType::kI16: return {type, int64_t{static_cast<int16_t>(U16())}};
      case ValueType::kI32: return {type, int64_t{static_cast<int32_t>(U32())}};
      case ValueType::kI64: return {type, static_cast<int64_t>(U64())};
      case ValueType::kF32: {
        const uint32_t bits = U32();
        float f;
        std::memcpy(&f, &bits, sizeof(f));
        return {type, double{f}};
      }
      case ValueType::kF64: {
        const uint64_t bits = U64();
        double d;
        std::memcpy(&d, &bits, sizeof(d));
        return {type, d};
      }
      // Any non-zero byte reads as true, as llama.cpp's reader does.
      case ValueType::kBool: return {type, U8() != 0};
      case ValueType::kString: return {type, String()};
      case ValueType::kArray: return {type, ReadArray(depth + 1)};
    }
    Fail("unknown value type in ", context_);
  }

  Array ReadArray(uint32_t depth) {
    if (depth > kMaxArrayDepth) {
      Fail("arrays nested more than ", kMaxArrayDepth, " deep in ", context_);
    }
    Array array;
    array.element_type = Type("array element");
    const uint64_t count = U64();
    const uint64_t min_size = MinEncodedSize(array.element_type);
    if (count > remaining() / min_size) {
      Fail("array of ", count, " ", ValueTypeName(array.element_type), " elements in ",
           context_, " cannot fit in the ", remaining(), " bytes left at offset ", pos_);
    }
    array.elements.reserve(count);
    for (uint64_t i = 0; i < count; ++i) {
      array.elements.push_back(ReadValue(array.element_type, depth));
    }
    return array;
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  const std::string& name_;
  uint64_t pos_ = 0;
  std::string context_ = "the header";
};

std::string Hex(const uint8_t* bytes, size_t n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) out += ' ';
    out += kHex[bytes[i] >> 4];
    out += kHex[bytes[i] & 15];
  }
  return out;
}

void CheckMagicAndVersion(Parser& p, const uint8_t* bytes, uint64_t size) {
  if (size == 0) p.Fail("empty file, not a GGUF model");
  if (size < 4) p.Fail("too short to be a GGUF file (", size, " bytes)");
  const uint32_t magic = p.U32();
  if (magic != kMagic) {
    for (uint32_t old : kOldMagics) {
      if (magic == old) {
        p.Fail("not a GGUF file: it is an older GGML/GGJT model; convert it to GGUF");
      }
    }
    p.Fail("not a GGUF file (starts with bytes ", Hex(bytes, 4), ", expected 47 47 55 46)");
  }
}

}  // namespace

GgufFile::GgufFile(GgufFile&& other) noexcept { *this = std::move(other); }

GgufFile& GgufFile::operator=(GgufFile&& other) noexcept {
  if (this != &other) {
    name_ = std::move(other.name_);
    mapping_ = std::move(other.mapping_);
    owned_ = std::move(other.owned_);
    buffer_ = std::move(other.buffer_);
    bytes_ = std::exchange(other.bytes_, nullptr);
    size_ = std::exchange(other.size_, 0);
    version_ = other.version_;
    alignment_ = other.alignment_;
    data_offset_ = other.data_offset_;
    metadata_ = std::move(other.metadata_);
    tensors_ = std::move(other.tensors_);
    key_index_ = std::move(other.key_index_);
    tensor_index_ = std::move(other.tensor_index_);
    other.metadata_.clear();
    other.tensors_.clear();
    other.key_index_.clear();
    other.tensor_index_.clear();
  }
  return *this;
}

GgufFile::~GgufFile() = default;

GgufFile GgufFile::Open(const std::string& path) {
  GgufFile file;
  file.name_ = path;
  file.mapping_ = std::make_unique<MappedFile>(path);
  file.bytes_ = file.mapping_->data();
  file.size_ = file.mapping_->size();
  file.Parse(file.size_, /*bind_data=*/true);
  return file;
}

GgufFile GgufFile::FromBytes(std::vector<uint8_t> bytes, std::string name) {
  GgufFile file;
  file.name_ = std::move(name);
  file.owned_ = std::move(bytes);
  file.bytes_ = file.owned_.data();
  file.size_ = file.owned_.size();
  file.Parse(file.size_, /*bind_data=*/true);
  return file;
}

GgufFile GgufFile::FromBuffer(HugePageBuffer buffer, uint64_t size, std::string name) {
  if (size > buffer.size()) throw std::invalid_argument("GgufFile::FromBuffer: size past the buffer");
  GgufFile file;
  file.name_ = std::move(name);
  file.buffer_ = std::move(buffer);
  file.bytes_ = file.buffer_.data();
  file.size_ = size;
  file.Parse(file.size_, /*bind_data=*/true);
  return file;
}

GgufFile GgufFile::HeaderFromPrefix(std::vector<uint8_t> prefix, uint64_t image_size,
                                    std::string name) {
  GgufFile file;
  file.name_ = std::move(name);
  file.owned_ = std::move(prefix);
  file.bytes_ = file.owned_.data();
  file.size_ = file.owned_.size();
  file.Parse(image_size, /*bind_data=*/false);
  return file;
}

void GgufFile::Parse(uint64_t image_size, bool bind_data) {
  Parser p(bytes_, size_, name_);
  CheckMagicAndVersion(p, bytes_, size_);

  version_ = p.U32();
  if (version_ != 2 && version_ != 3) {
    const uint32_t swapped = __builtin_bswap32(version_);
    if (swapped >= 1 && swapped <= 3) {
      p.Fail("big-endian GGUF files are not supported (version field reads ", swapped,
             " byte-swapped); use a little-endian file");
    }
    if (version_ == 1) {
      p.Fail("GGUF version 1 is not supported (obsolete; re-convert the model to version 3)");
    }
    p.Fail("unsupported GGUF version ", version_, " (versions 2 and 3 can be read)");
  }

  p.SetContext("the header (tensor count)");
  const uint64_t n_tensors = p.U64();
  p.SetContext("the header (metadata count)");
  const uint64_t n_kv = p.U64();
  // Bound both counts by the bytes left before reserving anything.
  if (n_kv > p.remaining() / kMinKeyValueBytes) {
    p.Fail("header claims ", n_kv, " metadata entries but only ", p.remaining(),
           " bytes follow");
  }
  if (n_tensors > p.remaining() / kMinTensorInfoBytes) {
    p.Fail("header claims ", n_tensors, " tensors but only ", p.remaining(), " bytes follow");
  }
  uint64_t min_bytes = 0;
  if (!CheckedAdd(n_kv * kMinKeyValueBytes, n_tensors * kMinTensorInfoBytes, &min_bytes) ||
      min_bytes > p.remaining()) {
    p.Fail("header claims ", n_kv, " metadata entries and ", n_tensors,
           " tensors but only ", p.remaining(), " bytes follow");
  }

  metadata_.reserve(n_kv);
  key_index_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    p.SetContext(StrCat("the key of metadata entry ", i, " of ", n_kv));
    std::string key = p.String();
    if (key.empty()) p.Fail("metadata entry ", i, " has an empty key");
    const std::string quoted = StrCat("metadata key '", Printable(key), "'");
    p.SetContext(StrCat("the value of ", quoted));
    if (key_index_.count(key) != 0) p.Fail("duplicate ", quoted);
    const ValueType type = p.Type("value");
    Value value = p.ReadValue(type, 0);
    key_index_.emplace(key, metadata_.size());
    metadata_.push_back({std::move(key), std::move(value)});
  }

  alignment_ = kDefaultAlignment;
  if (const Value* align = Find("general.alignment")) {
    const auto v = align->AsUInt();
    if (align->type != ValueType::kU32 || !v.has_value()) {
      p.Fail("general.alignment must be a u32, not ", TypeDescription(*align));
    }
    if (*v == 0 || (*v & (*v - 1)) != 0) {
      p.Fail("general.alignment ", *v, " is not a non-zero power of two");
    }
    alignment_ = *v;
  }

  tensors_.reserve(n_tensors);
  tensor_index_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    p.SetContext(StrCat("the name of tensor ", i, " of ", n_tensors));
    TensorInfo t;
    t.name = p.String();
    if (t.name.empty()) p.Fail("tensor ", i, " has an empty name");
    const std::string quoted = StrCat("tensor '", Printable(t.name), "'");
    p.SetContext(StrCat("the info of ", quoted));
    if (tensor_index_.count(t.name) != 0) p.Fail("duplicate ", quoted);

    const uint32_t rank = p.U32();
    if (rank < 1 || rank > kMaxDims) {
      p.Fail(quoted, " has ", rank, " dimensions (1 to ", kMaxDims, " allowed)");
    }
    t.dims.resize(rank);
    for (uint64_t& d : t.dims) d = p.U64();
    // An empty dimension would also hide an overflowing product of the rest.
    for (uint32_t d = 0; d < rank; ++d) {
      if (t.dims[d] == 0) p.Fail(quoted, " has an empty dimension (dimension ", d, " is 0)");
    }
    const uint32_t type_id = p.U32();
    const TensorTypeInfo* info = FindGgufTensorType(type_id);
    if (info == nullptr) p.Fail(quoted, " has unknown tensor type id ", type_id);
    t.type = info->type;
    t.offset = p.U64();

    // ggml counts elements in int64_t; larger products are malformed.
    uint64_t elems = 1;
    for (uint64_t d : t.dims) {
      if (!CheckedMul(elems, d, &elems) ||
          elems > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        std::string shape;
        for (uint64_t e : t.dims) shape += StrCat(shape.empty() ? "" : " x ", e);
        p.Fail(quoted, " has dimensions ", shape, " whose element count overflows");
      }
    }
    t.n_elements = elems;
    if (t.dims[0] % info->block_elems != 0) {
      p.Fail(quoted, " has rows of ", t.dims[0], " elements, not a whole number of ",
             info->name, " blocks (", info->block_elems, " elements each)");
    }
    if (!TensorTypeBytes(t.type, elems, &t.n_bytes)) {
      p.Fail(quoted, " data size overflows (", elems, " ", info->name, " elements)");
    }
    if (t.offset % alignment_ != 0) {
      p.Fail(quoted, " data offset ", t.offset, " is not a multiple of the alignment ",
             alignment_);
    }
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  if (!CheckedAlignUp(p.pos(), alignment_, &data_offset_)) {
    p.Fail("data section offset overflows");
  }

  for (TensorInfo& t : tensors_) {
    uint64_t start = 0;
    uint64_t end = 0;
    if (!CheckedAdd(data_offset_, t.offset, &start) || !CheckedAdd(start, t.n_bytes, &end)) {
      p.Fail("tensor '", Printable(t.name), "' data extent overflows (offset ", t.offset,
             ", ", t.n_bytes, " bytes)");
    }
    if (end > image_size) {
      p.Fail("tensor '", Printable(t.name), "' data ends at byte ", end,
             " past the end of the file (", image_size, " bytes)");
    }
    t.data = bind_data ? bytes_ + start : nullptr;
  }

  // Tensors may be stored in any order but must not share bytes.
  std::vector<size_t> order(tensors_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [this](size_t a, size_t b) {
    return tensors_[a].offset < tensors_[b].offset;
  });
  const TensorInfo* previous = nullptr;
  for (size_t index : order) {
    const TensorInfo& t = tensors_[index];
    if (t.n_bytes == 0) continue;
    if (previous != nullptr && t.offset < previous->offset + previous->n_bytes) {
      p.Fail("tensors '", Printable(previous->name), "' and '", Printable(t.name),
             "' overlap (data at offsets ", previous->offset, " and ", t.offset, ")");
    }
    previous = &t;
  }
}

const Value* GgufFile::Find(std::string_view key) const {
  const auto it = key_index_.find(std::string(key));
  return it == key_index_.end() ? nullptr : &metadata_[it->second].value;
}

void GgufFile::ReplaceTensorData(std::string_view name, const uint8_t* data) {
  for (TensorInfo& t : tensors_) {
    if (t.name == name) {
      t.data = data;
      return;
    }
  }
  throw std::invalid_argument(StrCat("ReplaceTensorData: no tensor '", name, "'"));
}

const TensorInfo* GgufFile::FindTensor(std::string_view name) const {
  const auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

[[noreturn]] void WrongType(const std::string& file, std::string_view key,
                            const Value& value, const char* expected) {
  ThrowInputError(file, ": metadata key '", Printable(key), "' is ",
                  TypeDescription(value), ", expected ", expected);
}

// Integer or float array element as double; nullopt for other kinds.
std::optional<double> NumberOf(const Value& v) {
  if (auto f = v.AsFloat()) return *f;
  if (auto i = v.AsInt()) return static_cast<double>(*i);
  if (auto u = v.AsUInt()) return static_cast<double>(*u);
  return std::nullopt;
}

bool IsNumericType(ValueType type) {
  return IsUnsignedValueType(type) || IsSignedValueType(type) || IsFloatValueType(type);
}

}  // namespace

std::optional<std::string> GgufFile::GetString(std::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return std::nullopt;
  const std::string* s = v->AsString();
  if (s == nullptr) WrongType(name_, key, *v, "string");
  return *s;
}

std::optional<uint64_t> GgufFile::GetUInt(std::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return std::nullopt;
  if (auto u = v->AsUInt()) return u;
  if (auto i = v->AsInt()) {
    ThrowInputError(name_, ": metadata key '", Printable(key), "' is negative (", *i, ")");
  }
  WrongType(name_, key, *v, "an unsigned integer");
}

std::optional<double> GgufFile::GetFloat(std::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return std::nullopt;
  if (auto d = NumberOf(*v)) return d;
  WrongType(name_, key, *v, "a number");
}

std::optional<bool> GgufFile::GetBool(std::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return std::nullopt;
  if (auto b = v->AsBool()) return b;
  WrongType(name_, key, *v, "bool");
}

std::vector<std::string> GgufFile::GetStringArray(std::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return {};
  const Array* array = v->AsArray();
  if (array == nullptr || array->element_type != ValueType::kString) {
    WrongType(name_, key, *v, "array of string");
  }
  std::vector<std::string> out;
  out.reserve(array->elements.size());
  for (const Value& e : array->elements) {
    const std::string* s = e.AsString();
    if (s == nullptr) WrongType(name_, key, *v, "array of string");
    out.push_back(*s);
  }
  return out;
}

std::vector<float> GgufFile::GetFloatArray(std::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return {};
  const Array* array = v->AsArray();
  if (array == nullptr || !IsNumericType(array->element_type)) {
    WrongType(name_, key, *v, "array of numbers");
  }
  std::vector<float> out;
  out.reserve(array->elements.size());
  for (const Value& e : array->elements) {
    const auto d = NumberOf(e);
    if (!d.has_value()) WrongType(name_, key, *v, "array of numbers");
    out.push_back(static_cast<float>(*d));
  }
  return out;
}

std::vector<int64_t> GgufFile::GetIntArray(std::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return {};
  const Array* array = v->AsArray();
  if (array == nullptr || !(IsUnsignedValueType(array->element_type) ||
                            IsSignedValueType(array->element_type))) {
    WrongType(name_, key, *v, "array of integers");
  }
  std::vector<int64_t> out;
  out.reserve(array->elements.size());
  for (size_t i = 0; i < array->elements.size(); ++i) {
    const auto x = array->elements[i].AsInt();
    if (!x.has_value()) {
      ThrowInputError(name_, ": metadata key '", Printable(key), "' element ", i,
                      " does not fit in a signed 64-bit integer");
    }
    out.push_back(*x);
  }
  return out;
}

uint64_t TensorInfo::rows() const {
  uint64_t rows = 1;
  for (size_t i = 1; i < dims.size(); ++i) rows *= dims[i];  // checked at load
  return rows;
}

}  // namespace sparrow::gguf
