#include "src/runtime/eviction.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/error.h"

// Failure messages show the unit lists.
template <>
struct doctest::StringMaker<std::vector<uint32_t>> {
  static doctest::String convert(const std::vector<uint32_t>& units) {
    std::string text = "{";
    for (size_t i = 0; i < units.size(); ++i) text += (i ? ", " : "") + std::to_string(units[i]);
    return (text + "}").c_str();
  }
};

namespace sparrow {
namespace {

using Units = std::vector<uint32_t>;

Units ExpiredOf(EvictionPolicy& policy, const Units& cached) {
  Units out = {999};  // must be replaced, not appended to
  policy.Expired(cached, &out);
  return out;
}

Units VictimsOf(EvictionPolicy& policy, const Units& candidates, size_t count) {
  Units out = {999};
  policy.ChooseVictims(candidates, count, &out);
  return out;
}

TEST_CASE("ParseEvictionKind") {
  CHECK(ParseEvictionKind("window") == EvictionKind::kWindow);
  CHECK(ParseEvictionKind("lru") == EvictionKind::kLru);
  CHECK(ParseEvictionKind("lfu") == EvictionKind::kLfu);
  for (const char* bad : {"", "LRU", "fifo", "window "}) {
    CAPTURE(bad);
    try {
      ParseEvictionKind(bad);
      FAIL("expected InputError");
    } catch (const InputError& e) {
      const std::string message = e.what();
      CHECK(message.find("--cache") != std::string::npos);
      CHECK(message.find("window, lru or lfu") != std::string::npos);
    }
  }
  CHECK(std::string(EvictionKindName(EvictionKind::kWindow)) == "window");
  CHECK(std::string(EvictionKindName(EvictionKind::kLru)) == "lru");
  CHECK(std::string(EvictionKindName(EvictionKind::kLfu)) == "lfu");
}

TEST_CASE("window K=2: used at token 1, not at 2 or 3, expires at token 4") {
  auto policy = MakeEvictionPolicy(EvictionKind::kWindow, 10, 2);
  CHECK(policy->kind() == EvictionKind::kWindow);
  policy->BeginToken(1);
  policy->OnUse(5);
  policy->OnUse(6);
  CHECK(ExpiredOf(*policy, {5, 6}).empty());
  policy->BeginToken(2);
  policy->OnUse(6);
  CHECK(ExpiredOf(*policy, {5, 6}).empty());  // window 0..1 holds both
  policy->BeginToken(3);
  CHECK(ExpiredOf(*policy, {5, 6}).empty());  // window 1..2 holds both
  policy->BeginToken(4);
  CHECK(ExpiredOf(*policy, {5, 6}) == Units{5});  // window 2..3: only 6
  policy->BeginToken(5);
  CHECK(ExpiredOf(*policy, {6, 5}) == Units{6, 5});  // in the order given
}

TEST_CASE("window: the current token's uses are never expired; never-used units are") {
  auto policy = MakeEvictionPolicy(EvictionKind::kWindow, 10, 2);
  policy->BeginToken(1);
  policy->OnUse(1);
  policy->BeginToken(7);
  policy->OnUse(1);  // a hit of token 7, reported before Expired is asked
  CHECK(ExpiredOf(*policy, {1, 2, 3}) == Units{2, 3});
  // A gap in token numbers counts as tokens that used nothing.
  policy->BeginToken(9);
  CHECK(ExpiredOf(*policy, {1}).empty());  // window 7..8
  policy->BeginToken(10);
  CHECK(ExpiredOf(*policy, {1}) == Units{1});  // window 8..9
}

TEST_CASE("window K=0 keeps nothing across tokens; K=1 keeps the previous token") {
  auto none = MakeEvictionPolicy(EvictionKind::kWindow, 4, 0);
  auto one = MakeEvictionPolicy(EvictionKind::kWindow, 4, 1);
  for (auto* policy : {none.get(), one.get()}) {
    policy->BeginToken(0);
    policy->OnUse(0);
    policy->OnUse(1);
    CHECK(ExpiredOf(*policy, {0, 1}).empty());
    policy->BeginToken(1);
    policy->OnUse(1);
  }
  CHECK(ExpiredOf(*none, {0, 1}) == Units{0});
  CHECK(ExpiredOf(*one, {0, 1}).empty());
  none->BeginToken(2);
  one->BeginToken(2);
  CHECK(ExpiredOf(*none, {0, 1}) == Units{0, 1});
  CHECK(ExpiredOf(*one, {0, 1}) == Units{0});
}

TEST_CASE("lru and lfu never expire units") {
  for (EvictionKind kind : {EvictionKind::kLru, EvictionKind::kLfu}) {
    auto policy = MakeEvictionPolicy(kind, 4, 1);
    policy->BeginToken(0);
    policy->OnUse(0);
    policy->BeginToken(100);
    CHECK(ExpiredOf(*policy, {0, 1, 2, 3}).empty());
  }
}

TEST_CASE("lru victim order on a hand-built sequence") {
  for (EvictionKind kind : {EvictionKind::kLru, EvictionKind::kWindow}) {
    CAPTURE(EvictionKindName(kind));
    auto policy = MakeEvictionPolicy(kind, 8, 100);
    policy->BeginToken(0);
    policy->OnUse(1);
    policy->OnUse(2);
    policy->OnUse(3);
    policy->BeginToken(1);
    policy->OnUse(2);
    policy->BeginToken(2);
    policy->OnUse(4);
    policy->OnUse(1);
    // Oldest first: 3 (token 0), 2 (token 1), 4 then 1 (token 2, call order).
    CHECK(VictimsOf(*policy, {1, 2, 3, 4}, 2) == Units{3, 2});
    CHECK(VictimsOf(*policy, {4, 3, 2, 1}, 4) == Units{3, 2, 4, 1});
    CHECK(VictimsOf(*policy, {1, 2, 3, 4}, 10) == Units{3, 2, 4, 1});  // fewer exist
    CHECK(VictimsOf(*policy, {1, 4}, 1) == Units{4});
    CHECK(VictimsOf(*policy, {1, 4}, 0).empty());
    CHECK(VictimsOf(*policy, {}, 3).empty());
    // Never-used units are the least recent of all, in unit order.
    CHECK(VictimsOf(*policy, {1, 7, 3, 0}, 3) == Units{0, 7, 3});
    // Removal does not change what is known about a unit.
    policy->OnRemove(3);
    CHECK(VictimsOf(*policy, {1, 2, 3, 4}, 1) == Units{3});
  }
}

TEST_CASE("lfu victim order on a hand-built sequence") {
  auto policy = MakeEvictionPolicy(EvictionKind::kLfu, 8, 0);
  CHECK(policy->kind() == EvictionKind::kLfu);
  const std::vector<Units> tokens = {{1, 2, 3}, {1, 2}, {1, 3}, {4}};
  for (size_t t = 0; t < tokens.size(); ++t) {
    policy->BeginToken(t);
    for (uint32_t unit : tokens[t]) policy->OnUse(unit);
  }
  // Uses: 1 x3, 2 x2 (last token 1), 3 x2 (last token 2), 4 x1.
  CHECK(VictimsOf(*policy, {1, 2, 3, 4}, 4) == Units{4, 2, 3, 1});
  CHECK(VictimsOf(*policy, {1, 2, 3}, 1) == Units{2});
  // Many uses within one token count once, but refresh recency.
  policy->BeginToken(4);
  for (int i = 0; i < 5; ++i) policy->OnUse(4);
  CHECK(VictimsOf(*policy, {1, 2, 3, 4}, 4) == Units{2, 3, 4, 1});
  // 2 gets token 4 as its third token: it ties 1 on count and is more recent.
  policy->OnUse(2);
  CHECK(VictimsOf(*policy, {1, 2, 3, 4}, 4) == Units{3, 4, 1, 2});
  // An evicted hot unit keeps its count: back with 4 tokens, it goes last.
  policy->OnRemove(1);
  policy->BeginToken(5);
  policy->OnUse(1);
  CHECK(VictimsOf(*policy, {1, 2, 3, 4}, 4) == Units{3, 4, 2, 1});
  // Never used: frequency 0, first.
  CHECK(VictimsOf(*policy, {1, 6, 2, 5}, 2) == Units{5, 6});
}

TEST_CASE("policies reject misuse") {
  for (EvictionKind kind : {EvictionKind::kWindow, EvictionKind::kLru, EvictionKind::kLfu}) {
    auto policy = MakeEvictionPolicy(kind, 4, 2);
    CHECK(policy->memory_bytes() == EvictionPolicyMemoryBytes(kind, 4));
    CHECK(policy->memory_bytes() == 4 * 40);
    policy->BeginToken(3);
    CHECK_THROWS_AS(policy->BeginToken(3), std::logic_error);
    CHECK_THROWS_AS(policy->BeginToken(2), std::logic_error);
    policy->BeginToken(4);
    Units out;
    CHECK_THROWS_AS(policy->OnUse(4), std::out_of_range);
    CHECK_THROWS_AS(policy->OnRemove(4), std::out_of_range);
    CHECK_THROWS_AS(policy->ChooseVictims({0, 4}, 1, &out), std::out_of_range);
    if (kind == EvictionKind::kWindow) {
      CHECK_THROWS_AS(policy->Expired({4}, &out), std::out_of_range);
    }
  }
}

// The reference: the full history of uses, from which recency, frequency
// and the window are recomputed from scratch for every question.
struct History {
  struct Use {
    uint64_t token;
    uint32_t unit;
  };
  std::vector<Use> uses;

