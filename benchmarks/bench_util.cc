#include "benchmarks/bench_util.h"

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

}  // namespace sparrow::bench
