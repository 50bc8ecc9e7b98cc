#include "src/cli/common.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <iostream>
#include <sstream>
#include <string_view>
#include <utility>

#include "base/byte_size.h"
#include "base/error.h"
#include "base/read_file.h"
#include "base/output_file.h"
#include "base/timer.h"
#include "src/ops/ops.h"
#include "base/threads.h"

namespace sparrow::cli {

void AddEngineOptions(cxxopts::Options& options, const char* prompt_gemm_default) {
  options.add_options("engine")
      ("t,threads", "Worker threads (default: all cores)", cxxopts::value<int>()->default_value("0"))
      ("kernels", "fast (Highway, oneDNN) or reference (scalar, for checking)",
       cxxopts::value<std::string>()->default_value("fast"))
      ("prompt-gemm", "Large batches: auto (bf16 where the CPU has AMX, else f32), f32 (results "
       "within ~1e-6 of one token at a time) or bf16 (also with AVX-512 BF16 alone)",
       cxxopts::value<std::string>()->default_value(prompt_gemm_default));
}

void ApplyPromptGemm(const std::string& value) {
  if (value == "auto") {
    ops::SetPromptGemm(ops::PromptGemm::kAuto);
  } else if (value == "f32") {
    ops::SetPromptGemm(ops::PromptGemm::kF32);
  } else if (value == "bf16") {
    if (!ops::PromptGemmBf16Available()) {
      ThrowInputError("--prompt-gemm bf16: this build has no bf16 matrix product for this CPU "
                      "(it needs oneDNN and AVX-512 BF16 or AMX)");
    }
    ops::SetPromptGemm(ops::PromptGemm::kBf16);
  } else {
    ThrowInputError("--prompt-gemm must be 'auto', 'f32' or 'bf16', not '", value, "'");
  }
}

void ApplyEngineOptions(const cxxopts::ParseResult& args) {
  const int threads = args["threads"].as<int>();
  if (threads < 0 || threads > 1024) ThrowInputError("-t must be between 1 and 1024");
  SetThreadCount(threads);
  const std::string kernels = args["kernels"].as<std::string>();
  if (kernels == "fast") {
    ops::SetKernelMode(ops::KernelMode::kFast);
  } else if (kernels == "reference") {
    ops::SetKernelMode(ops::KernelMode::kReference);
  } else {
    ThrowInputError("--kernels must be 'fast' or 'reference', not '", kernels, "'");
  }
  ApplyPromptGemm(args["prompt-gemm"].as<std::string>());
}

void AddModelOptions(cxxopts::Options& options) {
  options.add_options("memory")
      ("dram-budget", "Hard limit on the memory Sparrow uses: 800M, 1.5G, or a percentage "
       "of the model file (60%); a bundle streams its feed-forward within it",
       cxxopts::value<std::string>())
      ("window", "Sliding window: keep the units used by the last K tokens (--cache window; "
       "a cache with room for every unit keeps them all)",
       cxxopts::value<uint32_t>()->default_value("4"))
      ("cache", "Unit cache eviction: window, lru or lfu", cxxopts::value<std::string>()->default_value("window"))
      ("io", "Loader: auto (uring where the kernel allows it, else direct), pread, direct (O_DIRECT), mmap or uring", cxxopts::value<std::string>()->default_value("auto"))
      ("io-threads", "Parallel reads in flight (default: 64 with io_uring, 16 I/O threads "
       "otherwise)", cxxopts::value<int>())
      // 8K by default: a read costs the device a fixed time besides its
      // bytes (measured on a virtio disk: ~30-40K reads/s at ~1-2 GB/s, so
      // a read's overhead is worth ~30 KB; NVMe and UFS ~5-40 KB), so
      // reading an 8K hole costs less than the read it saves. dip-ca at
      // density 0.5 on the 1.1B shape: 17.8K -> 8.1K reads per token.
      ("read-gap", "Read the gap between two missing records as part of one read when it is at "
       "most this many bytes (e.g. 32K; Ripple's access collapse): fewer, larger reads for "
       "scattered units; 0 reads only the records", cxxopts::value<std::string>()->default_value("8K"))
      ("cache-type-k", "KV cache type for keys (-ctk): f16, f32, q8_0 or q4_0",
       cxxopts::value<std::string>()->default_value(kKvTypes[0].name))
      ("cache-type-v", "KV cache type for values (-ctv): f16, f32, q8_0 or q4_0",
       cxxopts::value<std::string>()->default_value(kKvTypes[0].name));
  options.add_options("sparsity")
      ("sparsity", "Which FFN units each token uses (bundles): dense; dip, dip-ca, glu (dip "
       "layout); up, gate (split layout)", cxxopts::value<std::string>()->default_value("dense"))
      ("mlp-density", "Fraction of the FFN weight bytes a token uses, in (0, 1]",
       cxxopts::value<std::string>()->default_value("1"))
      ("gamma", "dip-ca: weight of units not in the cache when ranking (Eq. 10 of the DIP paper)",
       cxxopts::value<std::string>()->default_value("0.2"))
      ("input-fraction", "dip, dip-ca: fraction of input columns (up/gate) a token keeps; the "
       "down columns get the rest of the density (default: the bundle's calibration from "
       "`sparrow calibrate`, else equal to the density)", cxxopts::value<std::string>());
}

EngineOptions ParseStreamOptions(const cxxopts::ParseResult& args, const std::string& model_path) {
  EngineOptions o;
  // Checked now, not after a long run whose statistics would be lost.
  if (args.count("stats-json")) CheckWritable(args["stats-json"].as<std::string>(), "--stats-json");
  if (args.count("dram-budget")) {
    struct stat st {};
    const uint64_t file_bytes = ::stat(model_path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
    o.dram_budget = ParseByteSize(args["dram-budget"].as<std::string>(), file_bytes, "--dram-budget");
  }
  o.stream.window_tokens = args["window"].as<uint32_t>();
  if (o.stream.window_tokens == 0) ThrowInputError("--window must be at least 1");
  o.stream.eviction = ParseEvictionKind(args["cache"].as<std::string>());
  o.stream.io = ParseIoMode(args["io"].as<std::string>());
  o.stream.io_threads =
      args.count("io-threads") ? args["io-threads"].as<int>() : DefaultIoParallelism(o.stream.io);
  if (o.stream.io_threads < 1 || o.stream.io_threads > 256) {
    ThrowInputError("--io-threads must be between 1 and 256");
  }
  const std::string gap = args["read-gap"].as<std::string>();
  o.stream.max_gap_bytes = gap == "0" ? 0 : ParseByteSize(gap, 0, "--read-gap");
  o.kv_types.k = ParseKvType(args["cache-type-k"].as<std::string>(), "--cache-type-k");
  o.kv_types.v = ParseKvType(args["cache-type-v"].as<std::string>(), "--cache-type-v");
  return o;
}

EngineOptions ParseModelOptions(const cxxopts::ParseResult& args, const std::string& model_path) {
  EngineOptions o = ParseStreamOptions(args, model_path);
  o.lora = ParseLoraOptions(args);
  if (!o.lora.empty()) {
    // Shown on a terminal for large models, like convert's.
    auto bar = std::make_shared<ProgressBar>("lora");
    o.lora_progress = [bar](uint64_t done, uint64_t total) { bar->Update(done, total); };
  }
  o.sparsity.kind = ParseSparsityKind(args["sparsity"].as<std::string>());
  o.sparsity.density = RealOption(args, "mlp-density");
  o.sparsity.gamma = RealOption(args, "gamma");
  CheckDensity(o.sparsity);  // now, not after the model has loaded
  if (args.count("input-fraction")) {
    if (!HasInputSplit(o.sparsity.kind)) {
      ThrowInputError("--input-fraction needs --sparsity dip or dip-ca");
    }
    o.sparsity.input_fraction = RealOption(args, "input-fraction");
    o.sparsity.split_source = SplitSource::kExplicit;
    // The range and the density it must reach are checked with the layout.
  }
  return o;
}

void AddLoraOptions(cxxopts::Options& options) {
  options.add_options("LoRA")
      ("lora", "Fuse this LoRA adapter (llama.cpp GGUF adapter or PEFT folder) into the "
       "weights at load; repeatable", cxxopts::value<std::vector<std::string>>())
      ("lora-scaled", "--lora-scaled ADAPTER SCALE: the same with a scale; repeatable",
       cxxopts::value<std::vector<std::string>>());
}

std::vector<LoraSpec> ParseLoraOptions(const cxxopts::ParseResult& args) {
  std::vector<LoraSpec> specs;
  if (args.count("lora")) {
    for (const std::string& path : args["lora"].as<std::vector<std::string>>()) {
      specs.push_back({path, 1.0f});
    }
  }
  if (args.count("lora-scaled")) {
    // Parse() joined each "--lora-scaled ADAPTER SCALE" into "SCALE:ADAPTER".
    for (const std::string& joined : args["lora-scaled"].as<std::vector<std::string>>()) {
      const size_t colon = joined.find(':');
      const std::string scale = colon == std::string::npos ? "" : joined.substr(0, colon);
      char* end = nullptr;
      const float value = std::strtof(scale.c_str(), &end);
      if (colon == std::string::npos || scale.empty() || *end != '\0' || !std::isfinite(value)) {
        ThrowInputError("--lora-scaled takes an adapter and a scale (--lora-scaled ADAPTER 0.5)");
      }
      specs.push_back({joined.substr(colon + 1), value});
    }
  }
  return specs;
}

void AddStatsOptions(cxxopts::Options& options) {
  options.add_options("memory")
      ("stats", "Print streaming statistics: bytes read, read calls, hit rate, I/O / memory / compute time")
      ("stats-json", "Write per-token streaming statistics to this JSON file", cxxopts::value<std::string>());
}

void ReportStats(const cxxopts::ParseResult& args, const LoadedModel& model) {
  const bool want = args.count("stats") || args.count("stats-json");
  if (!want) return;
  if (model.streamed == nullptr) {
    std::fprintf(stderr, "stats: %s runs fully resident; nothing is streamed\n", model.format.c_str());
    return;
  }
  if (args.count("stats")) {
    const StreamedFeedForward& ffn = *model.streamed;
    const SparsityOptions& sparsity = ffn.policy().options();
    std::fprintf(stderr,
                 "unit caches: %s, %.1f%% of the FFN's units (%s); sparsity %s at density %g",
                 FormatByteSize(ffn.cache_bytes(), 2).c_str(), 100.0 * ffn.cache_fraction(),
                 EvictionKindName(ffn.stream_config().eviction), ffn.policy().name().c_str(),
                 sparsity.density);
    if (HasInputSplit(sparsity.kind)) {
      std::fprintf(stderr, ", %s", DescribeSplit(sparsity).c_str());
    }
    if (sparsity.kind == SparsityKind::kDipCa) std::fprintf(stderr, ", gamma %g", sparsity.gamma);
    std::fprintf(stderr, "\n");
    if (!model.budget->unlimited()) {
      std::fprintf(stderr, "dram budget %s: %s\n", FormatByteSize(model.budget->limit(), 2).c_str(),
                   model.budget->Breakdown().c_str());
    }
    model.streamed->stats().PrintSummary(stderr);
  }
  if (args.count("stats-json")) model.streamed->stats().WriteJson(args["stats-json"].as<std::string>());
}

void AddSamplingOptions(cxxopts::Options& options) {
  options.add_options()
      ("temp", "Temperature; 0 = greedy", cxxopts::value<std::string>()->default_value("0.8"))
      ("top-k", "Keep the k most likely tokens (0: all)", cxxopts::value<int>()->default_value("40"))
      ("top-p", "Keep the smallest set with this much probability (1: all)",
       cxxopts::value<std::string>()->default_value("0.95"))
      ("min-p", "Drop tokens less likely than this times the likeliest (0: off)",
       cxxopts::value<std::string>()->default_value("0"))
      ("seed", "Random seed (default: from the clock)", cxxopts::value<uint64_t>())
      ("repeat-penalty", "Divide the positive logits (multiply the negative) of tokens among "
       "the last --repeat-last-n by this (1: off)", cxxopts::value<std::string>()->default_value("1"))
      ("repeat-last-n", "Context tokens the penalties look at (0: none, -1: the whole context)",
       cxxopts::value<int>()->default_value("64"))
      ("presence-penalty", "Subtract this from the logit of each token among the last "
       "--repeat-last-n (0: off)", cxxopts::value<std::string>()->default_value("0"))
      ("frequency-penalty", "Subtract this per time a token is among the last --repeat-last-n "
       "(0: off)", cxxopts::value<std::string>()->default_value("0"))
      ("logit-bias", "TOKEN_ID+BIAS or TOKEN_ID-BIAS added to that token's logit (repeat the "
       "flag, or separate with commas; -inf bans the token), e.g. --logit-bias 13+2,29871-inf",
       cxxopts::value<std::vector<std::string>>());
}

namespace {

// "13+2.5", "13-1", "29871-inf": a token id and the bias added to its logit.
std::pair<int32_t, float> ParseLogitBias(const std::string& text) {
  const size_t sign = text.find_first_of("+-", 1);
  const auto bad = [&] {
    ThrowInputError("--logit-bias: '", text, "' is not TOKEN_ID+BIAS or TOKEN_ID-BIAS (e.g. 13+2, 29871-inf)");
  };
  if (sign == std::string::npos) bad();
  const std::string id_text = text.substr(0, sign);
  if (id_text.empty() || id_text.find_first_not_of("0123456789") != std::string::npos ||
      id_text.size() > 9) {
    bad();
  }
  char* end = nullptr;
  const std::string bias_text = text.substr(sign);
  const float bias = std::strtof(bias_text.c_str(), &end);
  if (end != bias_text.c_str() + bias_text.size() || std::isnan(bias) || bias_text.size() < 2) bad();
  return {static_cast<int32_t>(std::stol(id_text)), bias};
}

}  // namespace

SamplerParams ParseSamplingOptions(const cxxopts::ParseResult& args) {
  SamplerParams sp;
  sp.temperature = static_cast<float>(RealOption(args, "temp"));
  if (sp.temperature < 0.0f) ThrowInputError("--temp must be 0 or more");
  sp.top_k = args["top-k"].as<int>();
  if (sp.top_k < 0) ThrowInputError("--top-k must be 0 (off) or more");
  sp.top_p = static_cast<float>(RealOption(args, "top-p"));
  if (!(sp.top_p > 0.0f && sp.top_p <= 1.0f)) ThrowInputError("--top-p must be in (0, 1]");
  sp.min_p = static_cast<float>(RealOption(args, "min-p"));
  if (!(sp.min_p >= 0.0f && sp.min_p <= 1.0f)) ThrowInputError("--min-p must be in [0, 1]");
  sp.repeat_penalty = static_cast<float>(RealOption(args, "repeat-penalty"));
  if (!(sp.repeat_penalty > 0.0f)) ThrowInputError("--repeat-penalty must be more than 0");
  sp.penalty_last_n = args["repeat-last-n"].as<int>();
  if (sp.penalty_last_n < -1) ThrowInputError("--repeat-last-n must be -1 (all), 0 (off) or more");
  sp.presence_penalty = static_cast<float>(RealOption(args, "presence-penalty"));
  sp.frequency_penalty = static_cast<float>(RealOption(args, "frequency-penalty"));
  if (args.count("logit-bias")) {
    for (const std::string& item : args["logit-bias"].as<std::vector<std::string>>()) {
      sp.logit_bias.push_back(ParseLogitBias(item));
    }
  }
  sp.seed = args.count("seed") ? args["seed"].as<uint64_t>()
                               : static_cast<uint64_t>(std::random_device{}()) ^
                                     static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return sp;
}

void AddContextOption(cxxopts::Options& options, const char* default_text) {
  options.add_options()("c,ctx-size", StrCat("Context size in tokens (default: ", default_text, ")"),
                        cxxopts::value<int>()->default_value("0"));
}

size_t ParseContextSize(const cxxopts::ParseResult& args) {
  const int requested = args["ctx-size"].as<int>();
  if (requested < 0) ThrowInputError("-c must be positive");
  return static_cast<size_t>(requested);
}

size_t ContextReachedBy(const std::string& prompt, long long n_predict) {
  if (n_predict < 0) return 0;
  constexpr size_t kMax = ~size_t{0};
  const size_t tokens = prompt.size() > kMax - 3 ? kMax : prompt.size() + 3;
  const auto n = static_cast<unsigned long long>(n_predict);
  return n > kMax - tokens ? kMax : tokens + static_cast<size_t>(n);
}

bool Parse(cxxopts::Options& options, int argc, char** argv,
           cxxopts::ParseResult* out) {
  options.add_options()("h,help", "Show this help");
  // cxxopts takes one value per flag: "--lora-scaled ADAPTER SCALE" becomes
  // "--lora-scaled=SCALE:ADAPTER" (a scale holds no ':'; a path may).
  // llama.cpp's multi-letter short flags, which cxxopts would read as
  // grouped one-letter ones (-c -t -k).
  static constexpr std::pair<std::string_view, std::string_view> kLongShortFlags[] = {
      {"-ctk", "--cache-type-k"}, {"-ctv", "--cache-type-v"}};
  std::vector<std::string> joined;
  for (int i = 0; i < argc; ++i) {
    const auto alias = std::find_if(std::begin(kLongShortFlags), std::end(kLongShortFlags),
                                    [&](const auto& a) { return a.first == argv[i]; });
    if (i > 0 && alias != std::end(kLongShortFlags)) {
      joined.emplace_back(alias->second);
    } else if (std::string_view(argv[i]) == "--lora-scaled") {
      if (i + 2 >= argc) ThrowInputError("--lora-scaled takes an adapter and a scale");
      joined.push_back(StrCat("--lora-scaled=", argv[i + 2], ":", argv[i + 1]));
      i += 2;
    } else {
      joined.push_back(argv[i]);
    }
  }
  std::vector<char*> args;
  for (std::string& a : joined) args.push_back(a.data());
  *out = options.parse(static_cast<int>(args.size()), args.data());
  if (out->count("help")) {
    std::cout << options.help() << std::endl;
    return false;
  }
  if (!out->unmatched().empty()) {
    ThrowInputError("unexpected argument '", out->unmatched().front(), "'");
  }
  return true;
}

std::string Require(const cxxopts::ParseResult& args, const std::string& name) {
  if (!args.count(name)) ThrowInputError("missing required option --", name);
  return args[name].as<std::string>();
}

std::vector<int> ParseIntList(const std::string& text, const std::string& flag) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno != 0 || v < 0 || v > 1000000) {
      ThrowInputError(flag, ": '", text, "' is not a list of non-negative integers");
    }
    out.push_back(static_cast<int>(v));
  }
  if (out.empty()) ThrowInputError(flag, ": empty list");
  return out;
}

