// OpenAI's HTTP API as Sparrow serves it: request bodies of
// /v1/chat/completions and /v1/completions parsed and checked into engine
// terms, and the JSON of responses, stream chunks and errors. No sockets
// here (server.cc does the HTTP), so the rules can be tested directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/chat/chat_template.h"
#include "src/chat/generator.h"

namespace sparrow::server {

// The sampling defaults a request starts from (the server's command line).
struct RequestDefaults {
  SamplerParams sampling;
  int max_tokens_chat = -1;        // -1: until the end of the turn or context
  int max_tokens_completion = 16;  // OpenAI's default for /v1/completions
  size_t n_vocab = 0;  // the model's, for logit_bias's token ids (0: not checked)
};

struct CompletionRequest {
  bool chat = false;
  std::vector<ChatMessage> messages;  // chat
  std::string prompt;                 // completions, as text
  std::vector<int32_t> prompt_tokens; // completions, as token ids (used as they are)
  bool echo = false;                  // completions: the prompt starts the reply
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  GenerationRequest generation;
};

// Parses and checks a body; InputError with an OpenAI-style message naming
// the field ("'temperature' must be a number between 0 and 2") otherwise.
// `seed_source` seeds requests that give no seed.
CompletionRequest ParseCompletionRequest(std::string_view body, bool chat,
                                         const RequestDefaults& defaults, uint64_t seed_source);

// What one finished request reports.
struct CompletionOutcome {
  std::string text;
  const char* finish_reason = "stop";
  size_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  double prompt_ms = 0.0, generation_ms = 0.0;
  std::vector<TokenLogprob> logprobs;  // when the request asked for them
};

// "chatcmpl-..." / "cmpl-..." ids: unique per server process.
std::string NewCompletionId(bool chat);

nlohmann::json CompletionResponse(const CompletionRequest& request, const std::string& id,
                                  const std::string& model, int64_t created,
                                  const CompletionOutcome& outcome);
// One stream chunk: text (may be empty), the log-probabilities of the
// tokens it completes (when the request asked for them) and, in the last,
// the finish reason.
nlohmann::json StreamChunk(const CompletionRequest& request, const std::string& id,
                           const std::string& model, int64_t created, std::string_view text,
                           bool first, const char* finish_reason,
                           std::span<const TokenLogprob> logprobs = {});
// The usage object (and llama.cpp-style timings) of an outcome.
nlohmann::json Usage(const CompletionOutcome& outcome);
nlohmann::json Timings(const CompletionOutcome& outcome);

// {"error": {"message", "type", "param", "code"}}
nlohmann::json ErrorBody(std::string_view message, std::string_view type,
                         std::string_view code = {});
// "data: <json>\n\n"
std::string ServerSentEvent(const nlohmann::json& data);

// Text as JSON can carry it: invalid UTF-8 replaced by U+FFFD.
std::string DumpJson(const nlohmann::json& value);

}  // namespace sparrow::server
