// sparrow simulate --trace FILE --device NAME: replays a streaming trace
// (--stats-json) against a device profile and predicts decode tokens/s with
// the I/O / memory management / compute split (src/runtime/simulator.h has
// the model and the profiles).
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "base/byte_size.h"
#include "base/error.h"
#include "src/cli/commands.h"
#include "src/cli/common.h"
#include "src/runtime/simulator.h"
#include "src/runtime/trace_reader.h"

namespace sparrow::cli {
namespace {

const char* OverlapName(Overlap o) { return o == Overlap::kSerial ? "serial" : "pipelined"; }

std::string FormatNumber(double v, int decimals) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.*f", decimals, v);
  return text;
}

std::string Ms(double seconds) { return FormatNumber(seconds * 1e3, 3); }

// Markdown cell "12.345 (61.2%)".
std::string MsShare(double seconds, double total) {
  if (!(total > 0)) return Ms(seconds);
  char text[64];
  std::snprintf(text, sizeof(text), "%.3f (%.1f%%)", seconds * 1e3, 100.0 * seconds / total);
  return text;
}

nlohmann::ordered_json NumberOrNull(double v, bool present) {
  return present ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
}

void PrintMarkdown(const std::string& trace_path, const Trace& trace, const DeviceProfile& device,
                   const SimulationResult& r) {
  const TraceModel& m = trace.model;
  std::printf("simulate: %s on %s (%s); %d threads, compute at %.1f GB/s, %s overlap\n",
              trace_path.c_str(), device.name.c_str(), device.description.c_str(), r.threads,
              r.compute_gbps, OverlapName(r.overlap));
  std::printf(
      "model: %s layout, %s, %u layers, d_model %u, d_ff %u; resident %s, FFN records %s, "
      "unit caches %s; policy %s, density %.3g (traced with %u threads, io %s)\n",
      m.layout.c_str(), m.record_type.c_str(), m.n_layers, m.d_model, m.d_ff,
      FormatByteSize(m.resident_bytes, 2).c_str(), FormatByteSize(m.ffn_bytes, 2).c_str(),
      FormatByteSize(m.cache_bytes, 2).c_str(), m.policy.c_str(), m.mlp_density, m.threads,
      m.io.c_str());
  std::printf("replayed: %llu decode records", static_cast<unsigned long long>(r.decode_records));
  if (r.prompt_records > 0) {
    std::printf("; %llu prompt batch%s (%llu tokens, measured %.1f tok/s) not replayed: a batch "
                "reuses each weight for many tokens, so its compute is not DRAM-bound as decode is",
                static_cast<unsigned long long>(r.prompt_records), r.prompt_records == 1 ? "" : "es",
                static_cast<unsigned long long>(r.prompt_tokens),
                r.prompt_wall_seconds > 0 ? r.prompt_tokens / r.prompt_wall_seconds : 0.0);
  }
  std::printf("\n\n");

  const TokenSplit& p = r.predicted;
  const TokenSplit& q = r.measured;
  const double p_sum = p.io_seconds + p.memory_seconds + p.compute_seconds;
  const double q_sum = q.io_seconds + q.memory_seconds + q.compute_seconds + r.measured_select_seconds;
  std::printf("| per decode token | predicted (%s, %s) | measured (trace) |\n",
              device.name.c_str(), OverlapName(r.overlap));
  std::printf("| --- | ---: | ---: |\n");
  std::printf("| tokens/s | %.2f | %.2f |\n", r.predicted_tokens_per_second,
              r.measured_tokens_per_second);
  std::printf("| token ms | %s | %s |\n", Ms(p.token_seconds).c_str(), Ms(q.token_seconds).c_str());
  std::printf("| I/O ms | %s | %s |\n", MsShare(p.io_seconds, p_sum).c_str(),
              MsShare(q.io_seconds, q_sum).c_str());
  std::printf("| memory ms | %s | %s |\n", MsShare(p.memory_seconds, p_sum).c_str(),
              MsShare(q.memory_seconds, q_sum).c_str());
  std::printf("| compute ms | %s | %s |\n", MsShare(p.compute_seconds, p_sum).c_str(),
              MsShare(q.compute_seconds, q_sum).c_str());
  std::printf("| select ms | (not modelled) | %s |\n",
              MsShare(r.measured_select_seconds, q_sum).c_str());
  std::printf("\nshares: of the sum of the parts (measured: of io + memory + compute + select; the "
              "rest of the measured token is attention and the output head)\n");
  std::printf("flash per token: %s in %.1f reads (mean read %s); unit hit rate %s\n",
              FormatByteSize(static_cast<uint64_t>(r.bytes_read_per_token + 0.5), 2).c_str(),
              r.read_calls_per_token,
              FormatByteSize(static_cast<uint64_t>(r.mean_read_bytes + 0.5), 2).c_str(),
              r.hit_rate < 0 ? "n/a" : (FormatNumber(100.0 * r.hit_rate, 1) + "%").c_str());
  if (r.overlap == Overlap::kPipelined) {
    std::printf("pipelined: the parts add up to %s ms; overlapping reads with copies and compute "
                "hides %s ms\n",
                Ms(p_sum).c_str(), Ms(p_sum - p.token_seconds).c_str());
  }
  if (r.exceeds_device_budget) {
    std::printf(
        "warning: the traced run held %s in DRAM (resident weights + unit caches), more "
        "than the %s the %s profile allows: its hit rate is better than the device's "
        "would be (trace with --dram-budget %s)\n",
        FormatByteSize(r.trace_dram_bytes, 2).c_str(),
        FormatByteSize(device.dram_budget_bytes, 2).c_str(), device.name.c_str(),
        FormatByteSize(device.dram_budget_bytes, 2).c_str());
  }
}

void PrintJson(const std::string& trace_path, const Trace& trace, const DeviceProfile& device,
               const SimulationResult& r) {
  using Json = nlohmann::ordered_json;
  Json dev = {{"name", device.name},
              {"description", device.description},
              {"dram_gbps", device.dram_gbps},
              {"read_latency_us", device.read_latency_us},
              {"cores", device.cores},
              {"core_gemv_gbps", device.core_gemv_gbps},
              {"dram_budget_bytes", device.dram_budget_bytes},
              {"source", device.source}};
  if (device.flash_curve.empty()) {
    dev["flash_flat_mbps"] = device.flat_mbps;
  } else {
    Json curve = Json::array();
    for (const FlashPoint& pt : device.flash_curve) {
      curve.push_back({{"read_bytes", pt.read_bytes}, {"mb_per_s", pt.mb_per_s}});
    }
    dev["flash_curve"] = curve;
  }
  const TokenSplit& p = r.predicted;
  const TokenSplit& q = r.measured;
  Json out = {
      {"trace", trace_path},
      {"model",
       {{"layout", trace.model.layout},
        {"record_type", trace.model.record_type},
        {"n_layers", trace.model.n_layers},
        {"policy", trace.model.policy},
        {"mlp_density", trace.model.mlp_density}}},
      {"device", dev},
      {"overlap", OverlapName(r.overlap)},
      {"threads", r.threads},
      {"compute_gbps", r.compute_gbps},
      {"decode_records", r.decode_records},
      {"prompt",
       {{"records", r.prompt_records},
        {"tokens", r.prompt_tokens},
        {"measured_tokens_per_second",
         NumberOrNull(r.prompt_wall_seconds > 0 ? r.prompt_tokens / r.prompt_wall_seconds : 0,
                      r.prompt_wall_seconds > 0)},
        {"replayed", false}}},
      {"predicted",
       {{"tokens_per_second", r.predicted_tokens_per_second},
        {"token_ms", p.token_seconds * 1e3},
        {"io_ms", p.io_seconds * 1e3},
        {"memory_ms", p.memory_seconds * 1e3},
        {"compute_ms", p.compute_seconds * 1e3}}},
      {"measured",
       {{"tokens_per_second", r.measured_tokens_per_second},
        {"wall_ms", q.token_seconds * 1e3},
        {"io_ms", q.io_seconds * 1e3},
        {"memory_ms", q.memory_seconds * 1e3},
        {"compute_ms", q.compute_seconds * 1e3},
        {"select_ms", r.measured_select_seconds * 1e3}}},
      {"bytes_read_per_token", r.bytes_read_per_token},
      {"read_calls_per_token", r.read_calls_per_token},
      {"mean_read_bytes", NumberOrNull(r.mean_read_bytes, r.read_calls_per_token > 0)},
      {"hit_rate", NumberOrNull(r.hit_rate, r.hit_rate >= 0)},
      {"trace_dram_bytes", r.trace_dram_bytes},
      {"exceeds_device_budget", r.exceeds_device_budget},
  };
  std::printf("%s\n", out.dump(2).c_str());
}

}  // namespace

