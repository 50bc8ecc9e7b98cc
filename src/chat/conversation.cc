#include "src/chat/conversation.h"

#include <algorithm>

#include "base/error.h"

namespace sparrow {
namespace {

std::string Trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return std::string();
  const size_t e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

}  // namespace

Conversation::Conversation(Generator& generator, const ChatFormat& format, std::string system)
    : generator_(generator), prompt_(generator.tokenizer(), format) {
  if (!system.empty()) messages_.push_back({"system", std::move(system)});
}

void Conversation::Reset() {
  const bool has_system = !messages_.empty() && messages_.front().role == "system";
  messages_.resize(has_system ? 1 : 0);
}

std::vector<int32_t> Conversation::Tokenize(const std::vector<ChatMessage>& messages) const {
  return prompt_.Tokenize(messages);
}

Conversation::Turn Conversation::Respond(const std::string& user, GenerationRequest request,
                                         const std::function<bool(std::string_view)>& on_text) {
  const size_t n_ctx = generator_.n_ctx();
  const size_t room = request.max_tokens > 0
                          ? std::min<size_t>(static_cast<size_t>(request.max_tokens), n_ctx / 2)
                          : n_ctx / 4;
  std::vector<ChatMessage> messages = messages_;
  messages.push_back({"user", user});
  Turn turn;
  std::vector<int32_t> prompt = Tokenize(messages);
  // Drop the oldest messages after the system message until the prompt and
  // the reply's room fit; never the new message itself.
  const size_t first = !messages.empty() && messages.front().role == "system" ? 1 : 0;
  while (prompt.size() + room > n_ctx && messages.size() - first > 1) {
    messages.erase(messages.begin() + static_cast<std::ptrdiff_t>(first));
    ++turn.dropped_messages;
    // A turn starts with a user message: drop the assistant reply with it.
    while (messages.size() - first > 1 && messages[first].role != "user") {
      messages.erase(messages.begin() + static_cast<std::ptrdiff_t>(first));
      ++turn.dropped_messages;
    }
    prompt = Tokenize(messages);
  }
  if (prompt.size() + room > n_ctx) {
    ThrowInputError("the message needs ", prompt.size(), " tokens of prompt and ", room,
                    " for the reply, more than the context of ", n_ctx,
                    " (a shorter message, or a larger -c)");
  }
  prompt_.AddEndOfTurn(request);
  turn.result = generator_.Generate(prompt, request, on_text);
  messages.push_back({"assistant", Trim(turn.result.text)});
  messages_ = std::move(messages);
  return turn;
}

}  // namespace sparrow
