// The feed-forward of a bundle model, streamed from flash through per-group
// compacted unit caches (LLM in a flash, section 3):
//   need = policy.Select(group, input)
//   hits are computed from the cache; misses are planned into coalesced
//   reads, loaded, checksum-verified, appended to the cache (evicting what
//   the eviction policy picks), and computed, chunk by chunk when a token
//   needs more units than the cache holds.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <utility>
#include <vector>

#include "base/aligned_buffer.h"
#include "formats/bundle.h"
#include "src/model/config.h"
#include "src/model/feed_forward.h"
#include "src/ops/ops.h"
#include "src/runtime/budget.h"
#include "src/runtime/eviction.h"
#include "src/runtime/loader.h"
#include "src/runtime/read_pipeline.h"
#include "src/runtime/read_planner.h"
#include "src/runtime/stats.h"
#include "src/runtime/row_arena.h"
#include "src/runtime/unit_cache.h"
#include "src/runtime/unit_policy.h"

namespace sparrow {

struct StreamConfig {
  EvictionKind eviction = EvictionKind::kWindow;
  uint32_t window_tokens = 4;
  IoMode io = IoMode::kPread;
  int io_threads = 16;
  uint64_t staging_bytes = 16ull << 20;
  uint64_t max_read_bytes = 1ull << 20;
  uint64_t max_gap_bytes = 0;
};

class StreamedFeedForward : public FeedForward {
 public:
  // Charges its scratch, staging and loader memory to `budget`, then sizes
  // the unit caches from what remains (in proportion to each group's size,
  // at most the whole group). InputError when not even the minimum fits,
  // or when the policy needs another layout.
  StreamedFeedForward(const bundle::Bundle& bundle, const ModelConfig& config,
                      const StreamConfig& stream, size_t max_batch,
                      MemoryBudget& budget, const SparsityOptions& sparsity);

  void BeginPass(size_t n) override;
  void Forward(uint32_t layer, const float* x, size_t n, float* out) override;
  void EndPass(bool completed) override;

  StreamStats& stats() { return stats_; }
  // Called with every group's per-token choices as the policy makes them
  // (group index in bundle order, the masks, the pass's token count; the
  // masks hold every unit when all() is true). For sparrow place, which
  // gathers co-activation statistics. Nothing is called by default.
  using ChoiceObserver = std::function<void(size_t group, const TokenMasks& masks, size_t n)>;
  void ObserveChoices(ChoiceObserver observer) { observer_ = std::move(observer); }
  const UnitPolicy& policy() const { return policy_; }
  const StreamConfig& stream_config() const { return stream_; }
  // Bytes of all unit caches, and the fraction of all units they can hold.
  uint64_t cache_bytes() const;
  double cache_fraction() const;
  IoMode io_mode() const { return loader_->mode(); }
  TensorType record_type() const { return bundle_.record_type(); }

  // Bytes the minimum workable configuration needs besides the fixed parts
  // (used for "budget too small" messages).
  static uint64_t MinimumBytes(const bundle::Bundle& bundle, const StreamConfig& stream,
                               const ModelConfig& config, size_t max_batch);

