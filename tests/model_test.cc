// Model-level checks on the real stories260K model: the batched and the
// token-by-token paths agree, the fast and reference kernels agree, and bad
// input to a session is rejected.
#include "src/model/model.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/error.h"
#include "src/ops/ops.h"

using namespace sparrow;

namespace {

std::string SharedPath(const std::string& rel) {
  const char* dir = std::getenv("SPARROW_SHARED_DIR");
  REQUIRE_MESSAGE(dir != nullptr, "SPARROW_SHARED_DIR must point at ../shared");
  return std::string(dir) + "/" + rel;
}

double MaxAbsDiff(const float* a, const float* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::abs(double(a[i]) - b[i]));
  return m;
}

}  // namespace

TEST_CASE("stories260K: batch and single-token evaluation give the same logits") {
  std::unique_ptr<Model> model = Model::Open(SharedPath("models/stories260K.gguf"));
  const ModelConfig& c = model->config();
  CHECK(c.n_layers == 5);
  CHECK(c.d_model == 64);
  CHECK(c.n_vocab == 512);
  const std::vector<int32_t> tokens = model->tokenizer().Encode("Once upon a time, there was a cat", true);
  REQUIRE(tokens.size() > 8);

  Session batched(*model, 64);
  const float* all = batched.Eval(tokens.data(), tokens.size(), true);
  std::vector<float> all_copy(all, all + tokens.size() * c.n_vocab);

  Session single(*model, 64);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const float* logits = single.Eval(&tokens[i], 1, false);
    CHECK(MaxAbsDiff(logits, all_copy.data() + i * c.n_vocab, c.n_vocab) < 1e-3);
  }
  CHECK(single.n_past() == tokens.size());
}

TEST_CASE("stories260K: fast and reference kernels agree") {
  std::unique_ptr<Model> model = Model::Open(SharedPath("models/stories260K.gguf"));
  const std::vector<int32_t> tokens = model->tokenizer().Encode("The little dog ran to the park.", true);
  const size_t v = model->config().n_vocab;
  Session fast2(*model, 64);
  const float* f = fast2.Eval(tokens.data(), tokens.size(), true);
  std::vector<float> fast_logits(f, f + tokens.size() * v);
  ops::SetKernelMode(ops::KernelMode::kReference);
  Session ref(*model, 64);
  const float* r = ref.Eval(tokens.data(), tokens.size(), true);
  std::vector<float> ref_logits(r, r + tokens.size() * v);
  ops::SetKernelMode(ops::KernelMode::kFast);
  CHECK(MaxAbsDiff(fast_logits.data(), ref_logits.data(), fast_logits.size()) < 1e-3);
}

TEST_CASE("sessions reject out-of-range tokens and context overflow") {
  std::unique_ptr<Model> model = Model::Open(SharedPath("models/stories260K.gguf"));
  Session s(*model, 4);
  const int32_t bad[] = {1, 512};
  CHECK_THROWS_AS(s.Eval(bad, 2, false), InputError);
  const int32_t neg[] = {-1};
  CHECK_THROWS_AS(s.Eval(neg, 1, false), InputError);
  const int32_t five[] = {1, 2, 3, 4, 5};
  CHECK_THROWS_AS(s.Eval(five, 5, false), InputError);
  CHECK_NOTHROW(s.Eval(five, 4, false));
  CHECK_THROWS_AS(s.Eval(five, 1, false), InputError);
}

TEST_CASE("a missing model file is an InputError naming it") {
  try {
    Model::Open("/nonexistent/model.gguf");
    FAIL("expected InputError");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("/nonexistent/model.gguf") != std::string::npos);
  }
}