int SimulateCommand(int argc, char** argv) {
  cxxopts::Options options(
      "sparrow simulate",
      "Replays a streaming trace (sparrow run/perplexity --stats-json FILE) against a device "
      "profile and predicts decode tokens/s with the I/O / memory management / compute split "
      "(the model is in src/runtime/simulator.h; README.md, \"Device profiles\", gives the "
      "figures' sources).");
  std::string devices;
  for (const std::string& name : BuiltinProfileNames()) devices += name + ", ";
  options.add_options()
      ("trace", "The trace (--stats-json output)", cxxopts::value<std::string>())
      ("device", devices + "custom:dram_gbps=X,flash_mbps=X,read_latency_us=X,cores=N[,core_gbps=X] "
                 "or local:PROBE.csv,dram_gbps=X[,cores=N][,core_gbps=X][,read_latency_us=X] "
                 "(PROBE.csv from sparrow probe-io FILE --csv PROBE.csv)",
       cxxopts::value<std::string>())
      ("threads", "Cores the decode runs on (default: the profile's cores)",
       cxxopts::value<std::string>())
      ("overlap", "serial (the engine today: reads, then copies, then compute) or pipelined "
                  "(each group's reads overlap its copies and compute)",
       cxxopts::value<std::string>()->default_value("serial"))
      ("o,output", "md or json", cxxopts::value<std::string>()->default_value("md"));
  cxxopts::ParseResult args;
  if (!Parse(options, argc, argv, &args)) return 0;
  if (args.unmatched().size() > 0) {
    ThrowInputError("simulate: unexpected argument '", args.unmatched()[0], "'");
  }

  const std::string trace_path = Require(args, "trace");
  const std::string device_name = Require(args, "device");
  const std::string format = args["output"].as<std::string>();
  if (format != "md" && format != "json") ThrowInputError("-o must be md or json");
  SimulationOptions sim;
  const std::string overlap = args["overlap"].as<std::string>();
  if (overlap == "serial") {
    sim.overlap = Overlap::kSerial;
  } else if (overlap == "pipelined") {
    sim.overlap = Overlap::kPipelined;
  } else {
    ThrowInputError("--overlap: '", overlap, "' is not serial or pipelined");
  }
  if (args.count("threads")) {
    const std::string text = args["threads"].as<std::string>();
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno != 0 || v < 1 || v > 4096) {
      ThrowInputError("--threads: '", text, "' is not a whole number in [1, 4096]");
    }
    sim.threads = static_cast<int>(v);
  }

  const DeviceProfile device = LookupProfile(device_name);
  const Trace trace = ReadTrace(trace_path);
  const SimulationResult result = Simulate(trace, device, sim);
  if (format == "json") {
    PrintJson(trace_path, trace, device, result);
  } else {
    PrintMarkdown(trace_path, trace, device, result);
  }
  return 0;
}

}  // namespace sparrow::cli
