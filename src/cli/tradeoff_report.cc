#include "src/cli/tradeoff_report.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <functional>
#include <map>

namespace sparrow::cli {
namespace {

std::string Number(double v, const char* format = "%.6g") {
  if (!std::isfinite(v)) return "";
  char text[64];
  std::snprintf(text, sizeof(text), format, v);
  return text;
}

std::string CsvQuoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string XmlEscaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// A plot axis over [lo, hi], linear or log10, mapped onto pixels [p0, p1].
struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
  double p0 = 0, p1 = 1;

  double T(double v) const { return log ? std::log10(v) : v; }
  double Pixel(double v) const {
    return p0 + (T(v) - T(lo)) / (T(hi) - T(lo)) * (p1 - p0);
  }

  // Round steps of 1, 2 or 5 × 10^k (linear), or 1, 2, 5 per decade (log).
  std::vector<double> Ticks() const {
    std::vector<double> ticks;
    if (log) {
      for (double decade = std::pow(10.0, std::floor(std::log10(lo))); decade <= hi; decade *= 10) {
        for (double m : {1.0, 2.0, 5.0}) {
          const double t = m * decade;
          if (t >= lo * (1 - 1e-9) && t <= hi * (1 + 1e-9)) ticks.push_back(t);
        }
      }
      return ticks;
    }
    const double raw = (hi - lo) / 5;
    const double base = std::pow(10.0, std::floor(std::log10(raw)));
    double step = base;
    for (double m : {1.0, 2.0, 5.0, 10.0}) {
      if (m * base >= raw) { step = m * base; break; }
    }
    for (double t = std::ceil(lo / step - 1e-9) * step; t <= hi + step * 1e-9; t += step) {
      ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
    }
    return ticks;
  }
};

// The range of the values, widened a little so no point sits on the frame;
// a log axis needs positive values and is used only if they span > 3×.
Axis FitAxis(const std::vector<double>& values, bool prefer_log) {
  Axis a;
  if (values.empty()) return a;
  double lo = *std::min_element(values.begin(), values.end());
  double hi = *std::max_element(values.begin(), values.end());
  a.log = prefer_log && lo > 0 && hi / lo > 3;
  if (a.log) {
    a.lo = lo / 1.15;
    a.hi = hi * 1.15;
    return a;
  }
  if (hi - lo < 1e-12 * std::max(1.0, std::abs(hi))) {
    const double pad = std::max(std::abs(hi) * 0.1, 1e-3);
    lo -= pad;
    hi += pad;
  }
  const double pad = (hi - lo) * 0.06;
  a.lo = lo - pad;
  a.hi = hi + pad;
  if (lo >= 0 && a.lo < 0) a.lo = 0;
  return a;
}

std::string SeriesName(const TradeoffPoint& p) {
  if (std::isfinite(p.gamma)) return p.policy + " (γ=" + Number(p.gamma, "%g") + ")";
  return p.policy;
}

// Distinguishable on white, in the order series first appear.
constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                   "#9467bd", "#8c564b", "#e377c2", "#17becf"};

// Both plots show perplexity (log scale when it spans more than 3×)
// against one of a point's figures.
struct PlotSpec {
  std::string title;
  std::string x_label;
  std::function<double(const TradeoffPoint&)> x;
  bool x_log = false;
};

