// Generation on one Session, for chat and the server: evaluates a prompt,
// reusing the longest prefix the KV cache already holds from the previous
// call, then samples until the end of the turn, a stop string, the token
// limit, the end of the context or the caller's cancel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <string_view>
#include <vector>

#include "src/model/model.h"
#include "src/sampler.h"
#include "src/tokenizer/tokenizer.h"

namespace sparrow {

// The most alternatives a generated token's log-probabilities may list
// (OpenAI's limit for top_logprobs).
inline constexpr int kMaxTopLogprobs = 20;

struct GenerationRequest {
  SamplerParams sampling;
  // -1: no log-probabilities; 0..kMaxTopLogprobs: each generated token's,
  // with that many of the most likely tokens at its position.
  int top_logprobs = -1;
  // With top_logprobs >= 0: also the prompt's tokens' (every position is
  // evaluated again, the KV cache's prefix not reused).
  bool prompt_logprobs = false;
  int max_tokens = -1;             // -1: until the end of the turn or context
  std::vector<std::string> stop;   // stop strings (not part of the result)
  std::vector<int32_t> end_tokens; // tokens that end the turn besides EOS/EOT
};

enum class FinishReason { kEndOfTurn, kStopString, kLength, kContextFull, kCancelled };
// "stop" (end of turn or stop string), "length" (token limit or context), or
// "cancelled", as OpenAI's API names them.
const char* FinishReasonName(FinishReason reason);

// A generated token's log-probability under the model: the log-softmax of
// its logits as the model gives them (before temperature, top-k and top-p,
// which shape the sampling, not the model), as OpenAI reports them.
struct TokenLogprob {
  std::string token;  // its text (bytes; a piece may be part of a character)
  float logprob = 0.0f;
  std::vector<std::pair<std::string, float>> top;  // most likely first
  size_t text_offset = 0;  // where its text starts in the result's text
};

struct GenerationResult {
  std::string text;
  // With request.top_logprobs >= 0: one per generated token whose text is
  // (at least in part) in `text`, in order; tokens cut off by a stop string
  // are left out, as their text is.
  std::vector<TokenLogprob> logprobs;
  // With request.prompt_logprobs: one per prompt token, offsets into the
  // prompt's pieces joined; the first has no logprob (NaN) and no top.
  std::vector<TokenLogprob> prompt_logprobs;
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

  // During Generate (from on_text): the log-probabilities of the tokens
  // whose text has been shown so far, whole (a token's entry comes with
  // the call that completes its text).
  std::span<const TokenLogprob> shown_logprobs() const {
    return std::span<const TokenLogprob>(logprobs_).first(shown_logprobs_);
  }

  // Empties the KV cache.
  void Forget();
  size_t n_ctx() const { return session_.n_ctx(); }
  const Tokenizer& tokenizer() const { return tokenizer_; }

 private:
  Session& session_;
  const Tokenizer& tokenizer_;
  size_t n_vocab_;
  std::vector<int32_t> cached_;  // the tokens at KV positions 0 .. n_past
  // The current Generate's entries (one per generated token) and how many
  // of them are shown.
  std::vector<TokenLogprob> logprobs_;
  size_t shown_logprobs_ = 0;
};

// The log-probability of `token` and of the `top` most likely tokens
// (log-softmax of `logits`), the pieces from `tokenizer`.
TokenLogprob LogprobOf(const float* logits, size_t n_vocab, int32_t token, int top,
                       const Tokenizer& tokenizer);

}  // namespace sparrow