 private:
  // A group's misses in chunks, read by turns into two stagings.
  struct Chunk {
    std::unique_ptr<ReadPlanner> planner;
    std::vector<uint32_t> units;
    std::vector<ReadOp> ops;
    std::vector<PlannedRecord> records;
    // Per record: bytes still to land; the piece that lands its last byte
    // verifies it, on the loader's thread (records can straddle pieces).
    std::vector<std::atomic<uint32_t>> pending;
    std::atomic<uint64_t> checksum_ns{0};  // time spent verifying, all threads
  };
  struct Group {
    const bundle::UnitGroup* info = nullptr;
    std::unique_ptr<UnitCache> cache;
    std::unique_ptr<EvictionPolicy> eviction;
    std::vector<uint32_t> need_stamp;  // == stamp_ when needed by this pass
    std::vector<uint32_t> chosen_at;   // decode token (low 32 bits) that last chose the unit
    uint64_t last_chosen = ~uint64_t{0};
    size_t index = 0;                  // in groups_ (and in the per-group stats)
    std::vector<uint32_t> by_slot;     // units in disk order (built at the first prefetch)
  };
  // Payloads of some of a group's units, wherever they are: unit units[k]'s
  // at base + index[k] * stride. `pitch` is the distance between two
  // payloads that sit next to each other there (a cache row, a record), so
  // a run of adjacent ones is a plain strided matrix. In a split cache
  // (UnitCache's head and tail) base holds the heads and tail_base the
  // tails, index[k] * tail_stride apart.
  struct UnitRows {
    const uint8_t* base = nullptr;
    size_t stride = 0;
    size_t pitch = 0;
    const uint32_t* index = nullptr;
    const uint32_t* units = nullptr;
    size_t count = 0;
    const uint8_t* tail_base = nullptr;
    size_t tail_stride = 0;
    size_t head_bytes = 0;  // where the tail starts in a payload (split only)
    // Rows [first, first + count) as a kernel row set, each row starting
    // `offset` bytes into its payload (type and cols left to the caller).
    ops::RowSet Slice(size_t first, size_t count, size_t offset = 0) const;
  };
  // Brings every unit of `need` in (from g's cache, or read from flash)
  // and calls use() on batches of them, each needed unit exactly once. A
  // unit read is admitted to the cache while it has room (after evicting
  // units this pass does not need); the rest are computed where they were
  // read, with no copy.
  using UseFn = std::function<void(const UnitRows& rows)>;
  void StreamGroup(Group& g, const std::vector<uint32_t>& need, const UseFn& use);
  void Evict(Group& g, const std::vector<uint32_t>& units, TokenStats& ts);
  // Plans `c` with the first units (in disk order, at most the cache's
  // capacity) that `next` will miss when the dense policy asks for all of
  // them, and starts reading them; false if it misses none.
  bool StartPrefetch(Group& next, Chunk& c);
  // Plans c.units (a prefix of them if the staging fills up) and starts
  // reading them, their checksums verified on the pipeline's thread;
  // returns how many were planned.
  size_t StartChunk(const bundle::UnitGroup& info, Chunk& c);
  // Waits for the read in flight into `c` and adds its time and bytes to `ts`.
  void WaitForChunk(const Chunk& c, TokenStats& ts);
  // Verifies the records of `c` that [dest, dest + length) completes.
  void OnLanded(const bundle::UnitGroup& info, Chunk& c, const uint8_t* dest, uint64_t length);
  // Runs the policy on g for n tokens ranked by `scores` (row stride
  // `stride`): fills masks_ and need_ (their union), times the selection
  // and, for a decode token, counts the overlap with the previous token's
  // choice.
  void Choose(Group& g, const float* scores, size_t n, size_t stride);
  void ForwardNeuron(uint32_t layer, const float* x, size_t n, float* out);
  void ForwardDip(uint32_t layer, const float* x, size_t n, float* out);
  void ForwardSplit(uint32_t layer, const float* x, size_t n, float* out);
  // Split layout: dst[t * ff + unit] = dot(row of unit, x[t]) for g's units
  // in `units` (dst's other entries untouched).
  void DotRows(Group& g, const std::vector<uint32_t>& units, const float* x, size_t n,
               size_t ff, float* dst);
  // The cached rows `rows` of g (their units gathered into row_units_).
  UnitRows CachedRows(const Group& g, const std::vector<uint32_t>& rows);
  // What AxpyColumns sums of each payload: `cols` elements in `parts`
  // parts, from `offset` bytes on.
  struct SumShape {
    size_t offset = 0;
    size_t cols = 0;
    size_t parts = 1;
  };
  // A dip group's payload whole: all its parts, part_padded_elems elements
  // each, as one row, so that every record is read once, front to back.
  static SumShape WholePayload(const bundle::UnitGroup& g);
  // A neuron record's down part.
  static SumShape DownPart(const bundle::UnitGroup& g);
  // For the rows `rows`, in slices of width_, weighs each row (`shape` of
  // its payload) by the activation of its unit (src[t * src_stride + unit]
  // for token t) and adds it into y (n rows of shape.cols).
  // With `integer`, into axpy_int_ instead of y (ops::RowAxpysInt).
  void AxpyColumns(const UnitRows& rows, const SumShape& shape, const float* src, size_t src_stride,
                   size_t n, float* y, bool integer);
  // AxpyColumns over every unit of need_ (StreamGroup), added into y: in
  // integers (ops::RowAxpysInt) where the kernels take the record type this
  // way and the bundle records the group's largest block scale, else
  // through RowAxpys.
  void SumColumns(Group& g, const float* src, size_t src_stride, size_t n, float* y);
  // Whether a batch of n tokens can sum g's rows in integers: the kernels
  // take the record type that way, the bundle bounds the group's block
  // scales, and the batch is too small for oneDNN's panels.
  bool IntegerSumsFit(const bundle::UnitGroup& g, size_t n) const;
  // Each token's step (axpy_steps_) for coefficients coeff(t, u) of the
  // units `units`: false if one is not finite (the float sums carry it).
  template <class Coefficient>
  bool IntegerSteps(const bundle::UnitGroup& g, const std::vector<uint32_t>& units, size_t n,
                    Coefficient coeff);
  // Neuron layout: the down parts of the cached records in deferred_,
  // weighed by their GLU outputs (scores_, n x n_units), added into out:
  // in integers where IntegerSteps allows, else through RowAxpys.
  void SumDeferredDowns(Group& g, size_t n, float* out);
  Group& GroupFor(uint32_t layer, bundle::RecordKind kind);

