// sparrow calibrate: for each --mlp-density D, the split of D between the
// input columns (up and gate, fraction f_in per token) and the down columns
// (f_out = 3 D - 2 f_in) that gives dip/dip-ca the lowest perplexity on a
// text (the DIP paper's Appendix B.1 calibration), stored in the bundle
// (formats/calibration.h) so that runs at that density use it by default.
//
// The search, per density: the default split f_in = D, then a grid over the
// feasible f_in (f_in and f_out both in (0, 1]), then rounds of pattern
// search around the best point, each halving the step. Candidates are
// rounded to 1e-4 so that the stored value, printed, is the exact value to
// pass back as --input-fraction. Splits that keep the same number of units
// per token as one already measured are not measured again.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <utility>

#include "base/error.h"
#include "formats/bundle.h"
#include "formats/calibration.h"
#include "src/cli/commands.h"
#include "src/cli/common.h"
#include "src/engine.h"
#include "src/model/model.h"
#include "src/perplexity.h"

namespace sparrow::cli {
namespace {

using bundle::CalibrationEntry;

constexpr double kQuantum = 1e-4;  // resolution of the stored input fractions

std::vector<double> ParseDensities(const std::string& text) {
  std::vector<double> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || end != item.c_str() + item.size() || !(v > 0.0 && v < 1.0)) {
      ThrowInputError("--mlp-density: '", item, "' is not a density in (0, 1) (at 1 every unit "
                      "is kept: there is no split to calibrate)");
    }
    out.push_back(v);
  }
  if (out.empty()) ThrowInputError("--mlp-density: no densities in '", text, "'");
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// The last path component, without control characters (it is stored and
// printed as one line), cut to what the format allows.
std::string TextName(const std::string& path) {
  std::string name = path.substr(path.find_last_of('/') + 1);
  for (char& c : name) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  name.resize(std::min<size_t>(name.size(), bundle::kMaxCalibrationNameBytes));
  return name;
}

// Perplexity of the text at given splits. The model is reopened for each:
// the policy is fixed when the streamed FFN is built, and a fresh one also
// gives dip-ca the same empty caches every time.
class Evaluator {
 public:
  Evaluator(std::string model_path, const EngineOptions& base, const bundle::Bundle& b,
            std::string text, size_t ctx, size_t max_chunks, size_t planned)
      : model_path_(std::move(model_path)), base_(base), d_model_(b.d_model()), d_ff_(b.d_ff()),
        text_(std::move(text)), ctx_(ctx), max_chunks_(max_chunks), planned_(planned) {}

  // The perplexity at input fraction f_in (f_in = density: the default
  // split), with one progress line on stderr.
  double Perplexity(double density, double f_in) {
    SparsityOptions sparsity = base_.sparsity;
    sparsity.density = density;
    // Always explicit, so that a calibration already in the bundle is not
    // applied instead.
    sparsity.input_fraction = f_in;
    sparsity.split_source = f_in == density ? SplitSource::kDefault : SplitSource::kExplicit;
    const UnitPolicy policy(sparsity, bundle::Layout::kDip);
    const std::pair<size_t, size_t> units = {
        policy.UnitsPerToken(bundle::RecordKind::kDipInput, d_model_),
        policy.UnitsPerToken(bundle::RecordKind::kDipOutput, d_ff_)};
    ++done_;
    const auto key = std::make_pair(density, units);
    if (const auto seen = measured_.find(key); seen != measured_.end()) {
      PrintProgress(density, f_in);
      std::fprintf(stderr, "ppl %.4f (the same units per token as input %.4g)\n",
                   seen->second.second, seen->second.first);
      return seen->second.second;
    }
    EngineOptions engine = base_;
    engine.sparsity = sparsity;
    const LoadedModel loaded = OpenModel(model_path_, engine);
    const Model& model = *loaded.model;
    if (tokens_.empty()) {
      tokens_ = model.tokenizer().Encode(text_, model.tokenizer().add_bos());
      // Checked before the progress line starts, so the error is a line of
      // its own (ComputePerplexity would say the same, after the prefix).
      if (tokens_.size() < ctx_) {
        ThrowInputError("the text has ", tokens_.size(), " tokens; calibrate needs at least ",
                        ctx_, " (one chunk of -c tokens)");
      }
    }
    PrintProgress(density, f_in);
    std::fflush(stderr);
    const PerplexityResult r = ComputePerplexity(loaded, tokens_, ctx_, max_chunks_);
    chunks_ = r.chunks;
    std::fprintf(stderr, "ppl %.4f\n", r.ppl);
    measured_[key] = {f_in, r.ppl};
    return r.ppl;
  }

