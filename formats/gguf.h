// GGUF (v2 and v3) reading and writing.
//
// The reader maps the file and validates everything before anything is used:
// magic, version, every count, string length, array length, type id, tensor
// rank and shape, data offset, alignment and the extent of each tensor's
// data, all with overflow-checked arithmetic. Any failure is an InputError
// whose one-line message names the file and what is wrong.
//
// The writer streams: metadata and tensor infos first, then tensor data in
// declaration order, fed in chunks of any size, so a file far larger than RAM
// can be produced. It writes to a temporary file beside the target and
// renames it into place only in Finish().
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "base/huge_pages.h"
#include "base/mapped_file.h"
#include "base/output_file.h"
#include "base/tensor_type.h"

namespace sparrow::gguf {

inline constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
inline constexpr uint64_t kDefaultAlignment = 32;
inline constexpr uint32_t kMaxDims = 4;
// Arrays may hold arrays; deeper nesting than this is rejected (no real file
// nests at all, and unbounded recursion would let a file exhaust the stack).
inline constexpr uint32_t kMaxArrayDepth = 8;

enum class ValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

std::string_view ValueTypeName(ValueType type);
bool IsKnownValueType(uint32_t id);
bool IsUnsignedValueType(ValueType type);  // u8, u16, u32, u64
bool IsSignedValueType(ValueType type);    // i8, i16, i32, i64
bool IsFloatValueType(ValueType type);     // f32, f64

// `text` made safe for a one-line message: control bytes and backslashes are
// escaped (\x0a, \\) and anything past `max_bytes` becomes "...". Names and
// keys come from files, so every message that quotes one goes through this.
std::string Printable(std::string_view text, size_t max_bytes = 96);

struct Value;
// An array's elements all share `element_type`.
struct Array {
  ValueType element_type = ValueType::kU8;
  std::vector<Value> elements;
};

// A metadata value. Integers keep their GGUF type in `type` and their value in
// the widest representation of their signedness.
struct Value {
  ValueType type = ValueType::kU8;
  std::variant<uint64_t, int64_t, double, bool, std::string, Array> data;

  static Value U32(uint32_t v) { return {ValueType::kU32, uint64_t{v}}; }
  static Value U64(uint64_t v) { return {ValueType::kU64, v}; }
  static Value I32(int32_t v) { return {ValueType::kI32, int64_t{v}}; }
  static Value F32(float v) { return {ValueType::kF32, double{v}}; }
  static Value Bool(bool v) { return {ValueType::kBool, v}; }
  static Value String(std::string v) { return {ValueType::kString, std::move(v)}; }
  static Value StringArray(const std::vector<std::string>& v);
  static Value F32Array(const std::vector<float>& v);
  static Value I32Array(const std::vector<int32_t>& v);

  // Conversions that never throw: nullopt when the value is not of a
  // compatible kind (or a negative integer asked for as unsigned).
  std::optional<uint64_t> AsUInt() const;
  std::optional<int64_t> AsInt() const;  // nullopt if a u64 exceeds INT64_MAX
  std::optional<double> AsFloat() const;  // f32, f64
  std::optional<bool> AsBool() const;
  const std::string* AsString() const;
  const Array* AsArray() const;
};

// "u32", "string", "array of f32", ... for messages.
std::string TypeDescription(const Value& value);

struct KeyValue {
  std::string key;
  Value value;
};

struct TensorInfo {
  std::string name;
  // dims[0] is the innermost (contiguous) dimension: a 2-D weight of
  // `rows` x `cols` has dims = {cols, rows}; each row is dims[0] elements.
  std::vector<uint64_t> dims;
  TensorType type = TensorType::kF32;
  uint64_t offset = 0;      // relative to the data section
  uint64_t n_elements = 0;  // product of dims
  uint64_t n_bytes = 0;     // size of the data
  const uint8_t* data = nullptr;  // into the mapping; valid while the file is

  uint64_t rows() const;  // product of dims[1..]
  uint64_t row_elems() const { return dims.empty() ? 1 : dims[0]; }
};

class GgufFile {
 public:
  // Maps and validates `path`.
  static GgufFile Open(const std::string& path);
  // Validates an in-memory image (tests, fuzzers). `name` is used in messages.
  static GgufFile FromBytes(std::vector<uint8_t> bytes, std::string name);
  // The same for an image in the first `size` bytes of an anonymous mapping
  // (a bundle's resident section): pages of it never written stay unbacked.
  static GgufFile FromBuffer(HugePageBuffer buffer, uint64_t size, std::string name);
  // The header alone (metadata and tensor infos) from the first bytes of an
  // image of `image_size` bytes: tensor extents are checked against
  // image_size, TensorInfo::data stays null, file_size() is the prefix's.
  // InputError as FromBytes gives, also when the header runs past `prefix`
  // (a longer prefix may then parse).
  static GgufFile HeaderFromPrefix(std::vector<uint8_t> prefix, uint64_t image_size,
                                   std::string name);

  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  ~GgufFile();

