// libFuzzer target for the server's request rules (src/server/openai_api.h).
//
// The first byte picks the endpoint (even: chat, odd: completions); the rest
// is the body. Any body must either parse or be rejected with an InputError
// whose message is one non-empty line. A parsed request must hold what the
// rules promise (roles known, max_tokens positive, at most 4 stop strings,
// top_p in (0, 1]), its messages must format under every chat template, and
// its response and stream chunks must serialize to JSON (text that is not
// UTF-8 replaced, not thrown). Anything else aborts, which libFuzzer records
// as a crash.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "base/error.h"
#include "src/chat/chat_template.h"
#include "src/server/openai_api.h"

namespace {

using namespace sparrow;

[[noreturn]] void Violated(const char* what, const std::string& detail = "") {
  std::fprintf(stderr, "server_request_fuzzer: invariant violated: %s %s\n", what, detail.c_str());
  std::abort();
}

const char* const kFamilies[] = {"chatml", "llama2", "llama3", "mistral-v1", "mistral-v3",
                                 "mistral-v3-tekken", "mistral-v7", "phi3", "zephyr", "gemma"};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool chat = (data[0] & 1) == 0;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  server::RequestDefaults defaults;
  server::CompletionRequest r;
  try {
    r = server::ParseCompletionRequest(body, chat, defaults, 7);
  } catch (const InputError& e) {
    const std::string msg = e.what();
    if (msg.empty() || msg.find('\n') != std::string::npos) Violated("message not one line:", msg);
    return 0;
  }
  const GenerationRequest& g = r.generation;
  if (g.max_tokens == 0 || g.max_tokens < -1) Violated("max_tokens");
  if (g.stop.size() > 4) Violated("stop count");
  if (!(g.sampling.top_p > 0.0f && g.sampling.top_p <= 1.0f)) Violated("top_p");
  if (!(g.sampling.temperature >= 0.0f && g.sampling.temperature <= 2.0f)) Violated("temperature");
  if (g.sampling.top_k < 0) Violated("top_k");
  if (chat) {
    if (r.messages.empty()) Violated("no messages");
    for (const char* name : kFamilies) {
      try {
        (void)ChatText(FormatChat(*FindChatFormat(name), r.messages, true, "<s>", "</s>"));
      } catch (const InputError& e) {
        Violated("a parsed message does not format:", e.what());
      }
    }
  }
  server::CompletionOutcome outcome;
  outcome.text = chat ? (r.messages.back().content) : r.prompt;
  (void)server::DumpJson(server::CompletionResponse(r, "id", "m", 0, outcome));
  (void)server::ServerSentEvent(server::StreamChunk(r, "id", "m", 0, outcome.text, true, nullptr));
  return 0;
}
