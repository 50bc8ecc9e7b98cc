// libFuzzer target for the tokenizers and pre-tokenizers.
//
// Small vocabularies are built once: a SentencePiece one (byte fallback,
// scored merges, a user-defined token) and byte-level BPE ones for each
// pre-tokenizer. Every input (any bytes, valid UTF-8 or not) is encoded with
// each, and then:
// - every id is in the vocabulary, BOS only first, control tokens nowhere
//   else (control-token text in the input is plain text);
// - SentencePiece: decoding gives the input back, exactly for well-formed
//   UTF-8 without U+2581, and up to spaces written as U+2581 otherwise (a
//   truncated sequence swallows the U+2581 a space became, as in llama.cpp);
// - BPE: decoding gives back the input with malformed bytes as U+FFFD;
// - pre-tokenizer words are non-empty and concatenate to that same text;
// - on short inputs, ids equal those of the naive rules (tokenizer_reference.h).
// A broken invariant aborts, which libFuzzer records as a crash.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "formats/tokenizer_data.h"
#include "src/tokenizer/pre_tokenizer.h"
#include "src/tokenizer/tokenizer.h"
#include "src/tokenizer/unicode.h"
#include "tests/tokenizer_reference.h"

namespace {

using sparrow::PreTokenize;
using sparrow::PreTokenizer;
using sparrow::PreTokenizerFor;
using sparrow::Tokenizer;
using sparrow::TokenizerData;
using sparrow::TokenType;
using Ids = std::vector<int32_t>;

constexpr size_t kNaiveMaxBytes = 256;  // the naive rules are quadratic
constexpr const char* kSpaceMark = "\xE2\x96\x81";

[[noreturn]] void Violated(const char* what, const std::string& text) {
  std::fprintf(stderr, "tokenizer_fuzzer: invariant violated: %s (input of %zu bytes)\n", what,
               text.size());
  std::abort();
}

void Add(TokenizerData& d, const std::string& text, float score, TokenType type) {
  d.tokens.push_back(text);
  d.scores.push_back(score);
  d.types.push_back(type);
}

TokenizerData SpmData() {
  TokenizerData d;
  d.model = "llama";
  d.unk_id = 0;
  d.bos_id = 1;
  d.eos_id = 2;
  d.add_bos = true;
  d.add_space_prefix = true;
  Add(d, "<unk>", 0, TokenType::kUnknown);
  Add(d, "<s>", 0, TokenType::kControl);
  Add(d, "</s>", 0, TokenType::kControl);
  for (int b = 0; b < 256; ++b) {
    Add(d, sparrow::reference::ByteTokenName(static_cast<uint8_t>(b)), 0, TokenType::kByte);
  }
  // Letters, the space mark and some merges, with scores that tie and differ.
  const std::string sp = kSpaceMark;
  const std::vector<std::pair<std::string, float>> normal = {
      {sp, -1},        {"a", -2},        {"b", -2},          {"e", -2},       {"h", -2},
      {"t", -2},       {"\n", -3},       {sp + sp, -4},      {sp + "t", -4},  {"he", -4},
      {"th", -5},      {"the", -3},      {sp + "the", -2.5}, {"ab", -6},      {"ba", -6},
      {"aba", -7},     {sp + "a", -5},   {"\xC3\xA9", -3},   {"\xC3\xA9t", -8},
      {"\xE4\xBD\xA0\xE5\xA5\xBD", -9},   {"\xE4\xBD\xA0", -9}, {"\xE5\xA5\xBD", -9},
  };
  for (const auto& [text, score] : normal) Add(d, text, score, TokenType::kNormal);
  Add(d, "<tag>", 0, TokenType::kUserDefined);
  return d;
}

TokenizerData BpeData(const std::string& pre) {
  TokenizerData d;
  d.model = "gpt2";
  d.pre = pre;
  for (int b = 0; b < 256; ++b) {
    Add(d, sparrow::reference::Gpt2Char(static_cast<uint8_t>(b)), 0, TokenType::kNormal);
  }
  const std::string sp = "\xC4\xA0";  // a space in the byte alphabet
  const std::vector<std::string> merged = {"th", "the", sp + "t", sp + "the", "he", "ll",
                                           "hell", "hello", "12", "123", sp + sp, "\xC3\x83\xC2\xA9",
                                           "in", "ing", sp + "a", "ab", "abc"};
  for (const std::string& m : merged) Add(d, m, 0, TokenType::kNormal);
  d.merges = {"t h", "th e", sp + " t", sp + "t he", "h e", "l l", "he ll", "hell o",
              "1 2", "12 3", sp + " " + sp, "\xC3\x83 \xC2\xA9", "i n", "in g",
              sp + " a", "a b", "x y", "t h"};
  Add(d, "<|begin_of_text|>", 0, TokenType::kControl);
  d.bos_id = static_cast<int32_t>(d.tokens.size() - 1);
  Add(d, "<|end_of_text|>", 0, TokenType::kControl);
  d.eos_id = static_cast<int32_t>(d.tokens.size() - 1);
  Add(d, "<tool>", 0, TokenType::kUserDefined);
  d.add_bos = true;
  return d;
}

struct Fixture {
  TokenizerData spm_data = SpmData();
  std::unique_ptr<Tokenizer> spm = Tokenizer::Create(spm_data);
  std::vector<TokenizerData> bpe_data = {BpeData("llama-bpe"), BpeData("qwen2"),
                                         BpeData("default"), BpeData("gpt-2")};
  std::vector<std::unique_ptr<Tokenizer>> bpe;
  sparrow::reference::NaiveSpm naive_spm{spm_data};
  std::vector<sparrow::reference::NaiveBpe> naive_bpe;
  Fixture() {
    for (const TokenizerData& d : bpe_data) {
      bpe.push_back(Tokenizer::Create(d));
      naive_bpe.emplace_back(d);
    }
  }
};

std::string Escaped(const std::string& s) {
  std::string out;
  for (char c : s) out += c == ' ' ? std::string(kSpaceMark) : std::string(1, c);
  return out;
}

// The text with each malformed byte as U+FFFD, the way llama.cpp reads it.
std::string Reencoded(const std::string& s) {
  std::string out;
  for (uint32_t cp : sparrow::unicode::DecodeUtf8(s)) sparrow::unicode::AppendUtf8(cp, out);
  return out;
}

void CheckIds(const Tokenizer& tok, const Ids& ids, const std::string& text) {
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= tok.vocab_size()) Violated("id out of range", text);
    const TokenType type = tok.data().types[id];
    if (type == TokenType::kControl && !(i == 0 && id == tok.bos_id())) {
      Violated("control token from plain text", text);
    }
    if (type == TokenType::kUnknown) Violated("unknown token despite byte fallback", text);
  }
  if (ids.empty() || ids[0] != tok.bos_id()) Violated("BOS missing", text);
}

