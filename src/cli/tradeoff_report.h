// The outputs of `sparrow tradeoff`: one point per (policy, density), written
// as CSV and as two standalone SVG plots (perplexity against density, and
// perplexity against decoding speed) that open in any browser.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace sparrow::cli {

struct TradeoffPoint {
  std::string policy;
  double density = 1.0;
  double gamma = NAN;  // dip-ca only
  bool reachable = true;
  std::string note;  // why an unreachable point was skipped
  double ppl = NAN;
  double ppl_stderr = NAN;
  double needed_bytes_per_token = NAN;  // FFN weight bytes a decode token uses
  double flash_bytes_per_token = NAN;   // of which read from flash (cache misses)
  double hit_rate = NAN;
  double tokens_per_second = NAN;
  double topk_overlap = NAN;
  uint64_t dram_budget = 0;  // 0: no budget
  double cache_fraction = NAN;  // units the caches hold / the FFN's units
};

// Header plus one row per point; empty cells for figures that were not
// measured; the note is quoted as CSV requires.
std::string TradeoffCsv(const std::vector<TradeoffPoint>& points);

// One series per policy, joined in order of density; unreachable points and
// non-finite figures are left out. Perplexity is on a log scale.
std::string PerplexityVsDensitySvg(const std::vector<TradeoffPoint>& points,
                                   const std::string& title);
std::string PerplexityVsSpeedSvg(const std::vector<TradeoffPoint>& points,
                                 const std::string& title);

}  // namespace sparrow::cli
