#include "src/runtime/trace_reader.h"


#include <cmath>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/read_file.h"

namespace sparrow {
namespace {

using Json = nlohmann::json;

// A value as the message shows it: its JSON text, cut short.
std::string Show(const Json& v) {
  std::string text = v.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text;
}

const char* TypeName(const Json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "something else";
}

class Validator {
 public:
  explicit Validator(const std::string& name) : name_(name) {}

  template <typename... Args>
  [[noreturn]] void Fail(const std::string& where, Args&&... args) const {
    ThrowInputError("trace '", name_, "': ", where, ": ", std::forward<Args>(args)...);
  }

  const Json& Object(const Json& v, const std::string& where) const {
    if (!v.is_object()) Fail(where, "must be an object, not ", TypeName(v));
    return v;
  }
  const Json& Array(const Json& v, const std::string& where) const {
    if (!v.is_array()) Fail(where, "must be an array, not ", TypeName(v));
    return v;
  }
  const Json& Field(const Json& object, const char* key, const std::string& where) const {
    const auto it = object.find(key);
    if (it == object.end()) {
      Fail(where.empty() ? std::string("top level") : where, "missing field \"", key, "\"");
    }
    return *it;
  }
  static std::string Sub(const std::string& where, const char* key) {
    return where.empty() ? std::string(key) : where + "." + key;
  }

  uint64_t U64(const Json& v, const std::string& where) const {
    if (v.is_number_unsigned()) return v.get<uint64_t>();
    if (v.is_number_integer()) Fail(where, "is negative (", Show(v), ")");
    if (v.is_number_float()) {
      if (v.get<double>() < 0) Fail(where, "is negative (", Show(v), ")");
      Fail(where, "must be an integer, not ", Show(v));
    }
    Fail(where, "must be a non-negative integer, not ", TypeName(v));
  }
  uint32_t U32(const Json& v, const std::string& where) const {
    const uint64_t x = U64(v, where);
    if (x > std::numeric_limits<uint32_t>::max()) Fail(where, Show(v), " is too large");
    return static_cast<uint32_t>(x);
  }
  double Real(const Json& v, const std::string& where) const {
    if (!v.is_number()) Fail(where, "must be a number, not ", TypeName(v));
    const double x = v.get<double>();
    if (!std::isfinite(x)) Fail(where, "must be finite, not ", Show(v));
    if (x < 0) Fail(where, "is negative (", Show(v), ")");
    return x;
  }
  std::string String(const Json& v, const std::string& where) const {
    if (!v.is_string()) Fail(where, "must be a string, not ", TypeName(v));
    std::string s = v.get<std::string>();
    if (s.empty()) Fail(where, "is empty");
    return s;
  }

  uint64_t U64Field(const Json& o, const char* key, const std::string& where) const {
    return U64(Field(o, key, where), Sub(where, key));
  }
  uint32_t U32Field(const Json& o, const char* key, const std::string& where) const {
    return U32(Field(o, key, where), Sub(where, key));
  }
  double RealField(const Json& o, const char* key, const std::string& where) const {
    return Real(Field(o, key, where), Sub(where, key));
  }
  std::string StringField(const Json& o, const char* key, const std::string& where) const {
    return String(Field(o, key, where), Sub(where, key));
  }
  // A number or null (the writer's "nothing to divide by").
  void OptionalRealField(const Json& o, const char* key, const std::string& where) const {
    const Json& v = Field(o, key, where);
    if (!v.is_null()) Real(v, Sub(where, key));
  }

