// Pieces shared by the two tokenizers (internal to src/tokenizer/).
#pragma once

#include <cstdint>
#include <deque>
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

// A stretch of input: plain text, or a special token found in it.
struct Fragment {
  std::string_view text;
  int32_t token = -1;  // >= 0: this fragment is that token
};

// Cuts text at the special tokens it contains, as llama.cpp does: the
// longest tokens first, each at every leftmost non-overlapping occurrence in
// what is still plain text. User-defined tokens (tokenizer.ggml.token_type 4)
// are always cut out; control and unknown tokens ("<s>", "<|eot_id|>") only
// by the splitter made with_control (Encode's parse_special).
class SpecialTokenSplitter {
 public:
  SpecialTokenSplitter(const TokenizerData& data, bool with_control);
  std::vector<Fragment> Split(std::string_view text) const;

 private:
  std::vector<int32_t> ids_;  // by length, longest first
  std::vector<std::string> texts_;
};

// The two splitters a tokenizer keeps, picked per segment.
class SpecialTokenSplitters {
 public:
  explicit SpecialTokenSplitters(const TokenizerData& data)
      : user_(data, false), all_(data, true) {}
  // The fragments of all segments in order, each segment split with its own
  // rule; plain text that continues across segments becomes one fragment
  // (its bytes kept in `storage`, which must outlive the result).
  std::vector<Fragment> Split(const std::vector<Tokenizer::Segment>& segments,
                              std::deque<std::string>& storage) const;

 private:
  SpecialTokenSplitter user_, all_;
};

// The constructors validate `data` for their model; InputError on failure.
std::unique_ptr<Tokenizer> MakeSpmTokenizer(const TokenizerData& data);
std::unique_ptr<Tokenizer> MakeBpeTokenizer(const TokenizerData& data, PreTokenizerSpec pre);

}  // namespace sparrow