  size_t tokens() const { return tokens_.size(); }
  size_t chunks() const { return chunks_; }

 private:
  // The start of a measurement's progress line; its figure ends it.
  void PrintProgress(double density, double f_in) const {
    std::fprintf(stderr, "calibrate [%zu/%zu] density %g input %.4g: ", done_, planned_, density,
                 f_in);
  }

  std::string model_path_;
  EngineOptions base_;
  uint32_t d_model_, d_ff_;
  std::string text_;
  size_t ctx_, max_chunks_, planned_;
  size_t done_ = 0;
  std::vector<int32_t> tokens_;
  size_t chunks_ = 0;
  // (density, (input units, down units)) -> (the f_in measured, perplexity)
  std::map<std::pair<double, std::pair<size_t, size_t>>, std::pair<double, double>> measured_;
};

// The measured points of one density, and the best one so far. The
// default split comes first, so it wins ties.
struct SplitSearch {
  double density;
  double default_ppl = NAN;
  double best_input = NAN;
  double best_ppl = NAN;

  void Try(Evaluator& eval, double f_in) {
    const double ppl = eval.Perplexity(density, f_in);
    if (!(ppl >= best_ppl)) {  // also takes the first point (best_ppl NaN)
      best_ppl = ppl;
      best_input = f_in;
    }
  }
};

// f_in rounded to the stored resolution; nullopt when that is not a
// feasible split of `density`.
std::optional<double> Candidate(double density, double f_in) {
  const double q = std::round(f_in / kQuantum) * kQuantum;
  if (!bundle::IsFeasibleSplit(density, q)) return std::nullopt;
  return q;
}

// The range of f_in the grid covers: where f_in and f_out are both in
// (0, 1], an end that would leave nothing (f_in = 0 or f_out = 0) moved in
// by half a grid step.
std::pair<double, double> SearchRange(double density, int grid) {
  double lo = std::max(0.0, (3.0 * density - 1.0) / 2.0);
  double hi = std::min(1.0, 1.5 * density);
  const double half_step = (hi - lo) / (2.0 * (grid - 1));
  if (lo <= 0.0) lo += half_step;
  if (hi >= 1.5 * density) hi -= half_step;
  return {lo, hi};
}

CalibrationEntry Calibrate(Evaluator& eval, double density, int grid, int refine) {
  SplitSearch s{density};
  s.Try(eval, density);
  s.default_ppl = s.best_ppl;
  const auto [lo, hi] = SearchRange(density, grid);
  double step = (hi - lo) / (grid - 1);
  for (int i = 0; i < grid; ++i) {
    if (const auto f = Candidate(density, lo + step * i)) s.Try(eval, *f);
  }
  for (int round = 0; round < refine; ++round) {
    step /= 2.0;
    const double center = s.best_input;
    for (double f_in : {center - step, center + step}) {
      if (f_in < lo - 1e-12 || f_in > hi + 1e-12) continue;
      if (const auto f = Candidate(density, f_in)) s.Try(eval, *f);
    }
  }
  CalibrationEntry e;
  e.density = density;
  e.input_fraction = s.best_input;
  e.perplexity = s.best_ppl;
  e.default_perplexity = s.default_ppl;
  return e;
}

void PrintTable(const std::vector<CalibrationEntry>& entries) {
  std::printf("| density | default split (input = down) | perplexity | calibrated input | "
              "calibrated down | perplexity | change |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const CalibrationEntry& e : entries) {
    std::printf("| %g | %g | %.4f | %.4g | %.4g | %.4f | %+.2f%% |\n", e.density, e.density,
                e.default_perplexity, e.input_fraction, e.output_fraction(), e.perplexity,
                100.0 * (e.perplexity / e.default_perplexity - 1.0));
  }
}

}  // namespace

