// Text <-> token ids, for the two tokenizer families GGUF models use:
// SentencePiece-style (model "llama": scores, byte fallback) and byte-level
// BPE (model "gpt2": merges, with the pre-tokenizer of Llama 3 or Qwen2).
// Both reproduce llama.cpp's tokenization exactly, so perplexity figures and
// greedy outputs compare one to one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "formats/tokenizer_data.h"

namespace sparrow {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Builds the tokenizer the data names; InputError for an unknown model or
  // pre-tokenizer.
  static std::unique_ptr<Tokenizer> Create(const TokenizerData& data);

  // Tokenizes `text`. add_bos prepends BOS (callers usually pass add_bos()).
  // User-defined tokens are always recognized in the text. Control tokens
  // ("<s>", "<|im_start|>") are only with parse_special, for text such as a
  // chat template's own markup.
  std::vector<int32_t> Encode(std::string_view text, bool add_bos,
                              bool parse_special = false) const {
    return EncodeSegments({Segment{text, parse_special}}, add_bos);
  }

  // Text made of parts that differ in whether control tokens are parsed: a
  // chat prompt, where the template's markup may hold "<|im_start|>" but a
  // user's message must not be able to forge it. The parts are tokenized as
  // one text (plain text that runs across a boundary merges as usual).
  struct Segment {
    std::string_view text;
    bool parse_special = false;
  };
  virtual std::vector<int32_t> EncodeSegments(const std::vector<Segment>& segments,
                                              bool add_bos) const = 0;

  // The id of the token whose text is exactly `text`, -1 if none.
  virtual int32_t FindToken(std::string_view text) const = 0;

  // The bytes token `id` stands for when printed (byte tokens give their byte,
  // SentencePiece's U+2581 becomes a space, control tokens give ""). Printing
  // the pieces of generated tokens one after another reproduces the text.
  virtual std::string TokenToPiece(int32_t id) const = 0;

  // Pieces of all tokens concatenated, except that a leading space produced by
  // SentencePiece's space prefix right after BOS is dropped.
  std::string Decode(const std::vector<int32_t>& ids) const;

  const TokenizerData& data() const { return data_; }
  int32_t vocab_size() const { return static_cast<int32_t>(data_.tokens.size()); }
  int32_t bos_id() const { return data_.bos_id; }
  int32_t eos_id() const { return data_.eos_id; }
  bool add_bos() const { return data_.add_bos; }
  // End of generation: EOS or EOT.
  bool IsEndOfGeneration(int32_t id) const {
    return id >= 0 && (id == data_.eos_id || id == data_.eot_id);
  }

 protected:
  explicit Tokenizer(TokenizerData data) : data_(std::move(data)) {}
  TokenizerData data_;
};

}  // namespace sparrow
