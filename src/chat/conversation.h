// A chat: the messages so far, formatted with the model's chat template and
// run through a Generator, which keeps the conversation in the KV cache so
// that a turn evaluates only its new tokens. When a turn would not fit in
// the context, the oldest turns are dropped (the system message stays).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "src/chat/chat_prompt.h"
#include "src/chat/chat_template.h"
#include "src/chat/generator.h"

namespace sparrow {

class Conversation {
 public:
  Conversation(Generator& generator, const ChatFormat& format, std::string system);

  struct Turn {
    GenerationResult result;
    size_t dropped_messages = 0;  // old messages dropped to make room
  };
  // Adds the user's message and generates the reply (streamed to on_text),
  // which joins the conversation. request.max_tokens also sets the room kept
  // for the reply (-1: a quarter of the context). InputError, with the
  // conversation unchanged, if the message cannot fit even alone.
  Turn Respond(const std::string& user, GenerationRequest request,
               const std::function<bool(std::string_view)>& on_text);

  // Forgets every turn (the system message stays).
  void Reset();
  const std::vector<ChatMessage>& messages() const { return messages_; }

  // The prompt tokens for `messages` with the generation prompt.
  std::vector<int32_t> Tokenize(const std::vector<ChatMessage>& messages) const;

 private:
  Generator& generator_;
  ChatPrompt prompt_;
  std::vector<ChatMessage> messages_;
};

}  // namespace sparrow
