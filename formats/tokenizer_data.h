// The tokenizer as GGUF metadata describes it (the tokenizer.ggml.* keys),
// validated, and written back the same way. The algorithms that use it are in
// src/tokenizer/; bundles carry the same keys so they need nothing else.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sparrow {
namespace gguf {
class GgufFile;
class GgufWriter;
}  // namespace gguf

// Token types as GGUF stores them (tokenizer.ggml.token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct TokenizerData {
  std::string model;  // "llama" (SentencePiece) or "gpt2" (byte-level BPE)
  std::string pre;    // tokenizer.ggml.pre: "default", "llama-bpe", "qwen2", ...
  std::vector<std::string> tokens;
  std::vector<float> scores;         // one per token (zeros if absent)
  std::vector<TokenType> types;      // one per token (kNormal if absent)
  std::vector<std::string> merges;   // "left right" pairs, gpt2 only
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t unk_id = -1;
  int32_t pad_id = -1;
  int32_t eot_id = -1;  // end of turn (chat models), -1 if none
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;
  // tokenizer.chat_template: the Jinja template the model was trained to
  // chat with, "" if the file has none (src/chat_template.h reads it).
  std::string chat_template;

  // Reads and validates: the model is one we implement, arrays that must be
  // one per token are, special ids are in range. InputError otherwise.
  static TokenizerData FromGguf(const gguf::GgufFile& file);
  // Adds every tokenizer.ggml.* key that FromGguf reads.
  void AddToGguf(gguf::GgufWriter& writer) const;
};

}  // namespace sparrow
