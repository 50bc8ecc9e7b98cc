#include "src/server/openai_api.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <limits>

#include "base/error.h"

namespace sparrow::server {
namespace {

using nlohmann::json;

[[noreturn]] void Bad(std::string_view field, std::string_view what) {
  ThrowInputError("'", field, "' ", what);
}

// A number field in [lo, hi]; absent or null: `fallback`.
double Number(const json& body, const char* field, double fallback, double lo, double hi) {
  const auto it = body.find(field);
  if (it == body.end() || it->is_null()) return fallback;
  if (!it->is_number()) Bad(field, "must be a number");
  const double v = it->get<double>();
  if (!(v >= lo && v <= hi)) {
    char range[96];
    std::snprintf(range, sizeof(range), "must be between %g and %g", lo, hi);
    Bad(field, range);
  }
  return v;
}

int64_t Integer(const json& body, const char* field, int64_t fallback, int64_t lo, int64_t hi) {
  const auto it = body.find(field);
  if (it == body.end() || it->is_null()) return fallback;
  if (!it->is_number_integer() && !it->is_number_unsigned()) Bad(field, "must be an integer");
  if (it->is_number_unsigned() &&
      it->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    Bad(field, "is too large");
  }
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) Bad(field, "is out of range");
  return v;
}

bool Boolean(const json& body, const char* field) {
  const auto it = body.find(field);
  if (it == body.end() || it->is_null()) return false;
  if (!it->is_boolean()) Bad(field, "must be true or false");
  return it->get<bool>();
}

// A message's content: a string, or a list of {"type": "text", "text": ...}
// parts (joined); null for an assistant message without text.
std::string Content(const json& content, size_t index) {
  const std::string field = "messages[" + std::to_string(index) + "].content";
  if (content.is_null()) return std::string();
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) Bad(field, "must be a string or a list of text parts");
  std::string text;
  for (const json& part : content) {
    if (!part.is_object() || part.value("type", json()) != "text" || !part.contains("text") ||
        !part["text"].is_string()) {
      Bad(field, "may only hold parts of type 'text' (this model reads text only)");
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

std::vector<ChatMessage> Messages(const json& body) {
  const auto it = body.find("messages");
  if (it == body.end()) Bad("messages", "is required");
  if (!it->is_array() || it->empty()) Bad("messages", "must be a non-empty list");
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string field = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) Bad(field, "must be an object");
    const auto role = m.find("role");
    if (role == m.end() || !role->is_string()) Bad(field + ".role", "must be a string");
    std::string r = role->get<std::string>();
    if (r == "developer") r = "system";  // OpenAI's newer name for it
    if (r != "system" && r != "user" && r != "assistant") {
      Bad(field + ".role", "must be 'system', 'user' or 'assistant'");
    }
    const auto content = m.find("content");
    if (content == m.end()) Bad(field + ".content", "is required");
    messages.push_back({r, Content(*content, i)});
  }
  return messages;
}

std::vector<std::string> Stops(const json& body) {
  const auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return {};
  if (it->is_string()) return {it->get<std::string>()};
  if (!it->is_array() || it->size() > 4) Bad("stop", "must be a string or a list of up to 4 strings");
  std::vector<std::string> stops;
  for (const json& s : *it) {
    if (!s.is_string()) Bad("stop", "must be a string or a list of up to 4 strings");
    stops.push_back(s.get<std::string>());
  }
  return stops;
}

// Fields that ask for something this server does not do: a reply that
// silently lacked it would look like an answer to the request and not be
// one (free text where a client expects a tool call or JSON, one reply where
// it asked for the best of several). Each is refused with 400 when it asks
// for more than the default; the default values themselves (1, "", [],
// "text", "none", "auto") pass, as clients often send them.
struct UnsupportedField {
  const char* name;
  bool chat;         // checked on /v1/chat/completions
  bool completions;  // checked on /v1/completions
  // Whether `value` (present, not null) asks for the feature.
  bool (*asks)(const json& value);
};

bool NotEmpty(const json& v) { return !((v.is_object() || v.is_array()) && v.empty()); }
bool NotOne(const json& v) { return !(v.is_number() && v.get<double>() == 1.0); }
bool NotEmptyString(const json& v) { return !(v.is_string() && v.get<std::string>().empty()); }
bool NotPlainText(const json& v) {
  const auto type = v.is_object() ? v.find("type") : v.end();
  return !(type != v.end() && type->is_string() && type->get<std::string>() == "text");
}
bool NotNoTool(const json& v) {
  return !(v.is_string() && (v.get<std::string>() == "none" || v.get<std::string>() == "auto"));
}

constexpr UnsupportedField kUnsupportedFields[] = {
    {"best_of", false, true, NotOne},
    {"suffix", false, true, NotEmptyString},
    {"tools", true, false, NotEmpty},
    {"functions", true, false, NotEmpty},
    {"tool_choice", true, false, NotNoTool},
    {"function_call", true, false, NotNoTool},
    {"response_format", true, false, NotPlainText},
};

void RefuseUnsupported(const json& body, bool chat) {
  for (const UnsupportedField& f : kUnsupportedFields) {
    if (!(chat ? f.chat : f.completions)) continue;
    const auto it = body.find(f.name);
    if (it == body.end() || it->is_null()) continue;
    if (f.asks(*it)) Bad(f.name, "is not supported by this server (only its default value is accepted)");
  }
}

}  // namespace

