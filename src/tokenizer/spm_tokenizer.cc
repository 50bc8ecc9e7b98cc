// SentencePiece-style tokenizer (tokenizer.ggml.model "llama"), as llama.cpp
// runs it:
// - a space is put in front of the text (add_space_prefix) and every space
//   becomes U+2581;
// - the text is cut into UTF-8 characters, then the adjacent pair whose
//   concatenation is the vocabulary token with the highest score is merged,
//   again and again (equal scores: the leftmost pair first), until no pair
//   forms a token;
// - what is left and is not a token is spelled out as byte tokens <0xXX>.
// The whole text is one merging sequence: nothing is split at spaces first.
#include <algorithm>
#include <array>
#include <cstdio>
#include <queue>

#include "src/tokenizer/tokenizer_impl.h"
#include "src/tokenizer/unicode.h"

namespace sparrow {
namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581

class SpmTokenizer final : public Tokenizer {
 public:
  explicit SpmTokenizer(const TokenizerData& data);

  std::vector<int32_t> EncodeSegments(const std::vector<Segment>& segments,
                                      bool add_bos) const override;
  int32_t FindToken(std::string_view text) const override { return index_.Find(text); }
  std::string TokenToPiece(int32_t id) const override;

 private:
  struct Symbol {
    size_t offset;  // into the escaped text
    size_t size;    // bytes; 0 once merged into its left neighbour
    int64_t prev;   // neighbours in the chain of live symbols, -1 at the ends
    int64_t next;
  };
  struct Bigram {
    float score;
    int64_t left;
    int64_t right;
    size_t size;  // of the merged text, to recognise pairs gone stale
  };
  // Orders the queue: highest score on top, then the leftmost pair.
  struct Lower {
    bool operator()(const Bigram& a, const Bigram& b) const {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
  };

  void EncodeText(std::string_view text, bool space_prefix, std::vector<int32_t>& out) const;
  // Merges the symbols [begin, end) of `text` as far as they go.
  void MergeSymbols(std::string_view text, std::vector<Symbol>& symbols, int64_t begin,
                    int64_t end) const;
  void AppendBytes(std::string_view text, std::vector<int32_t>& out) const;
  float Score(int32_t id) const { return data_.scores.empty() ? 0.0f : data_.scores[id]; }
  std::string MakePiece(int32_t id) const;

  TokenIndex index_;
  SpecialTokenSplitters special_tokens_;
  std::array<int32_t, 256> byte_tokens_;  // -1 where the vocabulary has none
  // ASCII bytes that no token longer than one byte contains. Such a byte,
  // standing alone as a symbol, never merges with a neighbour, so the text
  // on either side of it merges independently: cutting the work there gives
  // the same tokens and keeps the merge queue small (newlines in practice).
  std::array<bool, 128> isolating_{};
  std::vector<std::string> pieces_;
};

// The byte a token written "<0xXX>" stands for, -1 if it is not so written.
int ParseByteToken(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int value = 0;
  for (char c : text.substr(3, 2)) {
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else {
      return -1;
    }
    value = value * 16 + digit;
  }
  return value;
}

SpmTokenizer::SpmTokenizer(const TokenizerData& data)
    : Tokenizer(data), index_(data_.tokens), special_tokens_(data_) {
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    int32_t id = index_.Find(name);
    if (id < 0) id = index_.Find(std::string(1, static_cast<char>(b)));
    byte_tokens_[b] = id;
  }
  pieces_.reserve(data_.tokens.size());
  for (size_t i = 0; i < data_.tokens.size(); ++i) {
    pieces_.push_back(MakePiece(static_cast<int32_t>(i)));
  }
  isolating_.fill(true);
  for (const std::string& token : data_.tokens) {
    if (token.size() < 2) continue;
    for (char c : token) {
      if (static_cast<uint8_t>(c) < 128) isolating_[static_cast<uint8_t>(c)] = false;
    }
  }
}

std::string SpmTokenizer::MakePiece(int32_t id) const {
  const std::string& text = data_.tokens[id];
  switch (TypeOf(data_, id)) {
    case TokenType::kNormal: {
      std::string piece;
      piece.reserve(text.size());
      for (size_t i = 0; i < text.size();) {
        if (text.compare(i, kSpaceMark.size(), kSpaceMark) == 0) {
          piece += ' ';
          i += kSpaceMark.size();
        } else {
          piece += text[i++];
        }
      }
      return piece;
    }
    case TokenType::kUserDefined:
      return text;
    case TokenType::kByte: {
      const int byte = ParseByteToken(text);
      return byte < 0 ? std::string() : std::string(1, static_cast<char>(byte));
    }
    default:  // control, unknown, unused and undefined tokens print nothing
      return std::string();
  }
}

std::string SpmTokenizer::TokenToPiece(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= pieces_.size()) return std::string();
  return pieces_[id];
}