  const std::string& name() const { return name_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return size_; }
  const uint8_t* file_data() const { return bytes_; }

  const std::vector<KeyValue>& metadata() const { return metadata_; }
  const Value* Find(std::string_view key) const;

  // Typed lookups. Absent key: nullopt / empty. Present with an incompatible
  // type: InputError naming the key and both types. GetUInt takes any integer
  // type (a negative value is an error); GetFloat and GetFloatArray take
  // floats and integers; GetIntArray takes any integer element type.
  std::optional<std::string> GetString(std::string_view key) const;
  std::optional<uint64_t> GetUInt(std::string_view key) const;
  std::optional<double> GetFloat(std::string_view key) const;
  std::optional<bool> GetBool(std::string_view key) const;
  std::vector<std::string> GetStringArray(std::string_view key) const;
  std::vector<float> GetFloatArray(std::string_view key) const;
  std::vector<int64_t> GetIntArray(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* FindTensor(std::string_view name) const;
  // Points tensor `name` at other bytes of the same type and size (weights
  // fused with a LoRA adapter); the caller keeps them alive as long as this
  // file is used. std::invalid_argument if there is no such tensor.
  void ReplaceTensorData(std::string_view name, const uint8_t* data);

 private:
  GgufFile() = default;
  // Parses the header from bytes_[0, size_); tensors must end by
  // `image_size`; their data pointers are set only when `bind_data`.
  void Parse(uint64_t image_size, bool bind_data);

  std::string name_;
  std::unique_ptr<MappedFile> mapping_;  // set for Open()
  std::vector<uint8_t> owned_;           // set for FromBytes() and HeaderFromPrefix()
  HugePageBuffer buffer_;                // set for FromBuffer()
  const uint8_t* bytes_ = nullptr;
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<KeyValue> metadata_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> key_index_;     // into metadata_
  std::unordered_map<std::string, size_t> tensor_index_;  // into tensors_
};

class GgufWriter {
 public:
  // Nothing touches `path` until Finish(); data goes to a temporary file in
  // the same directory. Throws InputError if that cannot be created.
  explicit GgufWriter(std::string path, uint64_t alignment = kDefaultAlignment);
  // Writes the image into `file` at its current position instead (a GGUF
  // image embedded in a larger file, e.g. a bundle's resident section). The
  // image's offsets are relative to that position, so it should be a
  // multiple of `alignment`. The caller keeps the file: Finish() only
  // flushes it (no sync, close or rename), and nothing is removed on failure.
  // `name` is used in messages.
  GgufWriter(std::FILE* file, std::string name, uint64_t alignment = kDefaultAlignment);
  GgufWriter(const GgufWriter&) = delete;
  GgufWriter& operator=(const GgufWriter&) = delete;
  // Removes the temporary file unless Finish() succeeded.
  ~GgufWriter();

  // Metadata and tensor declarations; only before the first WriteTensorData.
  void Add(std::string key, Value value);
  // dims as in TensorInfo (dims[0] innermost).
  void AddTensor(std::string name, std::vector<uint64_t> dims, TensorType type);

  // Appends bytes of the tensors' data, in declaration order; a tensor may be
  // fed in any number of chunks and chunks may span tensors. Padding between
  // tensors is inserted automatically.
  void WriteTensorData(const void* data, size_t bytes);

  // Checks that exactly all declared data was written, flushes, and renames
  // the temporary file to the target path.
  void Finish();

 private:
  void WriteHeader();

  std::string path_;
  std::unique_ptr<TempFile> tmp_;  // when writing to a path of its own
  std::FILE* file_ = nullptr;
  bool owns_file_ = true;
  uint64_t alignment_;
  std::vector<KeyValue> metadata_;
  struct PendingTensor {
    std::string name;
    std::vector<uint64_t> dims;
    TensorType type;
    uint64_t offset;
    uint64_t n_bytes;
  };
  std::vector<PendingTensor> tensors_;
  bool header_written_ = false;
  bool finished_ = false;
  size_t current_tensor_ = 0;
  uint64_t written_in_tensor_ = 0;
};

}  // namespace sparrow::gguf