CompletionRequest ParseCompletionRequest(std::string_view body_text, bool chat,
                                         const RequestDefaults& defaults, uint64_t seed_source) {
  const json body = json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) ThrowInputError("the request body is not valid JSON");
  if (!body.is_object()) ThrowInputError("the request body must be a JSON object");
  CompletionRequest r;
  r.chat = chat;
  RefuseUnsupported(body, chat);
  if (chat) {
    r.messages = Messages(body);
  } else {
    const auto it = body.find("prompt");
    if (it == body.end()) Bad("prompt", "is required");
    // A string, or token ids; either alone or as a list of one prompt.
    const json& one = it->is_array() && it->size() == 1 &&
                              ((*it)[0].is_string() || (*it)[0].is_array())
                          ? (*it)[0]
                          : *it;
    if (one.is_string()) {
      r.prompt = one.get<std::string>();
    } else if (one.is_array() && !one.empty() &&
               std::all_of(one.begin(), one.end(), [](const json& t) { return t.is_number_integer(); })) {
      for (const json& t : one) {
        const int64_t id = t.get<int64_t>();
        if (id < 0 || (defaults.n_vocab > 0 && static_cast<uint64_t>(id) >= defaults.n_vocab) ||
            id > std::numeric_limits<int32_t>::max()) {
          Bad("prompt", "holds token " + std::to_string(id) + ", which is not in the vocabulary");
        }
        r.prompt_tokens.push_back(static_cast<int32_t>(id));
      }
    } else {
      Bad("prompt", "must be a string or a list of token ids (one prompt per request)");
    }
    r.echo = Boolean(body, "echo");
  }
  // One reply per request: any other count is refused by name.
  const int64_t n = Integer(body, "n", 1, std::numeric_limits<int64_t>::min(),
                            std::numeric_limits<int64_t>::max());
  if (n != 1) Bad("n", "must be 1 (one reply per request)");
  r.stream = Boolean(body, "stream");
  if (const auto so = body.find("stream_options"); so != body.end() && !so->is_null()) {
    if (!so->is_object()) Bad("stream_options", "must be an object");
    r.include_usage = Boolean(*so, "include_usage");
  }
  if (r.echo && r.stream) Bad("echo", "is not supported with 'stream' (ask for the reply whole)");
  GenerationRequest& g = r.generation;
  // Log-probabilities. Chat: "logprobs": true, with "top_logprobs"
  // alternatives (0-20); completions: "logprobs": the number of
  // alternatives (0-5, OpenAI's legacy limit), null for none.
  if (chat) {
    const int64_t top = Integer(body, "top_logprobs", 0, 0, kMaxTopLogprobs);
    if (Boolean(body, "logprobs")) {
      g.top_logprobs = static_cast<int>(top);
    } else if (top > 0) {
      Bad("top_logprobs", "needs \"logprobs\": true");
    }
  } else {
    g.top_logprobs = static_cast<int>(Integer(body, "logprobs", -1, 0, 5));
  }
  g.sampling = defaults.sampling;
  g.sampling.temperature =
      static_cast<float>(Number(body, "temperature", defaults.sampling.temperature, 0.0, 2.0));
  g.sampling.top_p = static_cast<float>(Number(body, "top_p", defaults.sampling.top_p, 0.0, 1.0));
  if (!(g.sampling.top_p > 0.0f)) Bad("top_p", "must be more than 0");
  // llama.cpp's server extension, as top_k.
  g.sampling.min_p = static_cast<float>(Number(body, "min_p", defaults.sampling.min_p, 0.0, 1.0));
  g.sampling.top_k = static_cast<int>(Integer(body, "top_k", defaults.sampling.top_k, 0, 1 << 30));
  g.sampling.seed = static_cast<uint64_t>(Integer(body, "seed", static_cast<int64_t>(seed_source >> 1),
                                                  std::numeric_limits<int64_t>::min(),
                                                  std::numeric_limits<int64_t>::max()));
  const int fallback = chat ? defaults.max_tokens_chat : defaults.max_tokens_completion;
  const char* tokens_field = body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  // 0 only where the reply is the echoed prompt (a client scoring it).
  g.max_tokens = static_cast<int>(Integer(body, tokens_field, fallback, r.echo ? 0 : 1, 1 << 30));
  g.prompt_logprobs = r.echo && g.top_logprobs >= 0;
  g.stop = Stops(body);
  // Penalties and biases (OpenAI's ranges); the penalties' window is the
  // server's --repeat-last-n.
  g.sampling.presence_penalty = static_cast<float>(
      Number(body, "presence_penalty", defaults.sampling.presence_penalty, -2.0, 2.0));
  g.sampling.frequency_penalty = static_cast<float>(
      Number(body, "frequency_penalty", defaults.sampling.frequency_penalty, -2.0, 2.0));
  if (const auto it = body.find("logit_bias"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) Bad("logit_bias", "must be an object of token ids and biases");
    g.sampling.logit_bias.clear();  // the request's replace the server's
    for (const auto& [key, value] : it->items()) {
      const std::string field = "logit_bias." + key;
      if (key.empty() || key.size() > 9 || key.find_first_not_of("0123456789") != std::string::npos) {
        Bad(field, "must be a token id (a whole number)");
      }
      if (!value.is_number()) Bad(field, "must be a number");
      const double bias = value.get<double>();
      if (!(bias >= -100.0 && bias <= 100.0)) Bad(field, "must be between -100 and 100");
      g.sampling.logit_bias.emplace_back(static_cast<int32_t>(std::stol(key)),
                                         static_cast<float>(bias));
    }
    if (defaults.n_vocab > 0) CheckLogitBias(g.sampling, defaults.n_vocab, "'logit_bias'");
  }
  return r;
}

