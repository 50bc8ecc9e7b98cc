// LoRA: the adapter readers (formats/lora_adapter.h) and fusion (src/lora.h).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "base/error.h"
#include "formats/gguf.h"
#include "formats/lora_adapter.h"
#include "simd/quantize.h"
#include "src/lora.h"
#include "tests/error_test_util.h"
#include "tests/shared_path.h"

namespace sparrow {
namespace {

using testing::Contains;
using testing::ErrorOf;
using testing::SharedPath;

std::vector<float> TensorF32(const gguf::TensorInfo& t) {
  std::vector<float> out(t.n_elements);
  simd::DequantizeRow(t.type, t.data, t.n_elements, out.data());
  return out;
}

TEST_CASE("lora: the GGUF adapter fixture reads as llama.cpp defines it") {
  const LoraAdapterFile a = ReadLoraAdapter(SharedPath("models/lora/stories260K-lora-r4.gguf"));
  CHECK(a.format == "gguf");
  CHECK(a.architecture == "llama");
  CHECK(a.alpha == 8.0f);
  CHECK_FALSE(a.hf_row_order);
  CHECK(a.pairs.size() == 35);  // 7 matrices x 5 layers
  for (const LoraTensorPair& p : a.pairs) {
    CHECK(p.rank == 4);
    CHECK(p.a.dims == std::vector<uint64_t>{p.n_in, 4});
    CHECK(p.b.dims == std::vector<uint64_t>{4, p.n_out});
    CHECK(a.Factor(p, 1.0f) == doctest::Approx(2.0));  // alpha / r
    CHECK(a.Factor(p, 0.5f) == doctest::Approx(1.0));
  }
}

TEST_CASE("lora: Hugging Face module names map to GGUF tensor names") {
  CHECK(GgufNameForHfModule("model.layers.3.self_attn.q_proj") == "blk.3.attn_q.weight");
  CHECK(GgufNameForHfModule("model.layers.12.self_attn.o_proj") == "blk.12.attn_output.weight");
  CHECK(GgufNameForHfModule("model.layers.0.mlp.down_proj") == "blk.0.ffn_down.weight");
  CHECK(GgufNameForHfModule("model.embed_tokens") == "token_embd.weight");
  CHECK(GgufNameForHfModule("lm_head") == "output.weight");
  CHECK(GgufNameForHfModule("model.layers.x.mlp.up_proj").empty());
  CHECK(GgufNameForHfModule("model.layers.1.mlp.fc1").empty());
  CHECK(GgufNameForHfModule("transformer.h.0.attn").empty());
}

// The PEFT folder holds the same update as the GGUF adapter, with q/k
// lora_B rows in Hugging Face order: after the permutation both must give
// the same fused weights, and every adapted tensor must change.
TEST_CASE("lora: the PEFT and GGUF forms of the same adapter fuse to the same weights") {
  gguf::GgufFile from_gguf = gguf::GgufFile::Open(SharedPath("models/stories260K.gguf"));
  gguf::GgufFile from_peft = gguf::GgufFile::Open(SharedPath("models/stories260K.gguf"));
  const gguf::GgufFile plain = gguf::GgufFile::Open(SharedPath("models/stories260K.gguf"));
  const FusedLora a = FusedLora::Fuse(from_gguf, {{SharedPath("models/lora/stories260K-lora-r4.gguf")}});
  const FusedLora b = FusedLora::Fuse(from_peft, {{SharedPath("models/lora/stories260K-lora-r4-peft")}});
  a.ApplyTo(from_gguf);
  b.ApplyTo(from_peft);
  REQUIRE(a.changes().size() == 35);
  for (const FusedLora::TensorChange& c : a.changes()) {
    CAPTURE(c.name);
    CHECK(c.relative_change > 1e-4);
    const std::vector<float> x = TensorF32(*from_gguf.FindTensor(c.name));
    const std::vector<float> y = TensorF32(*from_peft.FindTensor(c.name));
    const std::vector<float> w = TensorF32(*plain.FindTensor(c.name));
    double max_diff = 0, max_change = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      max_diff = std::max(max_diff, std::fabs(static_cast<double>(x[i]) - y[i]));
      max_change = std::max(max_change, std::fabs(static_cast<double>(x[i]) - w[i]));
    }
    CHECK(max_diff <= 1e-6);
    CHECK(max_change > 1e-4);
  }
  // Without the q/k permutation the PEFT form would differ: check it matters.
  CHECK(a.bytes() == b.bytes());
}

TEST_CASE("lora: scales add up, and two adapters sum") {
  gguf::GgufFile once = gguf::GgufFile::Open(SharedPath("models/stories260K.gguf"));
  gguf::GgufFile twice = gguf::GgufFile::Open(SharedPath("models/stories260K.gguf"));
  const std::string adapter = SharedPath("models/lora/stories260K-lora-r4.gguf");
  const FusedLora a = FusedLora::Fuse(once, {{adapter, 2.0f}});
  const FusedLora b = FusedLora::Fuse(twice, {{adapter, 1.0f}, {adapter, 1.0f}});
  a.ApplyTo(once);
  b.ApplyTo(twice);
  REQUIRE(b.adapters().size() == 2);
  for (const FusedLora::TensorChange& c : a.changes()) {
    const std::vector<float> x = TensorF32(*once.FindTensor(c.name));
    const std::vector<float> y = TensorF32(*twice.FindTensor(c.name));
    for (size_t i = 0; i < x.size(); ++i) REQUIRE(x[i] == doctest::Approx(y[i]).epsilon(1e-5));
  }
}

TEST_CASE("lora: adapters that do not fit the model are refused, naming the tensor") {
  gguf::GgufFile tiny = gguf::GgufFile::Open(SharedPath("models/llama-2-tiny-random.gguf"));
  const std::string msg = ErrorOf(
      [&] { FusedLora::Fuse(tiny, {{SharedPath("models/lora/stories260K-lora-r4.gguf")}}); });
  CHECK(Contains(msg, "stories260K-lora-r4.gguf"));
  CHECK(Contains(msg, ".weight"));
  gguf::GgufFile stories = gguf::GgufFile::Open(SharedPath("models/stories260K.gguf"));
  CHECK(Contains(ErrorOf([&] { FusedLora::Fuse(stories, {{SharedPath("models/stories260K.gguf")}}); }),
                 "not a LoRA adapter"));
  CHECK(Contains(ErrorOf([&] { ReadLoraAdapter("/nonexistent/adapter.gguf"); }), "cannot open"));
}

// Found by lora_adapter_fuzzer: a number too large for a double is not a
// parse error to nlohmann/json (out_of_range), and escaped as a crash.
TEST_CASE("lora: a PEFT config that is not valid JSON is refused in one line") {
  char tmpl[] = "/tmp/sparrow_peft_XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  const std::string config = dir + "/adapter_config.json";
  for (const char* text : {"1e999999", "{\"r\": 1e999999}", "{\"peft_type\": "}) {
    CAPTURE(text);
    std::FILE* f = std::fopen(config.c_str(), "wb");
    REQUIRE(f != nullptr);
    std::fputs(text, f);
    std::fclose(f);
    const std::string msg = ErrorOf([&] { ReadLoraAdapter(dir); });
    CHECK(Contains(msg, config + ": not valid JSON"));
  }
  std::remove(config.c_str());
  ::rmdir(dir.c_str());
}

// Found by lora_adapter_fuzzer: a rank or alpha too large for its type
// made the conversion undefined (caught by UBSan as a float-cast overflow).
TEST_CASE("lora: PEFT numbers out of their field's range are refused in one line") {
  char tmpl[] = "/tmp/sparrow_peft_XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  const std::string config = dir + "/adapter_config.json";
  struct Case {
    const char* text;
    const char* key;
  };
  for (const Case& c : {Case{"{\"peft_type\": \"LORA\", \"r\": 44444444444444444444444444}", "'r'"},
                        Case{"{\"peft_type\": \"LORA\", \"r\": 9223372036854775808}", "'r'"},
                        Case{"{\"peft_type\": \"LORA\", \"r\": 2.5}", "'r'"},
                        Case{"{\"peft_type\": \"LORA\", \"r\": 8, \"lora_alpha\": 1e300}",
                             "'lora_alpha'"}}) {
    CAPTURE(c.text);
    std::FILE* f = std::fopen(config.c_str(), "wb");
    REQUIRE(f != nullptr);
    std::fputs(c.text, f);
    std::fclose(f);
    const std::string msg = ErrorOf([&] { ReadLoraAdapter(dir); });
    CHECK(Contains(msg, config + ": " + c.key + " is out of range"));
  }
  std::remove(config.c_str());
  ::rmdir(dir.c_str());
}

}  // namespace
}  // namespace sparrow
