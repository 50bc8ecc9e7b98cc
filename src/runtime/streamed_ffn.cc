#include "src/runtime/streamed_ffn.h"

#include <algorithm>
#include <stdexcept>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>

#include "base/error.h"
#include "base/sort_unique.h"
#include "base/timer.h"
#include "src/ops/ops.h"
#include "base/threads.h"

namespace sparrow {
namespace {

constexpr uint32_t kMinRowsPerGroup = 8;
constexpr int kKinds = bundle::kRecordKinds;

size_t Floats(size_t n) { return n * sizeof(float); }

// Largest record and the widest part among the bundle's groups.
uint32_t MaxRecordBytes(const bundle::Bundle& b) {
  uint32_t m = 0;
  for (const bundle::UnitGroup& g : b.groups()) m = std::max(m, g.record_bytes);
  return m;
}

// Staging of one of the two planners (a chunk is read into one while the
// chunk before it, in the other, is copied and computed): half the
// configured size, but no more than 1/32 of the streamed weights (a small
// model needs little), and at least two of the largest records plus
// O_DIRECT alignment slack.
uint64_t PlannerStagingBytes(const bundle::Bundle& b, const StreamConfig& s) {
  uint64_t ffn = 0;
  for (const bundle::UnitGroup& g : b.groups()) ffn += g.section_bytes();
  const uint64_t floor = 2ull * MaxRecordBytes(b) + 3 * 4096;
  return std::max<uint64_t>(floor, std::min<uint64_t>(s.staging_bytes / 2, ffn / 32));
}

uint64_t StagingBytes(const bundle::Bundle& b, const StreamConfig& s) {
  return 2 * PlannerStagingBytes(b, s);
}

// Rows, maps and the eviction policy's per-unit records of one group, its
// two per-unit stamps (need_stamp, chosen_at), and the bitmap that sorts its
// cached rows (SortDistinctBelow's, shared by the groups: charging each
// covers the largest).
uint64_t GroupBytes(const bundle::UnitGroup& g, EvictionKind kind, uint32_t capacity) {
  return UnitCache::MemoryBytes(g.n_units, g.payload_bytes, capacity) +
         EvictionPolicyMemoryBytes(kind, g.n_units) + 2 * uint64_t{g.n_units} * sizeof(uint32_t) +
         SortDistinctScratchBytes(g.n_units);
}

// The caches' rows, one slot each in one RowArena; `capacity_of` gives each
// group's capacity.
template <class CapacityOf>
uint64_t ArenaSlotBytes(const bundle::Bundle& b, CapacityOf capacity_of) {
  uint64_t slots = 0;
  for (const bundle::UnitGroup& g : b.groups()) {
    slots +=
        RowArena::SlotBytes(UnitCache::MatrixBytes(g.n_units, g.payload_bytes, capacity_of(g)));
  }
  return slots;
}

// What that arena takes beyond the rows' own bytes (which GroupBytes
// counts): its rounding up to a whole page.
template <class CapacityOf>
uint64_t ArenaRoundingBytes(const bundle::Bundle& b, CapacityOf capacity_of) {
  const uint64_t slots = ArenaSlotBytes(b, capacity_of);
  return RowArena::MemoryBytes(slots) - slots;
}

// Width of the per-token activation rows: the FFN's (padded) hidden size or
// the model's, whichever is larger.
size_t ActivationWidth(const bundle::Bundle& b, const ModelConfig& c) {
  size_t padded_ff = c.d_ff;
  for (const bundle::UnitGroup& g : b.groups()) {
    if (g.kind == bundle::RecordKind::kDipInput) padded_ff = g.part_padded_elems;
  }
  // At least 2: the neuron layout's dot products take two rows per record.
  return std::max<size_t>({padded_ff, c.d_model, 2});
}

// Activation scratch: gate, up, coefficients and policy scores (max_batch x
// width each), the masked input, a row of ones, the policy's scratch row
// and its per-token choices.
uint64_t ActivationBytes(const ModelConfig& c, size_t width, size_t max_batch) {
  return 4 * Floats(max_batch * width) + Floats(max_batch * c.d_model) + 2 * Floats(width) +
         TokenMasks::MemoryBytes(max_batch, width, static_cast<uint32_t>(width));
}

// The length of the rows RowDots multiplies (the parts of neuron, up-row and
// gate-row records; 0 for the dip layout, which has none).
size_t DotRowElems(const bundle::Bundle& b) {
  size_t elems = 0;
  for (const bundle::UnitGroup& g : b.groups()) {
    if (g.kind == bundle::RecordKind::kNeuron || g.kind == bundle::RecordKind::kUpRow ||
        g.kind == bundle::RecordKind::kGateRow) {
      elems = std::max<size_t>(elems, g.part_padded_elems);
    }
  }
  return elems;
}

// The length of the rows RowAxpys sums: neuron down parts, dip output
// columns, and dip input records whole (AxpyColumns: both parts as one row).
size_t AxpyRowElems(const bundle::Bundle& b) {
  size_t elems = 0;
  for (const bundle::UnitGroup& g : b.groups()) {
    const size_t parts = g.kind == bundle::RecordKind::kDipInput ? g.parts : 1;
    elems = std::max<size_t>(elems, parts * g.part_padded_elems);
  }
  return elems;
}

// The row kernels' scratch: RowDots' prepared inputs and panels, RowAxpys'
// row pointers, panels and (types without a gather kernel) per-thread sums,
// over chunks of at most `width` rows, and SumColumns' integer sums.
uint64_t KernelScratchBytes(const bundle::Bundle& b, size_t width, size_t max_batch) {
  // SumColumns' integer sums, where a group it sums can take them (its
  // largest block scale recorded).
  bool bounded = false;
  for (const bundle::UnitGroup& g : b.groups()) {
    const bool summed = g.kind == bundle::RecordKind::kDipInput ||
                        g.kind == bundle::RecordKind::kDipOutput ||
                        g.kind == bundle::RecordKind::kNeuron;  // its down parts
    bounded |= summed && g.largest_scale > 0.0f;
  }
  // Only batches that RowProductsUsePanels leaves to the gather kernels
  // take them (IntegerSumsFit).
  size_t integer_batch = max_batch;
  while (integer_batch > 0 && ops::RowProductsUsePanels(integer_batch)) --integer_batch;
  const uint64_t integer_sums = ops::RowAxpyIntSums::Usable(b.record_type()) && bounded
                                    ? ops::RowAxpyIntSums::Bytes(AxpyRowElems(b), integer_batch)
                                    : 0;
  return ops::RowDotsScratchBytes(b.record_type(), DotRowElems(b), /*max_rows=*/width, max_batch) +
         ops::RowAxpysScratchBytes(b.record_type(), AxpyRowElems(b), /*max_rows=*/width,
                                   max_batch) +
         integer_sums;
}

}  // namespace

uint64_t StreamedFeedForward::MinimumBytes(const bundle::Bundle& b, const StreamConfig& s,
                                           const ModelConfig& c, size_t max_batch) {
  uint64_t bytes = StagingBytes(b, s);
  const auto fewest_rows = [](const bundle::UnitGroup& g) {
    return std::min(kMinRowsPerGroup, g.n_units);
  };
  for (const bundle::UnitGroup& g : b.groups()) bytes += GroupBytes(g, s.eviction, fewest_rows(g));
  bytes += ArenaRoundingBytes(b, fewest_rows);
  const size_t width = ActivationWidth(b, c);
  bytes += KernelScratchBytes(b, width, max_batch);
  bytes += ActivationBytes(c, width, max_batch);
  return bytes;
}

StreamedFeedForward::StreamedFeedForward(const bundle::Bundle& bundle, const ModelConfig& config,
                                         const StreamConfig& stream, size_t max_batch,
                                         MemoryBudget& budget, const SparsityOptions& sparsity)
    : bundle_(bundle),
      config_(config),
      stream_(stream),
      max_batch_(max_batch),
      policy_(sparsity, bundle.layout()) {
  const uint64_t minimum_hint = budget.used() + MinimumBytes(bundle, stream, config, max_batch);
  loader_ = MakeLoader(stream.io, LoaderSource(bundle.path(), bundle.fd()), stream.io_threads);
  budget.Charge(loader_->memory_bytes(), "I/O buffers", minimum_hint);
  ReadPlanOptions plan;
  plan.max_read_bytes = stream.max_read_bytes;
  plan.max_gap_bytes = stream.max_gap_bytes;
  plan.alignment = loader_->alignment();
  budget.Charge(StagingBytes(bundle, stream), "read staging", minimum_hint);
  for (Chunk& chunk : chunks_) {
    chunk.planner = std::make_unique<ReadPlanner>(PlannerStagingBytes(bundle, stream), plan);
  }
  pipeline_ = std::make_unique<ReadPipeline>(*loader_);
  prefetch_across_groups_ = policy_.kind() == SparsityKind::kDense;

  const size_t act_width = ActivationWidth(bundle, config);
  budget.Charge(KernelScratchBytes(bundle, act_width, max_batch), "kernel scratch",
                minimum_hint);

  // What is left, less the activation scratch, goes to the caches in
  // proportion to each group's size: the largest fraction whose exact cost
  // (rows, maps, policy records) fits.
  const uint64_t act_reserve = ActivationBytes(config, act_width, max_batch);
  auto capacity_at = [&](const bundle::UnitGroup& g, double fraction) {
    const uint32_t capacity = static_cast<uint32_t>(fraction * g.n_units);
    return std::clamp(capacity, std::min(kMinRowsPerGroup, g.n_units), g.n_units);
  };
  auto cost_at = [&](double fraction) {
    uint64_t bytes = act_reserve;
    for (const bundle::UnitGroup& g : bundle.groups()) {
      bytes += GroupBytes(g, stream.eviction, capacity_at(g, fraction));
    }
    return bytes + ArenaRoundingBytes(bundle, [&](const bundle::UnitGroup& g) {
             return capacity_at(g, fraction);
           });
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
  const auto capacity_of = [&](const bundle::UnitGroup& g) { return capacity_at(g, fraction); };
  budget.Charge(ArenaRoundingBytes(bundle, capacity_of), "unit caches", minimum_hint);
  cache_rows_ = RowArena(ArenaSlotBytes(bundle, capacity_of));
  for (const bundle::UnitGroup& g : bundle.groups()) {
    const uint32_t capacity = capacity_at(g, fraction);
    budget.Charge(GroupBytes(g, stream.eviction, capacity), "unit caches", minimum_hint);
    Group group;
    group.info = &g;
    // Neuron records are cached as [gate | up] and [down] (UnitCache's
    // head and tail), each pass of ForwardNeuron reading one contiguous span.
    const uint32_t split = g.kind == bundle::RecordKind::kNeuron ? 2 * g.part_bytes : 0;
    group.cache = std::make_unique<UnitCache>(
        g.n_units, g.payload_bytes, capacity, split,
        cache_rows_.Take(UnitCache::MatrixBytes(g.n_units, g.payload_bytes, capacity)));
    group.eviction = MakeEvictionPolicy(stream.eviction, g.n_units, stream.window_tokens);
    group.need_stamp.assign(g.n_units, 0);
    group.chosen_at.assign(g.n_units, ~uint32_t{0});
    group.index = groups_.size();
    group_index_[g.layer * kKinds + static_cast<int>(g.kind)] = static_cast<int>(groups_.size());
    groups_.push_back(std::move(group));
  }
  // Rows are processed in slices of at most width_, so the activation
  // scratch does not grow with the cache.
  width_ = act_width;
  budget.Charge(act_reserve, "activations", minimum_hint);
  glu_.Reset(2 * max_batch * width_);
  gate_ = glu_.data();
  up_ = glu_.data() + max_batch * width_;
  coeff_.Reset(max_batch * width_);
  scores_.Reset(max_batch * width_);
  masked_x_.Reset(max_batch * config.d_model);
  ones_.Reset(width_);
  std::fill(ones_.begin(), ones_.end(), 1.0f);
  select_scratch_.Reset(width_);
  masks_.Reset(max_batch, width_, static_cast<uint32_t>(width_));

  StreamStats::TraceHeader& trace = stats_.trace_header();
  trace.layout = std::string(bundle::LayoutName(bundle.layout()));
  trace.record_type = TensorTypeName(bundle.record_type());
  trace.n_layers = config.n_layers;
  trace.d_model = config.d_model;
  trace.d_ff = config.d_ff;
  trace.cache_bytes = cache_bytes();
  trace.io = IoModeName(loader_->mode());
  trace.policy = policy_.name();
  trace.mlp_density = sparsity.density;
  trace.gamma = sparsity.gamma;
  for (const Group& g : groups_) {
    trace.ffn_bytes += g.info->section_bytes();
    trace.groups.push_back({g.info->layer, std::string(bundle::RecordKindName(g.info->kind)),
                            g.info->n_units, g.info->record_bytes, g.info->payload_bytes,
                            g.cache->capacity()});
  }
  stats_.set_group_count(groups_.size());
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

size_t StreamedFeedForward::StartChunk(const bundle::UnitGroup& info, Chunk& c) {
  const size_t planned = c.planner->Plan(
      c.units, info.record_bytes, [&info](uint32_t u) { return info.UnitOffset(u); }, &c.ops, &c.records);
  if (planned == 0) ThrowInputError("internal: read staging cannot hold one record");
  if (c.pending.size() < c.records.size()) {
    c.pending = std::vector<std::atomic<uint32_t>>(c.records.size());
  }
  for (size_t i = 0; i < c.records.size(); ++i) {
    c.pending[i].store(info.record_bytes, std::memory_order_relaxed);
  }
  c.checksum_ns.store(0, std::memory_order_relaxed);
  pipeline_->Start(
      &c.ops,
      [this, &info, &c] {
        // Anything no piece completed (a loader that does not report
        // pieces) is verified here, still off the compute thread.
        for (size_t i = 0; i < c.records.size(); ++i) {
          if (c.pending[i].load(std::memory_order_acquire) != 0) {
            bundle_.VerifyRecord(info, c.records[i].unit, c.records[i].data);
          }
        }
      },
      [this, &info, &c](const uint8_t* dest, uint64_t length) { OnLanded(info, c, dest, length); });
  return planned;
}

void StreamedFeedForward::OnLanded(const bundle::UnitGroup& info, Chunk& c, const uint8_t* dest,
                                   uint64_t length) {
  const auto start = std::chrono::steady_clock::now();
  const uint8_t* end = dest + length;
  // Records are in staging order: the first one that may overlap is the
  // last starting at or before `dest`.
  auto it = std::upper_bound(c.records.begin(), c.records.end(), dest,
                             [](const uint8_t* p, const PlannedRecord& r) { return p < r.data; });
  if (it != c.records.begin()) --it;
  for (; it != c.records.end() && it->data < end; ++it) {
    const uint8_t* lo = std::max(dest, it->data);
    const uint8_t* hi = std::min(end, it->data + info.record_bytes);
    if (lo >= hi) continue;
    const auto got = static_cast<uint32_t>(hi - lo);
    // acq_rel: the piece that finishes a record sees the bytes of the
    // pieces other threads landed before it.
    std::atomic<uint32_t>& left = c.pending[static_cast<size_t>(it - c.records.begin())];
    if (left.fetch_sub(got, std::memory_order_acq_rel) == got) {
      bundle_.VerifyRecord(info, it->unit, it->data);
    }
  }
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::steady_clock::now() - start);
  c.checksum_ns.fetch_add(static_cast<uint64_t>(ns.count()), std::memory_order_relaxed);
}

void StreamedFeedForward::WaitForChunk(const Chunk& c, TokenStats& ts) {
  const double start = NowSeconds();
  const ReadPipeline::Result read = pipeline_->Wait();
  ts.io_seconds += NowSeconds() - start;
  ts.read_seconds += read.read_seconds;
  ts.checksum_seconds += read.after_seconds +
                         static_cast<double>(c.checksum_ns.load(std::memory_order_relaxed)) * 1e-9;
  ts.bytes_read += read.totals.bytes;
  ts.read_calls += read.totals.calls;
}

bool StreamedFeedForward::StartPrefetch(Group& next, Chunk& c) {
  const bundle::UnitGroup& info = *next.info;
  const UnitCache& cache = *next.cache;
  c.units.clear();
  if (next.by_slot.empty()) {
    next.by_slot.resize(info.n_units);
    for (uint32_t u = 0; u < info.n_units; ++u) next.by_slot[info.slot_of_unit[u]] = u;
  }
  for (uint32_t u : next.by_slot) {
    if (cache.Contains(u)) continue;
    c.units.push_back(u);
    if (c.units.size() == cache.capacity()) break;
  }
  if (c.units.empty()) return false;
  StartChunk(info, c);
  return true;
}

void StreamedFeedForward::StreamGroup(Group& g, const std::vector<uint32_t>& need, const UseFn& use) {
  TokenStats& ts = stats_.current();
  const GroupTokenStats before{ts.units_needed, ts.units_hit, ts.units_loaded, ts.bytes_read,
                               ts.read_calls};
  UnitCache& cache = *g.cache;
  const bundle::UnitGroup& info = *g.info;
  double t = NowSeconds();

  if (++stamp_ == 0) {  // wrapped: forget old stamps
    for (Group& other : groups_) std::fill(other.need_stamp.begin(), other.need_stamp.end(), 0);
    stamp_ = 1;
  }
  for (uint32_t u : need) g.need_stamp[u] = stamp_;
  ts.units_needed += need.size();

  // The sliding window's expiry, sparing units this pass needs. A cache
  // with a row for every unit of the group skips it: the window bounds
  // the memory the units take, and these rows are held anyway, so
  // dropping a unit would only read it again (a 125M-shaped synthetic
  // Q8_0 dip bundle in RAM at density 0.5 read 3.7 MiB a token and decoded
  // at half the dense policy's speed).
  expired_.clear();
  if (cache.capacity() < cache.n_units()) {
    candidates_.assign(cache.units_by_row().begin(), cache.units_by_row().begin() + cache.size());
    g.eviction->Expired(candidates_, &expired_);
  }
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
  // Already in order when the cache holds the units in unit order (a cache
  // that holds them all): checking costs less than sorting.
  if (!std::is_sorted(rows_.begin(), rows_.end())) {
    SortDistinctBelow(&rows_, cache.capacity(), &sort_bits_);
  }
  // Disk order, so consecutive chunks are contiguous on disk.
  std::sort(misses_.begin(), misses_.end(), [&](uint32_t a, uint32_t b) {
    return info.slot_of_unit[a] < info.slot_of_unit[b];
  });

  // The misses go through the two chunks in turn: chunk k+1 is read (and
  // its records verified) on the pipeline's thread while chunk k is copied
  // into the cache and computed here. A chunk holds at most the cache's
  // capacity, so it always fits once the units already used make room.
  size_t next = 0;
  int reading = 0;         // the chunk the pipeline fills (or filled, until waited for)
  bool in_flight = false;  // a read for this group is in flight
  bool first_is_prefetch = false;
  // If anything below throws (a bad record, an I/O error), the read in
  // flight must finish before its staging and ops can be reused or freed,
  // and a prefetch it was is forgotten.
  struct DrainOnUnwind {
    ReadPipeline& pipeline;
    int& prefetch_group;
    const int exceptions = std::uncaught_exceptions();
    ~DrainOnUnwind() {
      if (std::uncaught_exceptions() == exceptions) return;  // a normal return
      prefetch_group = -1;
      if (!pipeline.busy()) return;
      try {
        pipeline.Wait();
      } catch (...) {  // the first error is already on its way up
      }
    }
  } drain{*pipeline_, prefetch_group_};

  if (prefetch_group_ >= 0) {
    reading = prefetch_chunk_;
    const bool mine = prefetch_group_ == static_cast<int>(g.index);
    prefetch_group_ = -1;
    if (mine) {
      // What the prefetch brings is not read again.
      in_flight = first_is_prefetch = true;
      prefetched_.clear();
      for (const PlannedRecord& rec : chunks_[reading].records) prefetched_.push_back(rec.unit);
      std::sort(prefetched_.begin(), prefetched_.end());
      misses_.erase(std::remove_if(misses_.begin(), misses_.end(),
                                   [&](uint32_t u) {
                                     return std::binary_search(prefetched_.begin(), prefetched_.end(), u);
                                   }),
                    misses_.end());
    } else {
      // The forward pass went to another group than the one guessed.
      WaitForChunk(chunks_[reading], ts);
      ts.prefetched_units += chunks_[reading].records.size();
      reading = 0;
    }
  }
  auto start_next = [&] {
    Chunk& c = chunks_[reading];
    c.units.assign(misses_.begin() + next,
                   misses_.begin() + next + std::min<size_t>(cache.capacity(), misses_.size() - next));
    next += StartChunk(info, c);
    in_flight = true;
  };
  // Nothing more to read for this group: read ahead for the next one.
  auto maybe_prefetch = [&] {
    if (in_flight || next < misses_.size()) return;
    Group& following = groups_[(g.index + 1) % groups_.size()];
    if (!prefetch_across_groups_) return;
    if (StartPrefetch(following, chunks_[reading])) {
      prefetch_group_ = static_cast<int>(following.index);
      prefetch_chunk_ = reading;
    }
  };
  if (!in_flight && !misses_.empty()) start_next();
  maybe_prefetch();
  double now = NowSeconds();
  ts.memory_seconds += now - t;
  if (!rows_.empty()) {
    use(CachedRows(g, rows_));  // the hits, while the first chunk is read
    t = NowSeconds();
    ts.compute_seconds += t - now;
  }

  while (in_flight) {
    WaitForChunk(chunks_[reading], ts);
    in_flight = false;
    now = NowSeconds();
    Chunk& done = chunks_[reading];
    reading ^= 1;
    if (next < misses_.size()) {
      start_next();
    } else {
      maybe_prefetch();
    }

    // A record is placed if this pass needs its unit and the cache lacks
    // it (a prefetched one may be neither).
    auto usable = [&](uint32_t u) { return g.need_stamp[u] == stamp_ && !cache.Contains(u); };
    size_t want = 0;
    for (const PlannedRecord& rec : done.records) want += usable(rec.unit);
    if (first_is_prefetch) {
      ts.prefetched_units += done.records.size();
      ts.prefetch_used += want;
      first_is_prefetch = false;
    }
    // Room for what this chunk brings: first from units this pass does
    // not need, in policy order. Units this pass needs are never evicted
    // for one another (with every unit needed, as under the dense policy,
    // that would copy records around every token and hit no more often).
    size_t room = cache.capacity() - cache.size();
    if (room < want) {
      candidates_.clear();
      for (uint32_t row = 0; row < cache.size(); ++row) {
        const uint32_t u = cache.UnitAt(row);
        if (g.need_stamp[u] != stamp_) candidates_.push_back(u);
      }
      g.eviction->ChooseVictims(candidates_, want - room, &victims_);
      Evict(g, victims_, ts);
      room = cache.capacity() - cache.size();
    }
    // Admitted records are copied into the cache and computed there; the
    // others are computed in the staging they were read into.
    rows_.clear();
    staged_.clear();
    staged_units_.clear();
    const uint8_t* staging = done.planner->staging();
    for (const PlannedRecord& rec : done.records) {
      if (!usable(rec.unit)) continue;
      if (rows_.size() < room) {
        const uint32_t row = cache.Append(rec.unit);
        cache.Store(row, rec.data);
        rows_.push_back(row);
      } else {
        staged_.push_back(static_cast<uint32_t>(rec.data - staging));
        staged_units_.push_back(rec.unit);
      }
      g.eviction->OnUse(rec.unit);
    }
    ts.units_loaded += want;
    ts.units_streamed += staged_.size();
    t = NowSeconds();
    ts.memory_seconds += t - now;
    if (!rows_.empty()) use(CachedRows(g, rows_));
    if (!staged_.empty()) {
      UnitRows rows;
      rows.base = staging;
      rows.stride = 1;
      rows.pitch = info.record_bytes;
      rows.index = staged_.data();
      rows.units = staged_units_.data();
      rows.count = staged_.size();
      use(rows);
    }
    ts.compute_seconds += NowSeconds() - t;
  }
  GroupTokenStats& gs = ts.groups[g.index];
  gs.needed += ts.units_needed - before.needed;
  gs.hit += ts.units_hit - before.hit;
  gs.loaded += ts.units_loaded - before.loaded;
  gs.bytes_read += ts.bytes_read - before.bytes_read;
  gs.read_calls += ts.read_calls - before.read_calls;
}

void StreamedFeedForward::Choose(Group& g, const float* scores, size_t n, size_t stride) {
  TokenStats& ts = stats_.current();
  const double start = NowSeconds();
  policy_.Select(*g.info, *g.cache, scores, n, stride, select_scratch_.data(), &masks_);
  masks_.BuildUnion(&need_);
  if (observer_) observer_(g.index, masks_, n);
  if (!masks_.all() && n == 1) {
    // How many of this token's units the previous decode token chose too:
    // the persistence that caching and prediction live on.
    const auto now = static_cast<uint32_t>(token_);
    const bool previous = g.last_chosen + 1 == token_;
    uint64_t kept = 0;
    for (uint32_t u : need_) {
      kept += g.chosen_at[u] == now - 1;
      g.chosen_at[u] = now;
    }
    if (previous) {
      ts.overlap_kept += kept;
      ts.overlap_units += need_.size();
    }
    g.last_chosen = token_;
  }
  ts.select_seconds += NowSeconds() - start;
}

void StreamedFeedForward::BeginPass(size_t n) {
  if (n > max_batch_) ThrowInputError("internal: batch of ", n, " exceeds ", max_batch_);
  // One unit cache, one pass: two sessions may take turns, not overlap.
  if (pass_open_) {
    throw std::logic_error("StreamedFeedForward: a pass began while another was running");
  }
  pass_open_ = true;
  stats_.BeginToken(n);
  for (Group& g : groups_) g.eviction->BeginToken(token_);
  ++token_;
}

void StreamedFeedForward::EndPass(bool completed) {
  pass_open_ = false;
  if (completed) {
    stats_.EndToken();
    return;
  }
  // Abandoned: a read may still be in flight into a chunk (a prefetch, or
  // the read whose failure ended the pass). Let it finish and forget it, so
  // that the next pass plans its reads afresh; its record is not kept.
  if (pipeline_->busy()) {
    try {
      pipeline_->Wait();
    } catch (...) {  // the error that ended the pass, or a second one: already reported
    }
  }
  prefetch_group_ = -1;
  stats_.AbandonToken();
}

void StreamedFeedForward::Forward(uint32_t layer, const float* x, size_t n, float* out) {
  if (n > max_batch_) ThrowInputError("internal: batch of ", n, " exceeds ", max_batch_);
  if (!stats_.open()) throw std::logic_error("StreamedFeedForward::Forward outside a pass");
  std::fill(out, out + n * config_.d_model, 0.0f);
  switch (bundle_.layout()) {
    case bundle::Layout::kNeuron: ForwardNeuron(layer, x, n, out); break;
    case bundle::Layout::kDip: ForwardDip(layer, x, n, out); break;
    case bundle::Layout::kSplit: ForwardSplit(layer, x, n, out); break;
  }
}

void StreamedFeedForward::ForwardNeuron(uint32_t layer, const float* x, size_t n, float* out) {
  Group& g = GroupFor(layer, bundle::RecordKind::kNeuron);
  const bundle::UnitGroup& info = *g.info;
  Choose(g, x, n, config_.d_model);  // the neuron layout has no ranking: every unit
  // The gate and up parts of a record are one call's consecutive rows, so
  // the dot products read them in one pass (whole records: Q4_0 from DRAM
  // 58-61% -> 74-81% of the stream probe), and the cache keeps every
  // record's [gate | up] in one matrix and [down] in another, so that each
  // pass over cached records is one contiguous span (67% -> 88-90%;
  // gather_bench --layout records|split, README). The dot products,
  // interleaved in coeff_, take two of its width_ floats per record.
  const size_t slice = std::max<size_t>(1, width_ / 2);
  // The down parts in integers (SumColumns) need each token's step, its
  // largest GLU output, before the first of them is summed: known only
  // once every record's dot products are. So they wait for a second pass
  // over the cache (SumDeferredDowns), the GLU outputs kept in scores_ by
  // unit. Only where the cache holds every unit of the group: a smaller
  // one computes some records in the staging they were read into, which
  // the next chunk reuses, and mixing their float sums with the others'
  // integer ones would make a token's bits depend on what the cache held.
  // (Budgets that hold the group all give the integer sums' bits, those
  // that do not the float sums'.)
  const size_t units = info.n_units;
  const bool defer = IntegerSumsFit(info, n) && g.cache->capacity() >= g.cache->n_units() &&
                     n * units <= scores_.size();
  deferred_.clear();
  StreamGroup(g, need_, [&](const UnitRows& rows) {
    for (size_t first = 0; first < rows.count; first += slice) {
      const size_t count = std::min(slice, rows.count - first);
      ops::RowSet set = rows.Slice(first, count);
      set.type = bundle_.record_type();
      set.cols = info.part_padded_elems;
      set.parts = 2;
      set.part_stride = info.part_bytes;
      set.count = 2 * count;
      ops::RowDots(set, x, n, coeff_.data());
      for (size_t t = 0; t < n; ++t) {
        const float* both = coeff_.data() + t * 2 * count;
        float* gate = gate_ + t * count;
        float* up = up_ + t * count;
        for (size_t k = 0; k < count; ++k) {
          gate[k] = both[2 * k];
          up[k] = both[2 * k + 1];
        }
      }
      ops::SiluMul(gate_, up_, n * count, gate_);
      if (defer) {  // (every record is cached: the cache has room for all)
        const uint32_t* slice_units = rows.units + first;
        for (size_t t = 0; t < n; ++t) {
          for (size_t k = 0; k < count; ++k) {
            scores_[t * units + slice_units[k]] = gate_[t * count + k];
          }
        }
        deferred_.insert(deferred_.end(), slice_units, slice_units + count);
        continue;
      }
      const SumShape down_part = DownPart(info);
      ops::RowSet down = rows.Slice(first, count, down_part.offset);
      down.type = set.type;
      down.cols = down_part.cols;
      ops::RowAxpys(down, gate_, n, out);
    }
  });
  if (!deferred_.empty()) SumDeferredDowns(g, n, out);
}

void StreamedFeedForward::SumDeferredDowns(Group& g, size_t n, float* out) {
  const bundle::UnitGroup& info = *g.info;
  const double start = NowSeconds();
  const size_t units = info.n_units;
  const float* glu = scores_.data();
  const bool integer =
      IntegerSteps(info, deferred_, n, [&](size_t t, uint32_t u) { return glu[t * units + u]; });
  // Units this pass needs stay in the cache until it ends (StreamGroup),
  // and a cache with room for every unit never computes one in staging:
  // their rows, in the cache's order.
  rows_.clear();
  for (uint32_t u : deferred_) {
    const int32_t row = g.cache->RowOf(u);
    if (row < 0) throw std::logic_error("SumDeferredDowns: a unit not in the cache");
    rows_.push_back(static_cast<uint32_t>(row));
  }
  SortDistinctBelow(&rows_, g.cache->capacity(), &sort_bits_);
  const SumShape shape = DownPart(info);
  if (integer) axpy_int_.Begin(shape.cols, shape.parts, n, axpy_steps_.data());
  AxpyColumns(CachedRows(g, rows_), shape, glu, units, n, out, integer);
  if (integer) axpy_int_.Finish(out);
  stats_.current().compute_seconds += NowSeconds() - start;
}

void StreamedFeedForward::ForwardDip(uint32_t layer, const float* x, size_t n, float* out) {
  Group& in = GroupFor(layer, bundle::RecordKind::kDipInput);
  Group& outg = GroupFor(layer, bundle::RecordKind::kDipOutput);
  const size_t ff = in.info->part_padded_elems;
  const size_t d = config_.d_model;
  // Token t's up and gate sums are glu_'s row t, [up | gate]: an input
  // record's two parts, summed as one row, so one pass reads each record.
  float* const glu = glu_.data();
  const size_t glu_stride = 2 * ff;
  std::fill(glu, glu + n * glu_stride, 0.0f);

  // Up and gate: sums of input columns weighted by x, each token's own
  // top K of them (the others weigh 0 for that token).
  Choose(in, x, n, d);
  const float* xin = x;
  if (!masks_.all()) {
    masks_.ApplyMask(x, d, masked_x_.data());
    xin = masked_x_.data();
  }
  SumColumns(in, xin, d, n, glu);
  // The GLU output replaces the gate sums: h[t] at glu + t * glu_stride + ff.
  float* h = glu + ff;
  for (size_t t = 0; t < n; ++t) {
    float* gate = h + t * glu_stride;
    ops::SiluMul(gate, gate - ff, ff, gate);
  }

  // Down: sum of down columns weighted by the (pruned) GLU output.
  Choose(outg, h, n, glu_stride);
  if (!masks_.all()) masks_.ApplyMask(h, glu_stride, h);
  SumColumns(outg, h, glu_stride, n, out);
}

void StreamedFeedForward::ForwardSplit(uint32_t layer, const float* x, size_t n, float* out) {
  Group& up = GroupFor(layer, bundle::RecordKind::kUpRow);
  Group& gate = GroupFor(layer, bundle::RecordKind::kGateRow);
  Group& down = GroupFor(layer, bundle::RecordKind::kDipOutput);
  const size_t ff = up.info->n_units;  // activations indexed by neuron
  const size_t d = config_.d_model;
  std::fill(gate_, gate_ + n * ff, 0.0f);
  std::fill(up_, up_ + n * ff, 0.0f);

  const std::optional<bundle::RecordKind> leader = policy_.SplitLeader();
  if (!leader) {
    // dense, glu: both row matrices whole.
    Choose(up, x, n, d);
    DotRows(up, need_, x, n, ff, up_);
    Choose(gate, x, n, d);
    DotRows(gate, need_, x, n, ff, gate_);
    ops::SiluMul(gate_, up_, n * ff, gate_);
    Choose(down, gate_, n, ff);
  } else {
    // up / gate pruning: the leader matrix whole; its activations (W_up x,
    // or SiLU(W_gate x)) pick each token's neurons of the other two.
    const bool up_leads = *leader == bundle::RecordKind::kUpRow;
    Group& lead = up_leads ? up : gate;
    Group& follow = up_leads ? gate : up;
    float* lead_act = up_leads ? up_ : gate_;
    float* follow_act = up_leads ? gate_ : up_;
    Choose(lead, x, n, d);
    DotRows(lead, need_, x, n, ff, lead_act);
    const float* scores = lead_act;
    if (!up_leads) {
      for (size_t t = 0; t < n; ++t) {
        ops::SiluMul(lead_act + t * ff, ones_.data(), ff, scores_.data() + t * ff);
      }
      scores = scores_.data();
    }
    Choose(follow, scores, n, ff);
    DotRows(follow, need_, x, n, ff, follow_act);
  }
  float* h = gate_;
  if (leader) ops::SiluMul(gate_, up_, n * ff, h);
  // Each token keeps only its own neurons (the follower's choice, or for
  // glu the top K of |GLU|); the down columns are their union.
  if (!masks_.all()) masks_.ApplyMask(h, ff, h);
  SumColumns(down, h, ff, n, out);
}

ops::RowSet StreamedFeedForward::UnitRows::Slice(size_t first, size_t n, size_t offset) const {
  if (tail_base != nullptr && offset >= head_bytes) {
    UnitRows tails = *this;
    tails.base = tail_base;
    tails.stride = tails.pitch = tail_stride;
    tails.tail_base = nullptr;
    return tails.Slice(first, n, offset - head_bytes);
  }
  ops::RowSet set;
  set.count = n;
  set.offset = offset;
  const uint32_t* at = index + first;
  // A run of adjacent payloads is a plain strided matrix (faster kernels).
  // The index increases within a slice (cache rows sorted, records in disk
  // order), so equal end-to-end distance means no gaps.
  if ((at[n - 1] - at[0]) * stride == (n - 1) * pitch) {
    set.base = base + at[0] * stride;
    set.stride = pitch;
  } else {
    set.base = base;
    set.stride = stride;
    set.index = at;
  }
  return set;
}

StreamedFeedForward::UnitRows StreamedFeedForward::CachedRows(const Group& g,
                                                              const std::vector<uint32_t>& rows) {
  row_units_.resize(rows.size());
  for (size_t k = 0; k < rows.size(); ++k) row_units_[k] = g.cache->UnitAt(rows[k]);
  UnitRows out;
  out.base = g.cache->Row(0);
  out.stride = out.pitch = g.cache->head_bytes();
  if (g.cache->tail_bytes() != 0) {
    out.tail_base = g.cache->Tail(0);
    out.tail_stride = g.cache->tail_bytes();
    out.head_bytes = g.cache->head_bytes();
  }
  out.index = rows.data();
  out.units = row_units_.data();
  out.count = rows.size();
  return out;
}

void StreamedFeedForward::DotRows(Group& g, const std::vector<uint32_t>& units, const float* x,
                                  size_t n, size_t ff, float* dst) {
  StreamGroup(g, units, [&](const UnitRows& rows) {
    for (size_t first = 0; first < rows.count; first += width_) {
      const size_t count = std::min(width_, rows.count - first);
      ops::RowSet set = rows.Slice(first, count);
      set.type = bundle_.record_type();
      set.cols = g.info->part_padded_elems;
      ops::RowDots(set, x, n, coeff_.data());
      for (size_t t = 0; t < n; ++t) {
        for (size_t k = 0; k < count; ++k) {
          dst[t * ff + rows.units[first + k]] = coeff_[t * count + k];
        }
      }
    }
  });
}

bool StreamedFeedForward::IntegerSumsFit(const bundle::UnitGroup& g, size_t n) const {
  // Batches large enough for oneDNN's panels keep them (a token of such a
  // batch gets their products anyway, not the bits of its own run).
  return ops::RowAxpyIntSums::Usable(bundle_.record_type()) && g.largest_scale > 0.0f &&
         g.n_units <= ops::RowAxpyIntSums::MaxRows() && !ops::RowProductsUsePanels(n);
}

template <class Coefficient>
bool StreamedFeedForward::IntegerSteps(const bundle::UnitGroup& g,
                                       const std::vector<uint32_t>& units, size_t n,
                                       Coefficient coeff) {
  // Token t's step: its largest coefficient times the group's largest
  // block scale bounds every term before any record is read. (Each
  // coefficient is checked: std::max passes a NaN over, and the integer
  // kernels would count it as zero where y must get it.)
  axpy_steps_.resize(n);
  for (size_t t = 0; t < n; ++t) {
    float largest = 0.0f;
    for (uint32_t u : units) {
      const float c = coeff(t, u);
      if (!std::isfinite(c)) return false;
      largest = std::max(largest, std::fabs(c));
    }
    axpy_steps_[t] = ops::RowAxpyIntSums::Step(largest, g.largest_scale);
    if (!std::isfinite(axpy_steps_[t])) return false;
  }
  return true;
}

void StreamedFeedForward::SumColumns(Group& g, const float* src, size_t src_stride, size_t n,
                                     float* y) {
  const bundle::UnitGroup& info = *g.info;
  const bool integer =
      IntegerSumsFit(info, n) &&
      IntegerSteps(info, need_, n, [&](size_t t, uint32_t u) { return src[t * src_stride + u]; });
  const SumShape shape = WholePayload(info);
  if (integer) axpy_int_.Begin(shape.cols, shape.parts, n, axpy_steps_.data());
  StreamGroup(g, need_, [&](const UnitRows& rows) {
    AxpyColumns(rows, shape, src, src_stride, n, y, integer);
  });
  if (integer) axpy_int_.Finish(y);
}

StreamedFeedForward::SumShape StreamedFeedForward::WholePayload(const bundle::UnitGroup& g) {
  return {0, size_t{g.parts} * g.part_padded_elems, g.parts};
}

StreamedFeedForward::SumShape StreamedFeedForward::DownPart(const bundle::UnitGroup& g) {
  return {2 * size_t{g.part_bytes}, g.part_padded_elems, 1};
}

void StreamedFeedForward::AxpyColumns(const UnitRows& rows, const SumShape& shape, const float* src,
                                      size_t src_stride, size_t n, float* y, bool integer) {
  for (size_t first = 0; first < rows.count; first += width_) {
    const size_t count = std::min(width_, rows.count - first);
    for (size_t t = 0; t < n; ++t) {
      for (size_t k = 0; k < count; ++k) {
        coeff_[t * count + k] = src[t * src_stride + rows.units[first + k]];
      }
    }
    ops::RowSet set = rows.Slice(first, count, shape.offset);
    set.type = bundle_.record_type();
    // Several parts, back to back, are summed as one row of all their
    // elements (each part read as a row of its own where the layout spans
    // a row: Q4_0S).
    set.cols = shape.cols;
    set.row_parts = shape.parts;
    if (integer) {
      ops::RowAxpysInt(set, coeff_.data(), n, axpy_int_);
    } else {
      ops::RowAxpys(set, coeff_.data(), n, y);
    }
  }
}

}  // namespace sparrow
