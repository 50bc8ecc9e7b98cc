// Byte-level BPE tokenizer (tokenizer.ggml.model "gpt2"), as llama.cpp runs
// it:
// - the pre-tokenizer cuts the text into words;
// - each word's bytes are written in GPT-2's byte alphabet (unicode.h);
// - Llama 3 style vocabularies take a word that is a token as it stands;
// - otherwise the word starts as single characters and the adjacent pair
//   whose merge comes first in tokenizer.ggml.merges is merged, again and
//   again (the same merge twice: the leftmost first), until no pair is a
//   merge;
// - each resulting piece is looked up; a piece that is no token (a merge
//   whose result is missing from the vocabulary) falls back to the tokens of
//   its single bytes, and what has none is dropped.
#include <algorithm>
#include <array>
#include <cstdio>
#include <queue>

#include "src/tokenizer/tokenizer_impl.h"
#include "src/tokenizer/unicode.h"

namespace sparrow {
namespace {

class BpeTokenizer final : public Tokenizer {
 public:
  BpeTokenizer(const TokenizerData& data, PreTokenizerSpec pre);

  std::vector<int32_t> EncodeSegments(const std::vector<Segment>& segments,
                                      bool add_bos) const override;
  int32_t FindToken(std::string_view text) const override { return index_.Find(text); }
  std::string TokenToPiece(int32_t id) const override;

 private:
  struct Symbol {
    size_t offset;  // into the word
    size_t size;    // bytes; 0 once merged into its left neighbour
    int64_t prev;
    int64_t next;
  };
  struct Bigram {
    int32_t rank;
    int64_t left;
    int64_t right;
    size_t size;
  };
  // Orders the queue: lowest rank on top, then the leftmost pair.
  struct Later {
    bool operator()(const Bigram& a, const Bigram& b) const {
      return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    }
  };

  void EncodeWord(std::string_view word, std::vector<int32_t>& out) const;
  std::string MakePiece(int32_t id) const;

  PreTokenizerSpec pre_;
  TokenIndex index_;
  // "left right", as the merges list writes it -> its rank (position); the
  // first occurrence of a repeated merge decides. An entry without a space
  // after its first byte can never match a pair (llama.cpp reads it as an
  // empty pair), and neither can it match here.
  StringTable ranks_;
  SpecialTokenSplitters special_tokens_;
  std::vector<std::string> pieces_;
};

BpeTokenizer::BpeTokenizer(const TokenizerData& data, PreTokenizerSpec pre)
    : Tokenizer(data),
      pre_(pre),
      index_(data_.tokens),
      ranks_(data_.merges, StringTable::Repeats::kFirstWins),
      special_tokens_(data_) {
  pieces_.reserve(data_.tokens.size());
  for (size_t i = 0; i < data_.tokens.size(); ++i) {
    pieces_.push_back(MakePiece(static_cast<int32_t>(i)));
  }
}

std::string BpeTokenizer::MakePiece(int32_t id) const {
  const std::string& text = data_.tokens[id];
  switch (TypeOf(data_, id)) {
    case TokenType::kNormal: {
      // Back from the byte alphabet. A character outside it is written out
      // the way llama.cpp does, so outputs stay comparable.
      std::string piece;
      for (uint32_t cp : unicode::DecodeUtf8(text)) {
        const int byte = unicode::CharToByte(cp);
        if (byte >= 0) {
          piece += static_cast<char>(byte);
          continue;
        }
        std::string utf8;
        unicode::AppendUtf8(cp, utf8);
        piece += "[UNK_BYTE_0x";
        for (char c : utf8) {
          char hex[3];
          std::snprintf(hex, sizeof(hex), "%02x", static_cast<uint8_t>(c));
          piece += hex;
        }
        piece += text;
        piece += ']';
      }
      return piece;
    }
    case TokenType::kUserDefined:
      return text;
    default:  // control, unknown, unused, byte and undefined print nothing
      return std::string();
  }
}

std::string BpeTokenizer::TokenToPiece(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= pieces_.size()) return std::string();
  return pieces_[id];
}

std::vector<int32_t> BpeTokenizer::EncodeSegments(const std::vector<Segment>& segments,
                                                   bool add_bos) const {
  std::vector<int32_t> out;
  size_t bytes = 0;
  for (const Segment& s : segments) bytes += s.text.size();
  out.reserve(bytes / 3 + 2);
  std::deque<std::string> joined;
  if (add_bos && data_.bos_id >= 0) out.push_back(data_.bos_id);
  std::string mapped;
  for (const Fragment& fragment : special_tokens_.Split(segments, joined)) {
    if (fragment.token >= 0) {
      out.push_back(fragment.token);
      continue;
    }
    for (const std::string& word : PreTokenize(pre_.kind, fragment.text)) {
      mapped.clear();
      for (char c : word) mapped += unicode::ByteToChar(static_cast<uint8_t>(c));
      EncodeWord(mapped, out);
    }
  }
  return out;
}

void BpeTokenizer::EncodeWord(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (pre_.ignore_merges) {
    const int32_t id = index_.Find(word);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }

  std::vector<Symbol> symbols;
  symbols.reserve(word.size() / 2 + 1);
  for (size_t offset = 0; offset < word.size();) {
    const size_t size = std::min(unicode::SequenceLength(static_cast<uint8_t>(word[offset])),
                                 word.size() - offset);
    const auto index = static_cast<int64_t>(symbols.size());
    symbols.push_back({offset, size, index - 1, -1});
    if (index > 0) symbols[index - 1].next = index;
    offset += size;
  }

  std::priority_queue<Bigram, std::vector<Bigram>, Later> queue;
  std::string key;
  auto try_add = [&](int64_t left, int64_t right) {
    if (left < 0 || right < 0) return;
    key.assign(word.substr(symbols[left].offset, symbols[left].size));
    key += ' ';
    key.append(word.substr(symbols[right].offset, symbols[right].size));
    const int32_t rank = ranks_.Find(key);
    if (rank < 0) return;
    queue.push({rank, left, right, symbols[left].size + symbols[right].size});
  };
  for (size_t i = 1; i < symbols.size(); ++i) {
    try_add(static_cast<int64_t>(i) - 1, static_cast<int64_t>(i));
  }

  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    // Symbols only grow, so a pair whose sides changed no longer adds up.
    if (left.size == 0 || right.size == 0 || left.size + right.size != bigram.size) continue;
    left.size += right.size;
    right.size = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    try_add(left.prev, bigram.left);
    try_add(bigram.left, left.next);
  }

  for (int64_t i = 0; i >= 0; i = symbols[i].next) {
    const std::string_view piece = word.substr(symbols[i].offset, symbols[i].size);
    const int32_t id = index_.Find(piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (char c : piece) {
      const int32_t byte_id = index_.Find(std::string_view(&c, 1));
      if (byte_id >= 0) out.push_back(byte_id);
    }
  }
}

}  // namespace

std::unique_ptr<Tokenizer> MakeBpeTokenizer(const TokenizerData& data, PreTokenizerSpec pre) {
  return std::make_unique<BpeTokenizer>(data, pre);
}

}  // namespace sparrow
