#include "formats/lora_adapter.h"

#include <sys/stat.h>

#include <cmath>
#include <limits>
#include <type_traits>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include "base/crc32c.h"
#include "base/error.h"
#include "base/read_file.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"

namespace sparrow {
namespace {

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string DimsText(const std::vector<uint64_t>& dims) {
  std::string out = "[";
  for (size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + std::to_string(dims[i]);
  return out + "]";
}

// Ranks above this are not LoRA any more (and would overflow nothing, but
// would make fusion take hours): refused as malformed.
constexpr uint64_t kMaxRank = 1u << 16;
constexpr uint64_t kMaxDim = 1u << 24;

// Pairs up A and B and checks they agree with each other: A dims {n_in, r},
// B dims {r, n_out}.
LoraTensorPair MakePair(const std::string& path, const std::string& base, LoraMatrix a,
                        LoraMatrix b, const char* a_name, const char* b_name) {
  const auto fail = [&](const std::string& why) {
    ThrowInputError(path, ": adapter tensor '", base, "': ", why);
  };
  for (const LoraMatrix* m : {&a, &b}) {
    if (m->dims.size() != 2) fail(StrCat(m == &a ? a_name : b_name, " is not 2-D"));
    if (m->type != TensorType::kF32 && m->type != TensorType::kF16 &&
        m->type != TensorType::kBF16 && m->type != TensorType::kQ8_0) {
      fail(StrCat(m == &a ? a_name : b_name, " is ", TensorTypeName(m->type),
                  " (adapters may be F32, F16, BF16 or Q8_0)"));
    }
  }
  if (a.dims[1] != b.dims[0]) {
    fail(StrCat(a_name, " dims ", DimsText(a.dims), " and ", b_name, " dims ", DimsText(b.dims),
                " disagree on the rank: ", a_name,
                " must be [n_in, r] and ", b_name, " [r, n_out] (an untransposed ", a_name, "?)"));
  }
  const uint64_t rank = a.dims[1];
  if (rank == 0 || rank > kMaxRank || a.dims[0] == 0 || a.dims[0] > kMaxDim || b.dims[1] == 0 ||
      b.dims[1] > kMaxDim) {
    fail(StrCat("implausible dims ", DimsText(a.dims), " and ", DimsText(b.dims)));
  }
  LoraTensorPair p;
  p.base_name = base;
  p.rank = static_cast<uint32_t>(rank);
  p.n_in = static_cast<uint32_t>(a.dims[0]);
  p.n_out = static_cast<uint32_t>(b.dims[1]);
  p.a = std::move(a);
  p.b = std::move(b);
  return p;
}

LoraAdapterFile ReadGguf(const std::string& path) {
  auto file = std::make_shared<gguf::GgufFile>(gguf::GgufFile::Open(path));
  LoraAdapterFile out;
  out.path = path;
  out.format = "gguf";
  const std::optional<std::string> type = file->GetString("general.type");
  if (type != "adapter") {
    ThrowInputError(path, ": not a LoRA adapter (general.type is ",
                    type ? "'" + gguf::Printable(*type) + "'" : std::string("absent"),
                    ", expected 'adapter'): is it a model?");
  }
  const std::optional<std::string> kind = file->GetString("adapter.type");
  if (kind != "lora") {
    ThrowInputError(path, ": adapter.type is ",
                    kind ? "'" + gguf::Printable(*kind) + "'" : std::string("absent"),
                    "; only LoRA adapters ('lora') are supported");
  }
  const std::optional<std::string> arch = file->GetString("general.architecture");
  if (!arch) ThrowInputError(path, ": the adapter lacks general.architecture");
  out.architecture = *arch;
  const std::optional<double> alpha = file->GetFloat("adapter.lora.alpha");
  out.alpha = alpha ? static_cast<float>(*alpha) : 0.0f;
  if (!std::isfinite(out.alpha) || out.alpha < 0) {
    ThrowInputError(path, ": adapter.lora.alpha ", out.alpha, " is not a finite value >= 0");
  }

  std::map<std::string, std::pair<const gguf::TensorInfo*, const gguf::TensorInfo*>> by_base;
  for (const gguf::TensorInfo& t : file->tensors()) {
    const bool is_a = EndsWith(t.name, ".lora_a");
    if (!is_a && !EndsWith(t.name, ".lora_b")) {
      ThrowInputError(path, ": unexpected tensor '", gguf::Printable(t.name),
                      "' (an adapter holds NAME.lora_a and NAME.lora_b pairs only)");
    }
    auto& slot = by_base[t.name.substr(0, t.name.size() - 7)];
    (is_a ? slot.first : slot.second) = &t;
  }
  if (by_base.empty()) ThrowInputError(path, ": the adapter holds no tensors");
  for (const auto& [base, ab] : by_base) {
    if (ab.first == nullptr || ab.second == nullptr) {
      ThrowInputError(path, ": '", gguf::Printable(base), "' has a ",
                      ab.first ? "lora_a without its lora_b" : "lora_b without its lora_a");
    }
    const auto matrix = [](const gguf::TensorInfo& t) {
      return LoraMatrix{t.type, t.dims, t.data, t.n_bytes};
    };
    out.pairs.push_back(
        MakePair(path, base, matrix(*ab.first), matrix(*ab.second), "lora_a", "lora_b"));
  }
  out.crc32c = Crc32c(file->file_data(), file->file_size());
  out.storage = file;
  return out;
}

std::string ReadSmallFile(const std::string& path, const std::string& what) {
  return ReadWholeFile(path, what, 1u << 20);
}

// A JSON field of the config: absent -> fallback; wrong type -> InputError.
template <typename T>
T ConfigField(const nlohmann::json& config, const char* key, T fallback, const std::string& path) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return fallback;
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
    // A number T cannot hold would make the conversion undefined: refuse it
    // (a float for an integer field must also be whole).
    if (it->is_number()) {
      const double v = it->get<double>();
      // Strictly below an integer type's max: as a double, a 64-bit max
      // rounds up to 2^63, which does not fit.
      const double top = static_cast<double>(std::numeric_limits<T>::max());
      const bool fits = v >= static_cast<double>(std::numeric_limits<T>::lowest()) &&
                        (std::is_integral_v<T> ? v < top : v <= top);
      const bool whole = !std::is_integral_v<T> || !it->is_number_float() || v == std::trunc(v);
      if (!fits || !whole) ThrowInputError(path, ": '", key, "' is out of range (", it->dump(), ")");
    }
  }
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    ThrowInputError(path, ": '", key, "' has the wrong type (", it->type_name(), ")");
  }
}

