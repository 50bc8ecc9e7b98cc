// Tokenizer selection, decoding, and the parts both tokenizers share.
#include "src/tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "base/error.h"
#include "src/tokenizer/tokenizer_impl.h"

namespace sparrow {
namespace {

// What both tokenizers need of any TokenizerData, built by FromGguf or by hand.
void ValidateCommon(const TokenizerData& data) {
  const size_t n = data.tokens.size();
  if (n == 0) ThrowInputError("tokenizer: the vocabulary is empty");
  if (n > static_cast<size_t>(INT32_MAX)) {
    ThrowInputError("tokenizer: ", n, " tokens are more than token ids can number");
  }
  if (!data.scores.empty() && data.scores.size() != n) {
    ThrowInputError("tokenizer: ", data.scores.size(), " scores for ", n, " tokens");
  }
  if (!data.types.empty() && data.types.size() != n) {
    ThrowInputError("tokenizer: ", data.types.size(), " token types for ", n, " tokens");
  }
  const std::pair<const char*, int32_t> ids[] = {{"bos", data.bos_id},
                                                 {"eos", data.eos_id},
                                                 {"unknown", data.unk_id},
                                                 {"padding", data.pad_id},
                                                 {"end-of-turn", data.eot_id}};
  for (const auto& [name, id] : ids) {
    if (id < -1 || id >= static_cast<int64_t>(n)) {
      ThrowInputError("tokenizer: ", name, " token id ", id, " is out of range (", n,
                      " tokens)");
    }
  }
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::Create(const TokenizerData& data) {
  if (data.model == "llama") {
    ValidateCommon(data);
    return MakeSpmTokenizer(data);
  }
  if (data.model == "gpt2") {
    const auto pre = PreTokenizerFor(data.pre);
    if (!pre.has_value()) {
      ThrowInputError("tokenizer: pre-tokenizer '", data.pre,
                      "' (tokenizer.ggml.pre) is not supported; supported: default, gpt2, "
                      "gpt-2, llama-bpe, llama3, qwen2 and their aliases");
    }
    ValidateCommon(data);
    return MakeBpeTokenizer(data, *pre);
  }
  ThrowInputError("tokenizer: model '", data.model,
                  "' (tokenizer.ggml.model) is not supported; supported: llama, gpt2");
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string text;
  size_t first = 0;
  if (!ids.empty() && ids[0] == data_.bos_id) first = 1;
  for (size_t i = first; i < ids.size(); ++i) {
    const std::string piece = TokenToPiece(ids[i]);
    // SentencePiece's space prefix put this space there; the text had none.
    if (i == first && data_.model == "llama" && data_.add_space_prefix && !piece.empty() &&
        piece[0] == ' ') {
      text.append(piece, 1);
    } else {
      text += piece;
    }
  }
  return text;
}

StringTable::StringTable(const std::vector<std::string>& keys, Repeats repeats) {
  if (keys.size() > static_cast<size_t>(INT32_MAX)) {
    ThrowInputError("tokenizer: ", keys.size(), " strings are more than ids can number");
  }
  size_t capacity = 16;
  while (capacity < 2 * keys.size()) capacity *= 2;
  slots_.resize(capacity);
  const size_t mask = capacity - 1;
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string& key = keys[i];
    if (key.size() > UINT32_MAX || text_.size() + key.size() > UINT32_MAX) {
      ThrowInputError("tokenizer: the vocabulary's strings exceed 4 GiB");
    }
    const uint64_t hash = Hash(key);
    for (size_t s = hash & mask;; s = (s + 1) & mask) {
      Slot& slot = slots_[s];
      if (slot.index < 0) {
        slot = {static_cast<uint32_t>(hash), static_cast<uint32_t>(key.size()),
                static_cast<uint32_t>(text_.size()), static_cast<int32_t>(i)};
        text_ += key;
        break;
      }
      if (slot.hash == static_cast<uint32_t>(hash) && slot.size == key.size() &&
          text_.compare(slot.offset, slot.size, key) == 0) {
        if (repeats == Repeats::kLastWins) slot.index = static_cast<int32_t>(i);
        break;
      }
    }
  }
}

int32_t StringTable::Find(std::string_view key) const {
  const uint64_t hash = Hash(key);
  const size_t mask = slots_.size() - 1;
  for (size_t s = hash & mask;; s = (s + 1) & mask) {
    const Slot& slot = slots_[s];
    if (slot.index < 0) return -1;
    if (slot.hash == static_cast<uint32_t>(hash) && slot.size == key.size() &&
        std::memcmp(text_.data() + slot.offset, key.data(), key.size()) == 0) {
      return slot.index;
    }
  }
}

// FNV-1a with a final mix, so both the low bits (the slot) and the stored
// 32 bits vary.
uint64_t StringTable::Hash(std::string_view key) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (char c : key) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001B3ull;
  }
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return h;
}

TokenType TypeOf(const TokenizerData& data, int32_t id) {
  return data.types.empty() ? TokenType::kNormal : data.types[id];
}

SpecialTokenSplitter::SpecialTokenSplitter(const TokenizerData& data, bool with_control) {
  for (size_t i = 0; i < data.tokens.size(); ++i) {
    const auto id = static_cast<int32_t>(i);
    const TokenType type = TypeOf(data, id);
    const bool special = type == TokenType::kUserDefined ||
                         (with_control && (type == TokenType::kControl || type == TokenType::kUnknown));
    if (special && !data.tokens[i].empty()) ids_.push_back(id);
  }
  // llama.cpp sorts by length only; ties keep id order here.
  std::stable_sort(ids_.begin(), ids_.end(), [&](int32_t a, int32_t b) {
    return data.tokens[a].size() > data.tokens[b].size();
  });
  for (int32_t id : ids_) texts_.push_back(data.tokens[id]);
}

std::vector<Fragment> SpecialTokenSplitter::Split(std::string_view text) const {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back({text, -1});
  for (size_t t = 0; t < ids_.size(); ++t) {
    const std::string_view token = texts_[t];
    std::vector<Fragment> next;
    for (const Fragment& f : fragments) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t pos = 0;
      while (pos < f.text.size()) {
        const size_t match = f.text.find(token, pos);
        if (match == std::string_view::npos) break;
        if (match > pos) next.push_back({f.text.substr(pos, match - pos), -1});
        next.push_back({f.text.substr(match, token.size()), ids_[t]});
        pos = match + token.size();
      }
      if (pos < f.text.size()) next.push_back({f.text.substr(pos), -1});
    }
    fragments = std::move(next);
  }
  return fragments;
}

std::vector<Fragment> SpecialTokenSplitters::Split(const std::vector<Tokenizer::Segment>& segments,
                                                   std::deque<std::string>& storage) const {
  std::vector<Fragment> out;
  bool joined = false;  // out.back() is text held in storage.back()
  for (const Tokenizer::Segment& segment : segments) {
    for (const Fragment& f : (segment.parse_special ? all_ : user_).Split(segment.text)) {
      const bool text_after_text = f.token < 0 && !out.empty() && out.back().token < 0;
      if (!text_after_text) {
        out.push_back(f);
        joined = false;
        continue;
      }
      if (!joined) {
        storage.emplace_back(out.back().text);
        joined = true;
      }
      storage.back() += f.text;
      out.back().text = storage.back();
    }
  }
  return out;
}

}  // namespace sparrow
