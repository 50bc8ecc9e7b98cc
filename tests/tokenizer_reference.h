// Slow, obviously-correct restatements of the tokenizers' rules, for tests
// and the fuzzer to compare the real code against. Written from the rules as
// llama.cpp's tokenizers apply them, not from src/tokenizer/.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "formats/tokenizer_data.h"

namespace sparrow::reference {

using Ids = std::vector<int32_t>;

inline std::string ByteTokenName(uint8_t b) {
  char name[8];
  std::snprintf(name, sizeof(name), "<0x%02X>", b);
  return name;
}

// Whether `text` is UTF-8 that decodes without any U+FFFD under llama.cpp's
// lenient rule (each lead byte followed by its continuation bytes, nothing
// past U+10FFFF; overlong forms and surrogates pass). For such text,
// decoding the encoding gives the text back.
inline bool WellFormed(const std::string& text) {
  for (size_t i = 0; i < text.size();) {
    const auto b = static_cast<uint8_t>(text[i]);
    int more;
    if (b < 0x80) {
      more = 0;
    } else if (b >= 0xC0 && b < 0xE0) {
      more = 1;
    } else if (b >= 0xE0 && b < 0xF0) {
      more = 2;
    } else if (b >= 0xF0 && b < 0xF8) {
      more = 3;
    } else {
      return false;
    }
    if (more > 0 && i + more >= text.size()) return false;
    uint32_t cp = more == 0 ? b : b & (0x3F >> more);
    for (int k = 1; k <= more; ++k) {
      const auto c = static_cast<uint8_t>(text[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    if (cp > 0x10FFFF) return false;
    i += 1 + more;
  }
  return true;
}

// SentencePiece merging as llama.cpp states it, the slow way: while some
// adjacent pair of pieces forms a token, merge the pair whose token has the
// highest score, the leftmost among equals. No queue, no linked list.
class NaiveSpm {
 public:
  explicit NaiveSpm(const TokenizerData& data) : data_(data) {
    for (size_t i = 0; i < data.tokens.size(); ++i) ids_[data.tokens[i]] = static_cast<int32_t>(i);
  }

  Ids Encode(const std::string& text, bool space_prefix) const {
    std::string s = space_prefix ? " " + text : text;
    std::string escaped;
    for (char c : s) escaped += c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c);
    std::vector<std::string> pieces;
    for (size_t i = 0; i < escaped.size();) {
      const auto lead = static_cast<uint8_t>(escaped[i]);
      size_t n = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
      n = std::min(n, escaped.size() - i);
      pieces.push_back(escaped.substr(i, n));
      i += n;
    }
    for (;;) {
      int best = -1;
      float best_score = 0;
      for (size_t i = 0; i + 1 < pieces.size(); ++i) {
        const auto it = ids_.find(pieces[i] + pieces[i + 1]);
        if (it == ids_.end()) continue;
        const float score = data_.scores[it->second];
        if (best < 0 || score > best_score) {
          best = static_cast<int>(i);
          best_score = score;
        }
      }
      if (best < 0) break;
      pieces[best] += pieces[best + 1];
      pieces.erase(pieces.begin() + best + 1);
    }
    Ids out;
    for (const std::string& p : pieces) {
      const auto it = ids_.find(p);
      if (it != ids_.end()) {
        out.push_back(it->second);
      } else {
        for (char c : p) out.push_back(ids_.at(ByteTokenName(static_cast<uint8_t>(c))));
      }
    }
    return out;
  }

 private:
  const TokenizerData& data_;
  std::map<std::string, int32_t> ids_;  // a repeated text: the later id
};

// GPT-2's byte alphabet: the printable Latin-1 bytes stand for themselves,
// the other 68 bytes become U+0100, U+0101, ... in byte order.
inline std::string Gpt2Char(uint8_t b) {
  static const std::vector<std::string> table = [] {
    std::vector<std::string> t(256);
    int extra = 0;
    for (int c = 0; c < 256; ++c) {
      const bool printable = (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174;
      const int cp = printable ? c : 256 + extra++;
      std::string u;
      if (cp < 0x80) {
        u += static_cast<char>(cp);
      } else {
        u += static_cast<char>(0xC0 | (cp >> 6));
        u += static_cast<char>(0x80 | (cp & 0x3F));
      }
      t[c] = u;
    }
    return t;
  }();
  return table[b];
}

// Byte-level BPE on one pre-tokenized word, the slow way: write the bytes in
// GPT-2's alphabet (table built above from its definition); with
// ignore_merges a word that is a token is taken whole; otherwise, while some
// adjacent pair is a merge, merge the pair ranked first, leftmost among
// equals. A piece that is no token is spelled with its single bytes' tokens.
class NaiveBpe {
 public:
  explicit NaiveBpe(const TokenizerData& data) {
    for (size_t i = 0; i < data.tokens.size(); ++i) ids_[data.tokens[i]] = static_cast<int32_t>(i);
    for (size_t i = 0; i < data.merges.size(); ++i) {
      const size_t space = data.merges[i].find(' ', 1);
      if (space == std::string::npos) continue;
      ranks_.emplace(std::make_pair(data.merges[i].substr(0, space), data.merges[i].substr(space + 1)),
                     static_cast<int>(i));
    }
  }

  Ids EncodeWord(const std::string& word, bool ignore_merges) const {
    std::vector<std::string> pieces;
    for (char c : word) pieces.push_back(Gpt2Char(static_cast<uint8_t>(c)));
    std::string whole;
    for (const std::string& p : pieces) whole += p;
    if (ignore_merges && ids_.count(whole)) return {ids_.at(whole)};
    for (;;) {
      int best = -1, best_rank = 0;
      for (size_t i = 0; i + 1 < pieces.size(); ++i) {
        const auto it = ranks_.find({pieces[i], pieces[i + 1]});
        if (it != ranks_.end() && (best < 0 || it->second < best_rank)) {
          best = static_cast<int>(i);
          best_rank = it->second;
        }
      }
      if (best < 0) break;
      pieces[best] += pieces[best + 1];
      pieces.erase(pieces.begin() + best + 1);
    }
    Ids out;
    for (const std::string& p : pieces) {
      if (ids_.count(p)) {
        out.push_back(ids_.at(p));
        continue;
      }
      for (char c : p) {
        if (ids_.count(std::string(1, c))) out.push_back(ids_.at(std::string(1, c)));
      }
    }
    return out;
  }

 private:
  std::map<std::string, int32_t> ids_;
  std::map<std::pair<std::string, std::string>, int> ranks_;  // the first rank wins
};

}  // namespace sparrow::reference
