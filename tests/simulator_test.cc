// sparrow simulate's trace reader and replay model (src/runtime/trace_reader.h,
// src/runtime/simulator.h) on traces written by hand, with the expected
// figures worked out in the comments.
#include <cstdio>
#include <functional>
#include <string>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "src/runtime/simulator.h"
#include "src/runtime/trace_reader.h"

namespace sparrow {
namespace {

using Json = nlohmann::json;

// One layer, two groups:
//   g0 dip-input:  record 10000 B, payload 8000 B
//   g1 dip-output: record  5000 B, payload 4000 B
// resident 10 MB. Records: 0 decode, 1 a prompt batch of 4, 2 decode.
constexpr const char* kTrace = R"({
 "format": "sparrow-trace", "version": 1,
 "model": {"layout": "dip", "record_type": "q8_0", "n_layers": 1, "d_model": 64, "d_ff": 1000,
           "resident_bytes": 10000000, "ffn_bytes": 15000000, "cache_bytes": 6000000,
           "dram_budget": 0, "threads": 2, "io": "pread", "policy": "dip-ca",
           "mlp_density": 0.5, "gamma": 0.2},
 "groups": [
   {"layer": 0, "kind": "dip-input", "n_units": 1000, "record_bytes": 10000, "payload_bytes": 8000, "capacity": 500},
   {"layer": 0, "kind": "dip-output", "n_units": 1000, "record_bytes": 5000, "payload_bytes": 4000, "capacity": 500}
 ],
 "tokens": [
  {"record": 0, "tokens": 1, "bytes_read": 400000, "read_calls": 10, "mean_read_bytes": 40000,
   "units_needed": 150, "units_hit": 110, "hit_rate": 0.7333, "units_loaded": 40, "units_evicted": 0,
   "io_seconds": 0.002, "memory_seconds": 0.0005, "compute_seconds": 0.001, "select_seconds": 0.0001,
   "wall_seconds": 0.004, "overlap_units": 0, "overlap_kept": 0,
   "groups": [[100, 60, 40, 400000, 10], [50, 50, 0, 0, 0]]},
  {"record": 1, "tokens": 4, "bytes_read": 2200000, "read_calls": 9, "mean_read_bytes": 244444.4,
   "units_needed": 380, "units_hit": 140, "hit_rate": null, "units_loaded": 240, "units_evicted": 0,
   "io_seconds": 0.01, "memory_seconds": 0.001, "compute_seconds": 0.01, "select_seconds": 0.001,
   "wall_seconds": 0.025,
   "groups": [[300, 100, 200, 2000000, 5], [80, 40, 40, 200000, 4]]},
  {"record": 2, "tokens": 1, "bytes_read": 100000, "read_calls": 20, "mean_read_bytes": null,
   "units_needed": 150, "units_hit": 130, "hit_rate": 0.8667, "units_loaded": 20, "units_evicted": 20,
   "io_seconds": 0.001, "memory_seconds": 0.0003, "compute_seconds": 0.0005, "select_seconds": 0.0001,
   "wall_seconds": 0.002,
   "groups": [[100, 100, 0, 0, 0], [50, 30, 20, 100000, 20]]}
 ]
})";

// A custom device: 10 GB/s DRAM, a flat 1000 MB/s with 160 us per read,
// i.e. 160 / 16 = 10 us per read at 16 in flight.
constexpr const char* kCustom = "custom:dram_gbps=10,flash_mbps=1000,read_latency_us=160,cores=4";

std::string Mutated(const std::function<void(Json&)>& change) {
  Json doc = Json::parse(kTrace);
  change(doc);
  return doc.dump();
}