  const bundle::Bundle& bundle_;
  const ModelConfig& config_;
  StreamConfig stream_;
  size_t max_batch_;
  UnitPolicy policy_;
  std::unique_ptr<Loader> loader_;
  Chunk chunks_[2];
  // Prefetch across groups (dense policy only, where the next group's need
  // is known: every unit): once a group has no more reads to start, the
  // next group's first misses are read into the free chunk while this
  // group's last chunk, the attention and the norms in between compute.
  // Not under pruning: reading the next layer's input columns as this
  // layer chose them (81% of them then used under dip) made dip slower,
  // since the misses the guess left out could only be read after it, a
  // second round of reads per layer. 1.1B-shaped synthetic Q8_0 dip bundle
  // under memcap at half its size, dip at 0.5, 2 threads, Zen 4 VM,
  // alternated: 2.08-2.25 tok/s with the guess, 2.37-2.73 without.
  bool prefetch_across_groups_ = false;
  int prefetch_group_ = -1;  // the group whose read is in flight, or -1
  int prefetch_chunk_ = 0;   // the chunk it fills
  std::unique_ptr<ReadPipeline> pipeline_;  // after loader_: stops before it
  RowArena cache_rows_;                     // the caches' rows: before groups_, so it outlives them
  std::vector<Group> groups_;           // bundle order
  std::vector<int> group_index_;        // (layer * 3 + kind) -> index in groups_
  StreamStats stats_;
  ChoiceObserver observer_;
  uint64_t token_ = 0;
  bool pass_open_ = false;  // between BeginPass and EndPass
  uint32_t stamp_ = 0;
  // Scratch: coefficients/activations for max_batch tokens x width_, the
  // masked input, and the policy's per-token choices.
  size_t width_ = 0;
  AlignedBuffer<float> coeff_, scores_, masked_x_, ones_, select_scratch_;
  // The gate and up activations: gate_ and up_ are the two max_batch x
  // width_ halves of glu_, except in ForwardDip, which uses glu_ as rows of
  // [up | gate] per token (its input records' parts, in one row each).
  AlignedBuffer<float> glu_;
  float* gate_ = nullptr;
  float* up_ = nullptr;
  // SumColumns' and SumDeferredDowns' integer sums and each token's step.
  ops::RowAxpyIntSums axpy_int_;
  std::vector<float> axpy_steps_;
  std::vector<uint32_t> deferred_;  // ForwardNeuron's units whose down parts wait
  TokenMasks masks_;
  std::vector<uint32_t> need_, misses_, candidates_, victims_, expired_, rows_, prefetched_;
  std::vector<uint32_t> row_units_, staged_, staged_units_;
  std::vector<uint64_t> sort_bits_;  // SortDistinctBelow's scratch
};

}  // namespace sparrow
