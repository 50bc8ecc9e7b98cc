// sparrow info: what a model file holds and what this machine will run it
// with.
#include <cinttypes>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <map>
#include <optional>

#include "base/byte_size.h"
#include "base/crc32c.h"
#include "base/error.h"
#include "formats/bundle.h"
#include "formats/gguf.h"
#include "formats/lora_adapter.h"
#include "formats/tokenizer_data.h"
#include "src/chat/chat_template.h"
#include "simd/gemv.h"
#include "simd/packed_gemv.h"
#include "simd/targets.h"
#include "sparrow_config.h"
#include "src/cli/commands.h"
#include "src/cli/common.h"
#include "src/model/config.h"
#include "src/ops/ops.h"
#include "src/runtime/unit_policy.h"
#include "base/threads.h"

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

// The calibrated splits (sparrow calibrate), each as a run at its density
// uses it: through WithCalibratedSplit, as the engine does.
void PrintCalibration(const std::optional<bundle::Calibration>& calibration) {
  if (!calibration) {
    std::printf("calibration: none\n");
    return;
  }
  const std::vector<bundle::CalibrationEntry>& entries = calibration->entries;
  std::printf("calibration: dip and dip-ca use it at --mlp-density %g", entries.front().density);
  if (entries.size() > 1) {
    std::printf(" to %g (interpolated between these)", entries.back().density);
  }
  std::printf(" unless --input-fraction is given\n");
  for (const bundle::CalibrationEntry& e : entries) {
    SparsityOptions run;
    run.kind = SparsityKind::kDip;
    run.density = e.density;
    run = WithCalibratedSplit(run, calibration);
    std::printf("  density %g: %s, perplexity %.4f (default split %.4f); measured with %s on "
                "'%s', %u chunks of %u tokens\n",
                e.density, DescribeSplit(run).c_str(), e.perplexity, e.default_perplexity,
                std::string(bundle::CalibrationPolicyName(e.policy)).c_str(), e.text_name.c_str(),
                e.chunks, e.ctx);
  }
}

// How the dip and split layouts' column sums, and the neuron layout's down
// parts, will run (ops::RowAxpysInt): in integers where the record type
// and this CPU take that form and the bundle bounds its groups' block
// scales (converted by a Sparrow that records them); the neuron layout's
// only where the unit cache holds every unit (StreamedFeedForward).
void PrintColumnSums(const bundle::Bundle& b) {
  const bool neuron = b.layout() == bundle::Layout::kNeuron;
  bool bounded = true;
  for (const bundle::UnitGroup& g : b.groups()) bounded &= g.largest_scale > 0.0f;
  const char* how =
      !ops::RowAxpyIntSums::Usable(b.record_type())
          ? "float multiply-adds (integer sums take q4_0s and q4_0 records on x86's AVX3_DL "
            "and AVX2 targets)"
      : !bounded ? "float multiply-adds (the bundle records no block-scale bounds: convert it "
                   "again for integer sums)"
      : neuron   ? "exact integer sums of 15-bit multiples (simd/axpy_int.h) where the DRAM "
                   "budget holds every unit of the FFN, else float multiply-adds"
                 : "exact integer sums of 15-bit multiples (simd/axpy_int.h)";
  std::printf("%s: %s\n", neuron ? "down sums" : "column sums", how);
}

// A bundle's layout, record geometry and sections.
void PrintBundle(const bundle::Bundle& b, bool verify) {
  std::printf("file: %s (Sparrow bundle v%u, %s)\n", b.path().c_str(), bundle::kVersion,
              FormatByteSize(b.file_size(), 2).c_str());
  const std::string source = b.header().GetString(bundle::keys::kSource).value_or("?");
  std::printf("bundle: %s layout, %s records, converted from %s\n",
              std::string(bundle::LayoutName(b.layout())).c_str(),
              std::string(TensorTypeName(b.record_type())).c_str(), source.c_str());
  const std::optional<std::string> placement = b.header().GetString(bundle::keys::kPlacement);
  std::printf("placement: %s\n",
              placement ? gguf::Printable(*placement, 1024).c_str() : "unit order (not placed)");
  std::printf("  %-22s offset %12u  %12s\n", "header", 0u,
              FormatByteSize(b.header_bytes(), 2).c_str());
  std::printf("  %-22s offset %12" PRIu64 "  %12s  crc32c 0x%08x\n", "resident section",
              b.resident_offset(), FormatByteSize(b.resident_bytes(), 2).c_str(), b.resident_crc());
  for (bundle::RecordKind kind : bundle::LayoutKinds(b.layout())) {
    const bundle::UnitGroup& g = *b.FindGroup(0, kind);
    std::printf("  %-22s offset %12" PRIu64
                "  %12s  %u layers x %u records of %u bytes "
                "(%u x %u %s + crc32c)\n",
                StrCat(bundle::RecordKindName(kind), " records").c_str(), g.offset,
                FormatByteSize(g.section_bytes() * b.n_layers(), 2).c_str(), b.n_layers(),
                g.n_units, g.record_bytes, g.parts, g.part_padded_elems,
                std::string(TensorTypeName(b.record_type())).c_str());
  }
  if (b.calibration()) {
    std::printf("  %-22s offset %12" PRIu64 "  %12s\n", "calibration section", b.bundle_bytes(),
                FormatByteSize(b.file_size() - b.bundle_bytes(), 2).c_str());
  }
  PrintCalibration(b.calibration());
  PrintColumnSums(b);
  if (verify) {
    ProgressBar bar("verify");
    b.VerifyAll([&](uint64_t done, uint64_t total) { bar.Update(done, total); });
  }
  if (verify) std::printf("  every checksum verified\n");
}

