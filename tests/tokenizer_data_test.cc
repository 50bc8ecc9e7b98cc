// TokenizerData: the fixtures' tokenizers, llama.cpp's defaults for keys a
// file leaves out, validation errors, and AddToGguf -> FromGguf round trips.
#include "formats/tokenizer_data.h"

#include <doctest/doctest.h>

#include <string>

#include "base/error.h"
#include "formats/gguf.h"
#include "tests/gguf_test_util.h"

namespace sparrow {
namespace {

using gguf::GgufFile;
using namespace sparrow::testing;

std::vector<std::string> Vocab(size_t n) {
  std::vector<std::string> v;
  for (size_t i = 0; i < n; ++i) {
    std::string token = "t";  // not "t" + ...: GCC 12 warns falsely (-Wrestrict)
    token += std::to_string(i);
    v.push_back(token);
  }
  return v;
}

// A file holding only the given tokenizer keys.
GgufFile FileWith(std::vector<RawKv> kvs) {
  RawFile f;
  f.kvs = std::move(kvs);
  return GgufFile::FromBytes(f.Build(), "tok.gguf");
}

RawKv Str(const char* key, const char* v) { return {key, kTString, EncStr(v)}; }
RawKv U32(const char* key, uint32_t v) { return {key, kTU32, EncU32(v)}; }
RawKv Bool(const char* key, bool v) { return {key, kTBool, Bytes{uint8_t{v}}}; }
RawKv Tokens(size_t n) { return {"tokenizer.ggml.tokens", kTArray, EncStrArray(Vocab(n))}; }
RawKv Merges() {
  return {"tokenizer.ggml.merges", kTArray, EncStrArray({"t1 t2", "\xc4\xa0 t"})};
}

void ExpectError(const GgufFile& file, const std::string& needle) {
  try {
    (void)TokenizerData::FromGguf(file);
    FAIL("expected InputError containing '" << needle << "'");
  } catch (const InputError& e) {
    const std::string msg = e.what();
    CHECK_MESSAGE(msg.find(needle) != std::string::npos, msg);
    CHECK(msg.find('\n') == std::string::npos);
    CHECK(msg.rfind("tok.gguf: ", 0) == 0);
  }
}

TEST_CASE("tokenizer data: stories260K") {
  const GgufFile file = GgufFile::Open(ModelPath("stories260K.gguf"));
  const TokenizerData t = TokenizerData::FromGguf(file);
  CHECK(t.model == "llama");
  REQUIRE(t.tokens.size() == 512);
  CHECK(t.tokens[2] == "</s>");
  REQUIRE(t.scores.size() == 512);
  CHECK(t.scores[510] == -251.0f);
  REQUIRE(t.types.size() == 512);
  CHECK(t.types[0] == TokenType::kUnknown);
  CHECK(t.types[1] == TokenType::kControl);
  CHECK(t.types[3] == TokenType::kByte);
  CHECK(t.types[511] == TokenType::kNormal);
  CHECK(t.merges.empty());
  CHECK(t.bos_id == 1);
  CHECK(t.eos_id == 2);
  CHECK(t.unk_id == 0);
  CHECK(t.pad_id == -1);  // stored as 0xFFFFFFFF
  CHECK(t.eot_id == -1);
  CHECK(t.add_bos);
  CHECK_FALSE(t.add_eos);
  CHECK(t.add_space_prefix);
}

TEST_CASE("tokenizer data: llama-2-tiny-random") {
  const TokenizerData t =
      TokenizerData::FromGguf(GgufFile::Open(ModelPath("llama-2-tiny-random.gguf")));
  CHECK(t.model == "llama");
  CHECK(t.tokens.size() == 32000);
  CHECK(t.bos_id == 1);
  CHECK(t.eos_id == 2);
  CHECK(t.unk_id == 0);
  CHECK(t.add_bos);
}

TEST_CASE("tokenizer data: llama defaults when keys are absent") {
  const TokenizerData t = TokenizerData::FromGguf(FileWith({Str("tokenizer.ggml.model", "llama"), Tokens(5)}));
  CHECK(t.bos_id == 1);
  CHECK(t.eos_id == 2);
  CHECK(t.unk_id == 0);
  CHECK(t.pad_id == -1);
  CHECK(t.add_bos);
  CHECK_FALSE(t.add_eos);
  CHECK(t.add_space_prefix);
  CHECK(t.scores == std::vector<float>(5, 0.0f));
  CHECK(t.types == std::vector<TokenType>(5, TokenType::kNormal));
  CHECK(t.pre.empty());

  SUBCASE("metadata overrides") {
    const TokenizerData o = TokenizerData::FromGguf(FileWith(
        {Str("tokenizer.ggml.model", "llama"), Tokens(5), U32("tokenizer.ggml.bos_token_id", 3),
         Bool("tokenizer.ggml.add_bos_token", false), Bool("tokenizer.ggml.add_space_prefix", false),
         Bool("tokenizer.ggml.add_eos_token", true), U32("tokenizer.ggml.eot_token_id", 4)}));
    CHECK(o.bos_id == 3);
    CHECK_FALSE(o.add_bos);
    CHECK_FALSE(o.add_space_prefix);
    CHECK(o.add_eos);
    CHECK(o.eot_id == 4);
  }
  SUBCASE("a vocabulary too small for the default ids drops them") {
    const TokenizerData s = TokenizerData::FromGguf(FileWith({Str("tokenizer.ggml.model", "llama"), Tokens(1)}));
    CHECK(s.unk_id == 0);
    CHECK(s.bos_id == -1);
    CHECK(s.eos_id == -1);
    CHECK_FALSE(s.add_bos);  // nothing to add
  }
}

TEST_CASE("tokenizer data: gpt2 defaults follow the pre-tokenizer") {
  const auto load = [](const char* pre) {
    std::vector<RawKv> kvs = {Str("tokenizer.ggml.model", "gpt2"), Tokens(20), Merges()};
    if (pre != nullptr) kvs.push_back(Str("tokenizer.ggml.pre", pre));
    return TokenizerData::FromGguf(FileWith(kvs));
  };
  const TokenizerData none = load(nullptr);
  CHECK(none.pre == "default");
  CHECK(none.bos_id == 11);
  CHECK(none.eos_id == 11);
  CHECK(none.unk_id == -1);
  CHECK(none.pad_id == -1);
  CHECK_FALSE(none.add_bos);
  CHECK_FALSE(none.add_space_prefix);
  REQUIRE(none.merges.size() == 2);
  CHECK(none.merges[1] == "\xc4\xa0 t");
  CHECK(load("llama-bpe").add_bos);
  CHECK(load("qwen2").add_bos == false);
  CHECK(load("glm4").bos_id == -1);
}

TEST_CASE("tokenizer data: invalid tokenizers are InputErrors naming the problem") {
  ExpectError(FileWith({Tokens(4)}), "tokenizer.ggml.model");
  ExpectError(FileWith({Str("tokenizer.ggml.model", "bert"), Tokens(4)}), "'bert'");
  ExpectError(FileWith({Str("tokenizer.ggml.model", "llama")}), "no tokens");
  ExpectError(FileWith({Str("tokenizer.ggml.model", "gpt2"), Tokens(20)}), "merges");
  ExpectError(FileWith({Str("tokenizer.ggml.model", "gpt2"), Tokens(20),
                        {"tokenizer.ggml.merges", kTArray, EncStrArray({"nospace"})}}),
              "merges entry 0");
  ExpectError(FileWith({Str("tokenizer.ggml.model", "llama"), Tokens(4),
                        {"tokenizer.ggml.scores", kTArray, EncF32Array({0, 0, 0})}}),
              "3 entries for 4 tokens");
  ExpectError(FileWith({Str("tokenizer.ggml.model", "llama"), Tokens(4),
                        {"tokenizer.ggml.token_type", kTArray, EncI32Array({1, 1, 1, 1, 1})}}),
              "5 entries for 4 tokens");
  ExpectError(FileWith({Str("tokenizer.ggml.model", "llama"), Tokens(4),
                        {"tokenizer.ggml.scores", kTArray, EncStrArray({"a", "b", "c", "d"})}}),
              "tokenizer.ggml.scores");
  ExpectError(FileWith({Str("tokenizer.ggml.model", "llama"), Tokens(4),
                        U32("tokenizer.ggml.eos_token_id", 4)}),
              "eos_token_id 4 is out of range");
  ExpectError(FileWith({Str("tokenizer.ggml.model", "llama"), Tokens(4),
                        {"tokenizer.ggml.unknown_token_id", kTI32, EncI32(-7)}}),
              "negative");
  ExpectError(FileWith({Str("tokenizer.ggml.model", "llama"), Tokens(4),
                        Str("tokenizer.ggml.bos_token_id", "1")}),
              "bos_token_id");
  ExpectError(FileWith({Str("tokenizer.ggml.model", "llama"), Tokens(4),
                        U32("tokenizer.ggml.bos_token_id", 0xffffffffu),
                        Bool("tokenizer.ggml.add_bos_token", true)}),
              "no BOS");
  ExpectError(FileWith({{"tokenizer.ggml.model", kTU32, EncU32(1)}, Tokens(4)}),
              "tokenizer.ggml.model");
}

TEST_CASE("tokenizer data: 'none' ids and unknown token types") {
  const TokenizerData t = TokenizerData::FromGguf(FileWith(
      {Str("tokenizer.ggml.model", "llama"),
       U32("tokenizer.ggml.bos_token_id", 0xffffffffu),
       {"tokenizer.ggml.eos_token_id", kTI32, EncI32(-1)},
       {"tokenizer.ggml.token_type", kTArray, EncI32Array({1, 99, -3, 6})},
       {"tokenizer.ggml.tokens", kTArray, EncStrArray({"a", "", "c", "d"})}}));
  CHECK(t.bos_id == -1);
  CHECK(t.eos_id == -1);
  CHECK_FALSE(t.add_bos);  // default true, but there is no BOS
  CHECK(t.types[1] == TokenType::kUndefined);
  CHECK(t.types[2] == TokenType::kUndefined);
  CHECK(t.types[3] == TokenType::kByte);
  CHECK(t.tokens[1] == "[EMPTY_1]");  // llama.cpp's placeholder for empty text
}

TEST_CASE("tokenizer data: an empty token gets llama.cpp's placeholder text") {
  const TokenizerData t = TokenizerData::FromGguf(FileWith(
      {Str("tokenizer.ggml.model", "llama"),
       {"tokenizer.ggml.tokens", kTArray, EncStrArray({"<unk>", "", "x"})}}));
  CHECK(t.tokens[1] == "[EMPTY_1]");
}

TokenizerData RoundTrip(const TokenizerData& in) {
  TempDir dir;
  const std::string path = dir.File("rt.gguf");
  {
    gguf::GgufWriter w(path);
    in.AddToGguf(w);
    w.Finish();
  }
  return TokenizerData::FromGguf(GgufFile::Open(path));
}

void CheckSame(const TokenizerData& a, const TokenizerData& b) {
  CHECK(a.model == b.model);
  CHECK(a.pre == b.pre);
  CHECK(a.tokens == b.tokens);
  CHECK(a.scores == b.scores);
  CHECK(a.types == b.types);
  CHECK(a.merges == b.merges);
  CHECK(a.bos_id == b.bos_id);
  CHECK(a.eos_id == b.eos_id);
  CHECK(a.unk_id == b.unk_id);
  CHECK(a.pad_id == b.pad_id);
  CHECK(a.eot_id == b.eot_id);
  CHECK(a.add_bos == b.add_bos);
  CHECK(a.add_eos == b.add_eos);
  CHECK(a.add_space_prefix == b.add_space_prefix);
  CHECK(a.chat_template == b.chat_template);
}

TEST_CASE("tokenizer data: AddToGguf then FromGguf gives back the same data") {
  SUBCASE("stories260K") {
    const TokenizerData t =
        TokenizerData::FromGguf(GgufFile::Open(ModelPath("stories260K.gguf")));
    CheckSame(t, RoundTrip(t));
  }
  SUBCASE("gpt2 with every id set") {
    TokenizerData t;
    t.model = "gpt2";
    t.pre = "qwen2";
    t.tokens = Vocab(30);
    t.scores.assign(30, 0.5f);
    t.types.assign(30, TokenType::kNormal);
    t.types[29] = TokenType::kControl;
    t.merges = {"t1 t2", "t3 t4"};
    t.bos_id = 29;
    t.eos_id = 28;
    t.unk_id = 0;
    t.pad_id = 27;
    t.eot_id = 26;
    t.add_bos = true;
    t.add_eos = true;
    t.add_space_prefix = true;
    t.chat_template = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% endfor %}";
    CheckSame(t, RoundTrip(t));
  }
  SUBCASE("llama with ids cleared that have defaults") {
    TokenizerData t;
    t.model = "llama";
    t.tokens = Vocab(8);
    t.scores.assign(8, -1.0f);
    t.types.assign(8, TokenType::kUserDefined);
    t.bos_id = -1;  // the default would be 1: must survive as "none"
    t.eos_id = -1;
    t.unk_id = -1;
    CheckSame(t, RoundTrip(t));
  }
}

}  // namespace
}  // namespace sparrow
