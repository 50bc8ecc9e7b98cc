// Byte-level BPE pre-tokenizers: the regex splits that cut text into words
// before merging, written by hand (std::regex is slow and knows no Unicode
// classes). Each reproduces llama.cpp's splitting exactly, including how it
// treats malformed UTF-8 (every bad byte becomes U+FFFD).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sparrow {

enum class PreTokenizer {
  // llama.cpp's fallback chain ("default", or no tokenizer.ggml.pre):
  // punctuation runs, then the GPT-2 regex, then digit runs, then groups of
  // three ASCII digits.
  kDefault,
  // GPT-2's regex alone:
  //   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // Llama 3:
  //   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
  //   ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kLlama3,
  // Qwen2: Llama 3's regex with single digits (\p{N} instead of \p{N}{1,3}).
  kQwen2,
};

struct PreTokenizerSpec {
  PreTokenizer kind;
  // Llama 3 style vocabularies take a word that is itself a token as is,
  // without merging (tokenizer.json's ignore_merges).
  bool ignore_merges;
};

// The pre-tokenizer for a tokenizer.ggml.pre value, nullopt if unsupported.
std::optional<PreTokenizerSpec> PreTokenizerFor(std::string_view pre);

// Splits `text` into words (UTF-8, malformed bytes replaced by U+FFFD). The
// words concatenate to the re-encoded text.
std::vector<std::string> PreTokenize(PreTokenizer kind, std::string_view text);

}  // namespace sparrow