LoraAdapterFile ReadPeft(const std::string& dir) {
  const std::string config_path = dir + "/adapter_config.json";
  const std::string config_text = ReadSmallFile(config_path, "adapter_config.json");
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(config_text);
  } catch (const nlohmann::json::parse_error& e) {
    ThrowInputError(config_path, ": not valid JSON (at byte ", e.byte, ")");
  } catch (const nlohmann::json::exception&) {  // e.g. a number out of range
    ThrowInputError(config_path, ": not valid JSON (a number out of range)");
  }
  if (!config.is_object()) ThrowInputError(config_path, ": not a JSON object");
  const std::string peft_type = ConfigField<std::string>(config, "peft_type", "", config_path);
  if (peft_type != "LORA") {
    ThrowInputError(config_path, ": peft_type '", gguf::Printable(peft_type),
                    "' is not supported (only LORA)");
  }
  if (ConfigField<bool>(config, "use_dora", false, config_path)) {
    ThrowInputError(config_path, ": DoRA adapters (use_dora) are not supported: their update "
                    "is not W + B A");
  }
  if (ConfigField<bool>(config, "fan_in_fan_out", false, config_path)) {
    ThrowInputError(config_path, ": fan_in_fan_out adapters (GPT-2 style Conv1D layers) are not "
                    "supported for llama-family models");
  }
  for (const char* key : {"rank_pattern", "alpha_pattern"}) {
    const auto it = config.find(key);
    if (it != config.end() && !it->is_null() && !it->empty()) {
      ThrowInputError(config_path, ": per-module ranks or alphas (", key, ") are not supported");
    }
  }
  const int64_t r = ConfigField<int64_t>(config, "r", 0, config_path);
  if (r <= 0 || static_cast<uint64_t>(r) > kMaxRank) {
    ThrowInputError(config_path, ": r must be a positive rank (got ", r, ")");
  }
  LoraAdapterFile out;
  out.path = dir;
  out.format = "peft";
  out.hf_row_order = true;
  out.alpha = ConfigField<float>(config, "lora_alpha", 8.0f, config_path);  // range-checked
  if (!std::isfinite(out.alpha) || out.alpha <= 0) {
    ThrowInputError(config_path, ": lora_alpha must be positive");
  }
  out.rslora = ConfigField<bool>(config, "use_rslora", false, config_path);

  const std::string weights_path = dir + "/adapter_model.safetensors";
  struct stat st {};
  if (::stat(weights_path.c_str(), &st) != 0) {
    const std::string bin = dir + "/adapter_model.bin";
    if (::stat(bin.c_str(), &st) == 0) {
      ThrowInputError(bin, ": PyTorch pickle adapters are not read (they can run code); save "
                      "the adapter with safe_serialization=True");
    }
    ThrowInputError("cannot open '", weights_path, "'");
  }
  auto weights = std::make_shared<safetensors::SafetensorsFile>(
      safetensors::SafetensorsFile::Open(weights_path));
  const auto gguf_type = [&](safetensors::DType d) {
    switch (d) {
      case safetensors::DType::kF32: return TensorType::kF32;
      case safetensors::DType::kF16: return TensorType::kF16;
      case safetensors::DType::kBF16: return TensorType::kBF16;
    }
    return TensorType::kF32;
  };
  std::map<std::string, std::pair<const safetensors::Tensor*, const safetensors::Tensor*>> by_base;
  const std::string prefix = "base_model.model.";
  for (const safetensors::Tensor& t : weights->tensors()) {
    const bool is_a = EndsWith(t.name, ".lora_A.weight");
    if ((!is_a && !EndsWith(t.name, ".lora_B.weight")) || t.name.rfind(prefix, 0) != 0) {
      ThrowInputError(weights_path, ": unexpected tensor '", gguf::Printable(t.name),
                      "' (expected base_model.model.<module>.lora_A/lora_B.weight)");
    }
    const std::string module =
        t.name.substr(prefix.size(), t.name.size() - prefix.size() - 14);
    const std::string base = GgufNameForHfModule(module);
    if (base.empty()) {
      ThrowInputError(weights_path, ": module '", gguf::Printable(module),
                      "' is not one of a llama or qwen2 model's (q/k/v/o_proj, gate/up/down_proj, "
                      "embed_tokens, lm_head)");
    }
    auto& slot = by_base[base];
    (is_a ? slot.first : slot.second) = &t;
  }
  if (by_base.empty()) ThrowInputError(weights_path, ": the adapter holds no tensors");
  for (const auto& [base, ab] : by_base) {
    if (ab.first == nullptr || ab.second == nullptr) {
      ThrowInputError(weights_path, ": '", base, "' has a ",
                      ab.first ? "lora_A without its lora_B" : "lora_B without its lora_A");
    }
    // safetensors shapes are outermost first; GGUF dims innermost first.
    const auto matrix = [&](const safetensors::Tensor& t) {
      return LoraMatrix{gguf_type(t.dtype), {t.shape.rbegin(), t.shape.rend()}, t.data, t.n_bytes};
    };
    LoraTensorPair p =
        MakePair(weights_path, base, matrix(*ab.first), matrix(*ab.second), "lora_A", "lora_B");
    if (p.rank != static_cast<uint64_t>(r)) {
      ThrowInputError(weights_path, ": '", base, "' has rank ", p.rank,
                      " but adapter_config.json says r = ", r);
    }
    out.pairs.push_back(std::move(p));
  }
  out.crc32c = Crc32c(config_text.data(), config_text.size());
  for (const safetensors::Tensor& t : weights->tensors()) out.crc32c = Crc32c(t.data, t.n_bytes, out.crc32c);
  out.storage = weights;
  return out;
}

}  // namespace

