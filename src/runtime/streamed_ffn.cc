#include "src/runtime/streamed_ffn.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "base/timer.h"
#include "src/ops/ops.h"
#include "src/threads.h"

namespace sparrow {
namespace {

constexpr uint32_t kMinRowsPerGroup = 8;
constexpr int kKinds = 3;

size_t Floats(size_t n) { return n * sizeof(float); }

// Largest record and the widest part among the bundle's groups.
uint32_t MaxRecordBytes(const bundle::Bundle& b) {
  uint32_t m = 0;
  for (const bundle::UnitGroup& g : b.groups()) m = std::max(m, g.record_bytes);
  return m;
}

uint64_t StagingBytes(const bundle::Bundle& b, const StreamConfig& s) {
  // Up to the configured size, but no more than 1/16 of the streamed
  // weights (a small model needs little), and at least two of the largest
  // records plus O_DIRECT alignment slack.
  uint64_t ffn = 0;
  for (const bundle::UnitGroup& g : b.groups()) ffn += g.section_bytes();
  const uint64_t floor = 2ull * MaxRecordBytes(b) + 3 * 4096;
  return std::max<uint64_t>(floor, std::min<uint64_t>(s.staging_bytes, ffn / 16));
}

// Rows, maps and the eviction policy's per-unit records of one group.
uint64_t GroupBytes(const bundle::UnitGroup& g, EvictionKind kind, uint32_t capacity) {
  return UnitCache::MemoryBytes(g.n_units, g.payload_bytes, capacity) +
         EvictionPolicyMemoryBytes(kind, g.n_units) + uint64_t{g.n_units} * sizeof(uint32_t);
}

// Per-thread partial sums of RowAxpys plus the batched-matmul panel.
uint64_t KernelScratchBytes(const ModelConfig& c, uint32_t padded_ff, size_t max_batch) {
  const size_t widest = std::max<size_t>(c.d_model, padded_ff);
  return Floats(static_cast<size_t>(ThreadCount()) * (max_batch + 1) * widest) + (4u << 20);
}

}  // namespace

uint64_t StreamedFeedForward::MinimumBytes(const bundle::Bundle& b, const StreamConfig& s,
                                           const ModelConfig& c, size_t max_batch) {
  uint64_t bytes = StagingBytes(b, s);
  uint32_t padded_ff = c.d_ff;
  for (const bundle::UnitGroup& g : b.groups()) {
    bytes += GroupBytes(g, s.eviction, std::min(kMinRowsPerGroup, g.n_units));
    if (g.kind == bundle::RecordKind::kDipInput) padded_ff = g.part_padded_elems;
  }
  bytes += KernelScratchBytes(c, padded_ff, max_batch);
  bytes += 3 * Floats(max_batch * std::max<size_t>(padded_ff, c.d_model));  // activations
  return bytes;
}

StreamedFeedForward::StreamedFeedForward(const bundle::Bundle& bundle, const ModelConfig& config,
                                         const StreamConfig& stream, size_t max_batch,
                                         MemoryBudget& budget, std::unique_ptr<UnitPolicy> policy)
    : bundle_(bundle),
      config_(config),
      stream_(stream),
      max_batch_(max_batch),
      policy_(std::move(policy)) {
  const uint64_t minimum_hint = budget.used() + MinimumBytes(bundle, stream, config, max_batch);
  loader_ = MakeLoader(stream.io, bundle.path(), stream.io_threads);
  budget.Charge(loader_->memory_bytes(), "I/O buffers", minimum_hint);
  ReadPlanOptions plan;
  plan.max_read_bytes = stream.max_read_bytes;
  plan.max_gap_bytes = stream.max_gap_bytes;
  plan.alignment = loader_->alignment();
  const uint64_t staging = StagingBytes(bundle, stream);
  budget.Charge(staging, "read staging", minimum_hint);
  planner_ = std::make_unique<ReadPlanner>(staging, plan);

  uint32_t padded_ff = config.d_ff;
  for (const bundle::UnitGroup& g : bundle.groups()) {
    if (g.kind == bundle::RecordKind::kDipInput) padded_ff = g.part_padded_elems;
  }
  budget.Charge(KernelScratchBytes(config, padded_ff, max_batch), "kernel scratch", minimum_hint);

  // What is left, less the activation scratch, goes to the caches in
  // proportion to each group's size: the largest fraction whose exact cost
  // (rows, maps, policy records) fits.
  const size_t act_width = std::max<size_t>(padded_ff, config.d_model);
  const uint64_t act_reserve = 3 * Floats(max_batch * act_width);
  auto capacity_at = [&](const bundle::UnitGroup& g, double fraction) {
    const uint32_t capacity = static_cast<uint32_t>(fraction * g.n_units);
    return std::clamp(capacity, std::min(kMinRowsPerGroup, g.n_units), g.n_units);
  };
  auto cost_at = [&](double fraction) {
    uint64_t bytes = act_reserve;
    for (const bundle::UnitGroup& g : bundle.groups()) {
      bytes += GroupBytes(g, stream.eviction, capacity_at(g, fraction));
    }
    return bytes;
  };
  double fraction = 1.0;
  if (!budget.unlimited() && cost_at(1.0) > budget.remaining()) {
    double lo = 0.0, hi = 1.0;  // cost_at(lo) may not fit either: Charge says so
    for (int i = 0; i < 40; ++i) {
      const double mid = (lo + hi) / 2;
      (cost_at(mid) <= budget.remaining() ? lo : hi) = mid;
    }
    fraction = lo;
  }
  group_index_.assign(static_cast<size_t>(config.n_layers) * kKinds, -1);
  for (const bundle::UnitGroup& g : bundle.groups()) {
    const uint32_t capacity = capacity_at(g, fraction);
    budget.Charge(GroupBytes(g, stream.eviction, capacity),
                  StrCat("unit cache (layer ", g.layer, " ", bundle::RecordKindName(g.kind), ")"),
                  minimum_hint);
    Group group;
    group.info = &g;
    group.cache = std::make_unique<UnitCache>(g.n_units, g.payload_bytes, capacity);
    group.eviction = MakeEvictionPolicy(stream.eviction, g.n_units, stream.window_tokens);
    group.need_stamp.assign(g.n_units, 0);
    group_index_[g.layer * kKinds + static_cast<int>(g.kind)] = static_cast<int>(groups_.size());
    groups_.push_back(std::move(group));
  }
  // Rows are processed in slices of at most width_, so the activation
  // scratch does not grow with the cache.
  width_ = act_width;
  budget.Charge(act_reserve, "activations", minimum_hint);
  gate_.Reset(max_batch * width_);
  up_.Reset(max_batch * width_);
  coeff_.Reset(max_batch * width_);
}

uint64_t StreamedFeedForward::cache_bytes() const {
  uint64_t bytes = 0;
  for (const Group& g : groups_) bytes += g.cache->bytes();
  return bytes;
}

double StreamedFeedForward::cache_fraction() const {
  uint64_t cap = 0, all = 0;
  for (const Group& g : groups_) {
    cap += g.cache->capacity();
    all += g.info->n_units;
  }
  return all == 0 ? 1.0 : static_cast<double>(cap) / static_cast<double>(all);
}

StreamedFeedForward::Group& StreamedFeedForward::GroupFor(uint32_t layer, bundle::RecordKind kind) {
  const int index = group_index_[layer * kKinds + static_cast<int>(kind)];
  if (index < 0) {
    ThrowInputError(bundle_.path(), ": no ", bundle::RecordKindName(kind), " records for layer ", layer);
  }
  return groups_[index];
}

void StreamedFeedForward::Evict(Group& g, const std::vector<uint32_t>& units, TokenStats& ts) {
  if (units.empty()) return;
  g.cache->RemoveMany(units);
  for (uint32_t u : units) g.eviction->OnRemove(u);
  ts.units_evicted += units.size();
}

void StreamedFeedForward::StreamGroup(Group& g, const std::vector<uint32_t>& need, const UseFn& use) {
  TokenStats& ts = stats_.current();
  UnitCache& cache = *g.cache;
  const bundle::UnitGroup& info = *g.info;
  double t = NowSeconds();

  if (++stamp_ == 0) {  // wrapped: forget old stamps
    for (Group& other : groups_) std::fill(other.need_stamp.begin(), other.need_stamp.end(), 0);
    stamp_ = 1;
  }
  for (uint32_t u : need) g.need_stamp[u] = stamp_;
  ts.units_needed += need.size();

  // The sliding window's expiry, sparing units this pass needs.
  expired_.clear();
  candidates_.assign(cache.units_by_row().begin(), cache.units_by_row().begin() + cache.size());
  g.eviction->Expired(candidates_, &expired_);
  victims_.clear();
  for (uint32_t u : expired_) {
    if (g.need_stamp[u] != stamp_ && cache.Contains(u)) victims_.push_back(u);
  }
  Evict(g, victims_, ts);

  rows_.clear();
  misses_.clear();
  for (uint32_t u : need) {
    const int32_t row = cache.RowOf(u);
    if (row >= 0) {
      rows_.push_back(static_cast<uint32_t>(row));
      g.eviction->OnUse(u);
    } else {
      misses_.push_back(u);
    }
  }
  ts.units_hit += rows_.size();
  std::sort(rows_.begin(), rows_.end());
  // Disk order, so consecutive chunks are contiguous on disk.
  std::sort(misses_.begin(), misses_.end(), [&](uint32_t a, uint32_t b) {
    return info.slot_of_unit[a] < info.slot_of_unit[b];
  });
  double now = NowSeconds();
  ts.memory_seconds += now - t;
  if (!rows_.empty()) {
    use(rows_);
    t = NowSeconds();
    ts.compute_seconds += t - now;
  }

  size_t next = 0;
  std::vector<uint32_t> chunk;
  while (next < misses_.size()) {
    t = NowSeconds();
    const size_t want = misses_.size() - next;
    size_t room = cache.capacity() - cache.size();
    if (room < want) {
      // Victims: first units this pass does not need, in policy order.
      candidates_.clear();
      for (uint32_t row = 0; row < cache.size(); ++row) {
        const uint32_t u = cache.UnitAt(row);
        if (g.need_stamp[u] != stamp_) candidates_.push_back(u);
      }
      g.eviction->ChooseVictims(candidates_, want - room, &victims_);
      Evict(g, victims_, ts);
      room = cache.capacity() - cache.size();
      if (room == 0) {
        // The pass needs more units than the cache holds: everything cached
        // has been used already, so make room among those.
        candidates_.assign(cache.units_by_row().begin(), cache.units_by_row().begin() + cache.size());
        g.eviction->ChooseVictims(candidates_, std::min<size_t>(want, cache.capacity()), &victims_);
        Evict(g, victims_, ts);
        room = cache.capacity() - cache.size();
      }
      if (room == 0) ThrowInputError("internal: eviction freed no room in the unit cache");
    }
    chunk.assign(misses_.begin() + next, misses_.begin() + next + std::min(room, want));
    const size_t planned = planner_->Plan(
        chunk, info.record_bytes, [&info](uint32_t u) { return info.UnitOffset(u); }, &ops_, &planned_);
    if (planned == 0) ThrowInputError("internal: read staging cannot hold one record");
    now = NowSeconds();
    ts.memory_seconds += now - t;

    const ReadTotals totals = loader_->ReadAll(ops_);
    t = NowSeconds();
    ts.io_seconds += t - now;
    ts.bytes_read += totals.bytes;
    ts.read_calls += totals.calls;

    rows_.clear();
    for (const PlannedRecord& rec : planned_) {
      bundle_.VerifyRecord(info, rec.unit, rec.data);
      const uint32_t row = cache.Append(rec.unit);
      std::memcpy(cache.Row(row), rec.data, info.payload_bytes);
      g.eviction->OnUse(rec.unit);
      rows_.push_back(row);
    }
    ts.units_loaded += planned_.size();
    next += planned;
    now = NowSeconds();
    ts.memory_seconds += now - t;
    use(rows_);
    ts.compute_seconds += NowSeconds() - now;
  }
}

void StreamedFeedForward::Forward(uint32_t layer, const float* x, size_t n, float* out) {
  if (n > max_batch_) ThrowInputError("internal: batch of ", n, " exceeds ", max_batch_);
  if (layer == 0) {
    stats_.BeginToken(n);
    for (Group& g : groups_) g.eviction->BeginToken(token_);
    ++token_;
  }
  std::fill(out, out + n * config_.d_model, 0.0f);
  if (bundle_.layout() == bundle::Layout::kNeuron) {
    ForwardNeuron(layer, x, n, out);
  } else {
    ForwardDip(layer, x, n, out);
  }
  if (layer + 1 == config_.n_layers) stats_.EndToken();
}

void StreamedFeedForward::ForwardNeuron(uint32_t layer, const float* x, size_t n, float* out) {
  Group& g = GroupFor(layer, bundle::RecordKind::kNeuron);
  const bundle::UnitGroup& info = *g.info;
  policy_->Select(info, x, n, config_.d_model, &need_);
  const UnitCache& cache = *g.cache;
  StreamGroup(g, need_, [&](const std::vector<uint32_t>& all_rows) {
    for (size_t first = 0; first < all_rows.size(); first += width_) {
      const size_t count = std::min(width_, all_rows.size() - first);
      const uint32_t* rows = all_rows.data() + first;
      ops::RowSet set;
      set.type = bundle_.record_type();
      set.stride = cache.row_bytes();
      set.cols = info.part_padded_elems;
      set.count = count;
      // A run of consecutive rows is a plain strided matrix (faster kernels).
      if (rows[count - 1] - rows[0] + 1 == count) {
        set.base = cache.Row(rows[0]);
      } else {
        set.base = cache.Row(0);
        set.index = rows;
      }
      set.offset = 0;
      ops::RowDots(set, x, n, gate_.data());
      set.offset = info.part_bytes;
      ops::RowDots(set, x, n, up_.data());
      ops::SiluMul(gate_.data(), up_.data(), n * count, gate_.data());
      set.offset = 2 * size_t{info.part_bytes};
      ops::RowAxpys(set, gate_.data(), n, out);
    }
  });
}

void StreamedFeedForward::ForwardDip(uint32_t layer, const float* x, size_t n, float* out) {
  Group& in = GroupFor(layer, bundle::RecordKind::kDipInput);
  Group& outg = GroupFor(layer, bundle::RecordKind::kDipOutput);
  const size_t ff = in.info->part_padded_elems;  // accumulator row stride
  const size_t d = config_.d_model;
  std::fill(gate_.data(), gate_.data() + n * ff, 0.0f);
  std::fill(up_.data(), up_.data() + n * ff, 0.0f);

  // Up and gate: sums of input columns weighted by x.
  policy_->Select(*in.info, x, n, d, &need_);
  StreamGroup(in, need_, [&](const std::vector<uint32_t>& all_rows) {
    AxpyColumns(in, all_rows, x, d, n, {{0, up_.data()}, {in.info->part_bytes, gate_.data()}});
  });
  ops::SiluMul(gate_.data(), up_.data(), n * ff, gate_.data());

  // Down: sum of down columns weighted by the GLU output.
  const float* h = gate_.data();
  policy_->Select(*outg.info, h, n, ff, &need_);
  StreamGroup(outg, need_, [&](const std::vector<uint32_t>& all_rows) {
    AxpyColumns(outg, all_rows, h, ff, n, {{0, out}});
  });
}

void StreamedFeedForward::AxpyColumns(const Group& g, const std::vector<uint32_t>& all_rows,
                                      const float* src, size_t src_stride, size_t n,
                                      std::initializer_list<AxpyTarget> targets) {
  for (size_t first = 0; first < all_rows.size(); first += width_) {
    const size_t count = std::min(width_, all_rows.size() - first);
    const uint32_t* rows = all_rows.data() + first;
    for (size_t t = 0; t < n; ++t) {
      for (size_t k = 0; k < count; ++k) {
        coeff_[t * count + k] = src[t * src_stride + g.cache->UnitAt(rows[k])];
      }
    }
    ops::RowSet set;
    set.type = bundle_.record_type();
    set.base = g.cache->Row(0);
    set.stride = g.cache->row_bytes();
    set.cols = g.info->part_padded_elems;
    set.index = rows;
    set.count = count;
    for (const AxpyTarget& target : targets) {
      set.offset = target.first;
      ops::RowAxpys(set, coeff_.data(), n, target.second);
    }
  }
}

}  // namespace sparrow
