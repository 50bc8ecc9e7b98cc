// Small pieces every benchmark shares: list parsing for flags and the
// machine facts printed above each table.
#pragma once

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

}  // namespace sparrow::bench
