#include "benchmarks/bench_util.h"

#include <doctest/doctest.h>

#include <stdexcept>
#include <vector>

namespace sparrow::bench {
namespace {

TEST_CASE("MedianPairedRatio compares each repetition with the probe passes beside it") {
  // A busy spell halves repetitions 2-4 and the probe passes between them
  // (3 and 4): the medians alone would give 9 / 20 (45%); each repetition
  // against its neighbours gives 90%, 90%, 60% (between 20 and 10), 90%
  // and 60%, whose median is 90%.
  const std::vector<double> rates = {18, 18, 9, 9, 9};
  const std::vector<double> probe = {20, 20, 20, 10, 10, 20};
  CHECK(MedianPairedRatio(rates, probe) == doctest::Approx(0.9));
  // The probe's rate around a repetition is the mean of the two passes.
  CHECK(MedianPairedRatio({10}, {10, 30}) == doctest::Approx(0.5));
  // The median, not the mean: one outlier moves nothing.
  CHECK(MedianPairedRatio({9, 1000, 9}, {10, 10, 10, 10}) == doctest::Approx(0.9));
}

TEST_CASE("MedianPairedRatio wants one probe pass more than repetitions") {
  CHECK_THROWS_AS(MedianPairedRatio({1, 2}, {1, 2}), std::logic_error);
  CHECK_THROWS_AS(MedianPairedRatio({}, {1}), std::logic_error);
}

}  // namespace
}  // namespace sparrow::bench
