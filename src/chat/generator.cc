#include "src/chat/generator.h"

#include <algorithm>
#include <cmath>
#include <numeric>

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

TokenLogprob LogprobOf(const float* logits, size_t n_vocab, int32_t token, int top,
                       const Tokenizer& tokenizer) {
  const float max_logit = *std::max_element(logits, logits + n_vocab);
  double sum = 0.0;
  for (size_t i = 0; i < n_vocab; ++i) sum += std::exp(double{logits[i]} - max_logit);
  const double log_sum = std::log(sum) + max_logit;
  const auto logprob = [&](int32_t id) { return static_cast<float>(logits[id] - log_sum); };
  TokenLogprob out;
  out.token = tokenizer.TokenToPiece(token);
  out.logprob = logprob(token);
  const size_t k = std::min(static_cast<size_t>(std::max(top, 0)), n_vocab);
  if (k > 0) {
    std::vector<int32_t> ids(n_vocab);
    std::iota(ids.begin(), ids.end(), 0);
    // Ties go to the lower id, so the order does not depend on the sort.
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (size_t i = 0; i < k; ++i) {
      out.top.emplace_back(tokenizer.TokenToPiece(ids[i]), logprob(ids[i]));
    }
  }
  return out;
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
  const bool score_prompt = request.prompt_logprobs && request.top_logprobs >= 0;
  const size_t limit = score_prompt ? 0 : std::min(cached_.size(), prompt.size() - 1);
  while (keep < limit && cached_[keep] == prompt[keep]) ++keep;
  session_.Rewind(keep);
  cached_.resize(keep);
  result.reused_tokens = keep;

  // An evaluation that fails leaves the cache in an unknown state.
  const auto eval = [&](const int32_t* tokens, size_t n, bool all_logits = false) {
    try {
      const float* logits = session_.Eval(tokens, n, all_logits);
      cached_.insert(cached_.end(), tokens, tokens + n);
      return logits;
    } catch (...) {
      Forget();
      throw;
    }
  };
  const double t0 = NowSeconds();
  const float* logits = nullptr;
  if (score_prompt) {
    // Pass by pass, each within the logits rows the session holds, so the
    // budget it was charged for stays the limit.
    const size_t n = prompt.size();
    const size_t step = std::max<size_t>(
        1, std::min(session_.max_batch(), session_.held_logits_rows()));
    TokenLogprob first;
    first.token = tokenizer_.TokenToPiece(prompt[0]);
    first.logprob = NAN;
    result.prompt_logprobs.push_back(first);
    size_t offset = first.token.size();
    for (size_t start = 0; start < n; start += step) {
      const size_t len = std::min(step, n - start);
      const float* rows = eval(prompt.data() + start, len, /*all_logits=*/true);
      for (size_t i = 0; i < len && start + i + 1 < n; ++i) {
        TokenLogprob e = LogprobOf(rows + i * n_vocab_, n_vocab_, prompt[start + i + 1],
                                   request.top_logprobs, tokenizer_);
        e.text_offset = offset;
        offset += e.token.size();
        result.prompt_logprobs.push_back(std::move(e));
      }
      logits = rows + (len - 1) * n_vocab_;
    }
  } else {
    logits = eval(prompt.data() + keep, prompt.size() - keep);
  }
  result.prompt_seconds = NowSeconds() - t0;

  Sampler sampler(request.sampling);
  sampler.Accept(prompt);  // the penalties count the prompt's tokens
  TextStream stream(request.stop);
  // Log-probabilities: an entry per generated token, placed at the end of
  // the text so far (the pieces, before TextStream holds anything back);
  // shown once the stream has shown all of its text.
  const bool want_logprobs = request.top_logprobs >= 0;
  logprobs_.clear();
  shown_logprobs_ = 0;
  size_t raw_bytes = 0;
  const auto mark_shown = [&] {
    const size_t shown = stream.text().size();
    while (shown_logprobs_ < logprobs_.size() &&
           logprobs_[shown_logprobs_].text_offset + logprobs_[shown_logprobs_].token.size() <=
               shown) {
      ++shown_logprobs_;
    }
  };
  const auto is_end = [&](int32_t id) {
    return tokenizer_.IsEndOfGeneration(id) ||
           std::find(request.end_tokens.begin(), request.end_tokens.end(), id) !=
               request.end_tokens.end();
  };
  const auto show = [&](const std::string& text) {
    if (want_logprobs) mark_shown();
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
    const std::string piece = tokenizer_.TokenToPiece(next);
    if (want_logprobs) {
      logprobs_.push_back(LogprobOf(logits, n_vocab_, next, request.top_logprobs, tokenizer_));
      logprobs_.back().text_offset = raw_bytes;
    }
    raw_bytes += piece.size();
    if (!show(stream.Add(piece))) {
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
  if (want_logprobs) {
    // The shown text is a prefix of the pieces: a token a stop string cut
    // keeps its entry if some of its text is shown.
    mark_shown();
    while (shown_logprobs_ < logprobs_.size() &&
           logprobs_[shown_logprobs_].text_offset < result.text.size()) {
      ++shown_logprobs_;
    }
    logprobs_.resize(shown_logprobs_);
    result.logprobs = logprobs_;
  }
  return result;
}

}  // namespace sparrow
