// The safetensors reader: valid files read back, every malformation refused
// with one line naming the problem.
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "base/error.h"
#include "formats/safetensors.h"
#include "tests/error_test_util.h"
#include "tests/shared_path.h"

namespace sparrow::safetensors {
namespace {

using testing::Contains;
using testing::ErrorOf;

// An image with `header` as its JSON and `data` after it.
std::vector<uint8_t> Image(const std::string& header, const std::vector<uint8_t>& data = {}) {
  std::vector<uint8_t> out(8);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(uint64_t{header.size()} >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::string ErrorFor(const std::vector<uint8_t>& bytes) {
  return ErrorOf([&] { SafetensorsFile::FromBytes(bytes, "t.safetensors"); });
}

TEST_CASE("safetensors: tensors, dtypes, shapes and metadata read back") {
  std::vector<uint8_t> data(4 * 6 + 2 * 3 + 2 * 2);
  const float f[6] = {1.0f, -2.5f, 0.0f, 3.0f, 4.0f, 5.0f};
  std::memcpy(data.data(), f, sizeof(f));
  const std::string header =
      R"({"__metadata__": {"format": "pt"},)"
      R"( "b.weight": {"dtype": "F16", "shape": [3], "data_offsets": [24, 30]},)"
      R"( "a.weight": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},)"
      R"( "c": {"dtype": "BF16", "shape": [2, 1], "data_offsets": [30, 34]}}   )";
  const SafetensorsFile file = SafetensorsFile::FromBytes(Image(header, data), "t.safetensors");
  REQUIRE(file.tensors().size() == 3);
  CHECK(file.tensors()[0].name == "a.weight");  // file-offset order
  const Tensor* a = file.Find("a.weight");
  REQUIRE(a != nullptr);
  CHECK(a->dtype == DType::kF32);
  CHECK(a->shape == std::vector<uint64_t>{2, 3});
  CHECK(a->n_elements == 6);
  CHECK(a->n_bytes == 24);
  float back[6];
  std::memcpy(back, a->data, sizeof(back));
  CHECK(back[1] == -2.5f);
  CHECK(file.Find("b.weight")->dtype == DType::kF16);
  CHECK(file.Find("c")->dtype == DType::kBF16);
  CHECK(file.Find("missing") == nullptr);
  CHECK(file.metadata().at("format") == "pt");
  CHECK(DTypeName(DType::kBF16) == "BF16");
}

TEST_CASE("safetensors: malformed files are refused with one line naming the problem") {
  const std::vector<uint8_t> data(8);
  struct Case {
    const char* what;
    std::vector<uint8_t> bytes;
    const char* message;
  };
  std::vector<uint8_t> huge(16, 0);
  huge[7] = 0x40;  // 2^62
  const std::vector<Case> cases = {
      {"too short", {1, 2, 3}, "only 3 bytes"},
      {"zero header length", std::vector<uint8_t>(8, 0), "header length 0"},
      {"huge header length", huge, "does not fit"},
      {"bad JSON", Image("{\"a\": "), "not valid JSON"},
      {"not an object", Image("[1, 2]"), "not a JSON object"},
      {"tensor not an object", Image(R"({"a": 3})"), "is not an object"},
      {"unknown field", Image(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "x": 1}})", data),
       "unknown field 'x'"},
      {"unsupported dtype", Image(R"({"a": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})", data),
       "dtype 'I64' is not supported"},
      {"missing dtype", Image(R"({"a": {"shape": [1], "data_offsets": [0, 4]}})", data), "lacks a dtype"},
      {"negative dim", Image(R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", data),
       "not a count"},
      {"too many dims",
       Image(R"({"a": {"dtype": "F32", "shape": [1,1,1,1,1,1,1,1,1], "data_offsets": [0, 4]}})", data),
       "at most 8 dimensions"},
      {"count overflow",
       Image(R"({"a": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]}})", data),
       "overflows"},
      {"offsets reversed", Image(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})", data),
       "outside"},
      {"offsets past the data", Image(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", data),
       "outside the 8 bytes"},
      {"size mismatch", Image(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 8]}})", data),
       "8 bytes for 1 F32"},
      {"overlap",
       Image(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "b": {"dtype": "F32", "shape": [1], "data_offsets": [2, 6]}})",
             data),
       "overlap"},
      {"duplicate name",
       Image(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
             data),
       "appears twice"},
      {"metadata not strings", Image(R"({"__metadata__": {"k": 1}})"), "is not a string"},
      {"NUL in the header", Image(std::string("{}\0{\"a\": 1}", 11)), "NUL byte"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    const std::string msg = ErrorFor(c.bytes);
    CHECK(Contains(msg, c.message));
    CHECK(Contains(msg, "t.safetensors"));
    CHECK(msg.find('\n') == std::string::npos);
  }
}

// A parser callback made this quadratic (minutes for a 100 MiB header);
// the reader must stay linear in the number of tensors.
TEST_CASE("safetensors: a header with 200000 tensors reads in linear time") {
  std::string header = "{";
  const size_t n = 200000;
  for (size_t i = 0; i < n; ++i) {
    header += "\"t" + std::to_string(i) + "\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [0, 0]}";
    header += i + 1 < n ? ", " : "}";
  }
  const SafetensorsFile file = SafetensorsFile::FromBytes(Image(header), "many.safetensors");
  CHECK(file.tensors().size() == n);
}

TEST_CASE("safetensors: the PEFT fixture's adapter") {
  const SafetensorsFile file = SafetensorsFile::Open(testing::SharedPath(
      "models/lora/stories260K-lora-r4-peft/adapter_model.safetensors"));
  CHECK(file.tensors().size() == 70);
  for (const Tensor& t : file.tensors()) CHECK(t.dtype == DType::kF32);
  const Tensor* a = file.Find("base_model.model.model.layers.0.mlp.down_proj.lora_A.weight");
  REQUIRE(a != nullptr);
  CHECK(a->shape == std::vector<uint64_t>{4, 172});
  CHECK(Contains(ErrorOf([] { SafetensorsFile::Open("/nonexistent.safetensors"); }), "cannot open"));
}

}  // namespace
}  // namespace sparrow::safetensors
