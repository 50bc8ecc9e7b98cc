// sparrow serve: an OpenAI-compatible HTTP server over one model. One
// Generator (one KV cache, one DRAM budget) serves requests one at a time,
// in arrival order; up to `queue` more wait, and a request beyond that gets
// 503 with Retry-After. Waiting and running requests notice a client that
// went away (their next write fails) and stop.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "src/chat/chat_prompt.h"
#include "src/chat/generator.h"
#include "src/server/openai_api.h"

namespace sparrow::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;          // 0: any free port (see Server::port)
  std::string api_key;      // non-empty: /v1/ requires "Authorization: Bearer KEY"
  size_t max_body = 1 << 20;
  size_t queue = 16;        // requests that may wait while one runs
  std::string model_name;   // what /v1/models lists and responses name
  RequestDefaults defaults;
};

class Server {
 public:
  Server(ServerOptions options, Generator& generator, const ChatPrompt& chat);
  ~Server();

  // Binds the address; InputError if it cannot (in use, bad host).
  void Bind();
  int port() const;
  // Serves until Stop() (from another thread or a signal watcher).
  void Run();
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sparrow::server