// A GGUF carries no checksums, so --verify checks what can be checked:
// every tensor's bytes can be read (a file cut short or a bad sector fails
// here, not in the middle of a run), and float tensors hold no NaN or
// infinity (what a flipped exponent bit usually makes). Says exactly that.
void VerifyGguf(const gguf::GgufFile& file) {
  ProgressBar bar("verify");
  uint64_t total = 0, done = 0, float_tensors = 0, float_values = 0;
  for (const gguf::TensorInfo& t : file.tensors()) total += t.n_bytes;
  uint32_t crc = 0;  // reads every byte; printed as the data's fingerprint
  for (const gguf::TensorInfo& t : file.tensors()) {
    uint64_t non_finite = 0;
    if (t.type == TensorType::kF32) {
      for (uint64_t i = 0; i < t.n_bytes / 4; ++i) {
        float v;
        std::memcpy(&v, t.data + 4 * i, 4);
        non_finite += !std::isfinite(v);
      }
    } else if (t.type == TensorType::kF16 || t.type == TensorType::kBF16) {
      const uint16_t exponent = t.type == TensorType::kF16 ? 0x7C00 : 0x7F80;
      for (uint64_t i = 0; i < t.n_bytes / 2; ++i) {
        uint16_t v;
        std::memcpy(&v, t.data + 2 * i, 2);
        non_finite += (v & exponent) == exponent;
      }
    }
    crc = Crc32c(t.data, t.n_bytes, crc);
    if (t.type == TensorType::kF32 || t.type == TensorType::kF16 || t.type == TensorType::kBF16) {
      ++float_tensors;
      float_values += t.n_elements;
    }
    if (non_finite > 0) {
      ThrowInputError(file.name(), ": tensor '", t.name, "' holds ", non_finite,
                      " NaN or infinite values: the file is damaged");
    }
    done += t.n_bytes;
    bar.Update(done, total);
  }
  std::printf(
      "\nverify: a GGUF has no checksums; checked: the header and every tensor's "
      "bounds, that all %zu tensors (%s) can be read, and that the %" PRIu64
      " F32/F16/BF16 tensors (%" PRIu64
      " values) hold no NaN or infinity; quantized "
      "tensors' values are not checked; CRC32C of all tensor data 0x%08x\n",
      file.tensors().size(), FormatByteSize(total, 2).c_str(), float_tensors, float_values, crc);
}

}  // namespace

