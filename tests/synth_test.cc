// sparrow synth's hot structure (--hot-fraction / --hot-gain): which
// channels and units are hot, how strong the rest are, that the model stays
// sane, and that without the options the weights are the same as before.
#include "src/synth.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <numeric>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/read_file.h"
#include "base/threads.h"
#include "formats/gguf.h"
#include "src/model/model.h"
#include "tests/gguf_test_util.h"

using namespace sparrow;

namespace {

SynthSpec SmallSpec(TensorType type = TensorType::kF32) {
  SynthSpec s;
  s.dim = 128;
  s.ffn = 256;
  s.layers = 2;
  s.heads = 2;
  s.kv_heads = 2;
  s.vocab = 400;
  s.type = type;
  s.seed = 3;
  return s;
}

SynthSpec Hot(SynthSpec s, float fraction, float gain) {
  s.hot_fraction = fraction;
  s.hot_gain = gain;
  return s;
}

std::vector<float> ReadF32(const gguf::GgufFile& f, const std::string& name) {
  const gguf::TensorInfo* t = f.FindTensor(name);
  REQUIRE_MESSAGE(t != nullptr, "missing tensor " << name);
  REQUIRE(t->type == TensorType::kF32);
  std::vector<float> v(t->n_elements);
  std::memcpy(v.data(), t->data, t->n_bytes);
  return v;
}

std::vector<uint8_t> FileBytes(const std::string& path) {
  return ReadWholeFileBytes(path, "test file");
}

// FNV-1a of everything from the start of the tensor data to the end of the
// file: the weights, whatever the metadata before them says.
uint64_t TensorDataHash(const gguf::GgufFile& f) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint64_t i = f.data_offset(); i < f.file_size(); ++i) {
    h = (h ^ f.file_data()[i]) * 0x100000001b3ull;
  }
  return h;
}

// Indices sorted by strength, strongest first; ties (the hot ones) by index.
std::vector<uint32_t> ByRank(const std::vector<float>& strength) {
  std::vector<uint32_t> order(strength.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return strength[a] > strength[b]; });
  return order;
}

float Dot(const float* a, const float* b, size_t n) {
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += double(a[i]) * b[i];
  return static_cast<float>(sum);
}

float Silu(float x) { return x / (1.0f + std::exp(-x)); }

void CheckInputError(const SynthSpec& s, const std::string& flag) {
  try {
    ValidateSynthSpec(s);
    FAIL("expected an InputError naming " << flag);
  } catch (const InputError& e) {
    const std::string message = e.what();
    CHECK_MESSAGE(message.find(flag) != std::string::npos, message);
    CHECK(message.find('\n') == std::string::npos);
  }
}

}  // namespace

TEST_CASE("synth: bad or half-given hot options are InputErrors naming the flag") {
  const SynthSpec base = SmallSpec();
  CHECK_NOTHROW(ValidateSynthSpec(base));
  CHECK_NOTHROW(ValidateSynthSpec(Hot(base, 0.1f, 4.0f)));
  CHECK_NOTHROW(ValidateSynthSpec(Hot(base, 1.0f, 1.0f)));
  SynthSpec only_gain = base;
  only_gain.hot_gain = 4.0f;
  CheckInputError(only_gain, "--hot-fraction");
  SynthSpec only_fraction = base;
  only_fraction.hot_fraction = 0.1f;
  CheckInputError(only_fraction, "--hot-gain");
  for (float f : {0.0f, -0.1f, 1.01f, NAN, INFINITY}) CheckInputError(Hot(base, f, 4.0f), "--hot-fraction");
  for (float g : {0.99f, 0.0f, -4.0f, NAN, INFINITY}) CheckInputError(Hot(base, 0.1f, g), "--hot-gain");
}

