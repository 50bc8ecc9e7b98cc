#include "formats/safetensors.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "base/checked_math.h"
#include "base/error.h"
#include "base/read_file.h"

namespace sparrow::safetensors {
namespace {

constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;
constexpr uint64_t kMaxFileBytes = uint64_t{4} << 30;
constexpr size_t kMaxDims = 8;

// At most ~80 printable characters of something taken from the file.
std::string Quote(std::string_view text) {
  std::string out;
  for (char c : text.substr(0, 80)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (text.size() > 80) out += "...";
  return "'" + out + "'";
}

size_t ElementBytes(DType d) { return d == DType::kF32 ? 4 : 2; }

// Counts the keys of the top-level object (nested ones are not names).
struct TopLevelKeyCounter : nlohmann::json_sax<nlohmann::json> {
  size_t depth = 0;
  size_t keys = 0;
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return ++depth, true; }
  bool end_object() override { return --depth, true; }
  bool start_array(std::size_t) override { return ++depth, true; }
  bool end_array() override { return --depth, true; }
  bool key(string_t&) override {
    if (depth == 1) ++keys;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }
};

}  // namespace

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
  }
  return "?";
}

SafetensorsFile SafetensorsFile::Open(const std::string& path) {
  return FromBytes(ReadWholeFileBytes(path, "safetensors file", kMaxFileBytes), path);
}

SafetensorsFile SafetensorsFile::FromBytes(std::vector<uint8_t> bytes, std::string name) {
  SafetensorsFile f;
  f.bytes_ = std::move(bytes);
  f.name_ = std::move(name);
  f.Parse();
  return f;
}

void SafetensorsFile::Parse() {
  const auto fail = [&](const std::string& why) {
    ThrowInputError(name_, ": not a valid safetensors file: ", why);
  };
  if (bytes_.size() < 8) fail(StrCat("only ", bytes_.size(), " bytes"));
  uint64_t header = 0;
  for (int i = 0; i < 8; ++i) header |= uint64_t{bytes_[i]} << (8 * i);
  if (header == 0 || header > kMaxHeaderBytes || header > bytes_.size() - 8) {
    fail(StrCat("header length ", header, " does not fit the file's ", bytes_.size(),
                " bytes (at most 100 MiB)"));
  }
  const char* text = reinterpret_cast<const char*>(bytes_.data() + 8);
  // nlohmann stops at a NUL as at the end of input: "{}\0..." would pass.
  if (std::memchr(text, 0, header) != nullptr) fail("its header holds a NUL byte");
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text, text + header);
  } catch (const nlohmann::json::exception&) {
    fail("its header is not valid JSON");
  }
  // The format forbids repeated names, and the parser keeps only one of
  // them: count the top-level keys in a second, linear pass (a parser
  // callback would make large headers quadratic).
  TopLevelKeyCounter counter;
  nlohmann::json::sax_parse(text, text + header, &counter);
  if (doc.is_object() && counter.keys != doc.size()) fail("a tensor name appears twice");
  if (!doc.is_object()) fail("its header is not a JSON object");

  const uint8_t* data = bytes_.data() + 8 + header;
  const uint64_t data_bytes = bytes_.size() - 8 - header;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    const std::string& key = it.key();
    const nlohmann::json& v = it.value();
    if (key == "__metadata__") {
      if (!v.is_object()) fail("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) fail(StrCat("__metadata__ ", Quote(m.key()), " is not a string"));
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string what = "tensor " + Quote(key);
    if (!v.is_object()) fail(what + " is not an object");
    for (auto field = v.begin(); field != v.end(); ++field) {
      if (field.key() != "dtype" && field.key() != "shape" && field.key() != "data_offsets") {
        fail(StrCat(what, " has an unknown field ", Quote(field.key())));
      }
    }
    Tensor t;
    t.name = key;
    const auto dtype = v.find("dtype");
    if (dtype == v.end() || !dtype->is_string()) fail(what + " lacks a dtype string");
    const std::string d = dtype->get<std::string>();
    if (d == "F32") {
      t.dtype = DType::kF32;
    } else if (d == "F16") {
      t.dtype = DType::kF16;
    } else if (d == "BF16") {
      t.dtype = DType::kBF16;
    } else {
      fail(StrCat(what, ": dtype ", Quote(d), " is not supported (F32, F16, BF16)"));
    }
    const auto shape = v.find("shape");
    if (shape == v.end() || !shape->is_array() || shape->size() > kMaxDims) {
      fail(StrCat(what, " lacks a shape of at most ", kMaxDims, " dimensions"));
    }
    t.n_elements = 1;
    for (const nlohmann::json& dim : *shape) {
      if (!dim.is_number_unsigned()) fail(what + " has a shape entry that is not a count");
      const uint64_t n = dim.get<uint64_t>();
      t.shape.push_back(n);
      if (!CheckedMul(t.n_elements, n, &t.n_elements)) fail(what + ": its element count overflows");
    }
    const auto offsets = v.find("data_offsets");
    if (offsets == v.end() || !offsets->is_array() || offsets->size() != 2 ||
        !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
      fail(what + " lacks data_offsets [begin, end]");
    }
    const uint64_t begin = (*offsets)[0].get<uint64_t>(), end = (*offsets)[1].get<uint64_t>();
    if (begin > end || end > data_bytes) {
      fail(StrCat(what, ": data_offsets [", begin, ", ", end, "] outside the ", data_bytes,
                  " bytes of data"));
    }
    uint64_t expected = 0;
    if (!CheckedMul(t.n_elements, ElementBytes(t.dtype), &expected) || expected != end - begin) {
      fail(StrCat(what, ": ", end - begin, " bytes for ", t.n_elements, " ", DTypeName(t.dtype),
                  " elements"));
    }
    t.data = data + begin;
    t.n_bytes = end - begin;
    tensors_.push_back(std::move(t));
  }
  std::sort(tensors_.begin(), tensors_.end(),
            [](const Tensor& a, const Tensor& b) { return a.data < b.data; });
  for (size_t i = 1; i < tensors_.size(); ++i) {
    if (tensors_[i].data < tensors_[i - 1].data + tensors_[i - 1].n_bytes) {
      fail(StrCat("tensors ", Quote(tensors_[i - 1].name), " and ", Quote(tensors_[i].name),
                  " overlap"));
    }
  }
}

const Tensor* SafetensorsFile::Find(std::string_view name) const {
  for (const Tensor& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

}  // namespace sparrow::safetensors