int InfoCommand(int argc, char** argv) {
  cxxopts::Options options("sparrow info", "Show a model's metadata and tensors, and the SIMD target in use.");
  options.add_options()
      ("m,model", "Model file (GGUF or Sparrow bundle)", cxxopts::value<std::string>())
      ("tensors", "List every tensor (default: a summary by type; a bundle's resident "
       "tensors are read only with this flag)")
      ("verify", "Bundle: read it all and check every checksum; GGUF (no checksums): read "
       "every tensor and check float tensors for NaN and infinity");
  cxxopts::ParseResult args;
  if (!Parse(options, argc, argv, &args)) return 0;

  const std::string path = Require(args, "model");
  std::optional<bundle::Bundle> bndl;
  std::optional<gguf::GgufFile> with_tensors;  // the GGUF, or a bundle's resident section
  if (bundle::Bundle::LooksLikeBundle(path)) {
    bndl = bundle::Bundle::Open(path);
    PrintBundle(*bndl, args.count("verify") > 0);
    if (args.count("tensors")) with_tensors = bndl->LoadResident();
  } else {
    with_tensors = gguf::GgufFile::Open(path);
    std::printf("file: %s (GGUF v%u, %s, alignment %" PRIu64 ")\n", with_tensors->name().c_str(),
                with_tensors->version(), FormatByteSize(with_tensors->file_size(), 2).c_str(),
                with_tensors->alignment());
    if (args.count("verify")) VerifyGguf(*with_tensors);
  }
  const gguf::GgufFile& file = bndl ? bndl->header() : *with_tensors;
  // What `convert --lora` fused into these weights.
  const std::vector<std::string> fused = file.GetStringArray(kFusedAdaptersKey);
  if (!fused.empty()) {
    std::printf("\nLoRA adapters fused into the weights:\n");
    for (const std::string& line : fused) std::printf("  %s\n", gguf::Printable(line).c_str());
  }
  std::printf("\nmetadata (%zu keys):\n", file.metadata().size());
  for (const gguf::KeyValue& kv : file.metadata()) {
    std::printf("  %-45s %-8s %s\n", kv.key.c_str(),
                std::string(gguf::ValueTypeName(kv.value.type)).c_str(),
                ValueSummary(kv.value).c_str());
  }

  std::map<std::string, std::pair<uint64_t, uint64_t>> by_type;  // count, bytes
  uint64_t params = 0, bytes = 0;
  const std::vector<gguf::TensorInfo> no_tensors;
  const std::vector<gguf::TensorInfo>& tensors = with_tensors ? with_tensors->tensors() : no_tensors;
  for (const gguf::TensorInfo& t : tensors) {
    auto& entry = by_type[std::string(TensorTypeName(t.type))];
    ++entry.first;
    entry.second += t.n_bytes;
    params += t.n_elements;
    bytes += t.n_bytes;
  }
  if (with_tensors) {
    std::printf("\n%s: %zu, %" PRIu64 " parameters, %s\n", bndl ? "resident tensors" : "tensors",
                tensors.size(), params, FormatByteSize(bytes, 2).c_str());
  }
  for (const auto& [type, entry] : by_type) {
    std::printf("  %-8s %6" PRIu64 " tensors %12s\n", type.c_str(), entry.first,
                FormatByteSize(entry.second, 2).c_str());
  }
  if (args.count("tensors")) {
    for (const gguf::TensorInfo& t : tensors) {
      std::string shape;
      for (size_t i = 0; i < t.dims.size(); ++i) shape += (i ? " x " : "") + std::to_string(t.dims[i]);
      std::printf("  %-40s %-7s %-20s %12s\n", t.name.c_str(),
                  std::string(TensorTypeName(t.type)).c_str(), shape.c_str(),
                  FormatByteSize(t.n_bytes, 2).c_str());
    }
  }

  // A malformed tokenizer (e.g. a score list of the wrong length) makes the
  // file unusable: that is bad input, not a "cannot run" note.
  if (file.Find("tokenizer.ggml.model") != nullptr) {
    const TokenizerData tok = TokenizerData::FromGguf(file);
    std::printf("\ntokenizer: %s (pre: %s), %zu tokens, %zu merges, bos %d, eos %d, add_bos %s\n",
                tok.model.c_str(), tok.pre.empty() ? "-" : tok.pre.c_str(), tok.tokens.size(),
                tok.merges.size(), tok.bos_id, tok.eos_id, tok.add_bos ? "yes" : "no");
    const ChatFormat* chat = DetectChatFormat(tok.chat_template);
    std::printf("chat template: %s\n",
                tok.chat_template.empty() ? "none (chat and serve use chatml)"
                : chat != nullptr ? StrCat(chat->name, " (recognized in tokenizer.chat_template)").c_str()
                                  : "not recognized (choose one with --chat-template)");
  } else {
    std::printf("\ntokenizer: none\n");
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
  // Q4_0/Q4_K/Q8_0 decode kernels: repacked rows times 8-bit activations where
  // the CPU has a native 8-bit dot product, plain rows elsewhere.
  if (simd::PackedGemvPreferred()) {
    std::printf("  Q4_0/Q4_K/Q8_0 kernels: packed rows, 8-bit activations, %s\n", simd::PackedGemvDotForm());
  } else {
    std::printf("  Q4_0/Q4_K/Q8_0 kernels: plain rows, 16-bit activations\n");
  }
  // A bundle's cached units are gathered one record at a time, never packed.
  if (simd::GemvActivationMax(TensorType::kQ4_0) == simd::kInt8ActivationMax) {
    std::printf("  Q4_0/Q4_0S bundle records: per-row kernels, 8-bit activations, %s\n",
                simd::GemvByteDotForm());
  } else {
    std::printf("  Q4_0/Q4_0S bundle records: per-row kernels, 16-bit activations\n");
  }
  std::printf(
      "  Q6_K kernels: plain rows, %s activations\n",
      simd::GemvActivationMax(TensorType::kQ6_K) == simd::kInt8ActivationMax ? "8-bit" : "16-bit");
  std::printf("  decode row streams (packed and float rows): %s\n",
              simd::CpuStreamsRowsItself() ? "hardware prefetch only"
                                           : "software prefetch ahead of the hardware's");
  std::printf("  prompt batches: %s\n", ops::PromptGemmDescription().c_str());
  std::printf("  threads: %d, oneDNN: %s, OpenMP: %s, io_uring: %s\n", ThreadCount(),
              SPARROW_HAVE_ONEDNN ? "yes" : "no", SPARROW_HAVE_OPENMP ? "yes" : "no",
              SPARROW_HAVE_URING ? "yes" : "no");
  return 0;
}

}  // namespace sparrow::cli