std::vector<int32_t> SpmTokenizer::EncodeSegments(const std::vector<Segment>& segments,
                                                   bool add_bos) const {
  std::vector<int32_t> out;
  size_t bytes = 0;
  for (const Segment& s : segments) bytes += s.text.size();
  out.reserve(bytes / 3 + 2);
  std::deque<std::string> joined;
  if (add_bos && data_.bos_id >= 0) out.push_back(data_.bos_id);
  // Text at the start or right after a special token gets the prefix.
  bool after_special = true;
  for (const Fragment& fragment : special_tokens_.Split(segments, joined)) {
    if (fragment.token >= 0) {
      out.push_back(fragment.token);
      after_special = true;
    } else {
      EncodeText(fragment.text, after_special && data_.add_space_prefix, out);
      after_special = false;
    }
  }
  return out;
}

void SpmTokenizer::AppendBytes(std::string_view text, std::vector<int32_t>& out) const {
  for (char c : text) {
    const int32_t id = byte_tokens_[static_cast<uint8_t>(c)];
    // A vocabulary without byte tokens: llama.cpp fails here; we fall back to
    // the unknown token (or drop the byte if there is none).
    if (id >= 0) {
      out.push_back(id);
    } else if (data_.unk_id >= 0) {
      out.push_back(data_.unk_id);
    }
  }
}

void SpmTokenizer::EncodeText(std::string_view text, bool space_prefix,
                              std::vector<int32_t>& out) const {
  std::string escaped;
  escaped.reserve(text.size() + text.size() / 4 + kSpaceMark.size());
  if (space_prefix) escaped += kSpaceMark;
  for (char c : text) {
    if (c == ' ') {
      escaped += kSpaceMark;
    } else {
      escaped += c;
    }
  }
  if (escaped.empty()) return;

  std::vector<Symbol> symbols;
  symbols.reserve(escaped.size());
  for (size_t offset = 0; offset < escaped.size();) {
    const size_t size = std::min(unicode::SequenceLength(static_cast<uint8_t>(escaped[offset])),
                                 escaped.size() - offset);
    const auto index = static_cast<int64_t>(symbols.size());
    symbols.push_back({offset, size, index - 1, index + 1});
    offset += size;
  }
  symbols.back().next = -1;

  // Merge between isolating symbols, each stretch on its own.
  const std::string_view view = escaped;
  const auto n = static_cast<int64_t>(symbols.size());
  int64_t begin = 0;
  for (int64_t i = 0; i < n; ++i) {
    const Symbol& sym = symbols[i];
    const auto byte = static_cast<uint8_t>(view[sym.offset]);
    if (sym.size == 1 && byte < 128 && isolating_[byte]) {
      MergeSymbols(view, symbols, begin, i);
      begin = i + 1;
    }
  }
  MergeSymbols(view, symbols, begin, n);

  // Every merge produced a token, so a symbol that is not one is a single
  // character (or stray byte) missing from the vocabulary: spell its bytes.
  // (llama.cpp's "resegment" step also looks such a symbol up among the
  // merges it made, but only merged texts, which are tokens, are there.)
  for (int64_t i = 0; i >= 0; i = symbols[i].next) {
    const std::string_view symbol = view.substr(symbols[i].offset, symbols[i].size);
    const int32_t id = index_.Find(symbol);
    if (id >= 0) {
      out.push_back(id);
    } else {
      AppendBytes(symbol, out);
    }
  }
}

void SpmTokenizer::MergeSymbols(std::string_view text, std::vector<Symbol>& symbols,
                                int64_t begin, int64_t end) const {
  if (end - begin < 2) return;
  std::priority_queue<Bigram, std::vector<Bigram>, Lower> queue;
  auto try_add = [&](int64_t left, int64_t right) {
    if (left < begin || right < begin || right >= end) return;
    const size_t size = symbols[left].size + symbols[right].size;
    const int32_t id = index_.Find(text.substr(symbols[left].offset, size));
    if (id < 0) return;
    queue.push({Score(id), left, right, size});
  };
  for (int64_t i = begin + 1; i < end; ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    // Either side merged since this pair was queued: the pair is gone.
    if (left.size == 0 || right.size == 0 || left.size + right.size != bigram.size) continue;
    left.size += right.size;
    right.size = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    try_add(left.prev, bigram.left);
    try_add(bigram.left, left.next);
  }
}

}  // namespace

std::unique_ptr<Tokenizer> MakeSpmTokenizer(const TokenizerData& data) {
  return std::make_unique<SpmTokenizer>(data);
}

}  // namespace sparrow
