// sparrow place: Ripple's neuron placement for a bundle (src/placement.h).
// Runs the model over a text with the pruning policy it will run with,
// logs which units every token chose in every group, orders each group's
// records so that units chosen together sit together, and writes the
// placed copy. Prints, per kind of group, how many runs of adjacent records
// a token's units make before and after: the reads a token needs from an
// empty cache.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "base/error.h"
#include "formats/bundle.h"
#include "src/cli/commands.h"
#include "src/cli/common.h"
#include "src/engine.h"
#include "src/model/model.h"
#include "src/perplexity.h"
#include "src/placement.h"

namespace sparrow::cli {
namespace {

// Mean runs per token over the groups of one kind, before and after.
struct KindRuns {
  double before = 0, after = 0;
  size_t groups = 0;
};

}  // namespace

int PlaceCommand(int argc, char** argv) {
  cxxopts::Options options(
      "sparrow place",
      "Writes a copy of a bundle whose FFN records are placed so that units the tokens of a "
      "text choose together sit next to each other on disk (Ripple's co-activation placement): "
      "a token's misses then come in fewer, larger reads. Give the --sparsity and "
      "--mlp-density you will run with.");
  options.add_options()
      ("m,model", "Bundle to place", cxxopts::value<std::string>())
      ("f,file", "Text whose tokens' choices are logged", cxxopts::value<std::string>())
      ("o,output", "Placed bundle to write", cxxopts::value<std::string>())
      ("force", "Overwrite the output if it exists")
      ("c,ctx-size", "Tokens per chunk of the text", cxxopts::value<int>()->default_value("256"))
      ("chunks", "Chunks of the text to log (0: the whole text)",
       cxxopts::value<int>()->default_value("4"))
      ("neighbours", "Heaviest co-activation edges kept per unit for the greedy path",
       cxxopts::value<int>()->default_value("16"));
  AddEngineOptions(options);
  AddModelOptions(options);
  cxxopts::ParseResult args;
  if (!Parse(options, argc, argv, &args)) return 0;
  ApplyEngineOptions(args);
  const std::string model_path = Require(args, "model");
  const std::string text_path = Require(args, "file");
  const std::string out_path = Require(args, "output");
  const int ctx = args["ctx-size"].as<int>();
  const int chunks = args["chunks"].as<int>();
  const int neighbours = args["neighbours"].as<int>();
  if (ctx < 4) ThrowInputError("-c must be at least 4");
  if (chunks < 0) ThrowInputError("--chunks must be 0 or more");
  if (neighbours < 1 || neighbours > 1024) ThrowInputError("--neighbours must be between 1 and 1024");
  if (!bundle::Bundle::LooksLikeBundle(model_path)) {
    ThrowInputError(model_path, ": place needs a bundle (sparrow convert)");
  }
  CheckPlacedOutput(model_path, out_path, args.count("force") > 0);
  EngineOptions engine = ParseModelOptions(args, model_path);
  if (engine.sparsity.kind == SparsityKind::kDense) {
    std::string pruning;
    for (const PolicyInfo& p : Policies()) {
      if (p.kind != SparsityKind::kDense) pruning += StrCat(pruning.empty() ? "" : ", ", p.name);
    }
    ThrowInputError("place needs the pruning policy you will run with (--sparsity ", pruning,
                    "): dense uses every unit, in any order");
  }
  if (!args.count("mlp-density")) ThrowInputError("missing required option --mlp-density");
  const bundle::Bundle b = bundle::Bundle::Open(model_path);
  engine.n_ctx = static_cast<size_t>(ctx);
  engine.logits_rows = static_cast<size_t>(ctx);
  const std::string text = ReadTextFile(text_path);

  const LoadedModel loaded = OpenModel(model_path, engine);
  if (loaded.streamed == nullptr) throw std::logic_error("place: the bundle did not stream");
  std::vector<ChoiceLog> logs;
  for (const bundle::UnitGroup& g : b.groups()) logs.emplace_back(g.n_units);
  std::vector<uint32_t> every;
  loaded.streamed->ObserveChoices([&](size_t group, const TokenMasks& masks, size_t n) {
    ChoiceLog& log = logs[group];
    if (masks.all()) {  // a group the policy does not prune: every unit, every token
      every.resize(log.n_units());
      for (uint32_t u = 0; u < log.n_units(); ++u) every[u] = u;
      for (size_t t = 0; t < n; ++t) log.AddToken(every.data(), every.size());
      return;
    }
    for (size_t t = 0; t < n; ++t) log.AddToken(masks.token(t), masks.k());
  });
  const Model& model = *loaded.model;
  const std::vector<int32_t> tokens = model.tokenizer().Encode(text, model.tokenizer().add_bos());
  if (tokens.size() < static_cast<size_t>(ctx)) {
    ThrowInputError(text_path, ": the text has ", tokens.size(), " tokens, fewer than one chunk of ",
                    ctx, " (-c)");
  }
  const PerplexityResult r = ComputePerplexity(
      loaded, tokens, static_cast<size_t>(ctx), static_cast<size_t>(chunks),
      [&](size_t i, double ppl) {
        std::fprintf(stderr, "\rplace: logged chunk %zu, perplexity %.4f", i + 1, ppl);
        std::fflush(stderr);
      });
  std::fprintf(stderr, "\n");

  std::vector<std::vector<uint32_t>> placement;
  std::map<bundle::RecordKind, KindRuns> runs;
  for (size_t i = 0; i < b.groups().size(); ++i) {
    const bundle::UnitGroup& g = b.groups()[i];
    placement.push_back(PlaceByCoactivation(logs[i], static_cast<size_t>(neighbours)));
    KindRuns& k = runs[g.kind];
    k.before += MeanRunsPerToken(logs[i], g.slot_of_unit);
    k.after += MeanRunsPerToken(logs[i], placement.back());
    ++k.groups;
    std::fprintf(stderr, "\rplace: placed group %zu of %zu", i + 1, b.groups().size());
    std::fflush(stderr);
  }
  std::fprintf(stderr, "\n");
  const size_t logged = logs.empty() ? 0 : logs[0].tokens();
  std::printf("%zu tokens logged (%zu chunks of %d), perplexity %.4f with %s at density %g\n",
              logged, r.chunks, ctx, r.ppl, GetPolicyInfo(engine.sparsity.kind).name,
              engine.sparsity.density);
  std::printf("| group kind | groups | runs of adjacent records per token, before | after | "
              "change |\n|---|---:|---:|---:|---:|\n");
  for (const auto& [kind, k] : runs) {
    const double before = k.before / static_cast<double>(k.groups);
    const double after = k.after / static_cast<double>(k.groups);
    std::printf("| %s | %zu | %.1f | %.1f | %+.1f%% |\n",
                std::string(bundle::RecordKindName(kind)).c_str(), k.groups, before, after,
                before > 0 ? 100.0 * (after / before - 1.0) : 0.0);
  }

  const std::string text_name = text_path.substr(text_path.find_last_of('/') + 1);
  const std::string description = StrCat(
      "co-activation of ", GetPolicyInfo(engine.sparsity.kind).name, " at density ",
      engine.sparsity.density, " over ", logged, " tokens of ", text_name, ", ", neighbours,
      " neighbours per unit");
  WritePlacedBundle(b, placement, description, out_path, args.count("force") > 0,
                    [](uint64_t done, uint64_t total) {
                      std::fprintf(stderr, "\rplace: writing %3.0f%%",
                                   100.0 * static_cast<double>(done) / static_cast<double>(total));
                      std::fflush(stderr);
                    });
  std::fprintf(stderr, "\nplace: wrote %s\n", out_path.c_str());
  return 0;
}

}  // namespace sparrow::cli