// The InputError message for parsing `text`, or "" if it parsed.
std::string ParseError(const std::string& text) {
  try {
    ParseTrace(text, "hand.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

void CheckRejected(const std::string& text, const std::string& expected) {
  const std::string message = ParseError(text);
  CAPTURE(message);
  CHECK(message.find("hand.json") != std::string::npos);
  CHECK(message.find(expected) != std::string::npos);
}

TEST_CASE("trace: a hand-written trace parses into its fields") {
  const Trace t = ParseTrace(kTrace, "hand.json");
  CHECK(t.model.layout == "dip");
  CHECK(t.model.record_type == "q8_0");
  CHECK(t.model.n_layers == 1);
  CHECK(t.model.resident_bytes == 10000000);
  CHECK(t.model.threads == 2);
  CHECK(t.model.policy == "dip-ca");
  CHECK(t.model.mlp_density == doctest::Approx(0.5));
  REQUIRE(t.groups.size() == 2);
  CHECK(t.groups[1].kind == "dip-output");
  CHECK(t.groups[1].payload_bytes == 4000);
  REQUIRE(t.records.size() == 3);
  CHECK(t.records[1].tokens == 4);
  CHECK(t.records[2].groups[1].read_calls == 20);
  CHECK(t.records[0].wall_seconds == doctest::Approx(0.004));
}

TEST_CASE("simulate: serial replay of the hand-written trace on a custom device") {
  const Trace t = ParseTrace(kTrace, "hand.json");
  const DeviceProfile d = LookupProfile(kCustom);
  const SimulationResult r = Simulate(t, d, {Overlap::kSerial, 0});
  // Record 0, g0: 10 reads of 40000 B: 10 x (40 us + 10 us) + 160 us = 0.66 ms I/O;
  //   memory 40 x 10000 x 2 / 10 GB/s = 0.08 ms; compute 100 x 8000 / 10 GB/s = 0.08 ms.
  //   g1: compute 50 x 4000 / 10 GB/s = 0.02 ms. Resident 10 MB / 10 GB/s = 1 ms.
  //   Token: 1 + 0.66 + 0.08 + 0.08 + 0.02 = 1.84 ms.
  // Record 2, g0: compute 0.08 ms. g1: 20 reads of 5000 B: 20 x (5 + 10) us + 160 us =
  //   0.46 ms; memory 20 x 5000 x 2 / 10 GB/s = 0.02 ms; compute 0.02 ms.
  //   Token: 1 + 0.08 + 0.46 + 0.02 + 0.02 = 1.58 ms.
  CHECK(r.decode_records == 2);
  CHECK(r.prompt_records == 1);
  CHECK(r.prompt_tokens == 4);
  CHECK(r.threads == 4);
  CHECK(r.compute_gbps == doctest::Approx(10));
  CHECK(r.predicted.io_seconds == doctest::Approx((0.66e-3 + 0.46e-3) / 2));
  CHECK(r.predicted.memory_seconds == doctest::Approx((0.08e-3 + 0.02e-3) / 2));
  CHECK(r.predicted.compute_seconds == doctest::Approx(1.10e-3));
  CHECK(r.predicted.token_seconds == doctest::Approx(1.71e-3));
  CHECK(r.predicted_tokens_per_second == doctest::Approx(1.0 / 1.71e-3));
  // From the trace: decode records only.
  CHECK(r.bytes_read_per_token == doctest::Approx(250000));
  CHECK(r.read_calls_per_token == doctest::Approx(15));
  CHECK(r.mean_read_bytes == doctest::Approx(500000.0 / 30));
  CHECK(r.hit_rate == doctest::Approx(240.0 / 300));
  CHECK(r.measured.token_seconds == doctest::Approx(0.003));
  CHECK(r.measured.io_seconds == doctest::Approx(0.0015));
  CHECK(r.measured.memory_seconds == doctest::Approx(0.0004));
  CHECK(r.measured.compute_seconds == doctest::Approx(0.00075));
  CHECK(r.measured_select_seconds == doctest::Approx(0.0001));
  CHECK(r.measured_tokens_per_second == doctest::Approx(1.0 / 0.003));
  CHECK(r.trace_dram_bytes == 16000000);
  CHECK_FALSE(r.exceeds_device_budget);
}

TEST_CASE("simulate: pipelined replay overlaps each group's reads with its copies and compute") {
  const Trace t = ParseTrace(kTrace, "hand.json");
  const SimulationResult r = Simulate(t, LookupProfile(kCustom), {Overlap::kPipelined, 0});
  // Record 0: 1 + max(0.66, 0.08 + 0.08) + max(0, 0.02) = 1.68 ms.
  // Record 2: 1 + max(0, 0.08) + max(0.46, 0.02 + 0.02) = 1.54 ms.
  CHECK(r.predicted.token_seconds == doctest::Approx(1.61e-3));
  CHECK(r.predicted_tokens_per_second == doctest::Approx(1.0 / 1.61e-3));
  // The parts are the same as in the serial replay.
  CHECK(r.predicted.io_seconds == doctest::Approx(0.56e-3));
  CHECK(r.predicted.compute_seconds == doctest::Approx(1.10e-3));
}

TEST_CASE("simulate: the core bound caps compute bandwidth below DRAM's") {
  const Trace t = ParseTrace(kTrace, "hand.json");
  const DeviceProfile d = LookupProfile(std::string(kCustom) + ",core_gbps=2");
  // 2 threads x 2 GB/s = 4 GB/s: resident 10 MB -> 2.5 ms; g0 0.2 ms, g1 0.05 ms per token.
  const SimulationResult r = Simulate(t, d, {Overlap::kSerial, 2});
  CHECK(r.compute_gbps == doctest::Approx(4));
  CHECK(r.predicted.compute_seconds == doctest::Approx(2.5e-3 + 0.2e-3 + 0.05e-3));
  // Memory management still runs at DRAM speed.
  CHECK(r.predicted.memory_seconds == doctest::Approx(0.05e-3));
  CHECK_THROWS_AS(Simulate(t, d, {Overlap::kSerial, 5}), InputError);
}

TEST_CASE("simulate: a trace with only prompt batches has nothing to replay") {
  const Trace t = ParseTrace(Mutated([](Json& d) {
                               d["tokens"].erase(2);
                               d["tokens"].erase(0);
                               d["tokens"][0]["record"] = 0;
                             }),
                             "hand.json");
  try {
    Simulate(t, LookupProfile(kCustom), {});
    FAIL("no InputError");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("no decode records") != std::string::npos);
  }
}

TEST_CASE("simulate: the device's DRAM budget is checked against the traced run") {
  const Trace t = ParseTrace(Mutated([](Json& d) {
                               d["model"]["cache_bytes"] = 5ull << 30;
                             }),
                             "hand.json");
  CHECK(Simulate(t, LookupProfile("a18"), {}).exceeds_device_budget);
  CHECK_FALSE(Simulate(t, LookupProfile("m1max"), {}).exceeds_device_budget);
}

TEST_CASE("trace: malformed traces are InputErrors naming the file and the problem") {
  SUBCASE("bad JSON") { CheckRejected(R"({"format": "sparrow-trace", )", "not valid JSON"); }
  SUBCASE("not an object") { CheckRejected("[1, 2]", "must be an object"); }
  SUBCASE("empty file") { CheckRejected("", "not valid JSON"); }
  SUBCASE("wrong format") {
    CheckRejected(Mutated([](Json& d) { d["format"] = "llama-trace"; }), "sparrow-trace");
  }
  SUBCASE("wrong version") {
    CheckRejected(Mutated([](Json& d) { d["version"] = 2; }), "version: is 2");
  }
  SUBCASE("missing model field") {
    CheckRejected(Mutated([](Json& d) { d["model"].erase("d_ff"); }),
                  "model: missing field \"d_ff\"");
  }
  SUBCASE("missing top-level field") {
    CheckRejected(Mutated([](Json& d) { d.erase("groups"); }), "missing field \"groups\"");
  }
  SUBCASE("missing record field") {
    CheckRejected(Mutated([](Json& d) { d["tokens"][1].erase("wall_seconds"); }),
                  "tokens[1]: missing field \"wall_seconds\"");
  }
  SUBCASE("wrong type") {
    CheckRejected(Mutated([](Json& d) { d["tokens"][0]["bytes_read"] = "400000"; }),
                  "tokens[0].bytes_read: must be a non-negative integer, not a string");
  }
  SUBCASE("fractional counter") {
    CheckRejected(Mutated([](Json& d) { d["groups"][0]["n_units"] = 10.5; }),
                  "groups[0].n_units: must be an integer");
  }
  SUBCASE("group array of the wrong length") {
    CheckRejected(Mutated([](Json& d) { d["tokens"][2]["groups"].erase(1); }),
                  "tokens[2].groups: has 1 entries, but the trace has 2 groups");
  }
  SUBCASE("group entry of the wrong length") {
    CheckRejected(Mutated([](Json& d) { d["tokens"][0]["groups"][1].erase(4); }),
                  "tokens[0].groups[1]: has 4 numbers, expected 5");
  }
  SUBCASE("negative bytes") {
    CheckRejected(Mutated([](Json& d) { d["tokens"][0]["groups"][0][3] = -5; }),
                  "tokens[0].groups[0][3]: is negative (-5)");
  }
  SUBCASE("negative seconds") {
    CheckRejected(Mutated([](Json& d) { d["tokens"][2]["io_seconds"] = -0.5; }),
                  "tokens[2].io_seconds: is negative");
  }
  SUBCASE("needed < hit") {
    CheckRejected(Mutated([](Json& d) {
                    d["tokens"][0]["groups"][1][1] = 70;
                    d["tokens"][0]["units_hit"] = 130;
                  }),
                  "tokens[0].groups[1]: units hit (70) exceed units needed (50)");
  }
  SUBCASE("bytes without read calls") {
    CheckRejected(Mutated([](Json& d) {
                    d["tokens"][0]["groups"][0][4] = 0;
                    d["tokens"][0]["read_calls"] = 0;
                  }),
                  "400000 bytes read in 0 read calls");
  }
  SUBCASE("totals that are not the sum of the groups") {
    CheckRejected(Mutated([](Json& d) { d["tokens"][0]["bytes_read"] = 1; }),
                  "tokens[0].bytes_read: is 1 but its groups add up to 400000");
  }
  SUBCASE("records out of order") {
    CheckRejected(Mutated([](Json& d) { d["tokens"][1]["record"] = 7; }),
                  "tokens[1].record: is 7, expected 1");
  }
  SUBCASE("group layer outside the model") {
    CheckRejected(Mutated([](Json& d) { d["groups"][1]["layer"] = 1; }),
                  "groups[1].layer: 1 is not below model.n_layers (1)");
  }
  SUBCASE("payload larger than the record") {
    CheckRejected(Mutated([](Json& d) { d["groups"][0]["payload_bytes"] = 20000; }),
                  "groups[0].payload_bytes");
  }
  SUBCASE("unknown layout") {
    CheckRejected(Mutated([](Json& d) { d["model"]["layout"] = "rows"; }), "model.layout");
  }
  SUBCASE("null where a number belongs") {
    CheckRejected(Mutated([](Json& d) { d["tokens"][0]["compute_seconds"] = nullptr; }),
                  "tokens[0].compute_seconds: must be a number, not null");
  }
  SUBCASE("mean_read_bytes of the wrong type") {
    CheckRejected(Mutated([](Json& d) { d["tokens"][0]["mean_read_bytes"] = "big"; }),
                  "tokens[0].mean_read_bytes");
  }
  SUBCASE("number too large") {
    CheckRejected(R"({"format": "sparrow-trace", "version": 1e99999})", "not valid JSON");
  }
}

TEST_CASE("trace: ReadTrace names a missing file") {
  try {
    ReadTrace("/nonexistent/trace.json");
    FAIL("no InputError");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("/nonexistent/trace.json") != std::string::npos);
  }
}

TEST_CASE("trace: ReadTrace reads a file") {
  const std::string path = "simulator_test_trace.json";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  std::fputs(kTrace, f);
  std::fclose(f);
  const Trace t = ReadTrace(path);
  std::remove(path.c_str());
  CHECK(t.records.size() == 3);
}

TEST_CASE("profiles: every built-in name resolves to a complete profile") {
  const std::vector<std::string> names = BuiltinProfileNames();
  CHECK(names == std::vector<std::string>{"a18", "sd8g3", "m1max"});
  for (const std::string& name : names) {
    CAPTURE(name);
    const DeviceProfile p = LookupProfile(name);
    CHECK(p.name == name);
    CHECK(p.dram_gbps > 0);
    CHECK(p.cores >= 1);
    CHECK(p.core_gemv_gbps > 0);
    CHECK(p.read_latency_us > 0);
    CHECK_FALSE(p.source.empty());
    REQUIRE(p.flash_curve.size() >= 2);
    for (size_t i = 1; i < p.flash_curve.size(); ++i) {
      CHECK(p.flash_curve[i].read_bytes > p.flash_curve[i - 1].read_bytes);
      CHECK(p.flash_curve[i].mb_per_s >= p.flash_curve[i - 1].mb_per_s);
    }
  }
  CHECK(LookupProfile("a18").dram_gbps == doctest::Approx(60));
  CHECK(LookupProfile("m1max").dram_gbps == doctest::Approx(400));
}

TEST_CASE("profiles: an unknown name lists the valid ones") {
  try {
    LookupProfile("pixel9");
    FAIL("no InputError");
  } catch (const InputError& e) {
    const std::string m = e.what();
    CHECK(m.find("pixel9") != std::string::npos);
    for (const char* name : {"a18", "sd8g3", "m1max", "custom:", "local:"}) {
      CHECK(m.find(name) != std::string::npos);
    }
  }
}

TEST_CASE("profiles: the flash curve interpolates log-linearly in read size") {
  const DeviceProfile a18 = LookupProfile("a18");  // 4K 250, 16K 600, ..., 1M 1000 MB/s
  CHECK(FlashBytesPerSecond(a18, 4096) == doctest::Approx(250e6));
  CHECK(FlashBytesPerSecond(a18, 8192) == doctest::Approx(425e6));  // halfway in log
  CHECK(FlashBytesPerSecond(a18, 2048) == doctest::Approx(125e6));  // constant IOPS below
  CHECK(FlashBytesPerSecond(a18, 4 << 20) == doctest::Approx(1000e6));  // flat above
  const DeviceProfile c = LookupProfile(kCustom);
  // 40000 B per (40 + 10) us.
  CHECK(FlashBytesPerSecond(c, 40000) == doctest::Approx(40000 / 50e-6));
}

TEST_CASE("profiles: custom: parsing") {
  const DeviceProfile p =
      LookupProfile("custom:dram_gbps=50.5,flash_mbps=2000,read_latency_us=0,cores=6,core_gbps=8");
  CHECK(p.name == "custom");
  CHECK(p.dram_gbps == doctest::Approx(50.5));
  CHECK(p.flat_mbps == doctest::Approx(2000));
  CHECK(p.read_latency_us == 0);
  CHECK(p.cores == 6);
  CHECK(p.core_gemv_gbps == doctest::Approx(8));
  CHECK(p.flash_curve.empty());

  auto error = [](const std::string& spec) -> std::string {
    try {
      LookupProfile(spec);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  const std::string base = "custom:dram_gbps=10,flash_mbps=1000,read_latency_us=100,cores=4";
  CHECK(error(base + ",speed=3").find("unknown key 'speed'") != std::string::npos);
  CHECK(error(base + ",cores=2").find("given twice") != std::string::npos);
  CHECK(error(base + ",core_gbps").find("not key=value") != std::string::npos);
  CHECK(error("custom:dram_gbps=10,flash_mbps=1000,cores=4").find("missing read_latency_us") !=
        std::string::npos);
  CHECK(error("custom:dram_gbps=ten,flash_mbps=1000,read_latency_us=1,cores=4")
            .find("not a number") != std::string::npos);
  CHECK(error("custom:dram_gbps=nan,flash_mbps=1000,read_latency_us=1,cores=4")
            .find("not a number") != std::string::npos);
  CHECK(error("custom:dram_gbps=-1,flash_mbps=1000,read_latency_us=1,cores=4")
            .find("dram_gbps must be > 0") != std::string::npos);
  CHECK(error("custom:dram_gbps=10,flash_mbps=1000,read_latency_us=1,cores=2.5")
            .find("cores must be a whole number") != std::string::npos);
  CHECK(error("custom:").find("not key=value") != std::string::npos);
}

TEST_CASE("profiles: local: takes the best MB/s per read size from probe-io's CSV") {
  const std::string path = "simulator_test_probe.csv";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  std::fputs(
      "io,read_bytes,threads,seconds,reads,bytes,mb_per_s,iops,mean_latency_us,p50_latency_us,"
      "p99_latency_us\n"
      "direct,4096,1,1.0,1000,4096000,40.00,10000.0,95.00,90.00,200.00\n"
      "direct,4096,16,1.0,1000,4096000,400.00,100000.0,150.00,140.00,300.00\n"
      "direct,65536,1,1.0,1000,65536000,600.00,9000.0,110.00,100.00,200.00\n"
      "direct,65536,16,1.0,1000,65536000,1500.00,23000.0,600.00,500.00,900.00\n"
      "direct,65536,32,1.0,1000,65536000,1400.00,21000.0,1200.00,1100.00,1900.00\n",
      f);
  std::fclose(f);
  const DeviceProfile p = LookupProfile("local:" + path + ",dram_gbps=20,cores=3");
  REQUIRE(p.flash_curve.size() == 2);
  CHECK(p.flash_curve[0].read_bytes == 4096);
  CHECK(p.flash_curve[0].mb_per_s == doctest::Approx(400));
  CHECK(p.flash_curve[1].read_bytes == 65536);
  CHECK(p.flash_curve[1].mb_per_s == doctest::Approx(1500));
  CHECK(p.read_latency_us == doctest::Approx(95));
  CHECK(p.dram_gbps == doctest::Approx(20));
  CHECK(p.cores == 3);
  CHECK_THROWS_AS(LookupProfile("local:" + path), InputError);  // no dram_gbps
  CHECK_THROWS_AS(LookupProfile("local:" + path + ",dram_gbps=20,flash_mbps=3"), InputError);
  CHECK_THROWS_AS(LookupProfile("local:/nonexistent.csv,dram_gbps=20"), InputError);

  f = std::fopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  std::fputs("io,read_bytes,threads\ndirect,4096,1\n", f);
  std::fclose(f);
  try {
    LookupProfile("local:" + path + ",dram_gbps=20");
    FAIL("no InputError");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("no 'mb_per_s' column") != std::string::npos);
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace sparrow
