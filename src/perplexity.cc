#include "src/perplexity.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "src/engine.h"
#include "src/model/model.h"

namespace sparrow {
namespace {

// log softmax(logits)[target], in double as llama.cpp does.
double LogProbability(const float* logits, size_t n, int32_t target) {
  const float max_logit = *std::max_element(logits, logits + n);
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += std::exp(double{logits[i]} - max_logit);
  return double{logits[target]} - max_logit - std::log(sum);
}

}  // namespace

PerplexityResult ComputePerplexity(
    const LoadedModel& loaded, const std::vector<int32_t>& tokens, size_t n_ctx,
    size_t max_chunks, const std::function<void(size_t, double)>& on_chunk) {
  const Model& model = *loaded.model;
  if (n_ctx < 4) ThrowInputError("perplexity needs a context of at least 4 tokens");
  size_t chunks = tokens.size() / n_ctx;
  if (max_chunks > 0) chunks = std::min(chunks, max_chunks);
  if (chunks == 0) {
    ThrowInputError("the text has ", tokens.size(), " tokens; perplexity needs at least ",
                    n_ctx, " (one chunk of -c tokens)");
  }
  const Tokenizer& tok = model.tokenizer();
  const size_t n_vocab = model.config().n_vocab;
  const size_t first = n_ctx / 2;
  const std::unique_ptr<Session> owned = loaded.NewSession(n_ctx, 1);
  Session& session = *owned;
  const size_t step = std::max<size_t>(session.max_batch(), 1);
  std::vector<int32_t> chunk(n_ctx);
  double nll = 0.0, nll2 = 0.0;
  size_t count = 0;
  for (size_t c = 0; c < chunks; ++c) {
    std::copy_n(tokens.begin() + c * n_ctx, n_ctx, chunk.begin());
    if (tok.add_bos() && tok.bos_id() >= 0) chunk[0] = tok.bos_id();
    session.Reset();
    // Pass by pass, as Eval would cut the whole chunk (the same passes, so
    // the same figures), so that only one pass's logits are held: the
    // budget charges max_batch rows of them, not n_ctx.
    for (size_t start = 0; start < n_ctx; start += step) {
      const size_t n = std::min(step, n_ctx - start);
      const bool scored = start + n > first;
      const float* logits = session.Eval(chunk.data() + start, n, /*all_logits=*/scored);
      if (!scored) continue;
      for (size_t j = std::max(first, start); j < start + n && j + 1 < n_ctx; ++j) {
        const double lp = LogProbability(logits + (j - start) * n_vocab, n_vocab, chunk[j + 1]);
        nll -= lp;
        nll2 += lp * lp;
        ++count;
      }
    }
    if (on_chunk) on_chunk(c, std::exp(nll / count));
  }
  PerplexityResult r;
  r.chunks = chunks;
  r.scored_tokens = count;
  const double mean = nll / count;
  r.ppl = std::exp(mean);
  const double variance = nll2 / count - mean * mean;
  r.ppl_stderr = (variance > 0.0 && count > 1) ? std::sqrt(variance / (count - 1)) * r.ppl : 0.0;
  return r;
}

}  // namespace sparrow