int CalibrateCommand(int argc, char** argv) {
  cxxopts::Options options(
      "sparrow calibrate",
      "Finds, for each --mlp-density, the split between input columns (up/gate) and down "
      "columns that gives dip and dip-ca the lowest perplexity on a text, and stores it in the "
      "bundle: runs at that density then use it unless --input-fraction is given. Here "
      "--mlp-density takes a comma-separated list and --sparsity is dip (the default) or dip-ca.");
  options.add_options()
      ("m,model", "Bundle in the dip layout (sparrow convert --layout dip); rewritten with "
       "the calibration", cxxopts::value<std::string>())
      ("f,file", "Text to measure perplexity on", cxxopts::value<std::string>())
      ("c,ctx-size", "Tokens per perplexity chunk", cxxopts::value<int>()->default_value("256"))
      ("chunks", "Perplexity chunks per measurement (0: the whole text)",
       cxxopts::value<int>()->default_value("8"))
      ("grid", "Splits measured evenly over the feasible range", cxxopts::value<int>()->default_value("7"))
      ("refine", "Rounds around the best split, each halving the step (2 measurements each)",
       cxxopts::value<int>()->default_value("2"));
  AddEngineOptions(options);
  AddModelOptions(options);
  cxxopts::ParseResult args;
  if (!Parse(options, argc, argv, &args)) return 0;
  ApplyEngineOptions(args);
  const std::string model_path = Require(args, "model");
  const std::string text_path = Require(args, "file");
  const int ctx = args["ctx-size"].as<int>();
  const int chunks = args["chunks"].as<int>();
  const int grid = args["grid"].as<int>();
  const int refine = args["refine"].as<int>();
  if (ctx < 4) ThrowInputError("-c must be at least 4");
  if (chunks < 0) ThrowInputError("--chunks must be 0 or more");
  if (grid < 3 || grid > 64) ThrowInputError("--grid must be between 3 and 64");
  if (refine < 0 || refine > 16) ThrowInputError("--refine must be between 0 and 16");
  if (!args.count("mlp-density")) ThrowInputError("missing required option --mlp-density");
  if (args.count("input-fraction")) {
    ThrowInputError("calibrate searches the input fraction itself: leave out --input-fraction");
  }
  const std::vector<double> densities = ParseDensities(args["mlp-density"].as<std::string>());

  EngineOptions base = ParseStreamOptions(args, model_path);
  base.sparsity.kind =
      args.count("sparsity") ? ParseSparsityKind(args["sparsity"].as<std::string>()) : SparsityKind::kDip;
  if (!HasInputSplit(base.sparsity.kind)) {
    ThrowInputError("calibrate searches the split of --sparsity dip or dip-ca, not ",
                    GetPolicyInfo(base.sparsity.kind).name);
  }
  base.sparsity.gamma = RealOption(args, "gamma");
  base.n_ctx = static_cast<size_t>(ctx);
  base.logits_rows = static_cast<size_t>(ctx);
  if (!bundle::Bundle::LooksLikeBundle(model_path)) {
    ThrowInputError(model_path, ": calibrate needs a bundle in the dip layout (sparrow convert "
                    "--layout dip)");
  }
  const bundle::Bundle b = bundle::Bundle::Open(model_path);
  if (b.layout() != bundle::Layout::kDip) {
    ThrowInputError(model_path, ": calibrate needs a bundle in the dip layout (sparrow convert "
                    "--layout dip); this one is ", bundle::LayoutName(b.layout()));
  }

  bundle::CheckCalibrationWritable(b);

  const size_t planned = densities.size() * static_cast<size_t>(1 + grid + 2 * refine);
  Evaluator eval(model_path, base, b, ReadTextFile(text_path), static_cast<size_t>(ctx),
                 static_cast<size_t>(chunks), planned);
  std::vector<CalibrationEntry> entries;
  for (double density : densities) {
    CalibrationEntry e = Calibrate(eval, density, grid, refine);
    e.policy = base.sparsity.kind == SparsityKind::kDipCa ? bundle::CalibrationPolicy::kDipCa
                                                          : bundle::CalibrationPolicy::kDip;
    e.ctx = static_cast<uint32_t>(ctx);
    e.chunks = static_cast<uint32_t>(eval.chunks());
    e.text_tokens = eval.tokens();
    e.text_name = TextName(text_path);
    entries.push_back(std::move(e));
  }
  PrintTable(entries);

  const bundle::Calibration merged = bundle::MergeCalibration(b.calibration(), entries);
  bundle::WriteCalibration(b, merged);
  std::fprintf(stderr, "calibrate: stored %zu densit%s in %s (%zu in all)\n", entries.size(),
               entries.size() == 1 ? "y" : "ies", model_path.c_str(), merged.entries.size());
  return 0;
}

}  // namespace sparrow::cli