TEST_CASE("synth: hot counts and the power law of the cold strengths") {
  CHECK(SynthHotCount(128, 0.1f) == 13);
  CHECK(SynthHotCount(256, 0.1f) == 26);
  CHECK(SynthHotCount(100, 0.001f) == 1);  // never none
  CHECK(SynthHotCount(100, 1.0f) == 100);
  CHECK(SynthStrength(0, 13, 4.0f) == 4.0f);
  CHECK(SynthStrength(12, 13, 4.0f) == 4.0f);
  CHECK(SynthStrength(13, 13, 4.0f) == 1.0f);
  CHECK(SynthStrength(14, 13, 4.0f) == doctest::Approx(std::pow(2.0, -0.25)));
  CHECK(SynthStrength(13 + 15, 13, 4.0f) == doctest::Approx(0.5));  // 16^-0.25

  const SynthSpec s = Hot(SmallSpec(), 0.1f, 4.0f);
  const std::vector<float> channels = SynthChannelStrengths(s);
  REQUIRE(channels.size() == s.dim);
  // A permutation of strength(0..dim-1): sorted, it is the formula by rank.
  const std::vector<uint32_t> order = ByRank(channels);
  for (uint32_t rank = 0; rank < s.dim; ++rank) {
    CHECK(channels[order[rank]] == SynthStrength(rank, 13, 4.0f));
  }
  // The coldest is noticeably weaker than the first cold one, but alive.
  CHECK(channels[order.back()] < 0.4f);
  CHECK(channels[order.back()] > 0.2f);

  // Units: one permutation per layer, of ffn entries.
  const std::vector<float> layer0 = SynthUnitStrengths(s, 0);
  const std::vector<float> layer1 = SynthUnitStrengths(s, 1);
  REQUIRE(layer0.size() == s.ffn);
  CHECK(std::count(layer0.begin(), layer0.end(), 4.0f) == 26);
  CHECK(layer0 != layer1);
  // Deterministic in the seed, and the seed matters.
  CHECK(SynthUnitStrengths(s, 1) == layer1);
  SynthSpec other = s;
  other.seed = 4;
  CHECK(SynthChannelStrengths(other) != channels);
  // No options, no strengths.
  CHECK(SynthChannelStrengths(SmallSpec()).empty());
  CHECK(SynthUnitStrengths(SmallSpec(), 0).empty());
}

TEST_CASE("synth: without hot options the weights are the same bytes as before them") {
  testing::TempDir dir;
  // The reference hash is of a model written by `sparrow synth --dim 64
  // --ffn 128 --layers 2 --heads 2 --vocab 400 --type q8_0 --seed 7` before
  // the hot options existed.
  SynthSpec s = SmallSpec(TensorType::kQ8_0);
  s.dim = 64;
  s.ffn = 128;
  s.seed = 7;
  WriteSyntheticModel(s, dir.File("plain.gguf"));
  const gguf::GgufFile f = gguf::GgufFile::Open(dir.File("plain.gguf"));
  CHECK(TensorDataHash(f) == 0xbc6e0c5aeea5b490ull);
  CHECK(f.Find("sparrow.synth.hot_fraction") == nullptr);
  CHECK(f.Find("sparrow.synth.hot_gain") == nullptr);
}

