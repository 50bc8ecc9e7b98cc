#include "src/cli/tradeoff_report.h"

#include <doctest/doctest.h>

#include <cctype>
#include <sstream>

namespace sparrow::cli {
namespace {

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A non-finite number printed into the SVG ("nan", "-inf"), not a word
// that happens to contain the letters (dominant-baseline).
bool HasNonFinite(const std::string& svg) {
  for (const char* word : {"nan", "inf"}) {
    for (size_t at = svg.find(word); at != std::string::npos; at = svg.find(word, at + 1)) {
      if (at == 0 || !std::isalpha(static_cast<unsigned char>(svg[at - 1]))) return true;
    }
  }
  return false;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TradeoffPoint Point(const std::string& policy, double density, double ppl, double tps) {
  TradeoffPoint p;
  p.policy = policy;
  p.density = density;
  p.ppl = ppl;
  p.tokens_per_second = tps;
  p.needed_bytes_per_token = 4000 * density;
  p.flash_bytes_per_token = 1000 * density;
  p.hit_rate = 0.5;
  return p;
}

std::vector<TradeoffPoint> Sweep() {
  std::vector<TradeoffPoint> points = {Point("dense", 1.0, 3.94, 10), Point("dip", 0.5, 6.2, 18),
                                       Point("dip", 0.9, 3.95, 11), Point("dip", 0.3, 44.6, 25)};
  TradeoffPoint ca = Point("dip-ca", 0.5, 7.0, 22);
  ca.gamma = 0.2;
  points.push_back(ca);
  TradeoffPoint skipped;
  skipped.policy = "glu";
  skipped.density = 0.5;
  skipped.reachable = false;
  skipped.note = "glu needs \"density\" >= 0.667, got 0.5";
  points.push_back(skipped);
  return points;
}

TEST_CASE("tradeoff CSV: one row per point, empty cells for what was not measured") {
  const std::vector<std::string> lines = Lines(TradeoffCsv(Sweep()));
  REQUIRE(lines.size() == 7);
  CHECK(lines[0].rfind("policy,density,gamma,reachable,perplexity,", 0) == 0);
  CHECK(lines[1] == "dense,1,,1,3.94,,4000,1000,0.5,10,,0,,");
  CHECK(lines[5].rfind("dip-ca,0.5,0.2,1,7,", 0) == 0);
  // The note is quoted, its quotes doubled, so the comma inside stays in one cell.
  CHECK(lines[6] == "glu,0.5,,0,,,,,,,,0,,\"glu needs \"\"density\"\" >= 0.667, got 0.5\"");
}

TEST_CASE("tradeoff SVG: series per policy, unreachable points left out, text escaped") {
  const std::string svg = PerplexityVsDensitySvg(Sweep(), "a<b & c");
  CHECK(svg.rfind("<?xml", 0) == 0);
  CHECK(svg.find("</svg>") != std::string::npos);
  CHECK(svg.find("a&lt;b &amp; c") != std::string::npos);
  CHECK(svg.find("a<b") == std::string::npos);
  // Five measured points plus four legend markers (dense, dip, dip-ca, glu).
  CHECK(Count(svg, "<circle") == 5 + 4);
  // Only dip has more than one point, so only it gets a line.
  CHECK(Count(svg, "<polyline") == 1);
  CHECK(svg.find("glu (no points)") != std::string::npos);
  CHECK(svg.find("dip-ca (γ=0.2)") != std::string::npos);
  // Perplexities from 3.94 to 44.6 span more than 3×: a log axis with a tick at 10.
  CHECK(svg.find("perplexity (log scale)") != std::string::npos);
  CHECK(svg.find(">10</text>") != std::string::npos);
}

TEST_CASE("tradeoff SVG: the speed plot places points by tokens/s, dip's line in order of density") {
  const std::string svg = PerplexityVsSpeedSvg(Sweep(), "m");
  const size_t at = svg.find("<polyline");
  REQUIRE(at != std::string::npos);
  const size_t start = svg.find("points=\"", at) + 8;
  std::stringstream in(svg.substr(start, svg.find('"', start) - start));
  std::vector<double> xs;
  for (std::string pair; in >> pair;) xs.push_back(std::stod(pair.substr(0, pair.find(','))));
  REQUIRE(xs.size() == 3);
  // Densities 0.3, 0.5, 0.9 ran at 25, 18 and 11 tok/s: right to left.
  CHECK(xs[0] > xs[1]);
  CHECK(xs[1] > xs[2]);
  CHECK(svg.find("decoding speed (tokens/s)") != std::string::npos);
}

TEST_CASE("tradeoff SVG: nothing measured still gives a valid plot that says so") {
  std::vector<TradeoffPoint> points(1);
  points[0].policy = "up";
  points[0].reachable = false;
  const std::string svg = PerplexityVsDensitySvg(points, "empty");
  CHECK(svg.find("no measured points") != std::string::npos);
  CHECK_FALSE(HasNonFinite(svg));
}

TEST_CASE("tradeoff SVG: equal values get a linear axis around them, not a division by zero") {
  std::vector<TradeoffPoint> points = {Point("dip", 0.5, 5.0, 10), Point("dip", 0.7, 5.0, 10)};
  const std::string svg = PerplexityVsSpeedSvg(points, "flat");
  CHECK_FALSE(HasNonFinite(svg));
  CHECK(svg.find("log scale") == std::string::npos);
  CHECK(Count(svg, "<circle") == 2 + 1);
}

}  // namespace
}  // namespace sparrow::cli