  // Position of the last use (recency), or -1.
  long LastUse(uint32_t unit) const {
    for (long i = static_cast<long>(uses.size()) - 1; i >= 0; --i) {
      if (uses[static_cast<size_t>(i)].unit == unit) return i;
    }
    return -1;
  }
  size_t DistinctTokens(uint32_t unit) const {
    std::set<uint64_t> tokens;
    for (const Use& use : uses) {
      if (use.unit == unit) tokens.insert(use.token);
    }
    return tokens.size();
  }
  bool UsedBetween(uint32_t unit, uint64_t first, uint64_t last) const {
    for (const Use& use : uses) {
      if (use.unit == unit && use.token >= first && use.token <= last) return true;
    }
    return false;
  }
};

TEST_CASE("random sequences against a history-replaying reference") {
  std::mt19937_64 rng(42);
  for (EvictionKind kind : {EvictionKind::kWindow, EvictionKind::kLru, EvictionKind::kLfu}) {
    for (uint32_t window : {0u, 1u, 3u, 8u}) {
      CAPTURE(EvictionKindName(kind));
      CAPTURE(window);
      const uint32_t n_units = 40;
      auto policy = MakeEvictionPolicy(kind, n_units, window);
      History history;
      uint64_t token = rng() % 3;
      for (int step = 0; step < 120; ++step) {
        token += 1 + (rng() % 5 == 0 ? rng() % 3 : 0);  // occasional gaps
        policy->BeginToken(token);
        // A token uses a random subset, skewed to low unit ids (hot units).
        const size_t n_used = rng() % 12;
        for (size_t i = 0; i < n_used; ++i) {
          const uint32_t unit = static_cast<uint32_t>((rng() % n_units) * (rng() % n_units) / n_units);
          policy->OnUse(unit);
          history.uses.push_back({token, unit});
        }
        Units cached;
        for (uint32_t unit = 0; unit < n_units; ++unit) {
          if (rng() % 2) cached.push_back(unit);
        }
        std::shuffle(cached.begin(), cached.end(), rng);

        Units expected_expired;
        if (kind == EvictionKind::kWindow) {
          const uint64_t first = token >= window ? token - window : 0;
          for (uint32_t unit : cached) {
            if (!history.UsedBetween(unit, first, token)) expected_expired.push_back(unit);
          }
        }
        CHECK(ExpiredOf(*policy, cached) == expected_expired);

        Units expected = cached;
        std::sort(expected.begin(), expected.end(), [&](uint32_t a, uint32_t b) {
          if (kind == EvictionKind::kLfu) {
            const size_t fa = history.DistinctTokens(a), fb = history.DistinctTokens(b);
            if (fa != fb) return fa < fb;
          }
          const long ra = history.LastUse(a), rb = history.LastUse(b);
          return ra != rb ? ra < rb : a < b;
        });
        const size_t count = rng() % (cached.size() + 2);
        expected.resize(std::min(count, expected.size()));
        CHECK(VictimsOf(*policy, cached, count) == expected);
        if (!cached.empty() && rng() % 3 == 0) policy->OnRemove(cached[0]);
      }
    }
  }
}

}  // namespace
}  // namespace sparrow
