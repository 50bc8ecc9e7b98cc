#include "simd/targets.h"

#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <set>
#include <string>
#include <vector>

namespace sparrow::simd {
namespace {

TEST_CASE("every available target can be forced and is then dispatched") {
  const std::vector<Target> targets = AvailableTargets();
  REQUIRE(!targets.empty());
  // The best target is chosen even when the first thing a program does is
  // list targets (Highway 1.0.3 would otherwise skip SVE_256 / SVE2_128).
  CHECK(CurrentTargetName() == targets.front().name);
  std::set<std::string> seen;
  ForEachTarget([&](const Target& t) {
    CHECK(CurrentTargetName() == t.name);
    seen.insert(CurrentTargetName());
  });
  CHECK(seen.size() == targets.size());
  // Restored afterwards: the best target is chosen again.
  CHECK(CurrentTargetName() == targets.front().name);
}

TEST_CASE("CpuFeatures names something on every CPU we build for") {
  const std::string features = CpuFeatures();
  CHECK(!features.empty());
#if defined(__aarch64__) && defined(__linux__)
  // Every AArch64 Linux CPU has Advanced SIMD.
  CHECK(features.find("asimd") != std::string::npos);
#endif
}

// Prints, after each test case, the targets its ForEachTarget calls ran on,
// and at the end how many test cases covered every available target: the
// per-target evidence CI logs show (most useful under qemu, where the set
// depends on the emulated CPU). Registered in this file, so it runs in
// simd_tests.
struct TargetsListener : public doctest::IReporter {
  explicit TargetsListener(const doctest::ContextOptions&) {}

  void test_case_start(const doctest::TestCaseData& data) override {
    name_ = data.m_name;
    TakeTargetsVisited();  // drop anything left from outside a test case
  }
  void test_case_end(const doctest::CurrentTestCaseStats&) override {
    const std::vector<std::string> visited = TakeTargetsVisited();
    if (visited.empty()) return;
    const std::set<std::string> distinct(visited.begin(), visited.end());
    std::string line;
    for (const Target& t : AvailableTargets()) {
      if (distinct.count(t.name) != 0) line += " " + t.name;
    }
    std::printf("[targets]%s : %s\n", line.c_str(), name_.c_str());
    ++with_targets_;
    if (distinct.size() == AvailableTargets().size()) ++on_all_;
  }
  void test_run_end(const doctest::TestRunStats&) override {
    std::string all;
    for (const Target& t : AvailableTargets()) all += " " + t.name;
    std::printf("[targets] available:%s (cpu: %s); %d of %d per-target test "
                "cases ran on all of them\n",
                all.c_str(), CpuFeatures().c_str(), on_all_, with_targets_);
    std::fflush(stdout);
  }

  // SPARROW_SIMD_TARGET=A,B limits the run to those targets, e.g. to test
  // one SVE flavour per vector length under a slow emulator.
  void test_run_start() override {
    try {
      ApplyTargetFromEnvironment();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      std::exit(2);
    }
  }
  void report_query(const doctest::QueryData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}

  std::string name_;
  int with_targets_ = 0;
  int on_all_ = 0;
};
REGISTER_LISTENER("targets", 1, TargetsListener);

}  // namespace
}  // namespace sparrow::simd