float LoraAdapterFile::Factor(const LoraTensorPair& pair, float scale) const {
  if (alpha == 0.0f) return scale;  // llama.cpp: no alpha, no alpha / r
  const double r = rslora ? std::sqrt(static_cast<double>(pair.rank)) : pair.rank;
  return static_cast<float>(scale * alpha / r);
}

std::string GgufNameForHfModule(const std::string& m) {
  if (m == "model.embed_tokens") return "token_embd.weight";
  if (m == "lm_head") return "output.weight";
  const std::string layers = "model.layers.";
  if (m.rfind(layers, 0) != 0) return "";
  const size_t dot = m.find('.', layers.size());
  if (dot == std::string::npos || dot == layers.size() || dot - layers.size() > 6) return "";
  const std::string index = m.substr(layers.size(), dot - layers.size());
  for (char c : index) {
    if (c < '0' || c > '9') return "";
  }
  static const std::map<std::string, std::string> kModules = {
      {"self_attn.q_proj", "attn_q"},   {"self_attn.k_proj", "attn_k"},
      {"self_attn.v_proj", "attn_v"},   {"self_attn.o_proj", "attn_output"},
      {"mlp.gate_proj", "ffn_gate"},    {"mlp.up_proj", "ffn_up"},
      {"mlp.down_proj", "ffn_down"},
  };
  const auto it = kModules.find(m.substr(dot + 1));
  if (it == kModules.end()) return "";
  return "blk." + std::to_string(std::stoul(index)) + "." + it->second + ".weight";
}

LoraAdapterFile ReadLoraAdapter(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) ThrowInputError("cannot open adapter '", path, "'");
  return S_ISDIR(st.st_mode) ? ReadPeft(path) : ReadGguf(path);
}

}  // namespace sparrow
