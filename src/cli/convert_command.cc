// sparrow convert: a GGUF model to a Sparrow bundle for streaming its
// feed-forward weights from flash.
#include <cstdio>
#include <optional>

#include "base/byte_size.h"
#include "base/error.h"
#include "formats/bundle.h"
#include "formats/gguf.h"
#include "src/cli/commands.h"
#include "src/cli/common.h"
#include "src/convert.h"
#include "base/threads.h"

namespace sparrow::cli {

int ConvertCommand(int argc, char** argv) {
  cxxopts::Options options(
      "sparrow convert",
      "Convert a GGUF model into a Sparrow bundle: attention, embeddings and output stay in "
      "their source types (loaded into memory), the feed-forward weights become records "
      "streamed from disk. With --lora and an output ending in .gguf, writes the base with "
      "the adapters fused instead (a merged GGUF, like llama.cpp's export-lora).");
  options.add_options()
      ("m,model", "Input model (GGUF)", cxxopts::value<std::string>())
      ("o,output", "Output bundle (.sparrow), or merged GGUF (.gguf, with --lora)",
       cxxopts::value<std::string>())
      ("type", "Record type: " + TensorTypeNames(TypeAbility::kRecord) +
       " (default: the source's FFN type when it is one of these, q4_0s for q4_0, otherwise "
       "q8_0; q4_0s is q4_0 with each row's block scales stored together, faster to compute); "
       "for a .gguf output, the type 2-D weights are re-quantized to (any synth type)",
       cxxopts::value<std::string>())
      ("layout", "Record layout: neuron ([gate row | up row | down column] per FFN neuron) or "
       "dip (per input dim [up column | gate column], per neuron [down column]: for --sparsity "
       "dip, dip-ca, glu) or split (per neuron [up row], [gate row] and [down column] apart: "
       "for --sparsity up, gate)",
       cxxopts::value<std::string>()->default_value("neuron"))
      ("progress", "Show progress on stderr even when it is not a terminal or the job is small")
      ("force", "Overwrite the output file if it exists")
      ("t,threads", "Worker threads (default: all cores)", cxxopts::value<int>()->default_value("0"));
  AddLoraOptions(options);
  cxxopts::ParseResult args;
  if (!Parse(options, argc, argv, &args)) return 0;
  const std::string input = Require(args, "model");
  const std::string output = Require(args, "output");

  const std::vector<LoraSpec> lora = ParseLoraOptions(args);
  const bool to_gguf = output.size() >= 5 && output.substr(output.size() - 5) == ".gguf";
  if (to_gguf) {
    std::optional<TensorType> type;
    if (args.count("type")) {
      const std::string name = args["type"].as<std::string>();
      type = ParseTensorType(name);
      if (!type) ThrowInputError("convert: unknown --type '", name, "'");
      if (FindGgufTensorType(static_cast<uint32_t>(*type)) == nullptr) {
        ThrowInputError("convert: ", name, " is a bundle record type; a .gguf output takes "
                        "GGUF types");
      }
    }
    if (lora.empty() && !type) {
      ThrowInputError("convert: a .gguf output needs --lora (a merged model) or --type (a "
                      "re-quantized one); a bundle needs another name, e.g. .sparrow");
    }
    if (args.count("layout")) ThrowInputError("convert: --layout applies to bundles, not to a .gguf output");
    const int threads = args["threads"].as<int>();
    if (threads < 0) ThrowInputError("-t must be positive");
    SetThreadCount(threads);
    const GgufWriteSummary summary = WriteGguf(input, output, args.count("force") > 0, lora, type);
    std::string types;
    if (type) {
      types = StrCat(", ", summary.requantized, " weight(s) re-quantized to ", TensorTypeName(*type));
      if (summary.kept > 0) {
        types += StrCat(" (", summary.kept, " kept their type: rows of ", summary.kept_row_elems,
                        " elements are not whole blocks of ", GetTensorTypeInfo(*type).block_elems, ")");
      }
    }
    std::fprintf(stderr, "wrote %s: %zu adapter(s) fused%s\n", output.c_str(), lora.size(),
                 types.c_str());
    return 0;
  }
  ConvertOptions convert;
  convert.lora = lora;
  if (args.count("type")) {
    const std::string name = args["type"].as<std::string>();
    const std::optional<TensorType> type = ParseTensorType(name);
    if (!type || !bundle::IsRecordType(*type)) {
      ThrowInputError("convert: --type must be one of ", TensorTypeNames(TypeAbility::kRecord),
                      " (got '", name, "')");
    }
    convert.record_type = *type;
  }
  const std::string layout = args["layout"].as<std::string>();
  const std::optional<bundle::Layout> parsed_layout = bundle::ParseLayout(layout);
  if (!parsed_layout) ThrowInputError("convert: --layout must be neuron, dip or split (got '", layout, "')");
  convert.layout = *parsed_layout;
  convert.force = args.count("force") > 0;
  const int threads = args["threads"].as<int>();
  if (threads < 0) ThrowInputError("-t must be positive");
  SetThreadCount(threads);

  {
    ProgressBar bar("convert", args.count("progress") > 0);
    ConvertGgufToBundle(input, output, convert,
                        [&](uint64_t done, uint64_t total) { bar.Update(done, total); });
  }
  const bundle::Bundle result = bundle::Bundle::Open(output);
  std::fprintf(stderr, "wrote %s: %s layout, %s records, %s (resident %s)\n", output.c_str(),
               std::string(bundle::LayoutName(result.layout())).c_str(),
               std::string(TensorTypeName(result.record_type())).c_str(),
               FormatByteSize(result.file_size(), 2).c_str(),
               FormatByteSize(result.resident_bytes(), 2).c_str());
  return 0;
}

}  // namespace sparrow::cli
