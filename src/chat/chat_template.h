// Chat templates: how a conversation (system, user and assistant messages)
// becomes the prompt text an instruction-tuned model was trained on. GGUF
// files carry the template as Jinja (tokenizer.chat_template); like
// llama.cpp, Sparrow does not run Jinja but recognizes the common families
// by their markers and formats them with built-in rules, one row of a table
// per family (chat_template.cc).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace sparrow {

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

// One family's format. Texts may hold "{bos}" and "{eos}", which stand for
// the model's BOS and EOS token texts (Llama 2's "<s>", "</s>").
struct ChatFormat {
  std::string_view name;
  // A system message as its own turn; both empty: the family has no system
  // role, and system text goes at the start of the next user message,
  // between merged_system_prefix and merged_system_suffix.
  std::string_view system_prefix, system_suffix;
  std::string_view merged_system_prefix, merged_system_suffix;
  // The first user turn's prefix may differ (Llama 2 repeats "<s>" before
  // every later turn but the first, whose BOS the tokenizer adds).
  std::string_view first_user_prefix, user_prefix, user_suffix;
  std::string_view assistant_prefix, assistant_suffix;
  // What follows the last user turn so that the model answers.
  std::string_view generation_prompt;
  // What ends an assistant turn in the model's output.
  std::string_view end_of_turn;
};

// The families by name ("chatml", "llama2", "llama3", "mistral-v1",
// "mistral-v3", "mistral-v3-tekken", "mistral-v7", "phi3", "zephyr",
// "gemma"); nullptr for an unknown name.
const ChatFormat* FindChatFormat(std::string_view name);
// "chatml, llama2, ..." for messages.
std::string ChatFormatNames();
// The family a Jinja template belongs to, by its markers; nullptr when no
// family's markers are in it.
const ChatFormat* DetectChatFormat(std::string_view jinja);

// The format to use for a model: `override_name` if given (InputError
// listing the names if unknown), else the one its template names (InputError
// if the template is not recognized), else ChatML when the model has none
// (*note then says so).
const ChatFormat& ChooseChatFormat(std::string_view override_name, std::string_view jinja,
                                   std::string* note);

// A formatted prompt: the template's own markup (tokenized with control
// tokens parsed) and the messages' text (tokenized as plain text, so a
// message cannot forge "<|im_start|>").
struct ChatPart {
  std::string text;
  bool markup = false;
};

// Formats `messages` (roles as above; InputError for another role) and,
// with add_generation_prompt, the start of the assistant's answer.
std::vector<ChatPart> FormatChat(const ChatFormat& format,
                                 const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt, std::string_view bos_text,
                                 std::string_view eos_text);
// The parts joined.
std::string ChatText(const std::vector<ChatPart>& parts);

// `text` with "{bos}" and "{eos}" replaced.
std::string ExpandSpecialTexts(std::string_view text, std::string_view bos_text,
                               std::string_view eos_text);

}  // namespace sparrow
