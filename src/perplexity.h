// Perplexity the way llama.cpp's perplexity tool computes it, so figures
// compare one to one: the text is tokenized once (by the caller, with BOS in
// front when the model adds one, as llama.cpp's tool does) and cut into
// consecutive chunks of n_ctx tokens; each chunk's first token is replaced by
// BOS (when the model adds one) and the chunk is evaluated from an empty
// cache; only the second half of each chunk is scored (positions
// n_ctx/2 .. n_ctx-2 predicting the next token). PPL = exp(mean NLL), and the
// uncertainty is the standard error of the mean NLL carried through exp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace sparrow {

struct LoadedModel;

struct PerplexityResult {
  size_t chunks = 0;
  size_t scored_tokens = 0;
  double ppl = 0.0;
  double ppl_stderr = 0.0;
};

// Runs in one session of `loaded` (LoadedModel::NewSession) of n_ctx
// positions, which the budget should have been charged for with
// EngineOptions::logits_rows = n_ctx (a chunk is evaluated pass by pass, so
// the charge is for one pass's rows). max_chunks = 0: all whole chunks.
// on_chunk(i, running_ppl) after each.
PerplexityResult ComputePerplexity(
    const LoadedModel& loaded, const std::vector<int32_t>& tokens, size_t n_ctx,
    size_t max_chunks, const std::function<void(size_t, double)>& on_chunk = nullptr);

}  // namespace sparrow
