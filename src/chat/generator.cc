#include "src/chat/generator.h"

#include <algorithm>

#include "base/error.h"
#include "base/timer.h"
#include "src/chat/text_stream.h"

namespace sparrow {

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kEndOfTurn:
    case FinishReason::kStopString:
      return "stop";
    case FinishReason::kLength:
    case FinishReason::kContextFull:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
  }
  return "stop";
}

Generator::Generator(Session& session, const Tokenizer& tokenizer, size_t n_vocab)
    : session_(session), tokenizer_(tokenizer), n_vocab_(n_vocab) {
  session_.Reset();
}

void Generator::Forget() {
  session_.Reset();
  cached_.clear();
}

GenerationResult Generator::Generate(const std::vector<int32_t>& prompt,
                                     const GenerationRequest& request,
                                     const std::function<bool(std::string_view)>& on_text) {
  if (prompt.empty()) ThrowInputError("the prompt is empty");
  if (prompt.size() > session_.n_ctx()) {
    ThrowInputError("the prompt has ", prompt.size(), " tokens, more than the context of ",
                    session_.n_ctx());
  }
  GenerationResult result;
  result.prompt_tokens = prompt.size();

  // Keep the shared prefix, but evaluate at least the last prompt token: its
  // logits give the first sampled token.
  size_t keep = 0;
  const size_t limit = std::min(cached_.size(), prompt.size() - 1);
  while (keep < limit && cached_[keep] == prompt[keep]) ++keep;
  session_.Rewind(keep);
  cached_.resize(keep);
  result.reused_tokens = keep;

  // An evaluation that fails leaves the cache in an unknown state.
  const auto eval = [&](const int32_t* tokens, size_t n) {
    try {
      const float* logits = session_.Eval(tokens, n, false);
      cached_.insert(cached_.end(), tokens, tokens + n);
      return logits;
    } catch (...) {
      Forget();
      throw;
    }
  };
  const double t0 = NowSeconds();
  const float* logits = eval(prompt.data() + keep, prompt.size() - keep);
  result.prompt_seconds = NowSeconds() - t0;

  Sampler sampler(request.sampling);
  TextStream stream(request.stop);
  const auto is_end = [&](int32_t id) {
    return tokenizer_.IsEndOfGeneration(id) ||
           std::find(request.end_tokens.begin(), request.end_tokens.end(), id) !=
               request.end_tokens.end();
  };
  const auto show = [&](const std::string& text) {
    return text.empty() || !on_text || on_text(text);
  };
  const size_t max_tokens =
      request.max_tokens < 0 ? session_.n_ctx() : static_cast<size_t>(request.max_tokens);
  const double t1 = NowSeconds();
  result.finish = FinishReason::kLength;
  while (result.generated_tokens < max_tokens) {
    const int32_t next = sampler.Sample(logits, n_vocab_);
    if (is_end(next)) {
      result.finish = FinishReason::kEndOfTurn;
      break;
    }
    ++result.generated_tokens;
    if (!show(stream.Add(tokenizer_.TokenToPiece(next)))) {
      result.finish = FinishReason::kCancelled;
      break;
    }
    if (stream.stopped()) {
      result.finish = FinishReason::kStopString;
      break;
    }
    if (result.generated_tokens == max_tokens) break;
    if (session_.n_past() >= session_.n_ctx()) {
      result.finish = FinishReason::kContextFull;
      break;
    }
    logits = eval(&next, 1);
  }
  if (result.finish != FinishReason::kCancelled && !show(stream.Finish())) {
    result.finish = FinishReason::kCancelled;
  }
  result.generation_seconds = NowSeconds() - t1;
  result.text = stream.text();
  return result;
}

}  // namespace sparrow
