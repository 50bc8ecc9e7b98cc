// GGUF reader: files built byte by byte from the format description (not by
// our writer) and the two real fixtures, checked against values read from
// them independently (a Python dump of the same files).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "base/error.h"
#include "formats/gguf.h"
#include "tests/error_test_util.h"
#include "tests/gguf_test_util.h"

namespace sparrow {
namespace {

using gguf::GgufFile;
using gguf::ValueType;
using namespace sparrow::testing;

float F32At(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}

TEST_CASE("reader: a hand-built file of every value type reads back exactly") {
  RawFile f;
  f.version = 2;
  Bytes nested = EncArray(kTU8, 2, Bytes{1, 2});
  Bytes nested2 = EncArray(kTString, 1, EncStr("x"));
  Bytes outer_elems = nested;
  outer_elems.insert(outer_elems.end(), nested2.begin(), nested2.end());
  f.kvs = {
      {"u8", kTU8, Bytes{200}},
      {"i8", kTI8, Bytes{0x80}},
      {"u16", kTU16, Bytes{0x34, 0x12}},
      {"i16", kTI16, Bytes{0xfe, 0xff}},
      {"u32", kTU32, EncU32(0xdeadbeef)},
      {"i32", kTI32, EncI32(-123456)},
      {"f32", kTF32, EncF32(1.5f)},
      {"bool_t", kTBool, Bytes{1}},
      {"bool_f", kTBool, Bytes{0}},
      {"str", kTString, EncStr("h\xc3\xa9llo")},
      {"empty", kTString, EncStr("")},
      {"u64", kTU64, EncU64(0xffffffffffffffffull)},
      {"i64", kTI64, EncU64(0x8000000000000000ull)},
      {"f64", kTF64, EncU64(0x400921fb54442d18ull)},  // pi
      {"arr_i32", kTArray, EncI32Array({-1, 0, 7})},
      {"arr_empty", kTArray, EncArray(kTF32, 0, {})},
      {"arr_nested", kTArray, EncArray(kTArray, 2, outer_elems)},
  };
  const GgufFile file = GgufFile::FromBytes(f.Build(), "every_type.gguf");
  CHECK(file.version() == 2);
  CHECK(file.metadata().size() == f.kvs.size());
  CHECK(file.tensors().empty());
  CHECK(file.metadata()[0].key == "u8");  // order preserved

  CHECK(file.Find("u8")->type == ValueType::kU8);
  CHECK(file.GetUInt("u8") == 200u);
  CHECK(file.Find("i8")->AsInt() == -128);
  CHECK(file.GetUInt("u16") == 0x1234u);
  CHECK(file.Find("i16")->AsInt() == -2);
  CHECK(file.GetUInt("u32") == 0xdeadbeefu);
  CHECK(file.Find("i32")->AsInt() == -123456);
  CHECK(file.Find("f32")->type == ValueType::kF32);
  CHECK(file.GetFloat("f32") == 1.5);
  CHECK(file.GetBool("bool_t") == true);
  CHECK(file.GetBool("bool_f") == false);
  CHECK(file.GetString("str") == "h\xc3\xa9llo");
  CHECK(file.GetString("empty") == "");
  CHECK(file.GetUInt("u64") == std::numeric_limits<uint64_t>::max());
  CHECK(file.Find("u64")->AsInt() == std::nullopt);  // exceeds INT64_MAX
  CHECK(file.Find("i64")->AsInt() == std::numeric_limits<int64_t>::min());
  CHECK(file.GetFloat("f64") == doctest::Approx(3.141592653589793));
  CHECK(file.GetIntArray("arr_i32") == std::vector<int64_t>{-1, 0, 7});
  CHECK(file.GetFloatArray("arr_i32") == std::vector<float>{-1, 0, 7});
  CHECK(file.GetFloatArray("arr_empty").empty());
  CHECK(file.Find("arr_empty")->AsArray()->element_type == ValueType::kF32);

  const gguf::Array* outer = file.Find("arr_nested")->AsArray();
  REQUIRE(outer != nullptr);
  CHECK(outer->element_type == ValueType::kArray);
  REQUIRE(outer->elements.size() == 2);
  const gguf::Array* first = outer->elements[0].AsArray();
  REQUIRE(first != nullptr);
  CHECK(first->element_type == ValueType::kU8);
  REQUIRE(first->elements.size() == 2);
  CHECK(first->elements[1].AsUInt() == 2u);
  CHECK(*outer->elements[1].AsArray()->elements[0].AsString() == "x");

  CHECK(file.Find("absent") == nullptr);
  CHECK(file.GetString("absent") == std::nullopt);
  CHECK(file.GetStringArray("absent").empty());
}

TEST_CASE("reader: arrays nested to the depth limit are accepted") {
  Bytes deep = EncArray(kTU8, 1, Bytes{42});
  for (uint32_t level = 1; level < gguf::kMaxArrayDepth; ++level) deep = EncArray(kTArray, 1, deep);
  RawFile f;
  f.kvs = {{"deep", kTArray, deep}};
  const GgufFile file = GgufFile::FromBytes(f.Build(), "deep.gguf");
  const gguf::Value* v = file.Find("deep");
  for (uint32_t level = 1; level < gguf::kMaxArrayDepth; ++level) {
    REQUIRE(v->AsArray() != nullptr);
    CHECK(v->AsArray()->element_type == ValueType::kArray);
    v = &v->AsArray()->elements.at(0);
  }
  CHECK(v->AsArray()->elements.at(0).AsUInt() == 42u);
}

TEST_CASE("reader: typed lookups reject the wrong type with the key in the message") {
  RawFile f;
  f.kvs = {{"k.u32", kTU32, EncU32(5)},
           {"k.neg", kTI32, EncI32(-5)},
           {"k.str", kTString, EncStr("s")},
           {"k.strs", kTArray, EncStrArray({"a"})}};
  const GgufFile file = GgufFile::FromBytes(f.Build(), "typed.gguf");
  try {
    (void)file.GetString("k.u32");
    FAIL("expected InputError");
  } catch (const InputError& e) {
    const std::string msg = e.what();
    CHECK(msg.find("typed.gguf") != std::string::npos);
    CHECK(msg.find("k.u32") != std::string::npos);
    CHECK(msg.find("u32") != std::string::npos);
    CHECK(msg.find("string") != std::string::npos);
  }
  CHECK_THROWS_AS((void)file.GetUInt("k.neg"), InputError);
  CHECK_THROWS_AS((void)file.GetUInt("k.str"), InputError);
  CHECK_THROWS_AS((void)file.GetBool("k.u32"), InputError);
  CHECK_THROWS_AS((void)file.GetFloat("k.str"), InputError);
  CHECK_THROWS_AS((void)file.GetFloatArray("k.strs"), InputError);
  CHECK_THROWS_AS((void)file.GetIntArray("k.strs"), InputError);
  CHECK_THROWS_AS((void)file.GetStringArray("k.u32"), InputError);
  CHECK(file.GetFloat("k.u32") == 5.0);  // integers widen to float
}

TEST_CASE("reader: tensors, data offset and alignment of a hand-built file") {
  RawFile f = ValidRawFile();
  const Bytes bytes = f.Build();
  const GgufFile file = GgufFile::FromBytes(bytes, "valid.gguf");
  REQUIRE(file.tensors().size() == 3);
  CHECK(file.alignment() == 32);
  CHECK(file.data_offset() % 32 == 0);
  CHECK(file.data_offset() + 160 == bytes.size());
  const gguf::TensorInfo* b = file.FindTensor("b");
  REQUIRE(b != nullptr);
  CHECK(b->type == TensorType::kQ8_0);
  CHECK(b->dims == std::vector<uint64_t>{32, 2});
  CHECK(b->n_elements == 64);
  CHECK(b->n_bytes == 68);
  CHECK(b->rows() == 2);
  CHECK(b->row_elems() == 32);
  CHECK(b->offset == 32);
  CHECK(b->data == file.file_data() + file.data_offset() + 32);
  CHECK(b->data[0] == static_cast<uint8_t>(32 * 7 + 1));
  CHECK(file.FindTensor("c")->n_bytes == 32);
  CHECK(file.FindTensor("missing") == nullptr);

  SUBCASE("a larger general.alignment moves the data section") {
    f.kvs.push_back({"general.alignment", kTU32, EncU32(64)});
    f.alignment = 64;
    f.tensors[1].offset = 64;
    f.tensors[2].offset = 192;
    f.data.resize(224);
    const GgufFile aligned = GgufFile::FromBytes(f.Build(), "a64.gguf");
    CHECK(aligned.alignment() == 64);
    CHECK(aligned.data_offset() % 64 == 0);
    CHECK(aligned.FindTensor("c")->offset == 192);
  }
  SUBCASE("tensors may be stored out of declaration order") {
    std::swap(f.tensors[0].offset, f.tensors[2].offset);  // a at 128, c at 0
    const GgufFile swapped = GgufFile::FromBytes(f.Build(), "swapped.gguf");
    CHECK(swapped.FindTensor("a")->offset == 128);
  }
}

// A bundle plans its memory from the resident section's header before
// loading it: the header alone from a prefix, extents checked against the
// whole image, no data pointers; a prefix that ends inside the header (or
// a tensor past the image) is refused as FromBytes refuses it.
TEST_CASE("reader: the header alone from a prefix of the image") {
  const Bytes bytes = ValidRawFile().Build();
  const GgufFile whole = GgufFile::FromBytes(bytes, "valid.gguf");
  const Bytes header(bytes.begin(), bytes.begin() + static_cast<long>(whole.data_offset()));
  const GgufFile parsed = GgufFile::HeaderFromPrefix(header, bytes.size(), "valid.gguf");
  CHECK(parsed.data_offset() == whole.data_offset());
  CHECK(parsed.metadata().size() == whole.metadata().size());
  REQUIRE(parsed.tensors().size() == whole.tensors().size());
  for (size_t i = 0; i < whole.tensors().size(); ++i) {
    CHECK(parsed.tensors()[i].name == whole.tensors()[i].name);
    CHECK(parsed.tensors()[i].dims == whole.tensors()[i].dims);
    CHECK(parsed.tensors()[i].offset == whole.tensors()[i].offset);
    CHECK(parsed.tensors()[i].n_bytes == whole.tensors()[i].n_bytes);
    CHECK(parsed.tensors()[i].data == nullptr);
  }
  // A prefix cut inside the last tensor's info (before the alignment
  // padding, under 32 bytes here).
  const Bytes cut(header.begin(), header.end() - 40);
  CHECK_THROWS_AS(GgufFile::HeaderFromPrefix(cut, bytes.size(), "valid.gguf"), InputError);
  // The last tensor ends past an image one byte shorter.
  CHECK(ErrorOf([&] { GgufFile::HeaderFromPrefix(header, bytes.size() - 1, "valid.gguf"); }) ==
        ErrorOf([&] { GgufFile::FromBytes(Bytes(bytes.begin(), bytes.end() - 1), "valid.gguf"); }));
}

TEST_CASE("reader: a moved file keeps its data and lookups valid") {
  GgufFile a = GgufFile::FromBytes(ValidRawFile().Build(), "move.gguf");
  const uint8_t* data = a.FindTensor("b")->data;
  GgufFile b = std::move(a);
  CHECK(b.FindTensor("b")->data == data);
  CHECK(b.GetString("general.architecture") == "llama");
  GgufFile c = GgufFile::FromBytes(ValidRawFile().Build(), "other.gguf");
  c = std::move(b);
  CHECK(c.name() == "move.gguf");
  CHECK(c.FindTensor("a") != nullptr);
}

TEST_CASE("reader: Open maps a file and agrees with FromBytes") {
  TempDir dir;
  const Bytes bytes = ValidRawFile().Build();
  WriteFile(dir.File("m.gguf"), bytes);
  const GgufFile mapped = GgufFile::Open(dir.File("m.gguf"));
  const GgufFile owned = GgufFile::FromBytes(bytes, "m.gguf");
  CHECK(mapped.file_size() == bytes.size());
  CHECK(mapped.data_offset() == owned.data_offset());
  REQUIRE(mapped.tensors().size() == owned.tensors().size());
  for (size_t i = 0; i < mapped.tensors().size(); ++i) {
    const auto& m = mapped.tensors()[i];
    const auto& o = owned.tensors()[i];
    CHECK(m.name == o.name);
    CHECK(std::memcmp(m.data, o.data, m.n_bytes) == 0);
  }
  CHECK_THROWS_AS(GgufFile::Open(dir.File("absent.gguf")), InputError);
  CHECK_THROWS_AS(GgufFile::Open(dir.path()), InputError);  // a directory
  WriteFile(dir.File("empty.gguf"), {});
  CHECK_THROWS_AS(GgufFile::Open(dir.File("empty.gguf")), InputError);
}

TEST_CASE("reader: stories260K.gguf") {
  const GgufFile file = GgufFile::Open(ModelPath("stories260K.gguf"));
  CHECK(file.version() == 3);
  CHECK(file.file_size() == 1185376);
  CHECK(file.metadata().size() == 19);
  CHECK(file.tensors().size() == 48);
  CHECK(file.data_offset() == 14176);
  CHECK(file.GetString("general.architecture") == "llama");
  CHECK(file.GetUInt("llama.embedding_length") == 64u);
  CHECK(file.GetUInt("llama.feed_forward_length") == 172u);
  CHECK(file.GetUInt("llama.block_count") == 5u);
  CHECK(file.GetUInt("llama.attention.head_count") == 8u);
  CHECK(file.GetUInt("llama.attention.head_count_kv") == 4u);
  CHECK(file.GetUInt("llama.context_length") == 2048u);
  CHECK(file.GetUInt("llama.rope.dimension_count") == 8u);
  CHECK(file.GetFloat("llama.attention.layer_norm_rms_epsilon") == doctest::Approx(1e-5));
  CHECK(file.GetUInt("tokenizer.ggml.padding_token_id") == 0xffffffffu);

  const std::vector<std::string> tokens = file.GetStringArray("tokenizer.ggml.tokens");
  REQUIRE(tokens.size() == 512);
  CHECK(tokens[0] == "<unk>");
  CHECK(tokens[1] == "<s>");
  CHECK(tokens[3] == "<0x00>");
  CHECK(tokens[511] == "\xe2\x80\x8a");  // U+200A
  const std::vector<float> scores = file.GetFloatArray("tokenizer.ggml.scores");
  REQUIRE(scores.size() == 512);
  CHECK(scores[511] == -252.0f);
  const std::vector<int64_t> types = file.GetIntArray("tokenizer.ggml.token_type");
  REQUIRE(types.size() == 512);
  CHECK(types[0] == 2);
  CHECK(types[3] == 6);

  const gguf::TensorInfo* embd = file.FindTensor("token_embd.weight");
  REQUIRE(embd != nullptr);
  CHECK(embd->type == TensorType::kF32);
  CHECK(embd->dims == std::vector<uint64_t>{64, 512});
  CHECK(embd->n_bytes == 131072);
  CHECK(embd->offset == 0);
  CHECK(F32At(embd->data) == doctest::Approx(-0.29474878311157227));
  CHECK(F32At(embd->data + 4) == doctest::Approx(0.5618956089019775));
  const gguf::TensorInfo* last = file.FindTensor("blk.4.ffn_norm.weight");
  REQUIRE(last != nullptr);
  CHECK(last->offset == 1170944);
  CHECK(last->data + last->n_bytes == file.file_data() + file.file_size());
  CHECK(F32At(last->data + last->n_bytes - 4) == doctest::Approx(1.234261155128479));
  CHECK(file.FindTensor("blk.4.ffn_up.weight")->dims == std::vector<uint64_t>{64, 172});
  CHECK(file.FindTensor("blk.0.attn_k.weight")->rows() == 32);
}

TEST_CASE("reader: llama-2-tiny-random.gguf") {
  const GgufFile file = GgufFile::Open(ModelPath("llama-2-tiny-random.gguf"));
  CHECK(file.version() == 3);
  CHECK(file.metadata().size() == 18);
  CHECK(file.tensors().size() == 12);
  CHECK(file.data_offset() == 724416);
  CHECK(file.GetString("general.name") == "LLaMA v2");
  CHECK(file.GetUInt("llama.embedding_length") == 8u);
  CHECK(file.GetUInt("general.file_type") == 1u);
  const std::vector<std::string> tokens = file.GetStringArray("tokenizer.ggml.tokens");
  REQUIRE(tokens.size() == 32000);
  CHECK(tokens[31999] == "\xe7\xbb\x99");  // 给
  CHECK(file.GetFloatArray("tokenizer.ggml.scores")[31999] == -31740.0f);
  const gguf::TensorInfo* q = file.FindTensor("blk.0.attn_q.weight");
  REQUIRE(q != nullptr);
  CHECK(q->type == TensorType::kF16);
  CHECK(q->n_bytes == 128);
  CHECK(q->offset == 512000);
  const uint8_t expect[] = {0x36, 0x26, 0x0b, 0x25, 0x84, 0xaa, 0x4b, 0xa9};
  CHECK(std::memcmp(q->data, expect, sizeof(expect)) == 0);
  const gguf::TensorInfo* out = file.FindTensor("output.weight");
  REQUIRE(out != nullptr);
  CHECK(out->dims == std::vector<uint64_t>{8, 32000});
  CHECK(out->data + out->n_bytes == file.file_data() + file.file_size());
  CHECK(file.FindTensor("output_norm.weight")->type == TensorType::kF32);
}

}  // namespace
}  // namespace sparrow
