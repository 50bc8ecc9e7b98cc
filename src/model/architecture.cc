#include "src/model/architecture.h"

namespace sparrow {
namespace {

const Architecture kArchitectures[] = {
    // Llama 2/3, Mistral, TinyLlama, SmolLM (their GGUFs say "llama").
    {"llama", NormKind::kRms, FfnActivation::kSwiGlu, /*qkv_bias=*/false,
     simd::RopeStyle::kAdjacentPairs, 1e-5f, /*qk_rows_permuted=*/true, TensorNames{}},
    // Qwen 2 and 2.5: Q/K/V biases, NeoX-style RoPE over halves.
    {"qwen2", NormKind::kRms, FfnActivation::kSwiGlu, /*qkv_bias=*/true,
     simd::RopeStyle::kHalves, 1e-6f, /*qk_rows_permuted=*/false, TensorNames{}},
};

}  // namespace

const Architecture* FindArchitecture(std::string_view name) {
  for (const Architecture& a : kArchitectures) {
    if (name == a.name) return &a;
  }
  return nullptr;
}

std::string SupportedArchitectures() {
  std::string out;
  for (const Architecture& a : kArchitectures) out += (out.empty() ? "" : ", ") + std::string(a.name);
  return out;
}

}  // namespace sparrow
