// Generation on one Session, for chat and the server: evaluates a prompt,
// reusing the longest prefix the KV cache already holds from the previous
// call, then samples until the end of the turn, a stop string, the token
// limit, the end of the context or the caller's cancel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "src/model/model.h"
#include "src/sampler.h"
#include "src/tokenizer/tokenizer.h"

namespace sparrow {

struct GenerationRequest {
  SamplerParams sampling;
  int max_tokens = -1;             // -1: until the end of the turn or context
  std::vector<std::string> stop;   // stop strings (not part of the result)
  std::vector<int32_t> end_tokens; // tokens that end the turn besides EOS/EOT
};

enum class FinishReason { kEndOfTurn, kStopString, kLength, kContextFull, kCancelled };
// "stop" (end of turn or stop string), "length" (token limit or context), or
// "cancelled", as OpenAI's API names them.
const char* FinishReasonName(FinishReason reason);

struct GenerationResult {
  std::string text;
  FinishReason finish = FinishReason::kEndOfTurn;
  size_t prompt_tokens = 0;     // in the prompt
  size_t reused_tokens = 0;     // of those, found in the KV cache
  size_t generated_tokens = 0;  // sampled, end-of-turn token excluded
  double prompt_seconds = 0.0;
  double generation_seconds = 0.0;
};

class Generator {
 public:
  // The session's KV cache must be empty (or Forget() called).
  Generator(Session& session, const Tokenizer& tokenizer, size_t n_vocab);

  // on_text receives the text as it becomes safe to show (TextStream);
  // returning false cancels. InputError if the prompt is empty or does not
  // fit in the context.
  GenerationResult Generate(const std::vector<int32_t>& prompt, const GenerationRequest& request,
                            const std::function<bool(std::string_view)>& on_text);

  // Empties the KV cache.
  void Forget();
  size_t n_ctx() const { return session_.n_ctx(); }
  const Tokenizer& tokenizer() const { return tokenizer_; }

 private:
  Session& session_;
  const Tokenizer& tokenizer_;
  size_t n_vocab_;
  std::vector<int32_t> cached_;  // the tokens at KV positions 0 .. n_past
};

}  // namespace sparrow
