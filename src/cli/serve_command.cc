// sparrow serve: the OpenAI-compatible HTTP server (src/server/) over one
// model. Stops cleanly on SIGINT or SIGTERM.
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "base/error.h"
#include "src/chat/chat_prompt.h"
#include "src/chat/chat_template.h"
#include "src/chat/generator.h"
#include "src/cli/commands.h"
#include "src/cli/common.h"
#include "src/engine.h"
#include "src/model/model.h"
#include "src/server/server.h"

namespace sparrow::cli {

int ServeCommand(int argc, char** argv) {
  cxxopts::Options options("sparrow serve", "Serve a model over an OpenAI-compatible HTTP API.");
  options.add_options()
      ("m,model", "Model file (GGUF or bundle)", cxxopts::value<std::string>())
      ("host", "Address to listen on", cxxopts::value<std::string>()->default_value("127.0.0.1"))
      ("port", "Port (0: any free one, printed)", cxxopts::value<int>()->default_value("8080"))
      ("api-key", "Require 'Authorization: Bearer KEY' on /v1/ requests",
       cxxopts::value<std::string>()->default_value(""))
      ("max-body", "Largest request body in bytes (larger: 413)",
       cxxopts::value<std::string>()->default_value("1048576"))
      ("queue", "Requests that may wait while one runs (more: 503)",
       cxxopts::value<int>()->default_value("16"))
      ("alias", "Model name in the API (default: the file name)",
       cxxopts::value<std::string>()->default_value(""))
      ("chat-template", "Chat template family (default: the model's; " + ChatFormatNames() + ")",
       cxxopts::value<std::string>()->default_value(""))
      ("score-batch", "Prompt tokens per pass when an echoed prompt is scored (logprobs with "
       "echo); each holds a row of logits, charged to the budget",
       cxxopts::value<int>()->default_value("32"));
  AddContextOption(options);
  AddSamplingOptions(options);
  AddEngineOptions(options);
  AddModelOptions(options);
  AddLoraOptions(options);
  cxxopts::ParseResult args;
  if (!Parse(options, argc, argv, &args)) return 0;
  ApplyEngineOptions(args);

  const std::string model_path = Require(args, "model");
  server::ServerOptions so;
  so.host = args["host"].as<std::string>();
  so.port = args["port"].as<int>();
  if (so.port < 0 || so.port > 65535) ThrowInputError("--port must be 0..65535");
  so.api_key = args["api-key"].as<std::string>();
  const std::string max_body = args["max-body"].as<std::string>();
  if (max_body.empty() || max_body.find_first_not_of("0123456789") != std::string::npos ||
      max_body.size() > 12 || std::stoull(max_body) == 0) {
    ThrowInputError("--max-body must be a positive number of bytes");
  }
  so.max_body = std::stoull(max_body);
  const int queue = args["queue"].as<int>();
  if (queue < 0 || queue > 4096) ThrowInputError("--queue must be 0..4096");
  so.queue = static_cast<size_t>(queue);
  so.model_name = args["alias"].as<std::string>();
  if (so.model_name.empty()) so.model_name = std::filesystem::path(model_path).filename().string();
  so.defaults.sampling = ParseSamplingOptions(args);

  const int score_batch = args["score-batch"].as<int>();
  if (score_batch < 1 || score_batch > 4096) ThrowInputError("--score-batch must be 1..4096");

  EngineOptions engine = ParseModelOptions(args, model_path);
  engine.n_ctx = ParseContextSize(args);
  // Rows of logits the session holds: one pass of a scored prompt (at most
  // a forward pass's tokens; Session's HeldLogitsRows).
  engine.logits_rows = static_cast<size_t>(score_batch);
  const LoadedModel loaded = OpenModel(model_path, engine);
  const Model& model = *loaded.model;
  CheckLogitBias(so.defaults.sampling, model.config().n_vocab, "--logit-bias");
  so.defaults.n_vocab = model.config().n_vocab;
  std::string note;
  const ChatFormat& format = ChooseChatFormat(args["chat-template"].as<std::string>(),
                                             model.tokenizer().data().chat_template, &note);
  if (!note.empty()) std::fprintf(stderr, "%s\n", note.c_str());

  const std::unique_ptr<Session> owned_session = loaded.NewSession();
  Session& session = *owned_session;
  Generator generator(session, model.tokenizer(), model.config().n_vocab);
  ChatPrompt chat(model.tokenizer(), format);

  // Signals go to one watcher thread, which stops the server; every other
  // thread (the server's workers included) inherits the blocked mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  server::Server server(so, generator, chat);
  server.Bind();
  std::fprintf(stderr, "sparrow serve: http://%s:%d/ (model %s, chat template %s, context %zu)\n",
               so.host.c_str(), server.port(), so.model_name.c_str(),
               std::string(format.name).c_str(), loaded.n_ctx);
  std::fflush(stderr);
  std::thread watcher([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    server.Stop();
  });
  server.Run();
  // Run returned on its own (not by a signal): wake the watcher.
  pthread_kill(watcher.native_handle(), SIGTERM);
  watcher.join();
  std::fprintf(stderr, "sparrow serve: stopped\n");
  return 0;
}

}  // namespace sparrow::cli
