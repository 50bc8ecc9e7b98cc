#include "simd/targets.h"

#include <doctest/doctest.h>

#include <set>

TEST_CASE("every available target can be forced and is then dispatched") {
  using namespace sparrow::simd;
  const std::vector<Target> targets = AvailableTargets();
  REQUIRE(!targets.empty());
  std::set<std::string> seen;
  ForEachTarget([&](const Target& t) {
    CHECK(CurrentTargetName() == t.name);
    seen.insert(CurrentTargetName());
  });
  CHECK(seen.size() == targets.size());
  // Restored afterwards: the best target is chosen again.
  CHECK(CurrentTargetName() == targets.front().name);
}
