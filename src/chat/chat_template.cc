#include "src/chat/chat_template.h"

#include <array>

#include "base/error.h"

namespace sparrow {
namespace {

// Each family's documented format (model cards and the vendors' template
// guides), written as prefixes and suffixes around each message.
constexpr std::array<ChatFormat, 10> kFormats = {{
    // <|im_start|>role\ncontent<|im_end|>\n  (Qwen, SmolLM, many fine-tunes)
    {.name = "chatml",
     .system_prefix = "<|im_start|>system\n",
     .system_suffix = "<|im_end|>\n",
     .merged_system_prefix = "",
     .merged_system_suffix = "",
     .first_user_prefix = "<|im_start|>user\n",
     .user_prefix = "<|im_start|>user\n",
     .user_suffix = "<|im_end|>\n",
     .assistant_prefix = "<|im_start|>assistant\n",
     .assistant_suffix = "<|im_end|>\n",
     .generation_prompt = "<|im_start|>assistant\n",
     .end_of_turn = "<|im_end|>"},
    // <s>[INST] <<SYS>>\nsys\n<</SYS>>\n\nuser [/INST] answer </s><s>[INST] ...
    {.name = "llama2",
     .system_prefix = "",
     .system_suffix = "",
     .merged_system_prefix = "<<SYS>>\n",
     .merged_system_suffix = "\n<</SYS>>\n\n",
     .first_user_prefix = "[INST] ",
     .user_prefix = "{bos}[INST] ",
     .user_suffix = " [/INST]",
     .assistant_prefix = " ",
     .assistant_suffix = " {eos}",
     .generation_prompt = "",
     .end_of_turn = "{eos}"},
    // <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>
    {.name = "llama3",
     .system_prefix = "<|start_header_id|>system<|end_header_id|>\n\n",
     .system_suffix = "<|eot_id|>",
     .merged_system_prefix = "",
     .merged_system_suffix = "",
     .first_user_prefix = "<|start_header_id|>user<|end_header_id|>\n\n",
     .user_prefix = "<|start_header_id|>user<|end_header_id|>\n\n",
     .user_suffix = "<|eot_id|>",
     .assistant_prefix = "<|start_header_id|>assistant<|end_header_id|>\n\n",
     .assistant_suffix = "<|eot_id|>",
     .generation_prompt = "<|start_header_id|>assistant<|end_header_id|>\n\n",
     .end_of_turn = "<|eot_id|>"},
    // Mistral's tokenizer versions; the system prompt goes in front of the
    // first user message, as mistral-common does by default.
    // <s> [INST] user [/INST] answer</s> [INST] ...
    {.name = "mistral-v1",
     .system_prefix = "",
     .system_suffix = "",
     .merged_system_prefix = "",
     .merged_system_suffix = "\n\n",
     .first_user_prefix = " [INST] ",
     .user_prefix = " [INST] ",
     .user_suffix = " [/INST]",
     .assistant_prefix = " ",
     .assistant_suffix = "{eos}",
     .generation_prompt = "",
     .end_of_turn = "{eos}"},
    // <s>[INST] user[/INST] answer</s>[INST] ...
    {.name = "mistral-v3",
     .system_prefix = "",
     .system_suffix = "",
     .merged_system_prefix = "",
     .merged_system_suffix = "\n\n",
     .first_user_prefix = "[INST] ",
     .user_prefix = "[INST] ",
     .user_suffix = "[/INST]",
     .assistant_prefix = " ",
     .assistant_suffix = "{eos}",
     .generation_prompt = "",
     .end_of_turn = "{eos}"},
    // <s>[INST]user[/INST]answer</s>[INST]...
    {.name = "mistral-v3-tekken",
     .system_prefix = "",
     .system_suffix = "",
     .merged_system_prefix = "",
     .merged_system_suffix = "\n\n",
     .first_user_prefix = "[INST]",
     .user_prefix = "[INST]",
     .user_suffix = "[/INST]",
     .assistant_prefix = "",
     .assistant_suffix = "{eos}",
     .generation_prompt = "",
     .end_of_turn = "{eos}"},
    // <s>[SYSTEM_PROMPT] sys[/SYSTEM_PROMPT][INST] user[/INST] answer</s>...
    {.name = "mistral-v7",
     .system_prefix = "[SYSTEM_PROMPT] ",
     .system_suffix = "[/SYSTEM_PROMPT]",
     .merged_system_prefix = "",
     .merged_system_suffix = "",
     .first_user_prefix = "[INST] ",
     .user_prefix = "[INST] ",
     .user_suffix = "[/INST]",
     .assistant_prefix = " ",
     .assistant_suffix = "{eos}",
     .generation_prompt = "",
     .end_of_turn = "{eos}"},
    // <|role|>\ncontent<|end|>\n
    {.name = "phi3",
     .system_prefix = "<|system|>\n",
     .system_suffix = "<|end|>\n",
     .merged_system_prefix = "",
     .merged_system_suffix = "",
     .first_user_prefix = "<|user|>\n",
     .user_prefix = "<|user|>\n",
     .user_suffix = "<|end|>\n",
     .assistant_prefix = "<|assistant|>\n",
     .assistant_suffix = "<|end|>\n",
     .generation_prompt = "<|assistant|>\n",
     .end_of_turn = "<|end|>"},
    // <|role|>\ncontent</s>\n
    {.name = "zephyr",
     .system_prefix = "<|system|>\n",
     .system_suffix = "{eos}\n",
     .merged_system_prefix = "",
     .merged_system_suffix = "",
     .first_user_prefix = "<|user|>\n",
     .user_prefix = "<|user|>\n",
     .user_suffix = "{eos}\n",
     .assistant_prefix = "<|assistant|>\n",
     .assistant_suffix = "{eos}\n",
     .generation_prompt = "<|assistant|>\n",
     .end_of_turn = "{eos}"},
    // <start_of_turn>user\ncontent<end_of_turn>\n<start_of_turn>model\n...;
    // no system role: its text opens the first user turn.
    {.name = "gemma",
     .system_prefix = "",
     .system_suffix = "",
     .merged_system_prefix = "",
     .merged_system_suffix = "\n\n",
     .first_user_prefix = "<start_of_turn>user\n",
     .user_prefix = "<start_of_turn>user\n",
     .user_suffix = "<end_of_turn>\n",
     .assistant_prefix = "<start_of_turn>model\n",
     .assistant_suffix = "<end_of_turn>\n",
     .generation_prompt = "<start_of_turn>model\n",
     .end_of_turn = "<end_of_turn>"},
}};

// Detection: the first row whose markers all occur in the template wins, so
// the more specific rows come first.
struct DetectionRule {
  std::string_view family;
  std::array<std::string_view, 2> markers;  // "" = no second marker
};
constexpr std::array<DetectionRule, 11> kDetection = {{
    {"chatml", {"<|im_start|>", ""}},
    {"mistral-v7", {"[SYSTEM_PROMPT]", ""}},
    {"llama2", {"[INST]", "<<SYS>>"}},
    {"mistral-v1", {"' [INST] '", ""}},
    {"mistral-v3-tekken", {"'[INST]' +", ""}},
    {"mistral-v3-tekken", {"\"[INST]\" +", ""}},
    {"mistral-v3", {"[INST]", ""}},
    {"llama3", {"<|start_header_id|>", "<|end_header_id|>"}},
    {"phi3", {"<|assistant|>", "<|end|>"}},
    {"zephyr", {"<|user|>", "<|assistant|>"}},
    {"gemma", {"<start_of_turn>", ""}},
}};

bool Contains(std::string_view text, std::string_view marker) {
  return marker.empty() || text.find(marker) != std::string_view::npos;
}

}  // namespace

const ChatFormat* FindChatFormat(std::string_view name) {
  for (const ChatFormat& f : kFormats) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

std::string ChatFormatNames() {
  std::string names;
  for (const ChatFormat& f : kFormats) {
    if (!names.empty()) names += ", ";
    names += f.name;
  }
  return names;
}

const ChatFormat* DetectChatFormat(std::string_view jinja) {
  for (const DetectionRule& rule : kDetection) {
    if (Contains(jinja, rule.markers[0]) && Contains(jinja, rule.markers[1])) {
      return FindChatFormat(rule.family);
    }
  }
  return nullptr;
}

const ChatFormat& ChooseChatFormat(std::string_view override_name, std::string_view jinja,
                                   std::string* note) {
  if (!override_name.empty()) {
    const ChatFormat* f = FindChatFormat(override_name);
    if (f == nullptr) {
      ThrowInputError("unknown chat template '", override_name, "' (known: ", ChatFormatNames(),
                      ")");
    }
    return *f;
  }
  if (jinja.empty()) {
    if (note != nullptr) {
      *note = "the model has no chat template; using chatml (--chat-template NAME to choose)";
    }
    return *FindChatFormat("chatml");
  }
  const ChatFormat* f = DetectChatFormat(jinja);
  if (f == nullptr) {
    ThrowInputError("the model's chat template is not one Sparrow recognizes; choose one with "
                    "--chat-template NAME (known: ", ChatFormatNames(), ")");
  }
  return *f;
}

std::string ExpandSpecialTexts(std::string_view text, std::string_view bos_text,
                               std::string_view eos_text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    if (text.substr(i, 5) == "{bos}") {
      out += bos_text;
      i += 5;
    } else if (text.substr(i, 5) == "{eos}") {
      out += eos_text;
      i += 5;
    } else {
      out += text[i++];
    }
  }
  return out;
}

std::vector<ChatPart> FormatChat(const ChatFormat& format,
                                 const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt, std::string_view bos_text,
                                 std::string_view eos_text) {
  std::vector<ChatPart> parts;
  const auto markup = [&](std::string_view text) {
    if (text.empty()) return;
    std::string expanded = ExpandSpecialTexts(text, bos_text, eos_text);
    if (!parts.empty() && parts.back().markup) {
      parts.back().text += expanded;
    } else {
      parts.push_back({std::move(expanded), true});
    }
  };
  const auto content = [&](const std::string& text) {
    if (!text.empty()) parts.push_back({text, false});
  };
  const bool merges_system = format.system_prefix.empty() && format.system_suffix.empty();
  std::vector<const std::string*> pending_system;  // for families without a system role
  bool first_user = true;
  // A user turn's prefix, then the system text waiting for it.
  const auto open_user_turn = [&] {
    markup(first_user ? format.first_user_prefix : format.user_prefix);
    first_user = false;
    for (const std::string* system : pending_system) {
      markup(format.merged_system_prefix);
      content(*system);
      markup(format.merged_system_suffix);
    }
    pending_system.clear();
  };
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      if (merges_system) {
        pending_system.push_back(&m.content);
      } else {
        markup(format.system_prefix);
        content(m.content);
        markup(format.system_suffix);
      }
    } else if (m.role == "user") {
      open_user_turn();
      content(m.content);
      markup(format.user_suffix);
    } else if (m.role == "assistant") {
      markup(format.assistant_prefix);
      content(m.content);
      markup(format.assistant_suffix);
    } else {
      ThrowInputError("unknown chat role '", m.role, "' (system, user or assistant)");
    }
  }
  // System text with no user message after it still reaches the model.
  if (!pending_system.empty()) {
    open_user_turn();
    markup(format.user_suffix);
  }
  if (add_generation_prompt) markup(format.generation_prompt);
  return parts;
}

std::string ChatText(const std::vector<ChatPart>& parts) {
  std::string text;
  for (const ChatPart& p : parts) text += p.text;
  return text;
}

}  // namespace sparrow
