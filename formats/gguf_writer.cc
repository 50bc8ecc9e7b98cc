// GGUF writer (version 3, little-endian). Streams: the header goes out before
// the first tensor byte, data follows in declaration order with padding to
// the alignment after every tensor, and nothing appears at the target path
// until Finish() has flushed, synced and renamed the temporary file.
//
// Misuse by the caller (wrong call order, more or fewer bytes than declared,
// malformed Values) is a std::logic_error; a shape the type cannot hold is an
// InputError since it usually comes from a user's flags; I/O failures are
// InputErrors naming the path.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <unordered_set>

#include "base/checked_math.h"
#include "base/error.h"
#include "formats/gguf.h"

namespace sparrow::gguf {
namespace {

constexpr uint32_t kWriteVersion = 3;
constexpr size_t kBufferBytes = size_t{1} << 20;

[[noreturn]] void Misuse(const std::string& path, const std::string& what) {
  throw std::logic_error(StrCat("GGUF writer for '", path, "': ", what));
}

// Checks that `value` can be encoded as its type says: integers in range,
// the variant holding the kind the type needs, arrays homogeneous and not
// nested deeper than a reader accepts.
void CheckValue(const std::string& path, const std::string& key, const Value& value,
                uint32_t depth) {
  const auto bad = [&](const std::string& why) {
    Misuse(path, StrCat("metadata key '", Printable(key), "': ", why));
  };
  const ValueType t = value.type;
  if (IsUnsignedValueType(t)) {
    const auto* u = std::get_if<uint64_t>(&value.data);
    if (u == nullptr) bad(StrCat(ValueTypeName(t), " value does not hold an unsigned integer"));
    const uint64_t max = t == ValueType::kU8    ? 0xff
                         : t == ValueType::kU16 ? 0xffff
                         : t == ValueType::kU32 ? 0xffffffffu
                                                : std::numeric_limits<uint64_t>::max();
    if (*u > max) bad(StrCat(*u, " does not fit in ", ValueTypeName(t)));
  } else if (IsSignedValueType(t)) {
    const auto* i = std::get_if<int64_t>(&value.data);
    if (i == nullptr) bad(StrCat(ValueTypeName(t), " value does not hold a signed integer"));
    const int bits = t == ValueType::kI8 ? 8 : t == ValueType::kI16 ? 16 : t == ValueType::kI32 ? 32 : 64;
    if (bits < 64) {
      const int64_t lo = -(int64_t{1} << (bits - 1));
      const int64_t hi = (int64_t{1} << (bits - 1)) - 1;
      if (*i < lo || *i > hi) bad(StrCat(*i, " does not fit in ", ValueTypeName(t)));
    }
  } else if (IsFloatValueType(t)) {
    if (std::get_if<double>(&value.data) == nullptr) bad("float value does not hold a double");
  } else if (t == ValueType::kBool) {
    if (std::get_if<bool>(&value.data) == nullptr) bad("bool value does not hold a bool");
  } else if (t == ValueType::kString) {
    if (std::get_if<std::string>(&value.data) == nullptr) bad("string value does not hold a string");
  } else if (t == ValueType::kArray) {
    const Array* array = std::get_if<Array>(&value.data);
    if (array == nullptr) bad("array value does not hold an array");
    if (depth + 1 > kMaxArrayDepth) bad(StrCat("arrays nested more than ", kMaxArrayDepth, " deep"));
    if (!IsKnownValueType(static_cast<uint32_t>(array->element_type))) bad("unknown element type");
    for (const Value& e : array->elements) {
      if (e.type != array->element_type) {
        bad(StrCat("array of ", ValueTypeName(array->element_type), " holds a ",
                   ValueTypeName(e.type)));
      }
      CheckValue(path, key, e, depth + 1);
    }
  } else {
    bad(StrCat("unknown value type id ", static_cast<uint32_t>(t)));
  }
}

}  // namespace

namespace {

void CheckAlignment(const std::string& path, uint64_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 ||
      alignment > std::numeric_limits<uint32_t>::max()) {
    ThrowInputError("cannot write '", path, "': alignment ", alignment,
                    " is not a power of two that fits in 32 bits");
  }
}

}  // namespace

