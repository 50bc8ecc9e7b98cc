// ComputePerplexity on stories260K: it evaluates each chunk pass by pass and
// holds one pass's logits, and gives the same figure as scoring a whole
// chunk's logits from one Eval (the passes are the ones Eval cuts).
#include "src/perplexity.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "base/read_file.h"
#include "src/engine.h"
#include "src/model/model.h"
#include "tests/shared_path.h"

using namespace sparrow;

using testing::SharedPath;

TEST_CASE("perplexity: pass by pass, one pass of logits held, the whole chunk's figure") {
  constexpr size_t kCtx = 128, kBatch = 48, kChunks = 3;  // passes of 48, 48, 32
  EngineOptions options;
  options.n_ctx = kCtx;
  options.max_batch = kBatch;
  options.logits_rows = kCtx;
  const LoadedModel loaded = OpenModel(SharedPath("models/stories260K.gguf"), options);
  // The budget and the session hold one pass's rows, not the chunk's.
  CHECK(loaded.logits_rows == kBatch);

  std::string text = ReadWholeFile(SharedPath("corpora/tinystories_val_excerpt.txt"), "corpus");
  text.resize(std::min<size_t>(text.size(), 20000));
  const Model& model = *loaded.model;
  const std::vector<int32_t> tokens = model.tokenizer().Encode(text, model.tokenizer().add_bos());
  REQUIRE(tokens.size() >= kCtx * kChunks);
  const PerplexityResult r = ComputePerplexity(loaded, tokens, kCtx, kChunks);
  CHECK(r.chunks == kChunks);
  CHECK(r.scored_tokens == kChunks * (kCtx / 2 - 1));

  // The same chunks, each from one Eval of all its tokens.
  const size_t n_vocab = model.config().n_vocab;
  Session session(model, kCtx, kBatch);
  double nll = 0;
  for (size_t c = 0; c < kChunks; ++c) {
    std::vector<int32_t> chunk(tokens.begin() + c * kCtx, tokens.begin() + (c + 1) * kCtx);
    if (model.tokenizer().add_bos()) chunk[0] = model.tokenizer().bos_id();
    session.Reset();
    const float* logits = session.Eval(chunk.data(), kCtx, /*all_logits=*/true);
    for (size_t j = kCtx / 2; j + 1 < kCtx; ++j) {
      const float* row = logits + j * n_vocab;
      const float top = *std::max_element(row, row + n_vocab);
      double sum = 0;
      for (size_t v = 0; v < n_vocab; ++v) sum += std::exp(double{row[v]} - top);
      nll -= double{row[chunk[j + 1]]} - top - std::log(sum);
    }
  }
  CHECK(r.ppl == std::exp(nll / r.scored_tokens));
}