std::string ReadTextFile(const std::string& path) {
  return ReadWholeFile(path, "text file");
}

uint64_t PeakRssBytes() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<uint64_t>(usage.ru_maxrss) * 1024;  // Linux: KiB
}

ProgressBar::ProgressBar(std::string label, bool forced)
    : label_(std::move(label)),
      terminal_(isatty(STDERR_FILENO) == 1),
      forced_(forced),
      start_(NowSeconds()) {}

ProgressBar::~ProgressBar() {
  if (drawn_ && terminal_) std::fputc('\n', stderr);
}

void ProgressBar::Update(uint64_t done, uint64_t total) {
  if (total == 0) return;
  if (!forced_ && !(terminal_ && total > kProgressMinBytes)) return;
  const double now = NowSeconds();
  const double frac = static_cast<double>(std::min(done, total)) / static_cast<double>(total);
  const int decile = static_cast<int>(frac * 10.0);
  if (terminal_) {
    if (done < total && now - last_draw_ < 0.1) return;
  } else if (decile == last_decile_) {
    return;  // a log gets a line per 10%, not a flood
  }
  last_draw_ = now;
  last_decile_ = decile;
  const double elapsed = now - start_;
  const double mb_per_s = elapsed > 0 ? static_cast<double>(done) / 1e6 / elapsed : 0.0;
  const int width = 40;
  std::string bar(static_cast<size_t>(frac * width), '#');
  bar.resize(width, '.');
  std::fprintf(stderr, "%s%s [%s] %5.1f%% %s / %s, %.0f MB/s%s", terminal_ ? "\r" : "",
               label_.c_str(), bar.c_str(), frac * 100.0, FormatByteSize(done, 2).c_str(),
               FormatByteSize(total, 2).c_str(), mb_per_s, terminal_ ? "" : "\n");
  std::fflush(stderr);
  drawn_ = true;
}

double RealOption(const cxxopts::ParseResult& args, const std::string& name) {
  const std::string text = args[name].as<std::string>();
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  const bool whole = !text.empty() && end == text.c_str() + text.size();
  if (!whole || errno == ERANGE || !std::isfinite(value)) {
    ThrowInputError("--", name, ": '", text, "' is not a number");
  }
  return value;
}

}  // namespace sparrow::cli
