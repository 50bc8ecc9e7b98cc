// The context a loaded model reserves: -c when given; otherwise the model's
// own (at most 4096), cut to what the caller says it will use (sparrow run:
// its prompt and -n), so a budget is not spent on KV cache no token reaches.
#include <doctest/doctest.h>

#include "src/engine.h"
#include "tests/shared_path.h"

using namespace sparrow;

using testing::SharedPath;

namespace {

size_t ContextOf(size_t n_ctx, size_t used_at_most) {
  EngineOptions options;
  options.n_ctx = n_ctx;
  options.n_ctx_used_at_most = used_at_most;
  return OpenModel(SharedPath("models/stories260K.gguf"), options).n_ctx;
}

}  // namespace

TEST_CASE("context: the model's by default, cut to the positions a run can use, -c as given") {
  // stories260K's trained context is 2048 tokens.
  CHECK(ContextOf(0, 0) == 2048);
  CHECK(ContextOf(0, 40) == 40);
  CHECK(ContextOf(0, 2048) == 2048);
  CHECK(ContextOf(0, 100000) == 2048);  // never past the default
  CHECK(ContextOf(64, 40) == 64);       // -c wins
  CHECK(ContextOf(3000, 40) == 3000);   // -c past the trained context too (with a warning)
}
