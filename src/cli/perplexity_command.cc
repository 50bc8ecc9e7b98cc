// sparrow perplexity: progress per chunk on stderr; the result on stdout, the
// last line being `PPL = <value> +/- <stderr>`.
#include <cstdio>

#include "base/error.h"
#include "base/timer.h"
#include "src/cli/commands.h"
#include "src/cli/common.h"
#include "src/engine.h"
#include "src/model/model.h"
#include "src/perplexity.h"

namespace sparrow::cli {

int PerplexityCommand(int argc, char** argv) {
  cxxopts::Options options("sparrow perplexity",
                           "Perplexity of a text file, computed as llama.cpp's perplexity tool does.");
  options.add_options()
      ("m,model", "Model file (GGUF)", cxxopts::value<std::string>())
      ("f,file", "Text file", cxxopts::value<std::string>())
      ("c,ctx-size", "Tokens per chunk", cxxopts::value<int>()->default_value("512"))
      ("chunks", "Evaluate at most this many chunks (0: all)", cxxopts::value<int>()->default_value("0"))
      ("b,batch-size", "Tokens per forward pass (0: 512 for a GGUF, 64 for a bundle); the result "
       "does not depend on it beyond rounding", cxxopts::value<int>()->default_value("0"));
  AddEngineOptions(options);
  AddModelOptions(options);
  AddLoraOptions(options);
  AddStatsOptions(options);
  cxxopts::ParseResult args;
  if (!Parse(options, argc, argv, &args)) return 0;
  ApplyEngineOptions(args);
  const std::string text = ReadTextFile(Require(args, "file"));
  const int ctx = args["ctx-size"].as<int>();
  const int max_chunks = args["chunks"].as<int>();
  if (ctx < 4) ThrowInputError("-c must be at least 4");
  if (max_chunks < 0) ThrowInputError("--chunks must be 0 or more");

  const std::string model_path = Require(args, "model");
  EngineOptions engine = ParseModelOptions(args, model_path);
  engine.n_ctx = static_cast<size_t>(ctx);
  const int batch = args["batch-size"].as<int>();
  if (batch < 0 || batch > 4096) ThrowInputError("-b must be between 1 and 4096 (0: default)");
  engine.max_batch = static_cast<size_t>(batch);
  engine.logits_rows = static_cast<size_t>(ctx);
  const LoadedModel loaded = OpenModel(model_path, engine);
  const Model* model = loaded.model.get();
  // As llama.cpp's perplexity tool: the whole text is tokenized once with the
  // model's BOS in front (add_special), so chunk boundaries fall where its do.
  const std::vector<int32_t> tokens = model->tokenizer().Encode(text, model->tokenizer().add_bos());
  std::fprintf(stderr, "perplexity: %zu tokens, %zu chunks of %d\n", tokens.size(),
               max_chunks > 0 ? std::min<size_t>(tokens.size() / ctx, max_chunks)
                              : tokens.size() / ctx,
               ctx);
  const double t0 = NowSeconds();
  const PerplexityResult r = ComputePerplexity(
      loaded, tokens, static_cast<size_t>(ctx), static_cast<size_t>(max_chunks),
      [](size_t i, double ppl) {
        std::fprintf(stderr, "[%zu]%.4f,", i + 1, ppl);
        std::fflush(stderr);
      });
  const double seconds = NowSeconds() - t0;
  std::fprintf(stderr, "\n");
  ReportStats(args, loaded);
  std::printf("chunks: %zu, scored tokens: %zu, %.2f tok/s\n", r.chunks, r.scored_tokens,
              r.chunks * ctx / std::max(seconds, 1e-9));
  std::printf("PPL = %.4f +/- %.5f\n", r.ppl, r.ppl_stderr);
  return 0;
}

}  // namespace sparrow::cli