TEST_CASE("synth: hot residual channels are G times the strongest cold one in every ffn_norm") {
  testing::TempDir dir;
  const SynthSpec s = Hot(SmallSpec(), 0.1f, 4.0f);
  WriteSyntheticModel(s, dir.File("hot.gguf"));
  const gguf::GgufFile f = gguf::GgufFile::Open(dir.File("hot.gguf"));
  CHECK(f.GetFloat("sparrow.synth.hot_fraction") == doctest::Approx(0.1));
  CHECK(f.GetFloat("sparrow.synth.hot_gain") == doctest::Approx(4.0));

  const std::vector<float> strength = SynthChannelStrengths(s);
  const std::vector<uint32_t> order = ByRank(strength);
  const uint32_t n_hot = 13;  // round(0.1 * 128)
  for (uint32_t layer = 0; layer < s.layers; ++layer) {
    CAPTURE(layer);
    const std::vector<float> w = ReadF32(f, "blk." + std::to_string(layer) + ".ffn_norm.weight");
    REQUIRE(w.size() == s.dim);
    // Each entry is its strength times the usual value around 1 (+-17%).
    for (uint32_t c = 0; c < s.dim; ++c) {
      CHECK(w[c] / strength[c] == doctest::Approx(1.0).epsilon(0.2));
    }
    // Exactly n_hot entries, the same channels in every layer, are about G
    // times the largest cold entry.
    float max_cold = 0;
    for (uint32_t rank = n_hot; rank < s.dim; ++rank) max_cold = std::max(max_cold, w[order[rank]]);
    size_t strong = 0;
    for (uint32_t c = 0; c < s.dim; ++c) strong += w[c] > 2.0f * max_cold;
    CHECK(strong == n_hot);
    for (uint32_t rank = 0; rank < n_hot; ++rank) {
      const float ratio = w[order[rank]] / max_cold;
      CHECK(ratio > 0.6f * 4.0f);
      CHECK(ratio < 1.6f * 4.0f);
    }
    // The cold ones fall with rank: the first quarter of cold ranks against
    // the last, as the formula says up to the +-5% jitter.
    const uint32_t quarter = (s.dim - n_hot) / 4;
    double first = 0, last = 0, first_expected = 0, last_expected = 0;
    for (uint32_t i = 0; i < quarter; ++i) {
      first += w[order[n_hot + i]];
      last += w[order[s.dim - 1 - i]];
      first_expected += SynthStrength(n_hot + i, n_hot, 4.0f);
      last_expected += SynthStrength(s.dim - 1 - i, n_hot, 4.0f);
    }
    CHECK(first / last == doctest::Approx(first_expected / last_expected).epsilon(0.05));
    CHECK(first / last > 1.5);
  }
  // attn_norm is not part of the structure.
  const std::vector<float> attn = ReadF32(f, "blk.0.attn_norm.weight");
  CHECK(*std::max_element(attn.begin(), attn.end()) < 1.2f);
}

TEST_CASE("synth: hot FFN units have G times the up rows and G times the GLU output") {
  testing::TempDir dir;
  const SynthSpec s = Hot(SmallSpec(), 0.1f, 4.0f);
  WriteSyntheticModel(s, dir.File("hot.gguf"));
  const gguf::GgufFile f = gguf::GgufFile::Open(dir.File("hot.gguf"));
  for (uint32_t layer = 0; layer < s.layers; ++layer) {
    CAPTURE(layer);
    const std::string b = "blk." + std::to_string(layer) + ".";
    const std::vector<float> up = ReadF32(f, b + "ffn_up.weight");
    const std::vector<float> gate = ReadF32(f, b + "ffn_gate.weight");
    const std::vector<float> strength = SynthUnitStrengths(s, layer);
    const auto row_norm = [&](const std::vector<float>& m, uint32_t u) {
      return std::sqrt(Dot(&m[u * s.dim], &m[u * s.dim], s.dim));
    };
    // Mean over hot units, and over cold units divided by their strength.
    double hot_up = 0, cold_up = 0, hot_gate = 0, cold_gate = 0;
    size_t n_hot = 0;
    for (uint32_t u = 0; u < s.ffn; ++u) {
      if (strength[u] == 4.0f) {
        hot_up += row_norm(up, u);
        hot_gate += row_norm(gate, u);
        ++n_hot;
      } else {
        cold_up += row_norm(up, u) / strength[u];
        cold_gate += row_norm(gate, u);
      }
    }
    REQUIRE(n_hot == 26);
    const size_t n_cold = s.ffn - n_hot;
    CHECK((hot_up / n_hot) / (cold_up / n_cold) == doctest::Approx(4.0).epsilon(0.05));
    CHECK((hot_gate / n_hot) / (cold_gate / n_cold) == doctest::Approx(1.0).epsilon(0.05));

    // |SiLU(gate.x) * (up.x)| on unit-variance inputs, the same way.
    std::vector<float> x(s.dim);
    uint32_t lcg = 12345;
    double hot_glu = 0, cold_glu = 0;
    for (int sample = 0; sample < 64; ++sample) {
      for (float& v : x) {
        lcg = lcg * 1664525u + 1013904223u;
        v = (static_cast<float>(lcg >> 8) / 16777216.0f - 0.5f) * std::sqrt(12.0f);
      }
      for (uint32_t u = 0; u < s.ffn; ++u) {
        const float glu = std::abs(Silu(Dot(&gate[u * s.dim], x.data(), s.dim)) *
                                   Dot(&up[u * s.dim], x.data(), s.dim));
        if (strength[u] == 4.0f) {
          hot_glu += glu;
        } else {
          cold_glu += glu / strength[u];
        }
      }
    }
    CHECK((hot_glu / n_hot) / (cold_glu / n_cold) == doctest::Approx(4.0).epsilon(0.25));
  }
}