 private:
  const std::string& name_;
};

TraceModel ParseModel(const Validator& c, const Json& m) {
  const std::string w = "model";
  c.Object(m, w);
  TraceModel model;
  model.layout = c.StringField(m, "layout", w);
  if (model.layout != "dip" && model.layout != "neuron" && model.layout != "split") {
    c.Fail("model.layout", "\"", model.layout, "\" is not dip, neuron or split");
  }
  model.record_type = c.StringField(m, "record_type", w);
  model.n_layers = c.U32Field(m, "n_layers", w);
  model.d_model = c.U32Field(m, "d_model", w);
  model.d_ff = c.U32Field(m, "d_ff", w);
  if (model.n_layers == 0) c.Fail("model.n_layers", "must be at least 1");
  if (model.d_model == 0) c.Fail("model.d_model", "must be at least 1");
  if (model.d_ff == 0) c.Fail("model.d_ff", "must be at least 1");
  model.resident_bytes = c.U64Field(m, "resident_bytes", w);
  model.ffn_bytes = c.U64Field(m, "ffn_bytes", w);
  model.cache_bytes = c.U64Field(m, "cache_bytes", w);
  model.dram_budget = c.U64Field(m, "dram_budget", w);
  model.threads = c.U32Field(m, "threads", w);
  if (model.threads == 0) c.Fail("model.threads", "must be at least 1");
  model.io = c.StringField(m, "io", w);
  model.policy = c.StringField(m, "policy", w);
  model.mlp_density = c.RealField(m, "mlp_density", w);
  if (!(model.mlp_density > 0 && model.mlp_density <= 1)) {
    c.Fail("model.mlp_density", model.mlp_density, " is outside (0, 1]");
  }
  model.gamma = c.RealField(m, "gamma", w);
  return model;
}

TraceGroupInfo ParseGroup(const Validator& c, const Json& g, size_t index,
                          const TraceModel& model) {
  const std::string w = StrCat("groups[", index, "]");
  c.Object(g, w);
  TraceGroupInfo info;
  info.layer = c.U32Field(g, "layer", w);
  if (info.layer >= model.n_layers) {
    c.Fail(w + ".layer", info.layer, " is not below model.n_layers (", model.n_layers, ")");
  }
  info.kind = c.StringField(g, "kind", w);
  info.n_units = c.U32Field(g, "n_units", w);
  if (info.n_units == 0) c.Fail(w + ".n_units", "must be at least 1");
  info.record_bytes = c.U32Field(g, "record_bytes", w);
  if (info.record_bytes == 0) c.Fail(w + ".record_bytes", "must be at least 1");
  info.payload_bytes = c.U32Field(g, "payload_bytes", w);
  if (info.payload_bytes == 0 || info.payload_bytes > info.record_bytes) {
    c.Fail(w + ".payload_bytes", info.payload_bytes, " is outside [1, record_bytes = ",
           info.record_bytes, "]");
  }
  info.capacity = c.U32Field(g, "capacity", w);
  if (info.capacity > info.n_units) {
    c.Fail(w + ".capacity", info.capacity, " is more than n_units (", info.n_units, ")");
  }
  return info;
}

void CheckCounts(const Validator& c, const std::string& w, uint64_t needed, uint64_t hit,
                 uint64_t loaded, uint64_t bytes, uint64_t calls) {
  if (hit > needed) c.Fail(w, "units hit (", hit, ") exceed units needed (", needed, ")");
  if (loaded > needed) c.Fail(w, "units loaded (", loaded, ") exceed units needed (", needed, ")");
  if (bytes > 0 && calls == 0) c.Fail(w, bytes, " bytes read in 0 read calls");
  if (bytes == 0 && calls > 0) c.Fail(w, calls, " read calls that read 0 bytes");
}

TraceRecord ParseRecord(const Validator& c, const Json& t, size_t index,
                        const std::vector<TraceGroupInfo>& groups) {
  const std::string w = StrCat("tokens[", index, "]");
  c.Object(t, w);
  TraceRecord r;
  const uint64_t record = c.U64Field(t, "record", w);
  if (record != index) c.Fail(w + ".record", "is ", record, ", expected ", index, " (records in order)");
  r.tokens = c.U64Field(t, "tokens", w);
  if (r.tokens == 0) c.Fail(w + ".tokens", "must be at least 1");
  r.bytes_read = c.U64Field(t, "bytes_read", w);
  r.read_calls = c.U64Field(t, "read_calls", w);
  r.units_needed = c.U64Field(t, "units_needed", w);
  r.units_hit = c.U64Field(t, "units_hit", w);
  r.units_loaded = c.U64Field(t, "units_loaded", w);
  r.units_evicted = c.U64Field(t, "units_evicted", w);
  r.io_seconds = c.RealField(t, "io_seconds", w);
  r.memory_seconds = c.RealField(t, "memory_seconds", w);
  r.compute_seconds = c.RealField(t, "compute_seconds", w);
  r.select_seconds = c.RealField(t, "select_seconds", w);
  r.wall_seconds = c.RealField(t, "wall_seconds", w);
  c.OptionalRealField(t, "mean_read_bytes", w);
  c.OptionalRealField(t, "hit_rate", w);
  CheckCounts(c, w, r.units_needed, r.units_hit, r.units_loaded, r.bytes_read, r.read_calls);

  const std::string gw = w + ".groups";
  const Json& arr = c.Array(c.Field(t, "groups", w), gw);
  if (arr.size() != groups.size()) {
    c.Fail(gw, "has ", arr.size(), " entries, but the trace has ", groups.size(), " groups");
  }
  r.groups.resize(groups.size());
  TraceGroupCounts sum;
  for (size_t i = 0; i < groups.size(); ++i) {
    const std::string ew = StrCat(gw, "[", i, "]");
    const Json& e = c.Array(arr[i], ew);
    if (e.size() != 5) {
      c.Fail(ew, "has ", e.size(), " numbers, expected 5 [needed, hit, loaded, bytes_read, read_calls]");
    }
    TraceGroupCounts& g = r.groups[i];
    g.needed = c.U64(e[0], ew + "[0]");
    g.hit = c.U64(e[1], ew + "[1]");
    g.loaded = c.U64(e[2], ew + "[2]");
    g.bytes_read = c.U64(e[3], ew + "[3]");
    g.read_calls = c.U64(e[4], ew + "[4]");
    CheckCounts(c, ew, g.needed, g.hit, g.loaded, g.bytes_read, g.read_calls);
    // A batch reads the union of its tokens' units; no pass needs more than
    // the group has per token.
    const uint64_t n_units = groups[i].n_units;
    if (g.needed / r.tokens > n_units) {
      c.Fail(ew, "needs ", g.needed, " units; the group has ", groups[i].n_units);
    }
    sum.needed += g.needed;
    sum.hit += g.hit;
    sum.loaded += g.loaded;
    sum.bytes_read += g.bytes_read;
    sum.read_calls += g.read_calls;
  }
  auto check_sum = [&](const char* key, uint64_t total, uint64_t of_groups) {
    if (total != of_groups) {
      c.Fail(w + "." + key, "is ", total, " but its groups add up to ", of_groups);
    }
  };
  check_sum("units_needed", r.units_needed, sum.needed);
  check_sum("units_hit", r.units_hit, sum.hit);
  check_sum("units_loaded", r.units_loaded, sum.loaded);
  check_sum("bytes_read", r.bytes_read, sum.bytes_read);
  check_sum("read_calls", r.read_calls, sum.read_calls);
  return r;
}

}  // namespace

Trace ParseTrace(std::string_view text, const std::string& name) {
  const Validator c(name);
  Json doc;
  try {
    doc = Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line 1, ...".
    std::string what = e.what();
    const size_t bracket = what.find("] ");
    if (what.rfind("[json.exception.", 0) == 0 && bracket != std::string::npos) {
      what = what.substr(bracket + 2);
    }
    ThrowInputError("trace '", name, "' is not valid JSON: ", what);
  }
  if (!doc.is_object()) c.Fail("top level", "must be an object, not ", TypeName(doc));
  const Json& format = c.Field(doc, "format", "");
  if (!format.is_string() || format.get<std::string>() != "sparrow-trace") {
    c.Fail("format", "is ", Show(format), ", not \"sparrow-trace\" (write one with --stats-json)");
  }
  const Json& version = c.Field(doc, "version", "");
  if (!version.is_number_unsigned() || version.get<uint64_t>() != 1) {
    c.Fail("version", "is ", Show(version), "; this sparrow reads version 1");
  }

  Trace trace;
  trace.model = ParseModel(c, c.Field(doc, "model", ""));
  const Json& groups = c.Array(c.Field(doc, "groups", ""), "groups");
  if (groups.empty()) c.Fail("groups", "is empty (the trace of a model that streams nothing?)");
  trace.groups.reserve(groups.size());
  for (size_t i = 0; i < groups.size(); ++i) {
    trace.groups.push_back(ParseGroup(c, groups[i], i, trace.model));
  }
  const Json& tokens = c.Array(c.Field(doc, "tokens", ""), "tokens");
  trace.records.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    trace.records.push_back(ParseRecord(c, tokens[i], i, trace.groups));
  }
  return trace;
}

Trace ReadTrace(const std::string& path) {
  const std::string text = ReadWholeFile(path, "trace", kMaxTraceBytes);
  return ParseTrace(text, path);
}

}  // namespace sparrow
