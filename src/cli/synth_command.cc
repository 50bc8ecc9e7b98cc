// sparrow synth: a llama GGUF with random weights, for benchmarks.
#include <sys/stat.h>

#include <cstdio>

#include "base/error.h"
#include "src/cli/commands.h"
#include "src/cli/common.h"
#include "src/synth.h"
#include "base/threads.h"

namespace sparrow::cli {

int SynthCommand(int argc, char** argv) {
  cxxopts::Options options("sparrow synth",
                           "Write a llama-architecture GGUF with random weights and a small "
                           "SentencePiece tokenizer (for benchmarks; the text it generates is noise).");
  options.add_options()
      ("o,output", "Output GGUF file", cxxopts::value<std::string>())
      ("dim", "Embedding size", cxxopts::value<uint32_t>())
      ("ffn", "Feed-forward size", cxxopts::value<uint32_t>())
      ("layers", "Number of layers", cxxopts::value<uint32_t>())
      ("heads", "Attention heads", cxxopts::value<uint32_t>())
      ("kv-heads", "Key/value heads (default: --heads)", cxxopts::value<uint32_t>())
      ("vocab", "Vocabulary size (at least 354)", cxxopts::value<uint32_t>())
      ("type", "Weight type: " + TensorTypeNames(TypeAbility::kGemv, /*gguf_only=*/true), cxxopts::value<std::string>())
      ("ctx", "Context length recorded in the metadata", cxxopts::value<uint32_t>()->default_value("4096"))
      ("seed", "Random seed", cxxopts::value<uint64_t>()->default_value("1"))
      ("hot-fraction", "Fraction F in (0, 1] of residual channels and FFN units made hot, like "
                       "a trained model's outliers (needs --hot-gain)", cxxopts::value<float>())
      ("hot-gain", "Strength G >= 1 of the hot channels and units relative to the strongest "
                   "cold one; the rest decay as a power law (needs --hot-fraction)",
       cxxopts::value<float>())
      ("progress", "Show progress on stderr even when it is not a terminal or the job is small")
      ("force", "Overwrite the output file if it exists")
      ("t,threads", "Worker threads (default: all cores)", cxxopts::value<int>()->default_value("0"));
  cxxopts::ParseResult args;
  if (!Parse(options, argc, argv, &args)) return 0;
  SynthSpec spec;
  const std::string output = Require(args, "output");
  for (const char* name : {"dim", "ffn", "layers", "heads", "vocab", "type"}) {
    if (!args.count(name)) ThrowInputError("missing required option --", name);
  }
  spec.dim = args["dim"].as<uint32_t>();
  spec.ffn = args["ffn"].as<uint32_t>();
  spec.layers = args["layers"].as<uint32_t>();
  spec.heads = args["heads"].as<uint32_t>();
  spec.kv_heads = args.count("kv-heads") ? args["kv-heads"].as<uint32_t>() : spec.heads;
  spec.vocab = args["vocab"].as<uint32_t>();
  spec.context_length = args["ctx"].as<uint32_t>();
  spec.seed = args["seed"].as<uint64_t>();
  // Range checks and "one without the other" are ValidateSynthSpec's.
  if (args.count("hot-fraction")) spec.hot_fraction = args["hot-fraction"].as<float>();
  if (args.count("hot-gain")) spec.hot_gain = args["hot-gain"].as<float>();
  const std::string type = args["type"].as<std::string>();
  const std::optional<TensorType> parsed = ParseTensorType(type);
  if (!parsed) ThrowInputError("synth: unknown --type '", type, "'");
  spec.type = *parsed;
  ValidateSynthSpec(spec);
  struct stat st {};
  if (!args.count("force") && ::stat(output.c_str(), &st) == 0) {
    ThrowInputError("synth: '", output, "' exists (use --force to overwrite)");
  }
  const int threads = args["threads"].as<int>();
  if (threads < 0) ThrowInputError("-t must be positive");
  SetThreadCount(threads);

  {
    ProgressBar bar("synth", args.count("progress") > 0);
    WriteSyntheticModel(spec, output,
                        [&](uint64_t done, uint64_t total) { bar.Update(done, total); });
  }
  std::fprintf(stderr, "wrote %s\n", output.c_str());
  return 0;
}

int SynthLoraCommand(int argc, char** argv) {
  cxxopts::Options options("sparrow synth-lora",
                           "Write a random LoRA adapter (llama.cpp's GGUF adapter format) for a "
                           "base model: every attention and feed-forward matrix of every layer, "
                           "for testing --lora on shapes and types of your own.");
  options.add_options()
      ("m,model", "Base model (GGUF)", cxxopts::value<std::string>())
      ("o,output", "Output adapter (GGUF)", cxxopts::value<std::string>())
      ("rank", "LoRA rank r", cxxopts::value<uint32_t>()->default_value("4"))
      ("alpha", "adapter.lora.alpha (the update is scaled by alpha / r)",
       cxxopts::value<std::string>()->default_value("8"))
      ("type", "Type of lora_a and lora_b: f32, f16, bf16 or q8_0 (q8_0 needs a rank and "
       "columns that are multiples of 32)", cxxopts::value<std::string>()->default_value("f32"))
      ("sigma", "Standard deviation of the random values", cxxopts::value<std::string>()->default_value("0.02"))
      ("seed", "Random seed", cxxopts::value<uint64_t>()->default_value("1"))
      ("force", "Overwrite the output file if it exists");
  cxxopts::ParseResult args;
  if (!Parse(options, argc, argv, &args)) return 0;
  const std::string model = Require(args, "model");
  const std::string output = Require(args, "output");
  SynthLoraSpec spec;
  spec.rank = args["rank"].as<uint32_t>();
  spec.alpha = static_cast<float>(RealOption(args, "alpha"));
  spec.sigma = static_cast<float>(RealOption(args, "sigma"));
  spec.seed = args["seed"].as<uint64_t>();
  const std::optional<TensorType> type = ParseTensorType(args["type"].as<std::string>());
  if (!type) ThrowInputError("synth-lora: unknown --type '", args["type"].as<std::string>(), "'");
  spec.type = *type;
  struct stat st {};
  if (!args.count("force") && ::stat(output.c_str(), &st) == 0) {
    ThrowInputError("synth-lora: '", output, "' exists (use --force to overwrite)");
  }
  WriteSyntheticLora(model, spec, output);
  std::fprintf(stderr, "wrote %s\n", output.c_str());
  return 0;
}

}  // namespace sparrow::cli