GgufWriter::GgufWriter(std::FILE* file, std::string name, uint64_t alignment)
    : path_(std::move(name)), file_(file), owns_file_(false), alignment_(alignment) {
  CheckAlignment(path_, alignment_);
  if (file_ == nullptr) Misuse(path_, "null FILE");
}

GgufWriter::GgufWriter(std::string path, uint64_t alignment)
    : path_(std::move(path)), alignment_(alignment) {
  CheckAlignment(path_, alignment_);
  tmp_ = std::make_unique<TempFile>(path_);
  file_ = ::fdopen(tmp_->fd(), "wb");
  if (file_ == nullptr) {
    const int err = errno;
    ThrowInputError("cannot write '", path_, "': ", std::strerror(err));
  }
  (void)tmp_->ReleaseFd();  // the stream owns it now
  std::setvbuf(file_, nullptr, _IOFBF, kBufferBytes);
}

GgufWriter::~GgufWriter() {
  if (file_ != nullptr && owns_file_) std::fclose(file_);
  // tmp_ removes the temporary file unless Finish() committed it.
}

void GgufWriter::Add(std::string key, Value value) {
  if (header_written_) Misuse(path_, StrCat("metadata '", Printable(key), "' added after tensor data"));
  if (key.empty()) Misuse(path_, "empty metadata key");
  for (const KeyValue& kv : metadata_) {
    if (kv.key == key) Misuse(path_, StrCat("metadata key '", Printable(key), "' added twice"));
  }
  CheckValue(path_, key, value, 0);
  if (key == "general.alignment" &&
      (value.type != ValueType::kU32 || value.AsUInt() != alignment_)) {
    Misuse(path_, StrCat("general.alignment must be the u32 the writer was created with (",
                         alignment_, ")"));
  }
  metadata_.push_back({std::move(key), std::move(value)});
}

void GgufWriter::AddTensor(std::string name, std::vector<uint64_t> dims, TensorType type) {
  if (header_written_) Misuse(path_, StrCat("tensor '", Printable(name), "' added after tensor data"));
  if (name.empty()) Misuse(path_, "empty tensor name");
  for (const PendingTensor& t : tensors_) {
    if (t.name == name) Misuse(path_, StrCat("tensor '", Printable(name), "' added twice"));
  }
  const TensorTypeInfo* info = FindGgufTensorType(static_cast<uint32_t>(type));
  if (info == nullptr) Misuse(path_, StrCat("tensor '", Printable(name), "' has an unknown type"));
  const std::string what = StrCat("cannot write tensor '", Printable(name), "' to '", path_, "': ");
  if (dims.empty() || dims.size() > kMaxDims) {
    ThrowInputError(what, dims.size(), " dimensions (1 to ", kMaxDims, " allowed)");
  }
  uint64_t elems = 1;
  for (uint64_t d : dims) {
    if (d == 0) ThrowInputError(what, "a dimension is 0");
    if (!CheckedMul(elems, d, &elems) ||
        elems > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      ThrowInputError(what, "element count overflows");
    }
  }
  if (dims[0] % info->block_elems != 0) {
    ThrowInputError(what, "rows of ", dims[0], " elements are not a whole number of ",
                    info->name, " blocks (", info->block_elems, " elements each)");
  }
  uint64_t bytes = 0;
  uint64_t offset = 0;
  if (!TensorTypeBytes(type, elems, &bytes) ||
      !CheckedAlignUp(tensors_.empty() ? 0 : tensors_.back().offset + tensors_.back().n_bytes,
                      alignment_, &offset) ||
      offset + bytes < offset) {
    ThrowInputError(what, "data size overflows");
  }
  tensors_.push_back({std::move(name), std::move(dims), type, offset, bytes});
}

