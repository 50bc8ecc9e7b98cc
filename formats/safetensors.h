// Hugging Face's safetensors format, read for PEFT adapters
// (formats/lora_adapter.h): an 8-byte little-endian header length N, N bytes
// of JSON mapping each tensor name to {"dtype", "shape", "data_offsets"}
// (offsets relative to the byte after the header; an optional
// "__metadata__" object of strings), then the data.
//
// Every field is validated before any data is used: a header length past
// the file or over 100 MiB, JSON that does not parse, unknown fields or
// dtypes, shapes whose element count overflows or disagrees with the byte
// range, ranges outside the data or overlapping, duplicate names. Each is
// an InputError with one line naming the file.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace sparrow::safetensors {

enum class DType { kF32, kF16, kBF16 };
std::string_view DTypeName(DType dtype);

struct Tensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<uint64_t> shape;  // outermost first (row-major)
  uint64_t n_elements = 0;
  const uint8_t* data = nullptr;  // into the file's bytes
  uint64_t n_bytes = 0;
};

class SafetensorsFile {
 public:
  // Reads the whole file (adapters are small; files over 4 GiB are refused).
  static SafetensorsFile Open(const std::string& path);
  // Validates an in-memory image (tests, the fuzzer); `name` in messages.
  static SafetensorsFile FromBytes(std::vector<uint8_t> bytes, std::string name);

  const std::string& name() const { return name_; }
  // In file-offset order.
  const std::vector<Tensor>& tensors() const { return tensors_; }
  const Tensor* Find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  void Parse();

  std::string name_;
  std::vector<uint8_t> bytes_;
  std::vector<Tensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace sparrow::safetensors
