// sparrow run: streams the prompt and the generated text to stdout, then one
// line of throughput and peak memory on stderr.
#include <cstdio>

#include "base/error.h"
#include "base/timer.h"
#include "src/cli/commands.h"
#include "src/cli/common.h"
#include "src/model/model.h"
#include "src/engine.h"
#include "src/sampler.h"

namespace sparrow::cli {

int RunCommand(int argc, char** argv) {
  cxxopts::Options options("sparrow run", "Generate text from a prompt.");
  options.add_options()
      ("m,model", "Model file (GGUF)", cxxopts::value<std::string>())
      ("p,prompt", "Prompt text", cxxopts::value<std::string>()->default_value(""))
      ("f,file", "Read the prompt from this file", cxxopts::value<std::string>())
      ("n,n-predict", "Tokens to generate (-1: until end of text or context)",
       cxxopts::value<int>()->default_value("128"));
  AddContextOption(options, "the prompt and -n, at most the model's context or 4096");
  AddSamplingOptions(options);
  AddEngineOptions(options);
  AddModelOptions(options);
  AddLoraOptions(options);
  AddStatsOptions(options);
  cxxopts::ParseResult args;
  if (!Parse(options, argc, argv, &args)) return 0;
  ApplyEngineOptions(args);

  const std::string model_path = Require(args, "model");
  if (args.count("file") && args.count("prompt")) {
    ThrowInputError("-f and -p both give the prompt: use one of them");
  }
  std::string prompt = args["prompt"].as<std::string>();
  if (args.count("file")) prompt = ReadTextFile(args["file"].as<std::string>());
  const int n_predict = args["n-predict"].as<int>();
  if (n_predict < -1) ThrowInputError("-n must be -1 or more");
  const SamplerParams sp = ParseSamplingOptions(args);
  const size_t requested_ctx = ParseContextSize(args);
  EngineOptions engine = ParseModelOptions(args, model_path);
  engine.n_ctx = requested_ctx;
  // Without -c, reserve only the context this run can reach.
  engine.n_ctx_used_at_most = ContextReachedBy(prompt, n_predict);
  const LoadedModel loaded = OpenModel(model_path, engine);
  const Model* model = loaded.model.get();
  const Tokenizer& tok = model->tokenizer();
  const int ctx = static_cast<int>(loaded.n_ctx);
  CheckLogitBias(sp, model->config().n_vocab, "--logit-bias");

  const std::vector<int32_t> prompt_tokens = tok.Encode(prompt, tok.add_bos());
  if (prompt_tokens.empty()) ThrowInputError("the prompt is empty and the model adds no BOS token");
  if (prompt_tokens.size() >= static_cast<size_t>(ctx)) {
    ThrowInputError("the prompt has ", prompt_tokens.size(),
                    " tokens, which leaves no room in a context of ", ctx);
  }
  const std::unique_ptr<Session> owned_session = loaded.NewSession();
  Session& session = *owned_session;
  Sampler sampler(sp);
  sampler.Accept(prompt_tokens);  // the penalties count the prompt's tokens

  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  std::fflush(stdout);

  const double t0 = NowSeconds();
  const float* logits = session.Eval(prompt_tokens.data(), prompt_tokens.size(), false);
  const double prompt_seconds = NowSeconds() - t0;
  // Generation speed counts single-token forward passes and their time, as
  // llama.cpp's "eval" figure does (sampling and printing excluded).
  size_t generated = 0, evals = 0;
  double eval_seconds = 0.0;
  const size_t limit = n_predict < 0 ? static_cast<size_t>(ctx) : static_cast<size_t>(n_predict);
  while (generated < limit) {
    const int32_t next = sampler.Sample(logits, model->config().n_vocab);
    if (tok.IsEndOfGeneration(next)) break;
    const std::string piece = tok.TokenToPiece(next);
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    // Output that cannot be written ends the run (main reports the error).
    if (std::ferror(stdout)) break;
    ++generated;
    if (generated == limit || session.n_past() >= session.n_ctx()) break;
    const double e0 = NowSeconds();
    logits = session.Eval(&next, 1, false);
    eval_seconds += NowSeconds() - e0;
    ++evals;
  }
  std::fputc('\n', stdout);
  std::fflush(stdout);

  ReportStats(args, loaded);
  const double prompt_tps = prompt_tokens.size() / std::max(prompt_seconds, 1e-9);
  const double gen_tps = evals == 0 ? 0.0 : evals / std::max(eval_seconds, 1e-9);
  std::fprintf(stderr, "prompt: %.2f tok/s, generation: %.2f tok/s, peak rss: %.1f MiB\n",
               prompt_tps, gen_tps, PeakRssBytes() / (1024.0 * 1024.0));
  return 0;
}

}  // namespace sparrow::cli
