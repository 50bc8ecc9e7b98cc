// Tokenizer tests. The expectations come from outside the code under test:
// - llama.cpp's figures and the published stories260K sample (../shared);
// - the token ids Hugging Face's Llama 2 tokenizer gives for llama.cpp's
//   tokenizer test strings (llama-2-tiny-random.gguf carries that vocabulary);
// - splits and merges worked out by hand from the regexes and merge lists;
// - a naive quadratic re-implementation of each merge rule, written from the
//   rule's statement (tokenizer_reference.h), run against the real code on
//   many texts.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "formats/gguf.h"
#include "formats/tokenizer_data.h"
#include "src/tokenizer/pre_tokenizer.h"
#include "src/tokenizer/tokenizer.h"
#include "src/tokenizer/unicode.h"
#include "tests/shared_path.h"
#include "tests/tokenizer_reference.h"

namespace sparrow {
namespace {

using Ids = std::vector<int32_t>;
using Words = std::vector<std::string>;
using reference::ByteTokenName;
using reference::Gpt2Char;
using reference::NaiveBpe;
using reference::NaiveSpm;
using reference::WellFormed;

using testing::SharedPath;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot open ", path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TokenizerData LoadData(const std::string& model) {
  const gguf::GgufFile file = gguf::GgufFile::Open(SharedPath("models/" + model));
  return TokenizerData::FromGguf(file);
}

int32_t IdOf(const TokenizerData& data, const std::string& text) {
  for (size_t i = 0; i < data.tokens.size(); ++i) {
    if (data.tokens[i] == text) return static_cast<int32_t>(i);
  }
  FAIL("no token ", text);
  return -1;
}


// --- SentencePiece on the shared models --------------------------------------

TEST_CASE("spm: stories260K reproduces the published sample's token ids") {
  const TokenizerData data = LoadData("stories260K.gguf");
  const auto tok = Tokenizer::Create(data);
  const std::string reference = ReadFile(SharedPath("reference/stories260K_greedy_reference.txt"));
  // "ids [403, 407, ...]" on the last line.
  const size_t open = reference.rfind('[');
  const size_t close = reference.rfind(']');
  REQUIRE(open != std::string::npos);
  REQUIRE(close > open);
  Ids ids;
  std::stringstream list(reference.substr(open + 1, close - open - 1));
  for (std::string item; std::getline(list, item, ',');) ids.push_back(std::stoi(item));
  REQUIRE(ids.size() == 40);

  const std::string decoded = tok->Decode(ids);
  CHECK(reference.compare(0, decoded.size(), decoded) == 0);
  CHECK(decoded.size() > 100);
  CHECK(tok->Encode(decoded, /*add_bos=*/false) == ids);

  // The sample starts "Once upon a time," and those words are its first ids.
  const Ids once = tok->Encode("Once upon a time", /*add_bos=*/true);
  CHECK(once == Ids{data.bos_id, ids[0], ids[1], ids[2], ids[3]});
  CHECK(data.bos_id == 1);
  CHECK(tok->Decode(once) == "Once upon a time");
  CHECK(tok->TokenToPiece(ids[0]) == " Once");  // the space prefix
}

TEST_CASE("spm: stories260K on special cases matches the naive merge rule") {
  const TokenizerData data = LoadData("stories260K.gguf");
  const auto tok = Tokenizer::Create(data);
  REQUIRE(data.add_space_prefix);

  CHECK(tok->Encode("", true) == Ids{1});
  CHECK(tok->Encode("", false).empty());
  CHECK(tok->Decode({}).empty());

  const std::vector<std::string> texts = {
      "Hello world",  " leading", "trailing ", "  two  spaces  ", "\n", "a\nb\n\nc",
      "Tom said: \"Hi!\"\n\nThe end.", "1 22 333 4444 2024-01-01", "tabs\tand\rreturns",
      "caf\xC3\xA9 na\xC3\xAFve \xE2\x9C\x93 \xF0\x9F\xA6\x99", "\xE4\xBD\xA0\xE5\xA5\xBD",
      "   ", "x", "Lily's mom said, \"Let's go!\"",
  };
  for (const std::string& text : texts) {
    CAPTURE(text);
    const Ids ids = tok->Encode(text, false);
    CHECK(ids == NaiveSpm(data).Encode(text, true));
    CHECK(tok->Decode(ids) == text);
    Ids with_bos = ids;
    with_bos.insert(with_bos.begin(), data.bos_id);
    CHECK(tok->Encode(text, true) == with_bos);
    CHECK(tok->Decode(with_bos) == text);
  }

  // Byte fallback: no token of this 512-token vocabulary holds U+4F60.
  const int32_t space = IdOf(data, "\xE2\x96\x81");
  for (const std::string& t : data.tokens) REQUIRE(t.find("\xE4\xBD\xA0") == std::string::npos);
  CHECK(tok->Encode("\xE4\xBD\xA0", false) ==
        Ids{space, IdOf(data, "<0xE4>"), IdOf(data, "<0xBD>"), IdOf(data, "<0xA0>")});
  // Malformed UTF-8: a lead byte takes the bytes after it into its
  // character, as llama.cpp splits text; all of them become byte tokens.
  CHECK(tok->Encode("\xE2" "ab", false) ==
        Ids{space, IdOf(data, "<0xE2>"), IdOf(data, "<0x61>"), IdOf(data, "<0x62>")});
  for (std::string bad : {std::string("\xFF\xFE"), std::string("a\x80"), std::string("\xF0\x9F"),
                          std::string("\0\x01", 2)}) {
    CHECK(tok->Decode(tok->Encode(bad, true)) == bad);
  }
  // Spaces are written U+2581 before the text is cut into characters, so a
  // truncated sequence can swallow one, and it comes back as U+2581's bytes.
  CHECK(tok->Encode("\xF0 x", false) ==
        Ids{space, IdOf(data, "<0xF0>"), IdOf(data, "<0xE2>"), IdOf(data, "<0x96>"),
            IdOf(data, "<0x81>"), IdOf(data, "x")});
  CHECK(tok->Decode(tok->Encode("\xF0 x", false)) == "\xF0\xE2\x96\x81x");
  // Control tokens in the text are plain text; printing them gives nothing.
  const Ids control_text = tok->Encode("<s></s><unk>", false);
  for (int32_t id : control_text) {
    CHECK(id != data.bos_id);
    CHECK(id != data.eos_id);
    CHECK(id != data.unk_id);
  }
  CHECK(tok->Decode(control_text) == "<s></s><unk>");
  CHECK(tok->TokenToPiece(data.bos_id).empty());
  CHECK(tok->TokenToPiece(data.eos_id).empty());
  CHECK(tok->TokenToPiece(data.unk_id).empty());
  CHECK(tok->TokenToPiece(IdOf(data, "<0x0A>")) == "\n");
  CHECK(tok->TokenToPiece(-1).empty());
  CHECK(tok->TokenToPiece(tok->vocab_size()).empty());
}

TEST_CASE("spm: stories260K on the TinyStories excerpt gives llama.cpp's chunk count") {
  const TokenizerData data = LoadData("stories260K.gguf");
  const auto tok = Tokenizer::Create(data);
  const std::string text =
      ReadFile(SharedPath("corpora/tinystories_val_excerpt.txt")).substr(0, 100000);
  // llama.cpp's perplexity tokenizes the file with BOS and reports 186
  // chunks of 256 tokens.
  const Ids ids = tok->Encode(text, /*add_bos=*/true);
  MESSAGE("tokens with BOS: ", ids.size(), " = ", ids.size() / 256, " chunks of 256");
  CHECK(ids.size() >= 186 * 256);
  CHECK(ids.size() < 187 * 256);
  CHECK(tok->Decode(ids) == text);

  // The same rule, checked the slow way: a stretch across several lines (the
  // tokenizer merges between newlines separately; the naive rule does not),
  // then the first paragraphs one by one.
  const std::string lines = text.substr(0, 900);
  REQUIRE(std::count(lines.begin(), lines.end(), '\n') >= 3);
  CHECK(tok->Encode(lines, false) == NaiveSpm(data).Encode(lines, true));
  size_t begin = 0;
  for (int paragraph = 0; paragraph < 8; ++paragraph) {
    const size_t end = text.find('\n', begin);
    REQUIRE(end != std::string::npos);
    const std::string line = text.substr(begin, end - begin);
    begin = end + 1;
    if (line.empty()) continue;
    CAPTURE(line);
    CHECK(tok->Encode(line, false) == NaiveSpm(data).Encode(line, true));
  }
}

// Hugging Face's Llama 2 tokenizer on llama.cpp's tokenizer test strings
// (add_special_tokens=False), which llama.cpp reproduces.
TEST_CASE("spm: Llama 2 vocabulary gives Hugging Face's token ids") {
  const TokenizerData data = LoadData("llama-2-tiny-random.gguf");
  REQUIRE(data.tokens.size() == 32000);
  REQUIRE(data.tokens[15043] == "\xE2\x96\x81Hello");
  const auto tok = Tokenizer::Create(data);
  const std::vector<std::pair<std::string, Ids>> cases = {
      {"ied 4 \xC2\xBD months", {474, 287, 29871, 29946, 29871, 30226, 7378}},
      {"F\xC3\xBChrer", {383, 4000, 261}},
      {"", {}},
      {" ", {259}},
      {"  ", {1678}},
      {"   ", {268}},
      {"\t", {29871, 12}},
      {"\n", {29871, 13}},
      {"\n\n", {29871, 13, 13}},
      {"\n\n\n", {29871, 13, 13, 13}},
      {"\t\n", {29871, 12, 13}},
      {"Hello world", {15043, 3186}},
      {" Hello world", {29871, 15043, 3186}},
      {"Hello World", {15043, 2787}},
      {" Hello World", {29871, 15043, 2787}},
      {" Hello World!", {29871, 15043, 2787, 29991}},
      {"Hello, world!", {15043, 29892, 3186, 29991}},
      {" Hello, world!", {29871, 15043, 29892, 3186, 29991}},
      {" this is \xF0\x9F\xA6\x99.cpp", {29871, 445, 338, 29871, 243, 162, 169, 156, 29889, 8223}},
      {"w048 7tuijk dsdfhu", {281, 29900, 29946, 29947, 29871, 29955, 9161, 13535, 18031, 2176,
                              6905}},
      {"\xD0\xBD\xD0\xB5\xD1\x89\xD0\xBE \xD0\xBD\xD0\xB0 \xD0\x91\xD1\x8A\xD0\xBB\xD0\xB3\xD0"
       "\xB0\xD1\x80\xD1\x81\xD0\xBA\xD0\xB8",
       {1538, 4851, 665, 1386, 29713, 1305}},
      {"Hello", {15043}},
      {" Hello", {29871, 15043}},
      {"  Hello", {259, 15043}},
      {"   Hello", {1678, 15043}},
      {"    Hello", {268, 15043}},
      {"    Hello\n    Hello", {268, 15043, 13, 1678, 15043}},
      {" (", {29871, 313}},
      {"\n =", {29871, 13, 353}},
      {"' era", {525, 3152}},
      {"Hello, y'all! How are you \xF0\x9F\x98\x81 ?\xE6\x88\x91\xE6\x83\xB3\xE5\x9C\xA8"
       "apple\xE5\xB7\xA5\xE4\xBD\x9C"
       "1314151\xE5\xA4\xA9\xEF\xBD\x9E",
       {15043, 29892, 343, 29915, 497, 29991, 1128, 526, 366, 29871, 243, 162, 155, 132, 1577,
        30672, 31522, 30505, 11548, 31041, 30732, 29896, 29941, 29896, 29946, 29896, 29945,
        29896, 30408, 30739}},
      {"3", {29871, 29941}},
      {"33", {29871, 29941, 29941}},
      {"333", {29871, 29941, 29941, 29941}},
      {"3333", {29871, 29941, 29941, 29941, 29941}},
      {"333333333", {29871, 29941, 29941, 29941, 29941, 29941, 29941, 29941, 29941, 29941}},
  };
  for (const auto& [text, want] : cases) {
    const auto& text_ = text;  // clang 14 cannot capture a structured binding
    CAPTURE(text_);
    CHECK(tok->Encode(text, false) == want);
    CHECK(tok->Decode(tok->Encode(text, true)) == text);
  }
  // A Llama 2 chat prompt with its control tokens parsed is the text
  // between them tokenized as usual (each part with the space prefix, as
  // after BOS), with "<s>" and "</s>" as BOS and EOS.
  {
    const std::string prompt = "[INST] Hi [/INST] Hello </s><s>[INST] Bye [/INST]";
    Ids want = tok->Encode("[INST] Hi [/INST] Hello ", true);
    want.push_back(data.eos_id);
    want.push_back(data.bos_id);
    const Ids rest = tok->Encode("[INST] Bye [/INST]", false);
    want.insert(want.end(), rest.begin(), rest.end());
    CHECK(tok->Encode(prompt, true, true) == want);
    CHECK(tok->Encode("[INST]", false) == Ids{518, 25580, 29962});
  }
  // Wikitext lines (many merges, newlines between) against the naive rule.
  const std::string wiki = ReadFile(SharedPath("corpora/wikitext2_test.txt")).substr(0, 700);
  CHECK(tok->Encode(wiki, false) == NaiveSpm(data).Encode(wiki, true));
}

TEST_CASE("spm: hand-built vocabulary: score order, ties, user-defined tokens") {
  TokenizerData data;
  data.model = "llama";
  data.add_space_prefix = false;
  data.unk_id = 0;
  data.bos_id = 1;
  data.eos_id = 2;
  auto add = [&](const std::string& text, float score, TokenType type) {
    data.tokens.push_back(text);
    data.scores.push_back(score);
    data.types.push_back(type);
    return static_cast<int32_t>(data.tokens.size() - 1);
  };
  add("<unk>", 0, TokenType::kUnknown);
  add("<s>", 0, TokenType::kControl);
  add("</s>", 0, TokenType::kControl);
  for (int b = 0; b < 256; ++b) add(ByteTokenName(static_cast<uint8_t>(b)), 0, TokenType::kByte);
  const int32_t a = add("a", -1, TokenType::kNormal);
  const int32_t b = add("b", -1, TokenType::kNormal);
  const int32_t c = add("c", -1, TokenType::kNormal);
  const int32_t ab = add("ab", -5, TokenType::kNormal);
  const int32_t bc = add("bc", -5, TokenType::kNormal);
  const int32_t tag = add("<tag>", 0, TokenType::kUserDefined);
  const int32_t sp = add("\xE2\x96\x81", -2, TokenType::kNormal);
  const int32_t sp_a = add("\xE2\x96\x81" "a", -3, TokenType::kNormal);

  {
    const auto tok = Tokenizer::Create(data);
    // Equal scores: the leftmost pair merges first.
    CHECK(tok->Encode("abc", false) == Ids{ab, c});
    CHECK(tok->Encode("abcabc", false) == Ids{ab, c, ab, c});
    // User-defined tokens are cut out of the text first.
    CHECK(tok->Encode("ab<tag>c<tag>", false) == Ids{ab, tag, c, tag});
    CHECK(tok->TokenToPiece(tag) == "<tag>");
    CHECK(tok->Decode({ab, tag, c}) == "ab<tag>c");
    // Control tokens are not, unless special tokens are parsed.
    const Ids lt_s_gt{IdOf(data, "<0x3C>"), IdOf(data, "<0x73>"), IdOf(data, "<0x3E>")};
    CHECK(tok->Encode("<s>", false) == lt_s_gt);
    CHECK(tok->Encode("ab<s>c</s>", false, true) == Ids{ab, data.bos_id, c, data.eos_id});
    CHECK(tok->Encode("<unk>", false, true) == Ids{data.unk_id});
    CHECK(tok->Encode("<s><tag>", true, true) == Ids{data.bos_id, data.bos_id, tag});
    // Segments: each with its own rule, plain text merging across the cut.
    Ids want{ab, data.bos_id, c};
    want.insert(want.end(), lt_s_gt.begin(), lt_s_gt.end());
    CHECK(tok->EncodeSegments({{"a", false}, {"b<s>", true}, {"c<s>", false}}, false) == want);
    CHECK(tok->EncodeSegments({{"a", true}, {"", false}, {"bc", false}}, false) == Ids{ab, c});
    CHECK(tok->EncodeSegments({}, true) == Ids{data.bos_id});
    CHECK(tok->FindToken("<tag>") == tag);
    CHECK(tok->FindToken("<nope>") == -1);
  }
  data.scores[bc] = -4;  // now "bc" outranks "ab"
  {
    const auto tok = Tokenizer::Create(data);
    CHECK(tok->Encode("abc", false) == Ids{a, bc});
  }
  data.add_space_prefix = true;
  {
    const auto tok = Tokenizer::Create(data);
    // The prefix goes before the text and again after each user-defined token.
    CHECK(tok->Encode("a<tag>a", false) == Ids{sp_a, tag, sp_a});
    CHECK(tok->Encode(" b", false) == Ids{sp, sp, b});
    CHECK(tok->Decode({sp, sp, b}) == " b");
    CHECK(tok->Decode({data.bos_id, sp_a}) == "a");
    // ... and after a control token when special tokens are parsed.
    CHECK(tok->Encode("a</s>a", false, true) == Ids{sp_a, data.eos_id, sp_a});
    CHECK(tok->EncodeSegments({{"</s>", true}, {"a", false}}, false) ==
          Ids{data.eos_id, sp_a});
  }
}

// --- Pre-tokenizers ------------------------------------------------------------

TEST_CASE("pre-tokenizer: Llama 3") {
  auto split = [](const std::string& s) { return PreTokenize(PreTokenizer::kLlama3, s); };
  CHECK(split("Hello world") == Words{"Hello", " world"});
  CHECK(split("") == Words{});
  // Contractions, in any case; an apostrophe before other letters joins them.
  CHECK(split("I'm here, they'll") == Words{"I", "'m", " here", ",", " they", "'ll"});
  CHECK(split("DON'T WE'LL we'Ve i'D") ==
        Words{"DON", "'T", " WE", "'LL", " we", "'Ve", " i", "'D"});
  CHECK(split("'s'S'x 'hello") == Words{"'s", "'S", "'x", " '", "hello"});
  // Digits in groups of up to three, never joined to letters or a space.
  CHECK(split("1234567 89") == Words{"123", "456", "7", " ", "89"});
  CHECK(split("abc123def") == Words{"abc", "123", "def"});
  CHECK(split("\xD9\xA3\xD9\xA4\xD9\xA5\xD9\xA6") ==  // Arabic-Indic digits 3456
        Words{"\xD9\xA3\xD9\xA4\xD9\xA5", "\xD9\xA6"});
  // Punctuation runs take one leading space and the newlines after them.
  CHECK(split("Hi!!! ...\n\nok") == Words{"Hi", "!!!", " ...\n\n", "ok"});
  CHECK(split("x .") == Words{"x", " ."});
  CHECK(split("(a)") == Words{"(a", ")"});
  // Whitespace: newline runs, then \s+(?!\S) leaves the last space to the word.
  CHECK(split("a   b") == Words{"a", "  ", " b"});
  CHECK(split("a   ") == Words{"a", "   "});
  CHECK(split("a \n b") == Words{"a", " \n", " b"});
  CHECK(split("a\r\nb") == Words{"a", "\r\n", "b"});
  CHECK(split("\t\tx") == Words{"\t", "\tx"});
  CHECK(split("x \n\n  y") == Words{"x", " \n\n", " ", " y"});
  CHECK(split(" ") == Words{" "});
  CHECK(split("\n") == Words{"\n"});
  // Non-Latin letters are letters; CJK and Latin letters run together.
  CHECK(split("\xD0\xBF\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82 \xD0\xBC\xD0\xB8\xD1\x80") ==
        Words{"\xD0\xBF\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82", " \xD0\xBC\xD0\xB8\xD1\x80"});
  CHECK(split("\xE6\x88\x91\xE6\x83\xB3\xE5\x9C\xA8" "apple\xE5\xB7\xA5\xE4\xBD\x9C" "13") ==
        Words{"\xE6\x88\x91\xE6\x83\xB3\xE5\x9C\xA8" "apple\xE5\xB7\xA5\xE4\xBD\x9C", "13"});
  // Emoji (symbols) and a variation selector (a mark) are neither.
  CHECK(split("I \xE2\x9D\xA4\xEF\xB8\x8F \xF0\x9F\xA6\x99s") ==
        Words{"I", " \xE2\x9D\xA4\xEF\xB8\x8F", " \xF0\x9F\xA6\x99", "s"});
  // U+00A0 is whitespace, U+200B (a format character) is not.
  CHECK(split("a\xC2\xA0" "b") == Words{"a", "\xC2\xA0" "b"});
  CHECK(split("a\xE2\x80\x8B" "b") == Words{"a", "\xE2\x80\x8B" "b"});
  // Malformed UTF-8: each bad byte is U+FFFD, a symbol.
  CHECK(split("a\xFF b") == Words{"a", "\xEF\xBF\xBD", " b"});
  CHECK(split("\xC3") == Words{"\xEF\xBF\xBD"});
}

TEST_CASE("pre-tokenizer: Qwen2 splits digits one by one") {
  auto split = [](const std::string& s) { return PreTokenize(PreTokenizer::kQwen2, s); };
  CHECK(split("1234567 89") == Words{"1", "2", "3", "4", "5", "6", "7", " ", "8", "9"});
  CHECK(split("I'M x1y") == Words{"I", "'M", " x", "1", "y"});
  CHECK(split("Hi!!! ...\n\nok") == Words{"Hi", "!!!", " ...\n\n", "ok"});
  CHECK(split("a   b\n") == Words{"a", "  ", " b", "\n"});
}

TEST_CASE("pre-tokenizer: GPT-2 and llama.cpp's default chain") {
  auto gpt2 = [](const std::string& s) { return PreTokenize(PreTokenizer::kGpt2, s); };
  CHECK(gpt2("Hello world") == Words{"Hello", " world"});
  CHECK(gpt2("I'M it's") == Words{"I", "'", "M", " it", "'s"});  // lower case only
  CHECK(gpt2("  x") == Words{" ", " x"});
  CHECK(gpt2("12345 67") == Words{"12345", " 67"});
  CHECK(gpt2("a\n\nb") == Words{"a", "\n", "\n", "b"});
  CHECK(gpt2("x !?") == Words{"x", " !?"});

  auto def = [](const std::string& s) { return PreTokenize(PreTokenizer::kDefault, s); };
  CHECK(def("12345") == Words{"123", "45"});
  CHECK(def("a+b=c") == Words{"a", "+", "b", "=", "c"});
  CHECK(def("Hello, world!") == Words{"Hello", ",", " world", "!"});
  CHECK(def("x 1234") == Words{"x", " ", "123", "4"});
  CHECK(def("v1.2") == Words{"v", "1", ".", "2"});

  CHECK(PreTokenizerFor("llama-bpe")->kind == PreTokenizer::kLlama3);
  CHECK(PreTokenizerFor("llama-bpe")->ignore_merges);
  CHECK(PreTokenizerFor("qwen2")->kind == PreTokenizer::kQwen2);
  CHECK_FALSE(PreTokenizerFor("qwen2")->ignore_merges);
  CHECK(PreTokenizerFor("default")->kind == PreTokenizer::kDefault);
  CHECK(PreTokenizerFor("gpt2")->kind == PreTokenizer::kDefault);
  CHECK_FALSE(PreTokenizerFor("no-such-pre").has_value());
}

// --- Byte-level BPE ------------------------------------------------------------

TEST_CASE("unicode: GPT-2 byte alphabet and lenient UTF-8") {
  CHECK(unicode::ByteToChar('a') == "a");
  CHECK(unicode::ByteToChar(' ') == "\xC4\xA0");   // U+0120 "Ġ"
  CHECK(unicode::ByteToChar('\n') == "\xC4\x8A");  // U+010A "Ċ"
  CHECK(unicode::ByteToChar(0x00) == "\xC4\x80");  // U+0100
  CHECK(unicode::ByteToChar(0xAD) == "\xC5\x83");  // U+0143, the last one
  CHECK(unicode::ByteToChar(0xE9) == "\xC3\xA9");  // printable Latin-1 is itself
  for (int b = 0; b < 256; ++b) {
    const auto cps = unicode::DecodeUtf8(unicode::ByteToChar(static_cast<uint8_t>(b)));
    REQUIRE(cps.size() == 1);
    CHECK(unicode::CharToByte(cps[0]) == b);
  }
  CHECK(unicode::CharToByte(0x20) == -1);
  CHECK(unicode::DecodeUtf8("a\xC3\xA9\xE2\x82\xAC\xF0\x9F\xA6\x99") ==
        std::vector<uint32_t>{'a', 0xE9, 0x20AC, 0x1F999});
  CHECK(unicode::DecodeUtf8("\x80\xC3(\xF8") == std::vector<uint32_t>{0xFFFD, 0xFFFD, '(', 0xFFFD});
  CHECK(unicode::DecodeUtf8("\xE2\x82") == std::vector<uint32_t>{0xFFFD, 0xFFFD});
  std::string s;
  unicode::AppendUtf8(0x1FFFFF, s);  // past U+10FFFF: written as U+FFFD
  CHECK(s == "\xEF\xBF\xBD");
  CHECK(unicode::ClassOf('a') == unicode::kLetter);
  CHECK(unicode::ClassOf('7') == unicode::kNumber);
  CHECK(unicode::ClassOf('!') == unicode::kPunctuation);
  CHECK(unicode::ClassOf('$') == 0);
  CHECK(unicode::ClassOf(' ') == unicode::kWhitespace);
  CHECK(unicode::ClassOf(0x3000) == unicode::kWhitespace);
  CHECK(unicode::ClassOf(0x4E00) == unicode::kLetter);
  CHECK(unicode::ClassOf(0x2EBF0) == unicode::kLetter);  // Unicode 15.1
  CHECK(unicode::ClassOf(0x1F999) == 0);
  CHECK(unicode::ClassOf(0x110000) == 0);
}

// A small byte-level vocabulary: the 256 characters of the byte alphabet,
// then merged tokens, with the merges in rank order.
struct BpeVocab {
  TokenizerData data;
  int32_t Add(const std::string& text, TokenType type = TokenType::kNormal) {
    data.tokens.push_back(text);
    data.types.push_back(type);
    return static_cast<int32_t>(data.tokens.size() - 1);
  }
  int32_t Id(const std::string& text) const { return IdOf(data, text); }
  explicit BpeVocab(const std::string& pre) {
    data.model = "gpt2";
    data.pre = pre;
    for (int b = 0; b < 256; ++b) Add(Gpt2Char(static_cast<uint8_t>(b)));
    for (const char* merged : {"he", "ll", "hell", "hello", "\xC4\xA0w", "or", "\xC4\xA0wor",
                               "\xC4\xA0worl", "\xC4\xA0world", "lo", "ab", "abc",
                               "\xC3\x83\xC2\xA9"}) {
      Add(merged);
    }
    data.merges = {"h e",      "l l",          "he ll",          "hell o",
                   "\xC4\xA0 w", "o r",          "\xC4\xA0w or",   "\xC4\xA0wor l",
                   "\xC4\xA0worl d", "l o",      "a b",            "x y",
                   "\xC3\x83 \xC2\xA9", "h e"};  // a repeated merge keeps its first rank
    data.bos_id = Add("<|begin_of_text|>", TokenType::kControl);
    data.eos_id = Add("<|end_of_text|>", TokenType::kControl);
    Add("<tool>", TokenType::kUserDefined);
  }
};

TEST_CASE("bpe: merges by rank, leftmost first; ignore_merges; fallbacks") {
  for (const char* pre : {"llama-bpe", "qwen2"}) {
    CAPTURE(pre);
    BpeVocab v(pre);
    const auto tok = Tokenizer::Create(v.data);
    CHECK(tok->Encode("hello world", false) == Ids{v.Id("hello"), v.Id("\xC4\xA0world")});
    // h e l l l l o: "he" (rank 0), then "ll" at the first two l's, then the
    // next two; "he"+"ll" -> "hell"; "ll" and "o" do not merge.
    CHECK(tok->Encode("hellllo", false) == Ids{v.Id("hell"), v.Id("ll"), v.Id("o")});
    // The merge "x y" makes a piece that is not a token: its bytes are used.
    CHECK(tok->Encode("xy", false) == Ids{v.Id("x"), v.Id("y")});
    // Bytes outside ASCII go through the byte alphabet: e-acute is C3 A9.
    const int32_t e_acute = v.Id("\xC3\x83\xC2\xA9");
    CHECK(tok->Encode("\xC3\xA9", false) == Ids{e_acute});
    CHECK(tok->TokenToPiece(e_acute) == "\xC3\xA9");
    CHECK(tok->TokenToPiece(v.Id("\xC4\xA0world")) == " world");
    CHECK(tok->TokenToPiece(v.data.bos_id).empty());
    CHECK(tok->Encode("hi", true) == Ids{v.data.bos_id, v.Id("h"), v.Id("i")});
    // User-defined tokens are cut out first; control tokens stay text.
    CHECK(tok->Encode("a<tool>b", false) == Ids{v.Id("a"), v.Id("<tool>"), v.Id("b")});
    CHECK(tok->TokenToPiece(v.Id("<tool>")) == "<tool>");
    const Ids control = tok->Encode("<|end_of_text|>", false);
    CHECK(std::find(control.begin(), control.end(), v.data.eos_id) == control.end());
    // "abc" is a token but no merge makes it: Llama 3 takes the word whole.
    if (std::string(pre) == "llama-bpe") {
      CHECK(tok->Encode("abc", false) == Ids{v.Id("abc")});
    } else {
      CHECK(tok->Encode("abc", false) == Ids{v.Id("ab"), v.Id("c")});
    }
    // Malformed UTF-8 becomes U+FFFD's bytes, as in llama.cpp.
    CHECK(tok->Encode("\xFF", false) == Ids{v.Id("\xC3\xAF"), v.Id("\xC2\xBF"), v.Id("\xC2\xBD")});
    CHECK(tok->Decode(tok->Encode("\xFF", false)) == "\xEF\xBF\xBD");

    const std::string text = "Hello world, hello\n\n  hellllo! l'oreal 2024: he'll xyz \xC3\xA9t\xC3\xA9";
    const Ids ids = tok->Encode(text, false);
    CHECK(tok->Decode(ids) == text);
    Ids naive;
    const PreTokenizerSpec spec = *PreTokenizerFor(pre);
    for (const std::string& word : PreTokenize(spec.kind, text)) {
      for (int32_t id : NaiveBpe(v.data).EncodeWord(word, spec.ignore_merges)) naive.push_back(id);
    }
    CHECK(ids == naive);
  }
}

TEST_CASE("tokenizer: unsupported models and bad data are input errors") {
  BpeVocab v("no-such-pre");
  try {
    Tokenizer::Create(v.data);
    FAIL("expected InputError");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("no-such-pre") != std::string::npos);
  }
  TokenizerData bad = BpeVocab("qwen2").data;
  bad.model = "bert";
  CHECK_THROWS_AS(Tokenizer::Create(bad), InputError);
  bad = BpeVocab("qwen2").data;
  bad.bos_id = static_cast<int32_t>(bad.tokens.size());
  CHECK_THROWS_AS(Tokenizer::Create(bad), InputError);
  bad = BpeVocab("qwen2").data;
  bad.types.pop_back();
  CHECK_THROWS_AS(Tokenizer::Create(bad), InputError);
  bad.tokens.clear();
  bad.types.clear();
  CHECK_THROWS_AS(Tokenizer::Create(bad), InputError);
}