std::string ScatterSvg(const std::vector<TradeoffPoint>& points, const PlotSpec& spec) {
  constexpr int kWidth = 760, kHeight = 480;
  constexpr int kLeft = 80, kRight = 190, kTop = 50, kBottom = 60;

  // Series in order of first appearance; each keeps its drawable points.
  std::vector<std::string> order;
  // Each point keeps its density: a series is drawn in order of density,
  // a curve through the policy's settings even where x is not monotonic.
  std::map<std::string, std::vector<std::array<double, 3>>> series;
  std::vector<double> xs, ys;
  for (const TradeoffPoint& p : points) {
    const std::string name = SeriesName(p);
    if (!series.count(name)) order.push_back(name);
    std::vector<std::array<double, 3>>& s = series[name];
    const double x = spec.x(p), y = p.ppl;
    if (!p.reachable || !std::isfinite(x) || !std::isfinite(y) || y <= 0) continue;
    if (spec.x_log && x <= 0) continue;
    s.push_back({p.density, x, y});
    xs.push_back(x);
    ys.push_back(y);
  }
  Axis ax = FitAxis(xs, spec.x_log);
  Axis ay = FitAxis(ys, true);
  ax.p0 = kLeft;
  ax.p1 = kWidth - kRight;
  ay.p0 = kHeight - kBottom;
  ay.p1 = kTop;

  std::string svg;
  auto add = [&svg](const std::string& s) { svg += s; svg += '\n'; };
  add("<?xml version=\"1.0\" encoding=\"UTF-8\"?>");
  add("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(kWidth) +
      "\" height=\"" + std::to_string(kHeight) + "\" viewBox=\"0 0 " + std::to_string(kWidth) +
      " " + std::to_string(kHeight) + "\" font-family=\"sans-serif\" font-size=\"12\">");
  add("<rect width=\"100%\" height=\"100%\" fill=\"white\"/>");
  add("<text x=\"" + Number(kWidth / 2.0) + "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">" +
      XmlEscaped(spec.title) + "</text>");
  // Frame, grid and tick labels.
  add("<rect x=\"" + Number(ax.p0) + "\" y=\"" + Number(ay.p1) + "\" width=\"" +
      Number(ax.p1 - ax.p0) + "\" height=\"" + Number(ay.p0 - ay.p1) +
      "\" fill=\"none\" stroke=\"#333\"/>");
  if (!xs.empty()) {
    for (double t : ax.Ticks()) {
      const std::string px = Number(ax.Pixel(t), "%.2f");
      add("<line x1=\"" + px + "\" y1=\"" + Number(ay.p1) + "\" x2=\"" + px + "\" y2=\"" +
          Number(ay.p0) + "\" stroke=\"#ddd\"/>");
      add("<text x=\"" + px + "\" y=\"" + Number(ay.p0 + 16) + "\" text-anchor=\"middle\">" +
          Number(t, "%g") + "</text>");
    }
    for (double t : ay.Ticks()) {
      const std::string py = Number(ay.Pixel(t), "%.2f");
      add("<line x1=\"" + Number(ax.p0) + "\" y1=\"" + py + "\" x2=\"" + Number(ax.p1) +
          "\" y2=\"" + py + "\" stroke=\"#ddd\"/>");
      add("<text x=\"" + Number(ax.p0 - 6) + "\" y=\"" + py +
          "\" text-anchor=\"end\" dominant-baseline=\"middle\">" + Number(t, "%g") + "</text>");
    }
  } else {
    add("<text x=\"" + Number((ax.p0 + ax.p1) / 2) + "\" y=\"" + Number((ay.p0 + ay.p1) / 2) +
        "\" text-anchor=\"middle\">no measured points</text>");
  }
  add("<text x=\"" + Number((ax.p0 + ax.p1) / 2) + "\" y=\"" + Number(kHeight - 18) +
      "\" text-anchor=\"middle\">" + XmlEscaped(spec.x_label) + "</text>");
  add("<text transform=\"translate(20," + Number((ay.p0 + ay.p1) / 2) +
      ") rotate(-90)\" text-anchor=\"middle\">" + XmlEscaped(std::string("perplexity") + (ay.log ? " (log scale)" : "")) +
      "</text>");

  // Series: a line through the points in order of x, a dot at each, and a
  // legend entry (also for series with nothing measured, marked as such).
  for (size_t i = 0; i < order.size(); ++i) {
    const char* color = kColors[i % (sizeof(kColors) / sizeof(kColors[0]))];
    std::vector<std::array<double, 3>> s = series[order[i]];
    std::sort(s.begin(), s.end());
    if (s.size() > 1) {
      std::string path;
      for (const auto& [density, x, y] : s) {
        path += Number(ax.Pixel(x), "%.2f") + "," + Number(ay.Pixel(y), "%.2f") + " ";
      }
      add("<polyline fill=\"none\" stroke=\"" + std::string(color) +
          "\" stroke-width=\"2\" points=\"" + path + "\"/>");
    }
    for (const auto& [density, x, y] : s) {
      add("<circle cx=\"" + Number(ax.Pixel(x), "%.2f") + "\" cy=\"" + Number(ay.Pixel(y), "%.2f") +
          "\" r=\"4\" fill=\"" + color + "\"><title>" + XmlEscaped(order[i]) + ": " +
          Number(x, "%g") + ", " + Number(y, "%.4g") + "</title></circle>");
    }
    const double ly = kTop + 10 + 20.0 * static_cast<double>(i);
    const double lx = kWidth - kRight + 16;
    add("<line x1=\"" + Number(lx) + "\" y1=\"" + Number(ly) + "\" x2=\"" + Number(lx + 22) +
        "\" y2=\"" + Number(ly) + "\" stroke=\"" + color + "\" stroke-width=\"2\"/>");
    add("<circle cx=\"" + Number(lx + 11) + "\" cy=\"" + Number(ly) + "\" r=\"4\" fill=\"" + color +
        "\"/>");
    add("<text x=\"" + Number(lx + 30) + "\" y=\"" + Number(ly) +
        "\" dominant-baseline=\"middle\">" + XmlEscaped(order[i]) +
        (s.empty() ? " (no points)" : "") + "</text>");
  }
  add("</svg>");
  return svg;
}

}  // namespace

std::string TradeoffCsv(const std::vector<TradeoffPoint>& points) {
  std::string csv =
      "policy,density,gamma,reachable,perplexity,perplexity_stderr,needed_bytes_per_token,"
      "flash_bytes_per_token,hit_rate,tokens_per_second,topk_overlap,dram_budget,cache_fraction,"
      "note\n";
  for (const TradeoffPoint& p : points) {
    csv += p.policy + "," + Number(p.density) + "," + Number(p.gamma) + "," +
           (p.reachable ? "1" : "0") + "," + Number(p.ppl) + "," + Number(p.ppl_stderr) + "," +
           Number(p.needed_bytes_per_token, "%.0f") + "," +
           Number(p.flash_bytes_per_token, "%.0f") + "," + Number(p.hit_rate) + "," +
           Number(p.tokens_per_second) + "," + Number(p.topk_overlap) + "," +
           std::to_string(p.dram_budget) + "," + Number(p.cache_fraction) + "," +
           (p.note.empty() ? "" : CsvQuoted(p.note)) + "\n";
  }
  return csv;
}

std::string PerplexityVsDensitySvg(const std::vector<TradeoffPoint>& points,
                                   const std::string& title) {
  return ScatterSvg(points, {"Perplexity against MLP density: " + title,
                             "MLP density (fraction of FFN weight bytes per token)",
                             [](const TradeoffPoint& p) { return p.density; }});
}

std::string PerplexityVsSpeedSvg(const std::vector<TradeoffPoint>& points,
                                 const std::string& title) {
  return ScatterSvg(points, {"Perplexity against decoding speed: " + title,
                             "decoding speed (tokens/s)",
                             [](const TradeoffPoint& p) { return p.tokens_per_second; }});
}

}  // namespace sparrow::cli
