#include "src/server/server.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <mutex>
#include <random>

#include "base/error.h"
#include "src/server/web_page.h"

namespace sparrow::server {
namespace {

using nlohmann::json;

constexpr auto kHeartbeat = std::chrono::milliseconds(500);
// Non-stream replies are JSON after optional white space: a space written
// every so many tokens finds a client that went away (the write fails).
constexpr size_t kTokensPerProbe = 8;

void SendError(httplib::Response& res, int status, std::string_view message,
               std::string_view type, std::string_view code = {}) {
  res.status = status;
  res.set_content(DumpJson(ErrorBody(message, type, code)), "application/json");
}

}  // namespace

struct Server::Impl {
  ServerOptions options;
  Generator& generator;
  const ChatPrompt& chat;
  httplib::Server http;
  int port = 0;
  std::timed_mutex model;        // one generation at a time
  std::atomic<size_t> admitted{0};  // waiting or running
  // What /health reports: requests that ran to the end, that stopped because
  // their client went away, and that failed.
  std::atomic<uint64_t> completed{0}, cancelled{0}, failed{0};
  std::mt19937_64 seeds{std::random_device{}()};
  std::mutex seeds_mu;

  Impl(ServerOptions o, Generator& g, const ChatPrompt& c)
      : options(std::move(o)), generator(g), chat(c) {}

  uint64_t NextSeed() {
    std::lock_guard<std::mutex> lock(seeds_mu);
    return seeds();
  }

  // A place in line: at most 1 + options.queue requests hold one.
  struct Ticket {
    explicit Ticket(std::atomic<size_t>& c) : count(c) {}
    ~Ticket() { count.fetch_sub(1); }
    std::atomic<size_t>& count;
  };
  std::shared_ptr<Ticket> Admit() {
    if (admitted.fetch_add(1) >= options.queue + 1) {
      admitted.fetch_sub(1);
      return nullptr;
    }
    return std::make_shared<Ticket>(admitted);
  }

  bool Authorized(const httplib::Request& req) const {
    if (options.api_key.empty()) return true;
    return req.get_header_value("Authorization") == "Bearer " + options.api_key;
  }

  void Routes();
  void Complete(const httplib::Request& req, httplib::Response& res, bool chat_endpoint);
};

void Server::Impl::Routes() {
  http.set_payload_max_length(options.max_body);
  // Streamed tokens are small writes: without TCP_NODELAY, Nagle's algorithm
  // holds each one until the client's delayed ACK (~40 ms on Linux). The load
  // test measured 2.6 requests/s and a 9 s median time to first token with
  // it, for 32-token replies that take ~10 ms to generate.
  http.set_tcp_nodelay(true);
  // A worker serves one connection at a time, and stays with it while the
  // client keeps it alive (up to the keep-alive timeout) after a response.
  // So there are far more workers than admitted requests, and idle
  // connections are let go after 2 s instead of 5: with 12 workers, 64
  // clients that each kept their connection open after one request measured
  // a 9 s median time to first token (they waited for workers, not for the
  // model), and a request beyond the queue could wait for a worker instead
  // of getting its 503 at once.
  const size_t workers = options.queue + 64;
  http.set_keep_alive_timeout(2);
  http.new_task_queue = [workers] { return new httplib::ThreadPool(workers); };

  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (req.path.rfind("/v1/", 0) == 0 && !Authorized(req)) {
      SendError(res, 401, "missing or wrong API key (Authorization: Bearer KEY)",
                "invalid_request_error", "invalid_api_key");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Errors that httplib itself answers (404, 413, 400 for a bad request
  // line) get OpenAI-style bodies too.
  http.set_error_handler(httplib::Server::HandlerWithResponse(
      [](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    const char* message = res.status == 404   ? "no such endpoint"
                          : res.status == 413 ? "the request body is larger than --max-body"
                                              : "bad request";
    SendError(res, res.status, message, "invalid_request_error");
    return httplib::Server::HandlerResponse::Handled;
  }));

  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const json body = {{"status", "ok"},
                       {"requests_admitted", admitted.load()},
                       {"requests_completed", completed.load()},
                       {"requests_cancelled", cancelled.load()},
                       {"requests_failed", failed.load()}};
    res.set_content(DumpJson(body), "application/json");
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const json body = {{"object", "list"},
                       {"data", json::array({{{"id", options.model_name},
                                              {"object", "model"},
                                              {"created", 0},
                                              {"owned_by", "sparrow"}}})}};
    res.set_content(DumpJson(body), "application/json");
  });
  http.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(std::string(kChatPageHtml), "text/html; charset=utf-8");
  });
  http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    Complete(req, res, true);
  });
  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    Complete(req, res, false);
  });
}

