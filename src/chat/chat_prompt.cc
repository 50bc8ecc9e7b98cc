#include "src/chat/chat_prompt.h"

namespace sparrow {
namespace {

std::string TokenText(const Tokenizer& tok, int32_t id) {
  return id >= 0 && id < tok.vocab_size() ? tok.data().tokens[id] : std::string();
}

}  // namespace

ChatPrompt::ChatPrompt(const Tokenizer& tokenizer, const ChatFormat& format)
    : tokenizer_(tokenizer), format_(format) {
  bos_text_ = TokenText(tokenizer, tokenizer.bos_id());
  eos_text_ = TokenText(tokenizer, tokenizer.eos_id());
  end_text_ = ExpandSpecialTexts(format.end_of_turn, bos_text_, eos_text_);
  if (!end_text_.empty()) end_token_ = tokenizer.FindToken(end_text_);
}

std::vector<int32_t> ChatPrompt::Tokenize(const std::vector<ChatMessage>& messages) const {
  const std::vector<ChatPart> parts = FormatChat(format_, messages, true, bos_text_, eos_text_);
  std::vector<Tokenizer::Segment> segments;
  segments.reserve(parts.size());
  for (const ChatPart& p : parts) segments.push_back({p.text, p.markup});
  return tokenizer_.EncodeSegments(segments, tokenizer_.add_bos());
}

void ChatPrompt::AddEndOfTurn(GenerationRequest& request) const {
  if (end_token_ >= 0) request.end_tokens.push_back(end_token_);
  if (!end_text_.empty()) request.stop.push_back(end_text_);
}

}  // namespace sparrow
