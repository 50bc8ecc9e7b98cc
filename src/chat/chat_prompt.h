// A chat format bound to a model's tokenizer: messages -> prompt tokens
// (markup with control tokens parsed, message text without), and the
// markers that end the assistant's turn. Shared by Conversation and the
// server, which formats each request's messages afresh.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/chat/chat_template.h"
#include "src/chat/generator.h"
#include "src/tokenizer/tokenizer.h"

namespace sparrow {

class ChatPrompt {
 public:
  ChatPrompt(const Tokenizer& tokenizer, const ChatFormat& format);

  // The prompt for `messages`, ending with the generation prompt.
  std::vector<int32_t> Tokenize(const std::vector<ChatMessage>& messages) const;
  // Adds the family's end-of-turn marker to the request: as a token when the
  // vocabulary has it as one (a control token prints as nothing), and as a
  // stop string when the model writes it as text.
  void AddEndOfTurn(GenerationRequest& request) const;

  const ChatFormat& format() const { return format_; }

 private:
  const Tokenizer& tokenizer_;
  const ChatFormat& format_;
  std::string bos_text_, eos_text_;
  std::string end_text_;
  int32_t end_token_ = -1;
};

}  // namespace sparrow