void Server::Impl::Complete(const httplib::Request& req, httplib::Response& res, bool chat_endpoint) {
  auto request = std::make_shared<CompletionRequest>();
  auto prompt = std::make_shared<std::vector<int32_t>>();
  try {
    *request = ParseCompletionRequest(req.body, chat_endpoint, options.defaults, NextSeed());
    if (chat_endpoint) {
      *prompt = chat.Tokenize(request->messages);
      chat.AddEndOfTurn(request->generation);
    } else if (!request->prompt_tokens.empty()) {
      *prompt = request->prompt_tokens;  // token ids are the model's input as they are
    } else {
      const Tokenizer& tok = generator.tokenizer();
      *prompt = tok.Encode(request->prompt, tok.add_bos());
    }
    if (prompt->empty()) ThrowInputError("the prompt is empty");
    if (prompt->size() >= generator.n_ctx()) {
      ThrowInputError("the prompt has ", prompt->size(), " tokens; the context holds ",
                      generator.n_ctx(), " with room for at least one more");
    }
  } catch (const InputError& e) {
    return SendError(res, 400, e.what(), "invalid_request_error");
  }
  std::shared_ptr<Ticket> ticket = Admit();
  if (ticket == nullptr) {
    res.set_header("Retry-After", "1");
    return SendError(res, 503, "the server is busy: too many requests are waiting",
                     "server_error", "server_busy");
  }

  const std::string id = NewCompletionId(chat_endpoint);
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  const std::string model_name = options.model_name;
  const bool stream = request->stream;
  auto provider = [this, request, prompt, ticket, id, created, model_name, stream](
                      size_t, httplib::DataSink& sink) {
    const auto gone = [this] {
      cancelled.fetch_add(1);
      return false;
    };
    const auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
    // Wait for the model, showing the client that the request is alive and
    // giving up if it left.
    std::unique_lock<std::timed_mutex> lock(model, std::defer_lock);
    while (!lock.try_lock_for(kHeartbeat)) {
      if (!write(stream ? ": waiting\n\n" : " ")) return gone();
    }
    CompletionOutcome outcome;
    bool first = true;
    size_t logprobs_sent = 0;  // entries streamed so far
    size_t since_probe = 0;
    bool client_gone = false;
    try {
      const GenerationResult r = generator.Generate(
          *prompt, request->generation, [&](std::string_view text) {
            if (stream) {
              const auto shown = generator.shown_logprobs();
              const bool ok = write(ServerSentEvent(StreamChunk(
                  *request, id, model_name, created, text, first, nullptr,
                  shown.subspan(logprobs_sent))));
              logprobs_sent = shown.size();
              first = false;
              client_gone = !ok;
              return ok;
            }
            if (++since_probe >= kTokensPerProbe) {
              since_probe = 0;
              client_gone = !write(" ");
            }
            return !client_gone;
          });
      if (client_gone || r.finish == FinishReason::kCancelled) return gone();
      outcome.text = r.text;
      outcome.finish_reason = FinishReasonName(r.finish);
      outcome.prompt_tokens = r.prompt_tokens;
      outcome.cached_tokens = r.reused_tokens;
      outcome.completion_tokens = r.generated_tokens;
      outcome.prompt_ms = r.prompt_seconds * 1e3;
      outcome.generation_ms = r.generation_seconds * 1e3;
      outcome.logprobs = r.logprobs;
      if (request->echo) {
        // The reply starts with the prompt as the model read it (its tokens'
        // pieces), and so do the log-probabilities, offsets moved along.
        std::string echoed;
        for (const int32_t t : *prompt) echoed += generator.tokenizer().TokenToPiece(t);
        for (TokenLogprob& e : outcome.logprobs) e.text_offset += echoed.size();
        outcome.logprobs.insert(outcome.logprobs.begin(), r.prompt_logprobs.begin(),
                                r.prompt_logprobs.end());
        outcome.text = echoed + outcome.text;
      }
    } catch (const std::exception& e) {
      // The status line is gone already: the error travels in the body.
      failed.fetch_add(1);
      const json error = ErrorBody(e.what(), "server_error");
      write(stream ? ServerSentEvent(error) : DumpJson(error));
      sink.done();
      return true;
    }
    if (stream) {
      // With the entries no text chunk carried: tokens whose text was
      // held back to the end, or that a stop string cut.
      const std::span<const TokenLogprob> rest(outcome.logprobs);
      json last = StreamChunk(*request, id, model_name, created, "", first, outcome.finish_reason,
                              rest.subspan(std::min(logprobs_sent, rest.size())));
      last["timings"] = Timings(outcome);
      if (!write(ServerSentEvent(last))) return gone();
      if (request->include_usage) {
        json usage = StreamChunk(*request, id, model_name, created, "", false, nullptr);
        usage["choices"] = json::array();
        usage["usage"] = Usage(outcome);
        if (!write(ServerSentEvent(usage))) return gone();
      }
      if (!write("data: [DONE]\n\n")) return gone();
    } else {
      if (!write(DumpJson(CompletionResponse(*request, id, model_name, created, outcome)))) {
        return gone();
      }
    }
    completed.fetch_add(1);
    sink.done();
    return true;
  };
  if (stream) {
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", provider);
  } else {
    res.set_chunked_content_provider("application/json", provider);
  }
}

Server::Server(ServerOptions options, Generator& generator, const ChatPrompt& chat)
    : impl_(std::make_unique<Impl>(std::move(options), generator, chat)) {
  impl_->Routes();
}

Server::~Server() = default;

void Server::Bind() {
  const ServerOptions& o = impl_->options;
  if (o.port == 0) {
    impl_->port = impl_->http.bind_to_any_port(o.host);
    if (impl_->port < 0) ThrowInputError("cannot listen on ", o.host, " (any port)");
  } else {
    if (!impl_->http.bind_to_port(o.host, o.port)) {
      ThrowInputError("cannot listen on ", o.host, ":", o.port, " (in use, or not an address here)");
    }
    impl_->port = o.port;
  }
}

int Server::port() const { return impl_->port; }

void Server::Run() { impl_->http.listen_after_bind(); }

void Server::Stop() { impl_->http.stop(); }

}  // namespace sparrow::server
