// libFuzzer target for the trace reader (sparrow simulate).
//
// Any input must either parse or be rejected with an InputError whose
// message is one non-empty line. A parsed trace must hold what the reader
// promises (one count per group in every record, hit <= needed, ...), and is
// then replayed on a custom device, serial and pipelined: the prediction is
// finite and positive, or an InputError (no decode records). Any other
// exception or a broken invariant aborts, which libFuzzer records as a crash.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "base/error.h"
#include "src/runtime/simulator.h"
#include "src/runtime/trace_reader.h"

namespace {

using namespace sparrow;

[[noreturn]] void Violated(const char* what, const std::string& detail = "") {
  std::fprintf(stderr, "trace_fuzzer: invariant violated: %s %s\n", what, detail.c_str());
  std::abort();
}

void CheckMessage(const InputError& e) {
  const std::string msg = e.what();
  if (msg.empty() || msg.find('\n') != std::string::npos) Violated("message not one line:", msg);
}

void CheckTrace(const Trace& t) {
  if (t.groups.empty()) Violated("no groups");
  for (const TraceGroupInfo& g : t.groups) {
    if (g.layer >= t.model.n_layers || g.payload_bytes > g.record_bytes || g.capacity > g.n_units) {
      Violated("group header");
    }
  }
  for (const TraceRecord& r : t.records) {
    if (r.tokens == 0 || r.groups.size() != t.groups.size()) Violated("record shape");
    for (const TraceGroupCounts& c : r.groups) {
      if (c.hit > c.needed || c.loaded > c.needed) Violated("counts");
      if ((c.bytes_read == 0) != (c.read_calls == 0)) Violated("bytes vs calls");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const Trace trace = ParseTrace(text, "fuzz.json");
    CheckTrace(trace);
    static const DeviceProfile device =
        LookupProfile("custom:dram_gbps=10,flash_mbps=1000,read_latency_us=100,cores=4");
    for (Overlap overlap : {Overlap::kSerial, Overlap::kPipelined}) {
      try {
        const SimulationResult r = Simulate(trace, device, {overlap, 0});
        const double t = r.predicted.token_seconds;
        if (!std::isfinite(t) || t < 0 || r.decode_records == 0) Violated("prediction");
      } catch (const InputError& e) {
        CheckMessage(e);
      }
    }
  } catch (const InputError& e) {
    CheckMessage(e);
  }
  return 0;
}
