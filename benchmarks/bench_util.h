// Small pieces every benchmark shares: list parsing for flags, the
// machine facts printed above each table and the rotation of data copies.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace sparrow::bench {

// "a,b,,c" -> {"a", "b", "c"}: empty items are dropped.
std::vector<std::string> Split(const std::string& s, char sep = ',');

// The CPU's model name from /proc/cpuinfo, or "unknown".
std::string CpuModel();

// The three load averages from /proc/loadavg ("1.20 0.85 0.60"), or
// "unknown": a busy neighbour shows there.
std::string LoadAverage();

// The --pages flag of the benchmarks that read weights: "huge" (the default:
// their data and the probe on huge pages, as the engine's are) or "small".
// Whether to advise huge pages: "huge" where the system has them.
// std::invalid_argument (an input error) for any other value.
bool HugePagesFromFlag(const std::string& pages);

// The order in which repetitions take the copies of their data (gemv_bench's
// matrices, gather_bench's caches), which together are several times the
// last-level cache so that each repetition reads from DRAM: every copy but
// copy 0 in turn, carried on from case to case. Starting each case at copy
// 1 again would reread what the case before had just left in the
// last-level cache. Copy 0 is for the checks before timing.
class CopyRotation {
 public:
  explicit CopyRotation(size_t copies) : copies_(copies) {}  // copies >= 2
  size_t Next() { return 1 + next_++ % (copies_ - 1); }

 private:
  size_t copies_, next_ = 0;
};

// The figure a benchmark gives as "% of probe": the median over repetitions
// of rates[r] / the mean of probe_rates[r] and probe_rates[r + 1], the probe
// passes just before and just after repetition r (so probe_rates holds one
// more than rates). On a shared machine a neighbour's busy spell slows the
// passes it overlaps; the kernel and the probe beside it then fall together,
// where the median of each alone can come from different spells and put
// the ratio far off (gemv_bench on a 2 vCPU VM gave 130-159% in such runs).
double MedianPairedRatio(const std::vector<double>& rates, const std::vector<double>& probe_rates);

}  // namespace sparrow::bench