namespace {

class Sink {
 public:
  Sink(std::FILE* file, const std::string& path) : file_(file), path_(path) {}
  void Bytes(const void* data, size_t n) {
    if (n != 0 && std::fwrite(data, 1, n, file_) != n) {
      const int err = errno;
      ThrowInputError("cannot write '", path_, "': ", std::strerror(err));
    }
    written_ += n;
  }
  void LE(uint64_t v, int bytes) {
    uint8_t buf[8];
    for (int i = 0; i < bytes; ++i) buf[i] = static_cast<uint8_t>(v >> (8 * i));
    Bytes(buf, static_cast<size_t>(bytes));
  }
  void U32(uint32_t v) { LE(v, 4); }
  void U64(uint64_t v) { LE(v, 8); }
  void String(const std::string& s) {
    U64(s.size());
    Bytes(s.data(), s.size());
  }
  void Zeros(uint64_t n) {
    static constexpr uint8_t kZeros[256] = {};
    while (n > 0) {
      const size_t chunk = n < sizeof(kZeros) ? static_cast<size_t>(n) : sizeof(kZeros);
      Bytes(kZeros, chunk);
      n -= chunk;
    }
  }
  void WriteValue(const Value& v) {
    switch (v.type) {
      case ValueType::kU8: LE(std::get<uint64_t>(v.data), 1); break;
      case ValueType::kU16: LE(std::get<uint64_t>(v.data), 2); break;
      case ValueType::kU32: LE(std::get<uint64_t>(v.data), 4); break;
      case ValueType::kU64: LE(std::get<uint64_t>(v.data), 8); break;
      case ValueType::kI8: LE(static_cast<uint64_t>(std::get<int64_t>(v.data)), 1); break;
      case ValueType::kI16: LE(static_cast<uint64_t>(std::get<int64_t>(v.data)), 2); break;
      case ValueType::kI32: LE(static_cast<uint64_t>(std::get<int64_t>(v.data)), 4); break;
      case ValueType::kI64: LE(static_cast<uint64_t>(std::get<int64_t>(v.data)), 8); break;
      case ValueType::kF32: {
        const float f = static_cast<float>(std::get<double>(v.data));
        uint32_t bits;
        std::memcpy(&bits, &f, sizeof(bits));
        U32(bits);
        break;
      }
      case ValueType::kF64: {
        uint64_t bits;
        const double d = std::get<double>(v.data);
        std::memcpy(&bits, &d, sizeof(bits));
        U64(bits);
        break;
      }
      case ValueType::kBool: LE(std::get<bool>(v.data) ? 1 : 0, 1); break;
      case ValueType::kString: String(std::get<std::string>(v.data)); break;
      case ValueType::kArray: {
        const Array& array = std::get<Array>(v.data);
        U32(static_cast<uint32_t>(array.element_type));
        U64(array.elements.size());
        for (const Value& e : array.elements) WriteValue(e);
        break;
      }
    }
  }
  uint64_t written() const { return written_; }

 private:
  std::FILE* file_;
  const std::string& path_;
  uint64_t written_ = 0;
};

}  // namespace