std::string NewCompletionId(bool chat) {
  static std::atomic<uint64_t> counter{0};
  char id[64];
  std::snprintf(id, sizeof(id), "%s-%llx", chat ? "chatcmpl" : "cmpl",
                static_cast<unsigned long long>(++counter));
  return id;
}

json Usage(const CompletionOutcome& o) {
  return {{"prompt_tokens", o.prompt_tokens},
          {"completion_tokens", o.completion_tokens},
          {"total_tokens", o.prompt_tokens + o.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", o.cached_tokens}}}};
}

json Timings(const CompletionOutcome& o) {
  const size_t evaluated = o.prompt_tokens - o.cached_tokens;
  return {{"prompt_n", evaluated},
          {"cache_n", o.cached_tokens},
          {"prompt_ms", o.prompt_ms},
          {"prompt_per_second", o.prompt_ms > 0 ? evaluated * 1000.0 / o.prompt_ms : 0.0},
          {"predicted_n", o.completion_tokens},
          {"predicted_ms", o.generation_ms},
          {"predicted_per_second",
           o.generation_ms > 0 ? o.completion_tokens * 1000.0 / o.generation_ms : 0.0}};
}

namespace {

json Bytes(const std::string& text) {
  json out = json::array();
  for (const char c : text) out.push_back(static_cast<unsigned char>(c));
  return out;
}

// The "logprobs" of a choice: chat's {"content": [...]} or the completions'
// legacy {"tokens", "token_logprobs", "top_logprobs", "text_offset"}; null
// when the request did not ask.
json LogprobsJson(const CompletionRequest& request, std::span<const TokenLogprob> entries) {
  if (request.generation.top_logprobs < 0) return nullptr;
  if (request.chat) {
    json content = json::array();
    for (const TokenLogprob& e : entries) {
      json top = json::array();
      for (const auto& [token, logprob] : e.top) {
        top.push_back({{"token", token}, {"logprob", logprob}, {"bytes", Bytes(token)}});
      }
      content.push_back({{"token", e.token},
                         {"logprob", e.logprob},
                         {"bytes", Bytes(e.token)},
                         {"top_logprobs", top}});
    }
    return {{"content", content}, {"refusal", nullptr}};
  }
  json tokens = json::array(), token_logprobs = json::array(), offsets = json::array();
  json tops = request.generation.top_logprobs > 0 ? json::array() : json(nullptr);
  for (const TokenLogprob& e : entries) {
    tokens.push_back(e.token);
    token_logprobs.push_back(std::isnan(e.logprob) ? json(nullptr) : json(e.logprob));
    offsets.push_back(e.text_offset);
    if (tops.is_null()) continue;
    if (std::isnan(e.logprob)) {  // an echoed prompt's first token: nothing before it
      tops.push_back(nullptr);
      continue;
    }
    // An object keyed by text: of two tokens with the same text, the
    // likelier (listed first) stays.
    json top = json::object();
    for (const auto& [token, logprob] : e.top) {
      if (!top.contains(token)) top[token] = logprob;
    }
    tops.push_back(top);
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_logprobs},
          {"top_logprobs", tops},
          {"text_offset", offsets}};
}

}  // namespace

json CompletionResponse(const CompletionRequest& request, const std::string& id,
                        const std::string& model, int64_t created, const CompletionOutcome& o) {
  json choice = {{"index", 0}, {"finish_reason", o.finish_reason}};
  if (request.chat) {
    choice["message"] = {{"role", "assistant"}, {"content", o.text}};
  } else {
    choice["text"] = o.text;
  }
  choice["logprobs"] = LogprobsJson(request, o.logprobs);
  return {{"id", id},
          {"object", request.chat ? "chat.completion" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({choice})},
          {"usage", Usage(o)},
          {"timings", Timings(o)}};
}

json StreamChunk(const CompletionRequest& request, const std::string& id, const std::string& model,
                 int64_t created, std::string_view text, bool first, const char* finish_reason,
                 std::span<const TokenLogprob> logprobs) {
  json choice = {{"index", 0}};
  choice["finish_reason"] = finish_reason == nullptr ? json(nullptr) : json(finish_reason);
  if (request.chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || (first && finish_reason == nullptr)) delta["content"] = std::string(text);
    choice["delta"] = delta;
  } else {
    choice["text"] = std::string(text);
  }
  choice["logprobs"] = LogprobsJson(request, logprobs);
  return {{"id", id},
          {"object", request.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({choice})}};
}

json ErrorBody(std::string_view message, std::string_view type, std::string_view code) {
  return {{"error",
           {{"message", std::string(message)},
            {"type", std::string(type)},
            {"param", nullptr},
            {"code", code.empty() ? json(nullptr) : json(std::string(code))}}}};
}

std::string DumpJson(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ServerSentEvent(const json& data) { return "data: " + DumpJson(data) + "\n\n"; }

}  // namespace sparrow::server
