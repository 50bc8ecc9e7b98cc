// Pieces shared by the two tokenizers (internal to src/tokenizer/).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "formats/tokenizer_data.h"
#include "src/tokenizer/pre_tokenizer.h"
#include "src/tokenizer/tokenizer.h"

namespace sparrow {

// Strings -> their index in the list the table was built from: a flat,
// open-addressing hash table over one buffer holding all the strings, so a
// lookup touches one or two cache lines (the tokenizers' inner loops are
// lookups of substrings). Read-only once built, so safe to share.
class StringTable {
 public:
  enum class Repeats { kLastWins, kFirstWins };
  StringTable(const std::vector<std::string>& keys, Repeats repeats);
  // The index of `key`, -1 if absent.
  int32_t Find(std::string_view key) const;

 private:
  struct Slot {
    uint32_t hash = 0;
    uint32_t size = 0;
    uint32_t offset = 0;  // into text_
    int32_t index = -1;   // -1: empty
  };
  static uint64_t Hash(std::string_view key);

  std::string text_;
  std::vector<Slot> slots_;  // a power of two, at most half full
};

// Token text -> id. Where two tokens share a text the later id wins, as in
// llama.cpp's vocabulary.
class TokenIndex {
 public:
  explicit TokenIndex(const std::vector<std::string>& tokens)
      : table_(tokens, StringTable::Repeats::kLastWins) {}
  // -1 if no token has this text.
  int32_t Find(std::string_view text) const { return table_.Find(text); }

 private:
  StringTable table_;
};

TokenType TypeOf(const TokenizerData& data, int32_t id);

// A stretch of input: plain text, or a user-defined token found in it.
struct Fragment {
  std::string_view text;
  int32_t token = -1;  // >= 0: this fragment is that token
};

// Cuts text at the user-defined tokens it contains (tokenizer.ggml.token_type
// 4), as llama.cpp does even when special tokens are not parsed: the longest
// tokens first, each at every leftmost non-overlapping occurrence in what is
// still plain text. Control and unknown tokens ("<s>", "<|eot_id|>") stay
// plain text.
class UserTokenSplitter {
 public:
  explicit UserTokenSplitter(const TokenizerData& data);
  std::vector<Fragment> Split(std::string_view text) const;

 private:
  std::vector<int32_t> ids_;  // by length, longest first
  std::vector<std::string> texts_;
};

// The constructors validate `data` for their model; InputError on failure.
std::unique_ptr<Tokenizer> MakeSpmTokenizer(const TokenizerData& data);
std::unique_ptr<Tokenizer> MakeBpeTokenizer(const TokenizerData& data, PreTokenizerSpec pre);

}  // namespace sparrow