void GgufWriter::WriteHeader() {
  if (alignment_ != kDefaultAlignment) {
    bool present = false;
    for (const KeyValue& kv : metadata_) present |= kv.key == "general.alignment";
    if (!present) metadata_.push_back({"general.alignment", Value::U32(static_cast<uint32_t>(alignment_))});
  }
  Sink out(file_, path_);
  out.U32(kMagic);
  out.U32(kWriteVersion);
  out.U64(tensors_.size());
  out.U64(metadata_.size());
  for (const KeyValue& kv : metadata_) {
    out.String(kv.key);
    out.U32(static_cast<uint32_t>(kv.value.type));
    out.WriteValue(kv.value);
  }
  for (const PendingTensor& t : tensors_) {
    out.String(t.name);
    out.U32(static_cast<uint32_t>(t.dims.size()));
    for (uint64_t d : t.dims) out.U64(d);
    out.U32(static_cast<uint32_t>(t.type));
    out.U64(t.offset);
  }
  uint64_t data_offset = 0;
  if (!CheckedAlignUp(out.written(), alignment_, &data_offset)) Misuse(path_, "header too large");
  if (tmp_ != nullptr && !tensors_.empty()) {
    // The whole file's size is known now: refuse before writing gigabytes
    // into a file system that cannot hold them.
    const uint64_t data = tensors_.back().offset + tensors_.back().n_bytes;
    uint64_t total = 0;
    if (!CheckedAdd(data_offset, data, &total)) ThrowInputError(path_, ": data size overflows");
    CheckFreeSpace(path_, total);
  }
  out.Zeros(data_offset - out.written());
  header_written_ = true;
  current_tensor_ = 0;
  written_in_tensor_ = 0;
}

void GgufWriter::WriteTensorData(const void* data, size_t bytes) {
  if (finished_ || file_ == nullptr) Misuse(path_, "tensor data written after Finish()");
  if (!header_written_) WriteHeader();
  Sink out(file_, path_);
  const auto* p = static_cast<const uint8_t*>(data);
  while (bytes > 0) {
    // Skip past tensors already complete (including empty ones), padding
    // each to the alignment.
    while (current_tensor_ < tensors_.size() &&
           written_in_tensor_ == tensors_[current_tensor_].n_bytes) {
      const PendingTensor& t = tensors_[current_tensor_];
      uint64_t padded = 0;
      if (!CheckedAlignUp(t.n_bytes, alignment_, &padded)) Misuse(path_, "tensor size overflows");
      out.Zeros(padded - t.n_bytes);
      ++current_tensor_;
      written_in_tensor_ = 0;
    }
    if (current_tensor_ == tensors_.size()) {
      Misuse(path_, StrCat(bytes, " bytes of tensor data written beyond the declared tensors"));
    }
    const uint64_t left = tensors_[current_tensor_].n_bytes - written_in_tensor_;
    const size_t chunk = left < bytes ? static_cast<size_t>(left) : bytes;
    out.Bytes(p, chunk);
    p += chunk;
    bytes -= chunk;
    written_in_tensor_ += chunk;
  }
}

void GgufWriter::Finish() {
  if (finished_ || file_ == nullptr) Misuse(path_, "Finish() called twice");
  if (!header_written_) WriteHeader();
  // Close out the tensors still owed: only empty ones may remain.
  Sink out(file_, path_);
  while (current_tensor_ < tensors_.size()) {
    const PendingTensor& t = tensors_[current_tensor_];
    if (written_in_tensor_ != t.n_bytes) {
      Misuse(path_, StrCat("tensor '", Printable(t.name), "' got ", written_in_tensor_,
                           " of its ", t.n_bytes, " bytes before Finish()"));
    }
    uint64_t padded = 0;
    if (!CheckedAlignUp(t.n_bytes, alignment_, &padded)) Misuse(path_, "tensor size overflows");
    out.Zeros(padded - t.n_bytes);
    ++current_tensor_;
    written_in_tensor_ = 0;
  }
  std::FILE* file = file_;
  file_ = nullptr;
  if (!owns_file_) {
    if (std::fflush(file) != 0) {
      const int err = errno;
      ThrowInputError("cannot write '", path_, "': ", std::strerror(err));
    }
    finished_ = true;
    return;
  }
  bool ok = std::fflush(file) == 0;
  int err = ok ? 0 : errno;
  if (ok && ::fsync(::fileno(file)) != 0) {
    ok = false;
    err = errno;
  }
  if (std::fclose(file) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (!ok) ThrowInputError("cannot write '", path_, "': ", std::strerror(err));
  tmp_->Commit();
  finished_ = true;
}

}  // namespace sparrow::gguf
