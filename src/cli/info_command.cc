// sparrow info: what a model file holds and what this machine will run it
// with.
#include <cinttypes>
#include <cstdio>
#include <map>

#include "base/error.h"
#include "formats/gguf.h"
#include "simd/targets.h"
#include "sparrow_config.h"
#include "src/cli/commands.h"
#include "src/cli/common.h"
#include "src/model/config.h"
#include "src/threads.h"

namespace sparrow::cli {
namespace {

std::string ValueSummary(const gguf::Value& v) {
  if (const std::string* s = v.AsString()) {
    std::string out = "\"" + s->substr(0, 80) + (s->size() > 80 ? "...\"" : "\"");
    for (char& ch : out) {
      if (ch == '\n') ch = ' ';
    }
    return out;
  }
  if (const gguf::Array* a = v.AsArray()) {
    std::string out = StrCat("[", a->elements.size(), " x ", gguf::ValueTypeName(a->element_type), "]");
    const size_t show = std::min<size_t>(a->elements.size(), 4);
    if (show > 0 && a->element_type != gguf::ValueType::kArray) {
      out += " {";
      for (size_t i = 0; i < show; ++i) out += (i ? ", " : "") + ValueSummary(a->elements[i]);
      out += a->elements.size() > show ? ", ...}" : "}";
    }
    return out;
  }
  if (auto b = v.AsBool(); b && v.type == gguf::ValueType::kBool) return *b ? "true" : "false";
  if (v.type == gguf::ValueType::kF32 || v.type == gguf::ValueType::kF64) {
    return StrCat(*v.AsFloat());
  }
  if (auto u = v.AsUInt()) return std::to_string(*u);
  if (auto i = v.AsInt()) return std::to_string(*i);
  return "?";
}

}  // namespace

int InfoCommand(int argc, char** argv) {
  cxxopts::Options options("sparrow info", "Show a model's metadata and tensors, and the SIMD target in use.");
  options.add_options()
      ("m,model", "Model file (GGUF)", cxxopts::value<std::string>())
      ("tensors", "List every tensor (default: a summary by type)");
  cxxopts::ParseResult args;
  if (!Parse(options, argc, argv, &args)) return 0;

  const gguf::GgufFile file = gguf::GgufFile::Open(Require(args, "model"));
  std::printf("file: %s (GGUF v%u, %s, alignment %" PRIu64 ")\n", file.name().c_str(),
              file.version(), FormatBytes(file.file_size()).c_str(), file.alignment());
  std::printf("\nmetadata (%zu keys):\n", file.metadata().size());
  for (const gguf::KeyValue& kv : file.metadata()) {
    std::printf("  %-45s %-8s %s\n", kv.key.c_str(),
                std::string(gguf::ValueTypeName(kv.value.type)).c_str(),
                ValueSummary(kv.value).c_str());
  }

  std::map<std::string, std::pair<uint64_t, uint64_t>> by_type;  // count, bytes
  uint64_t params = 0, bytes = 0;
  for (const gguf::TensorInfo& t : file.tensors()) {
    auto& entry = by_type[std::string(TensorTypeName(t.type))];
    ++entry.first;
    entry.second += t.n_bytes;
    params += t.n_elements;
    bytes += t.n_bytes;
  }
  std::printf("\ntensors: %zu, %" PRIu64 " parameters, %s\n", file.tensors().size(), params,
              FormatBytes(bytes).c_str());
  for (const auto& [type, entry] : by_type) {
    std::printf("  %-8s %6" PRIu64 " tensors %12s\n", type.c_str(), entry.first,
                FormatBytes(entry.second).c_str());
  }
  if (args.count("tensors")) {
    for (const gguf::TensorInfo& t : file.tensors()) {
      std::string shape;
      for (size_t i = 0; i < t.dims.size(); ++i) shape += (i ? " x " : "") + std::to_string(t.dims[i]);
      std::printf("  %-40s %-7s %-20s %12s\n", t.name.c_str(),
                  std::string(TensorTypeName(t.type)).c_str(), shape.c_str(),
                  FormatBytes(t.n_bytes).c_str());
    }
  }

  // Whether this engine can run it, and the reason if not.
  try {
    const ModelConfig c = ModelConfig::FromGguf(file);
    std::printf("\nmodel: %s, %u layers, d_model %u, d_ff %u, %u heads (%u kv), head size %u, rope %u dims base %g\n",
                c.arch.c_str(), c.n_layers, c.d_model, c.d_ff, c.n_heads, c.n_kv_heads, c.head_dim,
                c.rope_dims, c.rope_base);
  } catch (const InputError& e) {
    std::printf("\nmodel: not runnable by Sparrow: %s\n", e.what());
  }

  std::printf("\nmachine:\n");
  std::printf("  cpu features: %s\n", simd::CpuFeatures().c_str());
  std::string targets;
  for (const simd::Target& t : simd::AvailableTargets()) targets += (targets.empty() ? "" : " ") + t.name;
  std::printf("  simd targets: %s (in use: %s)\n", targets.c_str(), simd::CurrentTargetName().c_str());
  std::printf("  threads: %d, oneDNN: %s, OpenMP: %s, io_uring: %s\n", ThreadCount(),
              SPARROW_HAVE_ONEDNN ? "yes" : "no", SPARROW_HAVE_OPENMP ? "yes" : "no",
              SPARROW_HAVE_URING ? "yes" : "no");
  return 0;
}

}  // namespace sparrow::cli
