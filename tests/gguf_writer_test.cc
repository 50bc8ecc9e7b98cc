// GGUF writer: exact bytes against a file laid out by hand, round trips of
// every value type and of tensors of several types fed in awkward chunks,
// the temporary-file discipline, and misuse errors.
#include <doctest/doctest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <stdexcept>

#include "base/error.h"
#include "formats/gguf.h"
#include "tests/gguf_test_util.h"

namespace sparrow {
namespace {

using gguf::GgufFile;
using gguf::GgufWriter;
using gguf::Value;
using gguf::ValueType;
using namespace sparrow::testing;

Value Nested() {
  gguf::Array inner_a{ValueType::kU16, {Value{ValueType::kU16, uint64_t{7}}}};
  gguf::Array inner_b{ValueType::kU16, {}};
  gguf::Array outer{ValueType::kArray,
                    {Value{ValueType::kArray, inner_a}, Value{ValueType::kArray, inner_b}}};
  return Value{ValueType::kArray, outer};
}

TEST_CASE("writer: output matches a hand-laid-out file byte for byte") {
  TempDir dir;
  const std::string path = dir.File("exact.gguf");
  {
    GgufWriter w(path);
    w.Add("a", Value::U32(1));
    w.Add("s", Value::String("xy"));
    w.AddTensor("t", {2}, TensorType::kF32);
    w.AddTensor("u", {1}, TensorType::kI8);
    const uint8_t data[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    w.WriteTensorData(data, 9);
    w.Finish();
  }
  RawFile f;
  f.kvs = {{"a", kTU32, EncU32(1)}, {"s", kTString, EncStr("xy")}};
  f.tensors = {{"t", {2}, kGgmlF32, 0}, {"u", {1}, 24 /* i8 */, 32}};
  f.data = {1, 2, 3, 4, 5, 6, 7, 8};
  f.data.resize(32, 0);  // padding after t
  f.data.push_back(9);
  f.data.resize(64, 0);  // padding after the last tensor too
  CHECK(ReadFile(path) == f.Build());
}

TEST_CASE("writer: metadata of every value type round-trips") {
  TempDir dir;
  const std::string path = dir.File("meta.gguf");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  {
    GgufWriter w(path);
    w.Add("u8", Value{ValueType::kU8, uint64_t{255}});
    w.Add("i8", Value{ValueType::kI8, int64_t{-128}});
    w.Add("u16", Value{ValueType::kU16, uint64_t{65535}});
    w.Add("i16", Value{ValueType::kI16, int64_t{-32768}});
    w.Add("u32", Value::U32(0xffffffffu));
    w.Add("i32", Value::I32(std::numeric_limits<int32_t>::min()));
    w.Add("f32", Value::F32(-0.15625f));
    w.Add("f32nan", Value{ValueType::kF32, nan});
    w.Add("bool", Value::Bool(true));
    w.Add("str", Value::String(std::string("nul\0inside", 10)));
    w.Add("empty", Value::String(""));
    w.Add("u64", Value::U64(std::numeric_limits<uint64_t>::max()));
    w.Add("i64", Value{ValueType::kI64, std::numeric_limits<int64_t>::min()});
    w.Add("f64", Value{ValueType::kF64, 1e300});
    w.Add("strs", Value::StringArray({"a", "", "ccc"}));
    w.Add("f32s", Value::F32Array({1.0f, -2.5f}));
    w.Add("i32s", Value::I32Array({}));
    w.Add("nested", Nested());
    w.Finish();
  }
  const GgufFile file = GgufFile::Open(path);
  CHECK(file.version() == 3);
  CHECK(file.metadata().size() == 18);
  CHECK(file.metadata()[3].key == "i16");
  CHECK(file.Find("u8")->type == ValueType::kU8);
  CHECK(file.GetUInt("u8") == 255u);
  CHECK(file.Find("i8")->AsInt() == -128);
  CHECK(file.GetUInt("u16") == 65535u);
  CHECK(file.Find("i16")->AsInt() == -32768);
  CHECK(file.GetUInt("u32") == 0xffffffffu);
  CHECK(file.Find("i32")->AsInt() == std::numeric_limits<int32_t>::min());
  CHECK(file.GetFloat("f32") == -0.15625);
  CHECK(std::isnan(*file.GetFloat("f32nan")));
  CHECK(file.GetBool("bool") == true);
  CHECK(file.GetString("str") == std::string("nul\0inside", 10));
  CHECK(file.GetString("empty") == "");
  CHECK(file.GetUInt("u64") == std::numeric_limits<uint64_t>::max());
  CHECK(file.Find("i64")->AsInt() == std::numeric_limits<int64_t>::min());
  CHECK(file.Find("f64")->type == ValueType::kF64);
  CHECK(file.GetFloat("f64") == 1e300);
  CHECK(file.GetStringArray("strs") == std::vector<std::string>{"a", "", "ccc"});
  CHECK(file.GetFloatArray("f32s") == std::vector<float>{1.0f, -2.5f});
  CHECK(file.Find("i32s")->AsArray()->element_type == ValueType::kI32);
  CHECK(file.GetIntArray("i32s").empty());
  const gguf::Array* outer = file.Find("nested")->AsArray();
  REQUIRE(outer != nullptr);
  REQUIRE(outer->elements.size() == 2);
  CHECK(outer->elements[0].AsArray()->element_type == ValueType::kU16);
  CHECK(outer->elements[0].AsArray()->elements.at(0).AsUInt() == 7u);
  CHECK(outer->elements[1].AsArray()->elements.empty());
}

struct TensorSpec {
  const char* name;
  std::vector<uint64_t> dims;
  TensorType type;
  uint64_t bytes;  // computed by hand from the block layouts
};

TEST_CASE("writer: tensors of several types, fed in odd chunks, round-trip") {
  const std::vector<TensorSpec> specs = {
      {"f32", {3, 5}, TensorType::kF32, 60},
      {"f16", {7}, TensorType::kF16, 14},
      {"bf16", {4, 2, 3}, TensorType::kBF16, 48},
      {"q8_0", {64, 3}, TensorType::kQ8_0, 6 * 34},
      {"q4_0", {32, 2, 2, 2}, TensorType::kQ4_0, 8 * 18},
      {"q4_k", {256, 2}, TensorType::kQ4_K, 2 * 144},
      {"q6_k", {512}, TensorType::kQ6_K, 2 * 210},
  };
  for (uint64_t alignment : {uint64_t{32}, uint64_t{64}, uint64_t{4096}}) {
    CAPTURE(alignment);
    TempDir dir;
    const std::string path = dir.File("t.gguf");
    std::mt19937 rng(static_cast<uint32_t>(alignment));
    std::vector<std::vector<uint8_t>> payloads;
    std::vector<uint8_t> all;
    for (const TensorSpec& s : specs) {
      std::vector<uint8_t> p(s.bytes);
      for (uint8_t& b : p) b = static_cast<uint8_t>(rng());
      all.insert(all.end(), p.begin(), p.end());
      payloads.push_back(std::move(p));
    }
    {
      GgufWriter w(path, alignment);
      w.Add("general.architecture", Value::String("test"));
      for (const TensorSpec& s : specs) w.AddTensor(s.name, s.dims, s.type);
      // Chunks of 1..97 bytes that freely span tensor boundaries.
      size_t pos = 0;
      while (pos < all.size()) {
        const size_t n = std::min<size_t>(1 + rng() % 97, all.size() - pos);
        w.WriteTensorData(all.data() + pos, n);
        pos += n;
      }
      CHECK_FALSE(std::filesystem::exists(path));  // nothing at the target yet
      w.Finish();
    }
    CHECK(dir.EntryCount() == 1);  // no temporary file left behind
    const GgufFile file = GgufFile::Open(path);
    CHECK(file.alignment() == alignment);
    if (alignment != 32) CHECK(file.GetUInt("general.alignment") == alignment);
    CHECK(file.data_offset() % alignment == 0);
    REQUIRE(file.tensors().size() == specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      const gguf::TensorInfo& t = file.tensors()[i];
      CAPTURE(t.name);
      CHECK(t.name == specs[i].name);
      CHECK(t.dims == specs[i].dims);
      CHECK(t.type == specs[i].type);
      CHECK(t.n_bytes == specs[i].bytes);
      CHECK(t.offset % alignment == 0);
      CHECK(std::memcmp(t.data, payloads[i].data(), t.n_bytes) == 0);
    }
  }
}

TEST_CASE("writer: a large tensor streams through in big chunks") {
  TempDir dir;
  const std::string path = dir.File("big.gguf");
  const uint64_t rows = 64, cols = 8192;  // 2 MiB of f32, more than the buffer
  std::vector<float> row(cols);
  {
    GgufWriter w(path);
    w.AddTensor("w", {cols, rows}, TensorType::kF32);
    for (uint64_t r = 0; r < rows; ++r) {
      for (uint64_t c = 0; c < cols; ++c) row[c] = static_cast<float>(r * cols + c);
      w.WriteTensorData(row.data(), row.size() * sizeof(float));
    }
    w.Finish();
  }
  const GgufFile file = GgufFile::Open(path);
  const gguf::TensorInfo* t = file.FindTensor("w");
  REQUIRE(t != nullptr);
  float last;
  std::memcpy(&last, t->data + t->n_bytes - 4, 4);
  CHECK(last == static_cast<float>(rows * cols - 1));
}

TEST_CASE("writer: an unfinished writer leaves nothing behind") {
  TempDir dir;
  const std::string path = dir.File("never.gguf");
  {
    GgufWriter w(path);
    w.AddTensor("t", {8}, TensorType::kF32);
    const float half[4] = {};
    w.WriteTensorData(half, sizeof(half));
    CHECK(dir.EntryCount() == 1);  // the temporary file
  }
  CHECK(dir.EntryCount() == 0);
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("writer: Finish replaces an existing file only when it succeeds") {
  TempDir dir;
  const std::string path = dir.File("m.gguf");
  WriteFile(path, Bytes{'o', 'l', 'd'});
  {
    GgufWriter w(path);
    w.AddTensor("t", {8}, TensorType::kF32);
    CHECK_THROWS_AS(w.Finish(), std::logic_error);  // no data written
  }
  CHECK(ReadFile(path) == Bytes{'o', 'l', 'd'});
  CHECK(dir.EntryCount() == 1);
  {
    GgufWriter w(path);
    w.Add("k", Value::Bool(false));
    w.Finish();
  }
  CHECK(GgufFile::Open(path).GetBool("k") == false);
}

TEST_CASE("writer: data that does not match the declared sizes is an error") {
  TempDir dir;
  const uint8_t buf[64] = {};
  SUBCASE("too much") {
    GgufWriter w(dir.File("a.gguf"));
    w.AddTensor("t", {4}, TensorType::kF32);
    w.WriteTensorData(buf, 10);
    CHECK_THROWS_AS(w.WriteTensorData(buf, 7), std::logic_error);
  }
  SUBCASE("too little") {
    GgufWriter w(dir.File("b.gguf"));
    w.AddTensor("t", {4}, TensorType::kF32);
    w.AddTensor("u", {4}, TensorType::kF32);
    w.WriteTensorData(buf, 16);
    CHECK_THROWS_AS(w.Finish(), std::logic_error);
  }
  SUBCASE("data with no tensors declared") {
    GgufWriter w(dir.File("c.gguf"));
    CHECK_THROWS_AS(w.WriteTensorData(buf, 1), std::logic_error);
  }
  CHECK(dir.EntryCount() == 0);
}

TEST_CASE("writer: misuse and impossible shapes are rejected") {
  TempDir dir;
  GgufWriter w(dir.File("x.gguf"));
  w.Add("k", Value::U32(1));
  CHECK_THROWS_AS(w.Add("k", Value::U32(2)), std::logic_error);
  CHECK_THROWS_AS(w.Add("", Value::U32(2)), std::logic_error);
  CHECK_THROWS_AS(w.Add("big", Value{ValueType::kU8, uint64_t{256}}), std::logic_error);
  CHECK_THROWS_AS(w.Add("small", Value{ValueType::kI16, int64_t{-40000}}), std::logic_error);
  CHECK_THROWS_AS(w.Add("mixed", Value{ValueType::kArray,
                                       gguf::Array{ValueType::kU32, {Value::I32(1)}}}),
                  std::logic_error);
  CHECK_THROWS_AS(w.Add("wrongkind", Value{ValueType::kString, uint64_t{1}}), std::logic_error);
  CHECK_THROWS_AS(w.Add("general.alignment", Value::U32(64)), std::logic_error);
  // Shapes come from users (synth flags): InputError with the tensor named.
  try {
    w.AddTensor("blk.0.q", {100, 4}, TensorType::kQ4_0);
    FAIL("expected InputError");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("blk.0.q") != std::string::npos);
  }
  CHECK_THROWS_AS(w.AddTensor("r0", {}, TensorType::kF32), InputError);
  CHECK_THROWS_AS(w.AddTensor("r5", {1, 1, 1, 1, 1}, TensorType::kF32), InputError);
  CHECK_THROWS_AS(w.AddTensor("zero", {0}, TensorType::kF32), InputError);
  CHECK_THROWS_AS(w.AddTensor("huge", {1ull << 40, 1ull << 40}, TensorType::kF32), InputError);
  w.AddTensor("ok", {32}, TensorType::kQ8_0);
  CHECK_THROWS_AS(w.AddTensor("ok", {32}, TensorType::kQ8_0), std::logic_error);
  const uint8_t buf[34] = {};
  w.WriteTensorData(buf, 34);
  CHECK_THROWS_AS(w.Add("late", Value::U32(1)), std::logic_error);
  CHECK_THROWS_AS(w.AddTensor("late", {1}, TensorType::kF32), std::logic_error);
  w.Finish();
  CHECK_THROWS_AS(w.Finish(), std::logic_error);
  CHECK(GgufFile::Open(dir.File("x.gguf")).tensors().size() == 1);
}

TEST_CASE("writer: I/O errors are InputErrors naming the path") {
  const std::string path = "/nonexistent-dir-for-sparrow-test/model.gguf";
  try {
    GgufWriter w(path);
    FAIL("expected InputError");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find(path) != std::string::npos);
  }
  CHECK_THROWS_AS(GgufWriter(path, 48), InputError);  // alignment not a power of two
  {
    // The directory vanishes under the writer: the rename in Finish fails.
    TempDir dir;
    GgufWriter w(dir.File("out.gguf"));
    w.AddTensor("t", {8}, TensorType::kF32);
    std::filesystem::remove_all(dir.path());
    const float data[8] = {};
    w.WriteTensorData(data, sizeof(data));
    try {
      w.Finish();
      FAIL("expected InputError");
    } catch (const InputError& e) {
      CHECK(std::string(e.what()).find("out.gguf") != std::string::npos);
    }
  }
}

TEST_CASE("writer: a write that fails (file size limit) is an InputError") {
  // RLIMIT_FSIZE makes write() fail with EFBIG once SIGXFSZ is ignored: a
  // real I/O error without needing a full disk.
  TempDir dir;
  struct rlimit old_limit {};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &old_limit) == 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit limit = old_limit;
  limit.rlim_cur = 1 << 20;
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &limit) == 0);
  bool threw = false;
  std::string message;
  {
    GgufWriter w(dir.File("limited.gguf"));
    w.AddTensor("t", {1 << 20}, TensorType::kF32);  // 4 MiB
    std::vector<uint8_t> chunk(1 << 16, 0);
    try {
      for (int i = 0; i < 64; ++i) w.WriteTensorData(chunk.data(), chunk.size());
      w.Finish();
    } catch (const InputError& e) {
      threw = true;
      message = e.what();
    }
  }
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);
  CHECK(threw);
  CHECK(message.find("limited.gguf") != std::string::npos);
  CHECK(dir.EntryCount() == 0);
}

}  // namespace
}  // namespace sparrow