TEST_CASE("synth: hot models depend only on the seed, not on the thread count") {
  testing::TempDir dir;
  const SynthSpec s = Hot(SmallSpec(TensorType::kQ8_0), 0.1f, 4.0f);
  SetThreadCount(1);
  WriteSyntheticModel(s, dir.File("one.gguf"));
  SetThreadCount(3);
  WriteSyntheticModel(s, dir.File("three.gguf"));
  SetThreadCount(0);
  WriteSyntheticModel(s, dir.File("all.gguf"));
  const std::vector<uint8_t> one = FileBytes(dir.File("one.gguf"));
  CHECK(one.size() > 100000);
  CHECK(one == FileBytes(dir.File("three.gguf")));
  CHECK(one == FileBytes(dir.File("all.gguf")));
  SynthSpec other = s;
  other.seed = 4;
  WriteSyntheticModel(other, dir.File("other.gguf"));
  CHECK(one != FileBytes(dir.File("other.gguf")));
  // The hot options change only ffn_norm and ffn_up: the other weights are
  // those of the plain model.
  WriteSyntheticModel(SmallSpec(TensorType::kQ8_0), dir.File("plain.gguf"));
  const gguf::GgufFile hot = gguf::GgufFile::Open(dir.File("one.gguf"));
  const gguf::GgufFile plain = gguf::GgufFile::Open(dir.File("plain.gguf"));
  for (const gguf::TensorInfo& t : plain.tensors()) {
    CAPTURE(t.name);
    const gguf::TensorInfo* h = hot.FindTensor(t.name);
    REQUIRE(h != nullptr);
    REQUIRE(h->n_bytes == t.n_bytes);
    const bool same = std::memcmp(h->data, t.data, t.n_bytes) == 0;
    const bool scaled = t.name.find("ffn_norm") != std::string::npos ||
                        t.name.find("ffn_up") != std::string::npos;
    CHECK(same != scaled);
  }
}

TEST_CASE("synth: a hot model's forward pass stays finite at G = 4 and G = 16") {
  for (float gain : {4.0f, 16.0f}) {
    CAPTURE(gain);
    testing::TempDir dir;
    SynthSpec s;
    s.dim = 256;
    s.ffn = 768;
    s.layers = 4;
    s.heads = 4;
    s.kv_heads = 4;
    s.vocab = 512;
    s.type = TensorType::kQ8_0;
    s.hot_fraction = 0.1f;
    s.hot_gain = gain;
    WriteSyntheticModel(s, dir.File("hot.gguf"));
    std::unique_ptr<Model> model = Model::Open(dir.File("hot.gguf"));
    const std::vector<int32_t> tokens = model->tokenizer().Encode("Once upon a time there was", true);
    REQUIRE(tokens.size() > 2);
    Session session(*model, 64);
    const float* logits = session.Eval(tokens.data(), tokens.size(), true);
    const size_t n = tokens.size() * s.vocab;
    CHECK(std::all_of(logits, logits + n, [](float v) { return std::isfinite(v); }));
    // Not collapsed to a constant either.
    CHECK(*std::max_element(logits, logits + n) > *std::min_element(logits, logits + n));
  }
}
