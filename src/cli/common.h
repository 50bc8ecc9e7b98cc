// Pieces every subcommand shares: option groups, parsing helpers, and the
// process facts printed in summaries.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "src/engine.h"
#include "src/lora.h"
#include "src/sampler.h"

namespace sparrow::cli {

// Options every model-running command takes: -t and --kernels.
// `prompt_gemm_default`: --prompt-gemm's default ("auto" or "f32").
void AddEngineOptions(cxxopts::Options& options, const char* prompt_gemm_default = "auto");
// Applies -t and --kernels; InputError for bad values.
void ApplyEngineOptions(const cxxopts::ParseResult& args);
// Sets ops' prompt GEMM from a --prompt-gemm value (InputError if unknown).
void ApplyPromptGemm(const std::string& value);

// Options for opening a model: --dram-budget, the streaming knobs that
// matter for bundles (--window, --cache, --io, --io-threads) and the
// sparsity flags (--sparsity, --mlp-density, --gamma, --input-fraction).
void AddModelOptions(cxxopts::Options& options);
// Reads them into EngineOptions (n_ctx etc. are left for the caller).
EngineOptions ParseModelOptions(const cxxopts::ParseResult& args, const std::string& model_path);
// Only the memory and streaming ones, for a command that reads the sparsity
// flags its own way (calibrate: a list of densities).
EngineOptions ParseStreamOptions(const cxxopts::ParseResult& args, const std::string& model_path);
// --stats / --stats-json for commands that run a model.
void AddStatsOptions(cxxopts::Options& options);
// --lora ADAPTER (repeatable) and --lora-scaled ADAPTER SCALE (repeatable,
// two values, as llama.cpp spells it); ParseLoraOptions reads both.
void AddLoraOptions(cxxopts::Options& options);
std::vector<LoraSpec> ParseLoraOptions(const cxxopts::ParseResult& args);
// Prints the stream summary (--stats) and writes the per-token JSON
// (--stats-json) when the model streams; notes on stderr when it does not.
void ReportStats(const cxxopts::ParseResult& args, const LoadedModel& model);

// --temp, --top-k, --top-p and --seed (default seed: from the clock).
void AddSamplingOptions(cxxopts::Options& options);
SamplerParams ParseSamplingOptions(const cxxopts::ParseResult& args);
// -c/--ctx-size for commands that run a conversation or a prompt (run,
// chat, serve, batch), and its value checked and converted (0: the
// default, which `default_text` describes for --help).
void AddContextOption(cxxopts::Options& options,
                      const char* default_text = "the model's, at most 4096");
size_t ParseContextSize(const cxxopts::ParseResult& args);
// The most positions a prompt and n_predict tokens after it can fill (a
// tokenizer makes at most one token per byte, plus BOS, a leading space and
// EOS), for EngineOptions::n_ctx_used_at_most; 0 (unknown) when n_predict
// is negative (until the context ends).
size_t ContextReachedBy(const std::string& prompt, long long n_predict);

// Parses argv; prints help and returns false when --help was asked for.
bool Parse(cxxopts::Options& options, int argc, char** argv,
           cxxopts::ParseResult* out);

// The value of a required option; InputError naming it when absent.
std::string Require(const cxxopts::ParseResult& args, const std::string& name);

// "1,2,4" -> {1, 2, 4}; InputError on anything else.
// The value of a real-number option, given as text: the whole of it must
// be a finite decimal number ("0.x" or "1e999" is an InputError naming
// --name), which cxxopts' own float parsing does not check.
double RealOption(const cxxopts::ParseResult& args, const std::string& name);
std::vector<int> ParseIntList(const std::string& text, const std::string& flag);

std::string ReadTextFile(const std::string& path);
uint64_t PeakRssBytes();

// Progress of a long write on stderr: percent, bytes and MB/s. On a
// terminal, one line redrawn at most ~10 times a second, for jobs of more
// than kProgressMinBytes (a small job is done before anyone would look).
// With `forced` (--progress) it is shown whatever the size and, when
// stderr is not a terminal (a log file, a CI job), as a new line every
// 10% instead of a redrawn one; otherwise it is quiet there.
inline constexpr uint64_t kProgressMinBytes = uint64_t{256} << 20;

class ProgressBar {
 public:
  explicit ProgressBar(std::string label, bool forced = false);
  ~ProgressBar();
  void Update(uint64_t done, uint64_t total);

 private:
  std::string label_;
  bool terminal_;
  bool forced_;
  bool drawn_ = false;
  double start_;
  double last_draw_ = 0.0;
  int last_decile_ = -1;
};

}  // namespace sparrow::cli