void CheckSpm(const Fixture& f, const std::string& text) {
  const Tokenizer& tok = *f.spm;
  const Ids ids = tok.Encode(text, true);
  CheckIds(tok, ids, text);
  if (text.empty() && ids.size() != 1) Violated("empty text gave tokens", text);
  // After a user-defined token the space prefix comes back, adding a space.
  if (text.find("<tag>") != std::string::npos) return;
  const std::string decoded = tok.Decode(ids);
  // (A literal U+2581 in the text reads as a space: SentencePiece cannot tell.)
  if (sparrow::reference::WellFormed(text) && text.find(kSpaceMark) == std::string::npos &&
      decoded != text) {
    Violated("SPM round trip", text);
  }
  if (Escaped(decoded) != Escaped(text)) Violated("SPM round trip up to U+2581", text);
  if (text.size() <= kNaiveMaxBytes) {
    Ids naive = f.naive_spm.Encode(text, !text.empty());
    naive.insert(naive.begin(), tok.bos_id());
    if (naive != ids) Violated("SPM differs from the naive rule", text);
  }
}

void CheckBpe(const Fixture& f, size_t which, const std::string& text) {
  const Tokenizer& tok = *f.bpe[which];
  const Ids ids = tok.Encode(text, true);
  CheckIds(tok, ids, text);
  const std::string expected = Reencoded(text);
  const std::string decoded = tok.Decode(ids);
  if (decoded != expected) Violated("BPE round trip", text);

  const auto spec = PreTokenizerFor(f.bpe_data[which].pre);
  if (!spec) Violated("pre-tokenizer missing", text);
  const std::vector<std::string> words = PreTokenize(spec->kind, text);
  std::string joined;
  for (const std::string& w : words) {
    if (w.empty()) Violated("empty pre-tokenizer word", text);
    joined += w;
  }
  if (joined != expected) Violated("pre-tokenizer words do not make the text", text);

  // The naive rule, word by word, where no user-defined token cuts the text.
  if (text.size() <= kNaiveMaxBytes && text.find("<tool>") == std::string::npos) {
    Ids naive = {tok.bos_id()};
    for (const std::string& w : words) {
      for (int32_t id : f.naive_bpe[which].EncodeWord(w, spec->ignore_merges)) {
        naive.push_back(id);
      }
    }
    if (naive != ids) Violated("BPE differs from the naive rule", text);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Fixture* fixture = new Fixture();
  const std::string text(reinterpret_cast<const char*>(data), size);
  CheckSpm(*fixture, text);
  for (size_t i = 0; i < fixture->bpe.size(); ++i) CheckBpe(*fixture, i, text);
  return 0;
}
