// sparrow tradeoff: the accuracy / speed sweep of the DIP paper (Figure 8,
// Table 2) on the user's own bundle: for each sparsity policy and density,
// perplexity on a text, and decoding speed, flash bytes per token, cache hit
// rate and top-K overlap of consecutive tokens under the same DRAM budget.
// Writes PREFIX.csv and two SVG plots, and a markdown table on stdout.
#include <cmath>
#include <cstdio>
#include <sstream>

#include "base/byte_size.h"
#include "base/error.h"
#include "base/output_file.h"
#include "base/timer.h"
#include "src/cli/commands.h"
#include "src/cli/common.h"
#include "src/cli/tradeoff_report.h"
#include "src/engine.h"
#include "src/model/model.h"
#include "src/perplexity.h"
#include "src/runtime/stats.h"

namespace sparrow::cli {
namespace {

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

double ParseDensity(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !(v > 0.0 && v <= 1.0)) {
    ThrowInputError("--densities: '", text, "' is not a density in (0, 1]");
  }
  return v;
}

// Decode-token figures of one run: tok/s over the timed evaluations, and
// the streamed FFN's per-token means.
struct DecodeFigures {
  double tokens_per_second = NAN;
  double needed_bytes_per_token = NAN;
  double bytes_per_token = NAN;
  double hit_rate = NAN;
  double overlap = NAN;
};

DecodeFigures Decode(const LoadedModel& loaded, const std::vector<int32_t>& prompt, size_t n_gen) {
  const Model& model = *loaded.model;
  const std::unique_ptr<Session> owned_session = loaded.NewSession();
  Session& session = *owned_session;
  const float* logits = session.Eval(prompt.data(), prompt.size(), false);
  const size_t first_record = loaded.streamed->stats().per_token().size();
  double seconds = 0.0;
  size_t evals = 0;
  for (size_t i = 0; i < n_gen && session.n_past() < session.n_ctx(); ++i) {
    // Greedy: the same text for every policy at density 1.
    int32_t next = 0;
    for (uint32_t v = 1; v < model.config().n_vocab; ++v) {
      if (logits[v] > logits[next]) next = static_cast<int32_t>(v);
    }
    const double t0 = NowSeconds();
    logits = session.Eval(&next, 1, false);
    seconds += NowSeconds() - t0;
    ++evals;
  }
  TokenStats sum;
  sum.tokens = 0;
  const std::vector<TokenStats>& records = loaded.streamed->stats().per_token();
  for (size_t r = first_record; r < records.size(); ++r) sum.Add(records[r]);
  DecodeFigures f;
  if (evals > 0) f.tokens_per_second = evals / std::max(seconds, 1e-9);
  if (sum.tokens > 0) {
    f.bytes_per_token = static_cast<double>(sum.bytes_read) / sum.tokens;
    // Weight bytes the chosen units hold, cached or not.
    const std::vector<StreamStats::TraceGroup>& groups =
        loaded.streamed->stats().trace_header().groups;
    double needed = 0;
    for (size_t g = 0; g < sum.groups.size() && g < groups.size(); ++g) {
      needed += static_cast<double>(sum.groups[g].needed) * groups[g].record_bytes;
    }
    f.needed_bytes_per_token = needed / sum.tokens;
  }
  if (sum.units_needed > 0) f.hit_rate = static_cast<double>(sum.units_hit) / sum.units_needed;
  if (sum.overlap_units > 0) f.overlap = static_cast<double>(sum.overlap_kept) / sum.overlap_units;
  return f;
}


std::string Cell(double v, const char* format) {
  if (!std::isfinite(v)) return "-";
  char text[64];
  std::snprintf(text, sizeof(text), format, v);
  return text;
}

}  // namespace

