// sparrow bench: prompt processing (ppN: N tokens in one batch from an empty
// cache) and generation (tgN: N single-token passes from an empty cache)
// throughput, as llama-bench measures them: a warm-up run, then -r timed
// repetitions, reported as mean +/- sample standard deviation of tokens/s.
// With -d D (llama-bench's --n-depth) each test starts after D tokens already
// in the cache, evaluated untimed ("pp64 @ d4096"): attention's share at long
// contexts.
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "base/byte_size.h"
#include "base/error.h"
#include "base/timer.h"
#include "simd/targets.h"
#include "src/cli/commands.h"
#include "src/cli/common.h"
#include "src/engine.h"
#include "src/model/model.h"
#include "src/ops/ops.h"
#include "base/threads.h"

namespace sparrow::cli {
namespace {

struct BenchResult {
  int threads;
  std::string test;
  int n_prompt;
  int n_gen;
  int n_depth;
  std::vector<double> samples;  // tokens/s
  double mean() const {
    double s = 0;
    for (double v : samples) s += v;
    return s / samples.size();
  }
  double stddev() const {
    if (samples.size() < 2) return 0.0;
    const double m = mean();
    double s = 0;
    for (double v : samples) s += (v - m) * (v - m);
    return std::sqrt(s / (samples.size() - 1));
  }
};

std::vector<int32_t> RandomTokens(size_t n, uint32_t vocab) {
  std::vector<int32_t> out(n);
  uint64_t state = 0x5EED;
  for (int32_t& t : out) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    t = static_cast<int32_t>((state >> 33) % vocab);
  }
  return out;
}

// A session holding `depth` (untimed) and then `tokens`.
std::unique_ptr<Session> SessionAtDepth(const LoadedModel& loaded, const std::vector<int32_t>& depth,
                                        size_t more) {
  std::unique_ptr<Session> session = loaded.NewSession(depth.size() + more, 1);
  if (!depth.empty()) session->Eval(depth.data(), depth.size(), false);
  return session;
}

double TimePrompt(const LoadedModel& loaded, const std::vector<int32_t>& depth,
                  const std::vector<int32_t>& tokens) {
  const std::unique_ptr<Session> session = SessionAtDepth(loaded, depth, tokens.size());
  const double t0 = NowSeconds();
  session->Eval(tokens.data(), tokens.size(), false);
  return NowSeconds() - t0;
}

double TimeGeneration(const LoadedModel& loaded, const std::vector<int32_t>& depth,
                      const std::vector<int32_t>& tokens) {
  const std::unique_ptr<Session> session = SessionAtDepth(loaded, depth, tokens.size());
  const double t0 = NowSeconds();
  for (const int32_t& t : tokens) session->Eval(&t, 1, false);
  return NowSeconds() - t0;
}

std::string FormatCount(uint64_t n) {
  char buf[32];
  if (n >= 1000000000ull) {
    std::snprintf(buf, sizeof(buf), "%.2f B", n / 1e9);
  } else if (n >= 1000000ull) {
    std::snprintf(buf, sizeof(buf), "%.2f M", n / 1e6);
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f K", n / 1e3);
  }
  return buf;
}

}  // namespace

