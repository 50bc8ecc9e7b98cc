#include "benchmarks/bench_util.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "base/huge_pages.h"

namespace sparrow::bench {

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, sep)) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

bool HugePagesFromFlag(const std::string& pages) {
  if (pages != "huge" && pages != "small") {
    ThrowInputError("unknown --pages '", pages, "' (want huge, small)");
  }
  return pages == "huge" && TransparentHugePagesAvailable();
}

std::string CpuModel() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown";
}

std::string LoadAverage() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  if (!(f >> a >> b >> c)) return "unknown";
  return a + " " + b + " " + c;
}

double MedianPairedRatio(const std::vector<double>& rates, const std::vector<double>& probe_rates) {
  if (rates.empty() || probe_rates.size() != rates.size() + 1) {
    throw std::logic_error(StrCat("MedianPairedRatio: ", rates.size(), " rates and ",
                                  probe_rates.size(), " probe passes"));
  }
  std::vector<double> ratios(rates.size());
  for (size_t r = 0; r < rates.size(); ++r) {
    ratios[r] = rates[r] / (0.5 * (probe_rates[r] + probe_rates[r + 1]));
  }
  std::nth_element(ratios.begin(), ratios.begin() + ratios.size() / 2, ratios.end());
  return ratios[ratios.size() / 2];
}

}  // namespace sparrow::bench
