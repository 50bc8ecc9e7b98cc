#include "src/model/config.h"

#include "base/error.h"
#include "formats/gguf.h"

namespace sparrow {
namespace {

uint32_t RequireU32(const gguf::GgufFile& file, const std::string& key) {
  const std::optional<uint64_t> v = file.GetUInt(key);
  if (!v) ThrowInputError(file.name(), ": missing metadata key '", key, "'");
  if (*v == 0 || *v > 0xFFFFFFFFu) {
    ThrowInputError(file.name(), ": metadata '", key, "' = ", *v,
                    " is out of range");
  }
  return static_cast<uint32_t>(*v);
}

uint32_t OptionalU32(const gguf::GgufFile& file, const std::string& key,
                     uint32_t fallback) {
  if (!file.GetUInt(key)) return fallback;
  return RequireU32(file, key);
}

}  // namespace

ModelConfig ModelConfig::FromGguf(const gguf::GgufFile& file) {
  ModelConfig c;
  const std::optional<std::string> arch = file.GetString("general.architecture");
  if (!arch) ThrowInputError(file.name(), ": missing general.architecture");
  c.arch = *arch;
  c.architecture = FindArchitecture(c.arch);
  if (c.architecture == nullptr) {
    ThrowInputError(file.name(), ": unsupported architecture '", c.arch,
                    "' (supported: ", SupportedArchitectures(), ")");
  }
  c.name = file.GetString("general.name").value_or(c.arch);
  const std::string p = c.arch + ".";
  c.n_layers = RequireU32(file, p + "block_count");
  c.d_model = RequireU32(file, p + "embedding_length");
  c.d_ff = RequireU32(file, p + "feed_forward_length");
  c.n_heads = RequireU32(file, p + "attention.head_count");
  c.n_kv_heads = OptionalU32(file, p + "attention.head_count_kv", c.n_heads);
  c.context_length = OptionalU32(file, p + "context_length", 2048);
  if (c.d_model % c.n_heads != 0) {
    ThrowInputError(file.name(), ": embedding_length ", c.d_model,
                    " is not a multiple of head_count ", c.n_heads);
  }
  c.head_dim = OptionalU32(file, p + "attention.key_length", c.d_model / c.n_heads);
  const uint32_t value_length = OptionalU32(file, p + "attention.value_length", c.head_dim);
  if (value_length != c.head_dim) {
    ThrowInputError(file.name(), ": attention.value_length ", value_length,
                    " differs from key_length ", c.head_dim, " (unsupported)");
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    ThrowInputError(file.name(), ": head_count ", c.n_heads,
                    " is not a multiple of head_count_kv ", c.n_kv_heads);
  }
  c.rope_dims = OptionalU32(file, p + "rope.dimension_count", c.head_dim);
  if (c.rope_dims > c.head_dim || c.rope_dims % 2 != 0) {
    ThrowInputError(file.name(), ": rope.dimension_count ", c.rope_dims,
                    " must be even and at most the head size ", c.head_dim);
  }
  c.rms_eps = static_cast<float>(
      file.GetFloat(p + "attention.layer_norm_rms_epsilon")
          .value_or(c.architecture->default_rms_eps));
  c.rope_base = static_cast<float>(file.GetFloat(p + "rope.freq_base").value_or(10000.0));
  if (!(c.rope_base > 1.0f) || !(c.rms_eps > 0.0f)) {
    ThrowInputError(file.name(), ": rope.freq_base and layer_norm_rms_epsilon must be positive");
  }
  const std::string scaling = file.GetString(p + "rope.scaling.type").value_or("none");
  if (scaling == "linear") {
    const double factor = file.GetFloat(p + "rope.scaling.factor").value_or(1.0);
    if (!(factor > 0.0)) ThrowInputError(file.name(), ": rope.scaling.factor must be positive");
    c.rope_position_scale = static_cast<float>(1.0 / factor);
  } else if (scaling != "none" && scaling != "llama3") {
    // llama3-style scaling arrives as the rope_freqs tensor, handled by the
    // weights; yarn and others are not implemented.
    ThrowInputError(file.name(), ": unsupported rope scaling '", scaling, "'");
  }
  c.rope_style = c.architecture->rope_style;
  c.qkv_bias = c.architecture->qkv_bias;
  return c;
}

}  // namespace sparrow