int BenchCommand(int argc, char** argv) {
  cxxopts::Options options("sparrow bench", "Prompt and generation throughput, like llama-bench.");
  options.add_options()
      ("m,model", "Model file (GGUF)", cxxopts::value<std::string>())
      ("p,n-prompt", "Prompt tokens per pp test (0: skip)", cxxopts::value<int>()->default_value("64"))
      ("n,n-gen", "Generated tokens per tg test (0: skip)", cxxopts::value<int>()->default_value("64"))
      ("d,n-depth", "Tokens already in the cache when each test starts (evaluated untimed)",
       cxxopts::value<int>()->default_value("0"))
      ("t,threads", "Comma-separated thread counts", cxxopts::value<std::string>()->default_value("1,2"))
      ("r,repetitions", "Timed repetitions per test", cxxopts::value<int>()->default_value("3"))
      ("o,output", "md or json", cxxopts::value<std::string>()->default_value("md"))
      ("kernels", "fast or reference", cxxopts::value<std::string>()->default_value("fast"))
      ("prompt-gemm", "Large batches: auto (bf16 where native) or f32",
       cxxopts::value<std::string>()->default_value("auto"));
  AddModelOptions(options);
  AddLoraOptions(options);
  AddStatsOptions(options);
  cxxopts::ParseResult args;
  if (!Parse(options, argc, argv, &args)) return 0;
  const int n_prompt = args["n-prompt"].as<int>();
  const int n_gen = args["n-gen"].as<int>();
  const int n_depth = args["n-depth"].as<int>();
  const int reps = args["repetitions"].as<int>();
  const std::string format = args["output"].as<std::string>();
  const std::vector<int> thread_counts = ParseIntList(args["threads"].as<std::string>(), "-t");
  if (n_prompt < 0 || n_gen < 0 || (n_prompt == 0 && n_gen == 0)) {
    ThrowInputError("-p and -n must be non-negative and not both 0");
  }
  if (reps < 1) ThrowInputError("-r must be at least 1");
  if (n_depth < 0) ThrowInputError("-d must be non-negative");
  if (format != "md" && format != "json") ThrowInputError("-o must be md or json");
  for (int t : thread_counts) {
    if (t < 1) ThrowInputError("-t: thread counts must be at least 1");
  }
  const std::string kernels = args["kernels"].as<std::string>();
  if (kernels != "fast" && kernels != "reference") ThrowInputError("--kernels must be fast or reference");
  ops::SetKernelMode(kernels == "fast" ? ops::KernelMode::kFast : ops::KernelMode::kReference);
  ApplyPromptGemm(args["prompt-gemm"].as<std::string>());

  const std::string path = Require(args, "model");
  EngineOptions engine = ParseModelOptions(args, path);
  engine.n_ctx = static_cast<size_t>(n_depth) + static_cast<size_t>(std::max(n_prompt, n_gen));
  const LoadedModel loaded = OpenModel(path, engine);
  const Model* model = loaded.model.get();
  const ModelConfig& config = model->config();
  // A bundle's feed-forward is not among the resident weights: count it.
  uint64_t model_bytes = model->weight_bytes();
  uint64_t model_params = model->parameter_count();
  std::string type = model->dominant_type();
  if (loaded.streamed != nullptr) {
    model_bytes = std::filesystem::file_size(path);
    model_params += 3ull * config.n_layers * config.d_model * config.d_ff;
    type = StrCat(TensorTypeName(loaded.streamed->record_type()), " bundle");
  }
  const std::string model_name = StrCat(std::filesystem::path(path).filename().string(), " ", type);
  const uint32_t vocab = model->config().n_vocab;

  // The depth's tokens come from the same generator as a test's: a test's
  // tokens are the sequence's continuation.
  const std::vector<int32_t> all = RandomTokens(n_depth + std::max(n_prompt, n_gen), vocab);
  const std::vector<int32_t> depth(all.begin(), all.begin() + n_depth);
  const std::string at_depth = n_depth > 0 ? StrCat(" @ d", n_depth) : "";
  std::vector<BenchResult> results;
  for (int threads : thread_counts) {
    SetThreadCount(threads);
    if (n_prompt > 0) {
      const std::vector<int32_t> tokens(all.begin() + n_depth, all.begin() + n_depth + n_prompt);
      BenchResult r{threads, StrCat("pp", n_prompt, at_depth), n_prompt, 0, n_depth, {}};
      TimePrompt(loaded, depth, tokens);  // warm-up
      for (int i = 0; i < reps; ++i) {
        r.samples.push_back(n_prompt / TimePrompt(loaded, depth, tokens));
      }
      results.push_back(r);
    }
    if (n_gen > 0) {
      const std::vector<int32_t> tokens(all.begin() + n_depth, all.begin() + n_depth + n_gen);
      BenchResult r{threads, StrCat("tg", n_gen, at_depth), 0, n_gen, n_depth, {}};
      TimeGeneration(loaded, depth, tokens);  // warm-up
      for (int i = 0; i < reps; ++i) {
        r.samples.push_back(n_gen / TimeGeneration(loaded, depth, tokens));
      }
      results.push_back(r);
    }
  }

  ReportStats(args, loaded);
  const std::string target = simd::CurrentTargetName();
  if (format == "md") {
    std::printf("| %-30s | %10s | %10s | %-8s | %7s | %14s | %20s |\n", "model", "size", "params",
                "simd", "threads", "test", "t/s");
    std::printf("| %s | %s: | %s: | %s | %s: | %s: | %s: |\n", std::string(30, '-').c_str(),
                std::string(9, '-').c_str(), std::string(9, '-').c_str(), std::string(8, '-').c_str(),
                std::string(6, '-').c_str(), std::string(13, '-').c_str(), std::string(19, '-').c_str());
    for (const BenchResult& r : results) {
      char ts[64];
      std::snprintf(ts, sizeof(ts), "%.2f ± %.2f", r.mean(), r.stddev());
      std::printf("| %-30s | %10s | %10s | %-8s | %7d | %14s | %20s |\n", model_name.c_str(),
                  FormatByteSize(model_bytes, 2).c_str(), FormatCount(model_params).c_str(),
                  target.c_str(), r.threads, r.test.c_str(), ts);
    }
  } else {
    std::printf("[\n");
    for (size_t i = 0; i < results.size(); ++i) {
      const BenchResult& r = results[i];
      std::printf("  {\"model\": \"%s\", \"model_type\": \"%s\", \"model_size\": %" PRIu64
                  ", \"model_n_params\": %" PRIu64 ", \"simd\": \"%s\", \"n_threads\": %d, "
                  "\"test\": \"%s\", \"n_prompt\": %d, \"n_gen\": %d, \"n_depth\": %d, "
                  "\"avg_ts\": %.4f, "
                  "\"stddev_ts\": %.4f, \"samples_ts\": [",
                  std::filesystem::path(path).filename().string().c_str(), type.c_str(),
                  model_bytes, model_params, target.c_str(), r.threads,
                  r.test.c_str(), r.n_prompt, r.n_gen, r.n_depth, r.mean(), r.stddev());
      for (size_t j = 0; j < r.samples.size(); ++j) std::printf("%s%.4f", j ? ", " : "", r.samples[j]);
      std::printf("]}%s\n", i + 1 < results.size() ? "," : "");
    }
    std::printf("]\n");
  }
  return 0;
}

}  // namespace sparrow::cli
