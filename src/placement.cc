#include "src/placement.h"

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <bit>
#include <numeric>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "base/error.h"
#include "base/output_file.h"
#include "base/threads.h"
#include "formats/bundle_writer.h"
#include "formats/calibration.h"
#include "formats/gguf.h"
#include "formats/lora_adapter.h"

namespace sparrow {

// ------------------------------------------------------------ ChoiceLog

ChoiceLog::ChoiceLog(uint32_t n_units) : n_units_(n_units) {}

void ChoiceLog::Grow() {
  const size_t words = std::max<size_t>(1, 2 * words_);
  std::vector<uint64_t> bits(size_t{n_units_} * words, 0);
  for (uint32_t u = 0; u < n_units_; ++u) {
    std::copy_n(Bits(u), words_, bits.data() + size_t{u} * words);
  }
  bits_ = std::move(bits);
  words_ = words;
}

void ChoiceLog::AddToken(const uint32_t* units, size_t count) {
  if (tokens_ == words_ * 64) Grow();
  const size_t word = tokens_ / 64;
  const uint64_t bit = uint64_t{1} << (tokens_ % 64);
  for (size_t i = 0; i < count; ++i) {
    if (units[i] >= n_units_) throw std::logic_error("ChoiceLog: unit out of range");
    bits_[size_t{units[i]} * words_ + word] |= bit;
  }
  ++tokens_;
}

uint64_t ChoiceLog::Count(uint32_t u) const {
  uint64_t n = 0;
  for (size_t w = 0; w < words_; ++w) n += static_cast<uint64_t>(std::popcount(Bits(u)[w]));
  return n;
}

uint64_t ChoiceLog::CoCount(uint32_t u, uint32_t v) const {
  const uint64_t* a = Bits(u);
  const uint64_t* b = Bits(v);
  uint64_t n = 0;
  for (size_t w = 0; w < words_; ++w) n += static_cast<uint64_t>(std::popcount(a[w] & b[w]));
  return n;
}

uint64_t ChoiceLog::Agreement(uint32_t u, uint32_t v) const {
  const uint64_t* a = Bits(u);
  const uint64_t* b = Bits(v);
  uint64_t n = 0;
  for (size_t w = 0; w < words_; ++w) n += static_cast<uint64_t>(std::popcount(a[w] ^ b[w]));
  return tokens_ - n;
}

std::vector<uint32_t> ChoiceLog::TokenUnits(size_t t) const {
  std::vector<uint32_t> units;
  const size_t word = t / 64;
  const uint64_t bit = uint64_t{1} << (t % 64);
  for (uint32_t u = 0; u < n_units_; ++u) {
    if (Bits(u)[word] & bit) units.push_back(u);
  }
  return units;
}

// ------------------------------------------------------------ placement

namespace {

struct Edge {
  uint64_t weight;
  uint32_t a, b;  // a < b
};

// Heaviest first; among equal weights, by (a, b), so the result does not
// depend on how candidates were gathered.
bool Heavier(const Edge& x, const Edge& y) {
  return std::tie(y.weight, x.a, x.b) < std::tie(x.weight, y.a, y.b);
}

uint32_t Root(std::vector<uint32_t>& parent, uint32_t u) {
  while (parent[u] != u) {
    parent[u] = parent[parent[u]];
    u = parent[u];
  }
  return u;
}

// For each of `units`, its `neighbours` heaviest edges (most agreement) to
// the others of `units`.
std::vector<Edge> CandidateEdges(const ChoiceLog& log, const std::vector<uint32_t>& units,
                                 size_t neighbours) {
  const size_t m = units.size();
  std::vector<std::vector<Edge>> per_thread(static_cast<size_t>(std::max(1, ThreadCount())));
  ParallelFor(m, 16, [&](size_t begin, size_t end, int thread) {
    std::vector<Edge>& out = per_thread[static_cast<size_t>(thread)];
    std::vector<Edge> row;
    for (size_t i = begin; i < end; ++i) {
      const uint32_t u = units[i];
      row.clear();
      for (uint32_t v : units) {
        if (v != u) row.push_back({log.Agreement(u, v), std::min(u, v), std::max(u, v)});
      }
      const size_t keep = std::min(neighbours, row.size());
      std::partial_sort(row.begin(), row.begin() + static_cast<std::ptrdiff_t>(keep), row.end(),
                        Heavier);
      out.insert(out.end(), row.begin(), row.begin() + static_cast<std::ptrdiff_t>(keep));
    }
  });
  std::vector<Edge> edges;
  for (std::vector<Edge>& part : per_thread) edges.insert(edges.end(), part.begin(), part.end());
  std::sort(edges.begin(), edges.end(), Heavier);
  edges.erase(std::unique(edges.begin(), edges.end(),
                          [](const Edge& x, const Edge& y) { return x.a == y.a && x.b == y.b; }),
              edges.end());
  return edges;
}

}  // namespace

std::vector<uint32_t> PlaceByCoactivation(const ChoiceLog& log, size_t neighbours) {
  const uint32_t n = log.n_units();
  std::vector<uint64_t> count(n);
  for (uint32_t u = 0; u < n; ++u) count[u] = log.Count(u);

  // Greedy Hamiltonian path pieces: at most two neighbours per unit, no
  // cycles (union-find over the pieces). The first round offers each unit's
  // heaviest edges; a unit whose candidates all filled up first is left
  // with a free end, so further rounds offer the heaviest edges among the
  // free ends only, until one path remains (or no edge joins two pieces).
  constexpr uint32_t kNone = ~uint32_t{0};
  std::vector<std::array<uint32_t, 2>> link(n, {kNone, kNone});
  std::vector<uint32_t> parent(n);
  std::iota(parent.begin(), parent.end(), 0u);
  const auto degree = [&](uint32_t u) { return (link[u][0] != kNone) + (link[u][1] != kNone); };
  size_t pieces_left = n;
  std::vector<uint32_t> free_ends;
  for (;;) {
    free_ends.clear();
    for (uint32_t u = 0; u < n; ++u) {
      if (degree(u) < 2) free_ends.push_back(u);
    }
    size_t joined = 0;
    for (const Edge& e : CandidateEdges(log, free_ends, neighbours)) {
      if (degree(e.a) == 2 || degree(e.b) == 2) continue;
      const uint32_t ra = Root(parent, e.a), rb = Root(parent, e.b);
      if (ra == rb) continue;
      parent[ra] = rb;
      link[e.a][degree(e.a)] = e.b;
      link[e.b][degree(e.b)] = e.a;
      ++joined;
    }
    pieces_left -= joined;
    if (pieces_left <= 1 || joined == 0) break;
  }

  // Walk each piece from its more often chosen end.
  struct Piece {
    std::vector<uint32_t> units;
    double mean_count = 0;
  };
  std::vector<Piece> pieces;
  std::vector<bool> placed(n, false);
  const auto step = [&](uint32_t u, uint32_t prev) {
    return link[u][0] != prev ? link[u][0] : link[u][1];
  };
  for (uint32_t start = 0; start < n; ++start) {
    if (placed[start] || degree(start) == 2) continue;  // done, or not an end
    uint32_t other_end = start;
    for (uint32_t u = start, prev = kNone; u != kNone;) {
      other_end = u;
      const uint32_t next = step(u, prev);
      prev = u;
      u = next;
    }
    Piece p;
    for (uint32_t u = count[other_end] > count[start] ? other_end : start, prev = kNone;
         u != kNone;) {
      p.units.push_back(u);
      placed[u] = true;
      const uint32_t next = step(u, prev);
      prev = u;
      u = next;
    }
    uint64_t sum = 0;
    for (uint32_t u : p.units) sum += count[u];
    p.mean_count = static_cast<double>(sum) / static_cast<double>(p.units.size());
    pieces.push_back(std::move(p));
  }
  std::stable_sort(pieces.begin(), pieces.end(),
                   [](const Piece& x, const Piece& y) { return x.mean_count > y.mean_count; });

  std::vector<uint32_t> slot_of_unit(n);
  uint32_t slot = 0;
  for (const Piece& p : pieces) {
    for (uint32_t u : p.units) slot_of_unit[u] = slot++;
  }
  if (slot != n) throw std::logic_error("PlaceByCoactivation: not a permutation");
  return slot_of_unit;
}

double MeanRunsPerToken(const ChoiceLog& log, const std::vector<uint32_t>& slot_of_unit) {
  if (slot_of_unit.size() != log.n_units()) {
    throw std::logic_error("MeanRunsPerToken: permutation of another size");
  }
  if (log.tokens() == 0) return 0.0;
  uint64_t runs = 0;
  std::vector<uint32_t> slots;
  for (size_t t = 0; t < log.tokens(); ++t) {
    slots.clear();
    for (uint32_t u : log.TokenUnits(t)) slots.push_back(slot_of_unit[u]);
    std::sort(slots.begin(), slots.end());
    for (size_t i = 0; i < slots.size(); ++i) runs += i == 0 || slots[i] != slots[i - 1] + 1;
  }
  return static_cast<double>(runs) / static_cast<double>(log.tokens());
}

// ------------------------------------------------------------ rewriting

namespace {

constexpr uint64_t kCopyBytes = uint64_t{16} << 20;  // records moved per step

}  // namespace

void CheckPlacedOutput(const std::string& in_path, const std::string& out_path, bool force) {
  struct stat st {};
  if (!force && ::stat(out_path.c_str(), &st) == 0) {
    ThrowInputError("'", out_path, "' exists (use --force to overwrite)");
  }
  if (IsSameFile(in_path, out_path)) {
    ThrowInputError("place: the output '", out_path, "' is the input bundle");
  }
}

void WritePlacedBundle(const bundle::Bundle& in,
                       const std::vector<std::vector<uint32_t>>& slot_of_unit,
                       const std::string& description, const std::string& out_path, bool force,
                       const std::function<void(uint64_t, uint64_t)>& progress) {
  const std::vector<bundle::UnitGroup>& groups = in.groups();
  if (slot_of_unit.size() != groups.size()) {
    throw std::logic_error("WritePlacedBundle: one permutation per group expected");
  }
  CheckPlacedOutput(in.path(), out_path, force);

  bundle::BundleWriter writer(out_path, force);
  for (const gguf::KeyValue& kv : in.header().metadata()) {
    // The writer writes sparrow.* itself, except what it is handed.
    if (kv.key == kFusedAdaptersKey || kv.key.rfind("sparrow.", 0) != 0) {
      writer.AddMetadata(kv.key, kv.value);
    }
  }
  writer.SetSource(in.header().GetString(bundle::keys::kSource).value_or(""));
  writer.SetPlacement(description);
  writer.DeclareGroups(in.layout(), in.record_type(), in.n_layers(), in.d_model(), in.d_ff());
  for (size_t i = 0; i < groups.size(); ++i) {
    const bundle::UnitGroup& a = groups[i];
    const bundle::UnitGroup& b = writer.groups()[i];
    if (a.layer != b.layer || a.kind != b.kind || a.n_units != b.n_units ||
        a.record_bytes != b.record_bytes) {
      throw std::logic_error("WritePlacedBundle: the writer's groups differ from the input's");
    }
    writer.SetPermutation(i, slot_of_unit[i]);
    writer.SetLargestScale(i, a.largest_scale);  // the same records
  }

  uint64_t total = in.resident_bytes(), done = 0;
  for (const bundle::UnitGroup& g : groups) total += g.section_bytes();
  {
    const gguf::GgufFile resident = in.LoadResident();
    gguf::GgufWriter& out = writer.BeginResident(resident.alignment());
    for (const gguf::TensorInfo& t : resident.tensors()) out.AddTensor(t.name, t.dims, t.type);
    for (const gguf::TensorInfo& t : resident.tensors()) {
      out.WriteTensorData(t.data, static_cast<size_t>(t.n_bytes));
    }
    writer.EndResident();
  }
  done += in.resident_bytes();
  if (progress) progress(done, total);

  // A group's records are read whole (in the old slot order), then handed
  // to the writer in the new one, a few MiB at a time.
  std::vector<uint8_t> source, staged;
  for (size_t i = 0; i < groups.size(); ++i) {
    const bundle::UnitGroup& g = groups[i];
    source.resize(size_t{g.n_units} * g.record_bytes);
    in.ReadRecords(g, 0, g.n_units, source.data());
    std::vector<uint32_t> unit_of_new_slot(g.n_units);
    for (uint32_t u = 0; u < g.n_units; ++u) unit_of_new_slot[slot_of_unit[i][u]] = u;
    const uint32_t per_step =
        static_cast<uint32_t>(std::max<uint64_t>(1, kCopyBytes / g.record_bytes));
    staged.resize(size_t{std::min(per_step, g.n_units)} * g.record_bytes);
    for (uint32_t slot = 0; slot < g.n_units; slot += per_step) {
      const uint32_t n = std::min(per_step, g.n_units - slot);
      for (uint32_t k = 0; k < n; ++k) {
        const uint32_t unit = unit_of_new_slot[slot + k];
        const uint8_t* record = source.data() + size_t{g.slot_of_unit[unit]} * g.record_bytes;
        in.VerifyRecord(g, unit, record);
        std::copy_n(record, g.record_bytes, staged.data() + size_t{k} * g.record_bytes);
      }
      writer.AppendRecords(staged.data(), n);
      done += uint64_t{n} * g.record_bytes;
      if (progress) progress(done, total);
    }
  }
  writer.Finish();
  if (in.calibration()) {
    bundle::WriteCalibration(bundle::Bundle::Open(out_path), *in.calibration());
  }
}

}  // namespace sparrow