TEST_CASE("tokenizer: random text against the naive rules") {
  const TokenizerData data = LoadData("stories260K.gguf");
  const auto tok = Tokenizer::Create(data);
  const NaiveSpm naive(data);
  std::mt19937 rng(1234);
  const std::vector<std::string> alphabet = {"a", "e", "t", "h", " ", " ", "\n", "o", "n", "s",
                                             "Lily", ".", ",", "1", "\xC3\xA9", "\xFF", "\t"};
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    const int n = static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) text += alphabet[rng() % alphabet.size()];
    CAPTURE(text);
    const Ids ids = tok->Encode(text, false);
    CHECK(ids == naive.Encode(text, !text.empty()));
    if (WellFormed(text)) CHECK(tok->Decode(ids) == text);
  }
}

TEST_CASE("tokenizer: encoding speed (printed, not asserted)") {
  const std::string wiki = ReadFile(SharedPath("corpora/wikitext2_test.txt")).substr(0, 1 << 20);
  for (const char* model : {"stories260K.gguf", "llama-2-tiny-random.gguf"}) {
    const auto tok = Tokenizer::Create(LoadData(model));
    const std::clock_t cpu_start = std::clock();
    const auto start = std::chrono::steady_clock::now();
    const Ids ids = tok->Encode(wiki, true);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double cpu = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
    MESSAGE(std::string(model), ": 1 MiB of wikitext-2 -> ", ids.size(), " tokens in ", s * 1e3,
            " ms wall, ", cpu * 1e3, " ms CPU (", wiki.size() / cpu / 1e6, " MB/s of CPU time)");
    CHECK(tok->Decode(ids) == wiki);
  }
  const auto start = std::chrono::steady_clock::now();
  const Words words = PreTokenize(PreTokenizer::kLlama3, wiki);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MESSAGE("Llama 3 pre-tokenizer: 1 MiB -> ", words.size(), " words in ", s * 1e3, " ms");
  std::string joined;
  for (const std::string& w : words) joined += w;
  CHECK(joined == wiki);
}

}  // namespace
}  // namespace sparrow
