// The fixtures in ../shared (models, corpora, reference outputs), found
// through SPARROW_SHARED_DIR, which `meson test` sets.
#pragma once

#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

namespace sparrow::testing {

// SPARROW_SHARED_DIR + "/" + relative; the test fails at once without it.
inline std::string SharedPath(const std::string& relative) {
  const char* dir = std::getenv("SPARROW_SHARED_DIR");
  REQUIRE_MESSAGE(dir != nullptr, "SPARROW_SHARED_DIR must point at ../shared");
  return std::string(dir) + "/" + relative;
}

}  // namespace sparrow::testing