int TradeoffCommand(int argc, char** argv) {
  cxxopts::Options options(
      "sparrow tradeoff",
      "Perplexity, decoding speed, flash bytes per token and cache hit rate for each sparsity "
      "policy and MLP density (the DIP paper's Figure 8 and Table 2), as CSV and SVG plots.");
  options.add_options()
      ("m,model", "Bundle(s): a policy runs on the first one in its layout (dip: dip, dip-ca, "
       "glu; split: up, gate)", cxxopts::value<std::vector<std::string>>())
      ("f,file", "Text for perplexity (its start is also the decoding prompt)",
       cxxopts::value<std::string>())
      ("policies", "Comma-separated policies", cxxopts::value<std::string>()->default_value(
           "dense,dip,dip-ca,glu,up,gate"))
      ("densities", "Comma-separated MLP densities",
       cxxopts::value<std::string>()->default_value("0.3,0.5,0.7,0.9,1.0"))
      ("c,ctx-size", "Tokens per perplexity chunk", cxxopts::value<int>()->default_value("256"))
      ("chunks", "Perplexity chunks per point (0: the whole text)",
       cxxopts::value<int>()->default_value("8"))
      ("prompt-tokens", "Prompt length before decoding", cxxopts::value<int>()->default_value("16"))
      ("n-gen", "Tokens decoded per point for speed, bytes and hit rate",
       cxxopts::value<int>()->default_value("32"))
      ("o,output", "Write PREFIX.csv, PREFIX-ppl-density.svg, PREFIX-ppl-speed.svg",
       cxxopts::value<std::string>());
  AddEngineOptions(options);
  AddModelOptions(options);
  cxxopts::ParseResult args;
  if (!Parse(options, argc, argv, &args)) return 0;
  ApplyEngineOptions(args);
  if (!args.count("model")) ThrowInputError("missing required option --model");
  const std::vector<std::string> models = args["model"].as<std::vector<std::string>>();
  if (args.count("output")) {
    // Checked now, not after a sweep of many minutes whose results would be lost.
    const std::string prefix = args["output"].as<std::string>();
    for (const char* suffix : {".csv", "-ppl-density.svg", "-ppl-speed.svg"}) {
      CheckWritable(prefix + suffix, "-o");
    }
  }
  const std::string text = ReadTextFile(Require(args, "file"));
  const int ctx = args["ctx-size"].as<int>();
  const int chunks = args["chunks"].as<int>();
  const int prompt_len = args["prompt-tokens"].as<int>();
  const int n_gen = args["n-gen"].as<int>();
  if (ctx < 4) ThrowInputError("-c must be at least 4");
  if (chunks < 0 || prompt_len < 1 || n_gen < 1) {
    ThrowInputError("--chunks must be >= 0, --prompt-tokens and --n-gen >= 1");
  }
  std::vector<SparsityKind> policies;
  for (const std::string& name : SplitList(args["policies"].as<std::string>())) {
    policies.push_back(ParseSparsityKind(name));
  }
  std::vector<double> densities;
  for (const std::string& d : SplitList(args["densities"].as<std::string>())) {
    densities.push_back(ParseDensity(d));
  }
  if (policies.empty() || densities.empty()) ThrowInputError("--policies and --densities need values");

  // Each model's layout, read once.
  std::vector<bundle::Layout> layouts;
  for (const std::string& path : models) {
    if (!bundle::Bundle::LooksLikeBundle(path)) {
      ThrowInputError(path, ": tradeoff needs bundles (sparrow convert --layout dip|split)");
    }
    layouts.push_back(bundle::Bundle::Open(path).layout());
  }

  // Every kind of model a figure may come from says so.
  {
    const bundle::Bundle first = bundle::Bundle::Open(models.front());
    const std::string model_name = first.header().GetString("general.name").value_or("");
    std::printf("model: %s (%s)\n\n", models.front().c_str(),
                model_name.rfind("sparrow-synth-", 0) == 0
                    ? ("synthetic, random weights: " + model_name).c_str()
                    : ("trained: " + (model_name.empty() ? std::string("unnamed") : model_name)).c_str());
  }

  EngineOptions base = ParseModelOptions(args, models.front());
  base.n_ctx = static_cast<size_t>(std::max(ctx, prompt_len + n_gen + 1));
  base.logits_rows = static_cast<size_t>(ctx);
  std::vector<TradeoffPoint> points;
  // Dense has one point, at density 1, whatever the list.
  size_t total = 0;
  for (SparsityKind kind : policies) {
    total += kind == SparsityKind::kDense ? 1 : densities.size();
  }
  for (SparsityKind kind : policies) {
    std::vector<double> list = densities;
    if (kind == SparsityKind::kDense) list = {1.0};
    for (double density : list) {
      TradeoffPoint p;
      p.policy = GetPolicyInfo(kind).name;
      p.density = density;
      p.dram_budget = base.dram_budget;
      if (kind == SparsityKind::kDipCa) p.gamma = base.sparsity.gamma;
      std::fprintf(stderr, "tradeoff [%zu/%zu] %s at density %g: ", points.size() + 1, total,
                   p.policy.c_str(), density);
      std::fflush(stderr);
      EngineOptions engine = base;
      engine.sparsity.kind = kind;
      engine.sparsity.density = density;
      // A policy runs on the first bundle in the layout it needs (any, for
      // dense); CheckSparsity then says whether it reaches the density.
      std::string model_path;
      try {
        const std::optional<bundle::Layout> needed = GetPolicyInfo(kind).layout;
        size_t chosen = 0;
        while (needed && chosen < models.size() && layouts[chosen] != *needed) ++chosen;
        CheckSparsity(engine.sparsity, layouts[std::min(chosen, models.size() - 1)]);
        model_path = models[chosen];
      } catch (const InputError& e) {
        p.reachable = false;
        p.note = e.what();
        std::fprintf(stderr, "skipped (%s)\n", e.what());
        points.push_back(p);
        continue;
      }
      {
        const LoadedModel loaded = OpenModel(model_path, engine);
        const Model& model = *loaded.model;
        const std::vector<int32_t> tokens =
            model.tokenizer().Encode(text, model.tokenizer().add_bos());
        if (tokens.size() < static_cast<size_t>(std::max(ctx, prompt_len))) {
          ThrowInputError("the text has ", tokens.size(), " tokens, fewer than one chunk of ", ctx);
        }
        const PerplexityResult r = ComputePerplexity(loaded, tokens, static_cast<size_t>(ctx),
                                                     static_cast<size_t>(chunks));
        p.ppl = r.ppl;
        p.ppl_stderr = r.ppl_stderr;
      }
      {
        // Decoding from fresh caches, as a user's run would start; with the
        // perplexity run's options (logits rows included), so that both get
        // the same unit caches from the budget.
        const LoadedModel loaded = OpenModel(model_path, engine);
        const Model& model = *loaded.model;
        std::vector<int32_t> prompt = model.tokenizer().Encode(text, model.tokenizer().add_bos());
        prompt.resize(std::min<size_t>(prompt.size(), static_cast<size_t>(prompt_len)));
        const DecodeFigures f = Decode(loaded, prompt, static_cast<size_t>(n_gen));
        p.tokens_per_second = f.tokens_per_second;
        p.needed_bytes_per_token = f.needed_bytes_per_token;
        p.cache_fraction = loaded.streamed->cache_fraction();
        p.flash_bytes_per_token = f.bytes_per_token;
        p.hit_rate = f.hit_rate;
        p.topk_overlap = f.overlap;
      }
      std::fprintf(
          stderr, "ppl %.4f, %.2f tok/s, %s/token read, hit rate %s, caches %s of the FFN\n", p.ppl,
          p.tokens_per_second,
          FormatByteSize(static_cast<uint64_t>(p.flash_bytes_per_token), 2).c_str(),
          Cell(100 * p.hit_rate, "%.1f%%").c_str(), Cell(100 * p.cache_fraction, "%.1f%%").c_str());
      points.push_back(p);
    }
  }

  auto bytes = [](double v) {
    return std::isfinite(v) ? FormatByteSize(static_cast<uint64_t>(v), 2) : std::string("-");
  };
  std::printf("| policy | density | perplexity | tok/s | FFN bytes used / token | flash read / token "
              "| hit rate | top-K overlap | caches / FFN |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const TradeoffPoint& p : points) {
    if (!p.reachable) {
      std::printf("| %s | %g | unreachable | - | - | - | - | - | - |\n", p.policy.c_str(), p.density);
      continue;
    }
    std::printf("| %s | %g | %s ± %s | %s | %s | %s | %s | %s | %s |\n", p.policy.c_str(),
                p.density, Cell(p.ppl, "%.4f").c_str(), Cell(p.ppl_stderr, "%.4f").c_str(),
                Cell(p.tokens_per_second, "%.2f").c_str(), bytes(p.needed_bytes_per_token).c_str(),
                bytes(p.flash_bytes_per_token).c_str(), Cell(100 * p.hit_rate, "%.1f%%").c_str(),
                Cell(100 * p.topk_overlap, "%.1f%%").c_str(),
                Cell(100 * p.cache_fraction, "%.1f%%").c_str());
  }
  if (args.count("output")) {
    const std::string prefix = args["output"].as<std::string>();
    const std::string title = models.front().substr(models.front().find_last_of('/') + 1);
    WriteFileAtomically(prefix + ".csv", TradeoffCsv(points), "the CSV");
    WriteFileAtomically(prefix + "-ppl-density.svg", PerplexityVsDensitySvg(points, title), "a plot");
    WriteFileAtomically(prefix + "-ppl-speed.svg", PerplexityVsSpeedSvg(points, title), "a plot");
    std::fprintf(stderr, "wrote %s.csv, %s-ppl-density.svg, %s-ppl-speed.svg\n", prefix.c_str(),
                 prefix.c_str(), prefix.c_str());
  }
  return 0;
}

}  // namespace sparrow::cli
