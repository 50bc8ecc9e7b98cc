// sparrow chat: an interactive conversation on stdin/stdout with the
// model's chat template. The KV cache keeps the conversation, so each turn
// evaluates only its new tokens; when the context fills up, the oldest turns
// are dropped. Lines ending in '\' continue on the next line; /reset starts
// over (the system message stays), /exit or end of input quits.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "base/error.h"
#include "src/chat/chat_template.h"
#include "src/chat/conversation.h"
#include "src/chat/generator.h"
#include "src/cli/commands.h"
#include "src/cli/common.h"
#include "src/engine.h"
#include "src/model/model.h"

namespace sparrow::cli {
namespace {

// One message from stdin (continued lines joined); false at end of input.
bool ReadMessage(bool interactive, std::string* message) {
  message->clear();
  if (interactive) {
    std::fputs("> ", stdout);
    std::fflush(stdout);
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty() && line.back() == '\\') {
      line.pop_back();
      *message += line + "\n";
      continue;
    }
    *message += line;
    return true;
  }
  return !message->empty();
}

}  // namespace

int ChatCommand(int argc, char** argv) {
  cxxopts::Options options("sparrow chat",
                           "Chat with an instruction-tuned model (reads messages from stdin).");
  options.add_options()
      ("m,model", "Model file (GGUF or bundle)", cxxopts::value<std::string>())
      ("system", "System message", cxxopts::value<std::string>()->default_value(""))
      ("chat-template", "Chat template family (default: the model's; " + ChatFormatNames() + ")",
       cxxopts::value<std::string>()->default_value(""))
      ("n,n-predict", "Most tokens per reply (-1: until the end of the turn)",
       cxxopts::value<int>()->default_value("-1"));
  AddContextOption(options);
  AddSamplingOptions(options);
  AddEngineOptions(options);
  AddModelOptions(options);
  AddLoraOptions(options);
  AddStatsOptions(options);
  cxxopts::ParseResult args;
  if (!Parse(options, argc, argv, &args)) return 0;
  ApplyEngineOptions(args);

  const std::string model_path = Require(args, "model");
  GenerationRequest request;
  request.sampling = ParseSamplingOptions(args);
  request.max_tokens = args["n-predict"].as<int>();
  if (request.max_tokens < -1 || request.max_tokens == 0) ThrowInputError("-n must be -1 or more than 0");
  EngineOptions engine = ParseModelOptions(args, model_path);
  engine.n_ctx = ParseContextSize(args);
  const LoadedModel loaded = OpenModel(model_path, engine);
  const Model& model = *loaded.model;
  CheckLogitBias(request.sampling, model.config().n_vocab, "--logit-bias");
  std::string note;
  const ChatFormat& format = ChooseChatFormat(args["chat-template"].as<std::string>(),
                                             model.tokenizer().data().chat_template, &note);

  const std::unique_ptr<Session> owned_session = loaded.NewSession();
  Session& session = *owned_session;
  Generator generator(session, model.tokenizer(), model.config().n_vocab);
  Conversation chat(generator, format, args["system"].as<std::string>());

  const bool interactive = isatty(STDIN_FILENO) != 0;
  if (!note.empty()) std::fprintf(stderr, "%s\n", note.c_str());
  if (interactive) {
    std::fprintf(stderr, "chat template %s, context %zu tokens; /reset starts over, /exit quits, "
                 "a line ending in \\ continues\n", std::string(format.name).c_str(), loaded.n_ctx);
  }
  size_t turns = 0, prompt_tokens = 0, generated = 0;
  double prompt_seconds = 0.0, generation_seconds = 0.0;
  std::string message;
  while (ReadMessage(interactive, &message)) {
    if (message == "/exit") break;
    if (message == "/reset") {
      chat.Reset();
      std::fprintf(stderr, "[conversation cleared]\n");
      continue;
    }
    if (message.find_first_not_of(" \t\n") == std::string::npos) continue;
    Conversation::Turn turn;
    try {
      turn = chat.Respond(message, request, [](std::string_view text) {
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
        return !std::ferror(stdout);  // output that cannot be written ends the reply
      });
    } catch (const InputError& e) {
      // Too long for the context: the conversation goes on without it.
      std::fprintf(stderr, "error: %s\n", e.what());
      continue;
    }
    std::fputc('\n', stdout);
    std::fflush(stdout);
    if (std::ferror(stdout)) break;
    if (turn.dropped_messages > 0) {
      std::fprintf(stderr, "[dropped the %zu oldest message(s) to fit the context of %zu tokens]\n",
                   turn.dropped_messages, loaded.n_ctx);
    }
    if (turn.result.finish == FinishReason::kContextFull) {
      std::fprintf(stderr, "[the context is full: the reply was cut; older turns make room next turn]\n");
    }
    ++turns;
    prompt_tokens += turn.result.prompt_tokens - turn.result.reused_tokens;
    generated += turn.result.generated_tokens;
    prompt_seconds += turn.result.prompt_seconds;
    generation_seconds += turn.result.generation_seconds;
  }
  ReportStats(args, loaded);
  std::fprintf(stderr, "%zu turn(s); prompt: %zu tokens evaluated, %.2f tok/s; generation: %zu tokens, "
               "%.2f tok/s; peak rss: %.1f MiB\n",
               turns, prompt_tokens, prompt_tokens / std::max(prompt_seconds, 1e-9), generated,
               generated / std::max(generation_seconds, 1e-9), PeakRssBytes() / (1024.0 * 1024.0));
  return 0;
}

}  // namespace sparrow::cli
