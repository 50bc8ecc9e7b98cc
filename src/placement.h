// Neuron placement (Ripple): records that tokens choose together are put
// next to each other on flash, so that one token's misses are a few long
// runs of slots instead of many scattered records. The streamed FFN reads
// a group's misses in slot order and coalesces adjacent records into one
// read (read_planner.h), so longer runs mean fewer, larger reads, which is
// what flash (and this project's VMs' virtio disks even more) serves fastest.
//
//   1. ChoiceLog: which units each of T tokens chose in one group (a T-bit
//      set per unit), filled from the policy's per-token masks.
//   2. PlaceByCoactivation: a greedy Hamiltonian path over the units, as in
//      Ripple: edges are taken heaviest first, skipping any that would give
//      a unit a third neighbour or close a cycle, which leaves disjoint
//      paths; the paths are laid out one after another, the most often
//      chosen first. An edge's weight is the number of tokens on which its
//      two units agree (both chosen, or both not), not Ripple's count of
//      tokens that chose both: a token's reads end or begin exactly where
//      two neighbours disagree, so the path with the most agreement gives
//      the fewest runs. Measured with `sparrow place` (runs per token, dip at
//      density 0.5, 1024 tokens): both-chosen counts cut them by 7-10% on
//      stories260K and on the hot 1.1B synthetic bundle, agreement by 13%
//      and 19-20%. Only each unit's `neighbours` heaviest edges are
//      candidates: the full graph of a 14336-unit group has 10^8 edges, and
//      the heaviest few per unit are the ones the greedy pass takes.
//   3. WritePlacedBundle: a copy of the bundle with those permutations and
//      its records moved to their new slots (formats/bundle.h: each group
//      maps unit -> slot, so nothing else changes).
//
// The placement changes where records are, not what any token computes;
// only the order in which a token's rows are summed can differ (the streamed
// FFN adds them in cache-row and disk order), so results agree to rounding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "formats/bundle.h"

namespace sparrow {

class ChoiceLog {
 public:
  explicit ChoiceLog(uint32_t n_units);

  // Appends a token that chose `units` (each < n_units, no repeats).
  void AddToken(const uint32_t* units, size_t count);

  uint32_t n_units() const { return n_units_; }
  size_t tokens() const { return tokens_; }
  // Tokens that chose u; that chose both u and v; on which u and v agree
  // (both chosen, or both not).
  uint64_t Count(uint32_t u) const;
  uint64_t CoCount(uint32_t u, uint32_t v) const;
  uint64_t Agreement(uint32_t u, uint32_t v) const;
  // The units token t chose, in unit order.
  std::vector<uint32_t> TokenUnits(size_t t) const;

 private:
  const uint64_t* Bits(uint32_t u) const { return bits_.data() + size_t{u} * words_; }
  void Grow();  // doubles the tokens each unit's bit set can hold

  uint32_t n_units_;
  size_t tokens_ = 0;
  size_t words_ = 0;            // 64-bit words per unit
  std::vector<uint64_t> bits_;  // unit u's set at [u * words_, (u + 1) * words_)
};

// Unit -> slot (a permutation of the log's units), as described above.
// Deterministic: ties go to the lower unit index. Runs on ThreadCount()
// threads.
std::vector<uint32_t> PlaceByCoactivation(const ChoiceLog& log, size_t neighbours = 16);

// The mean, over the log's tokens, of the number of runs of consecutive
// slots that a token's units occupy under `slot_of_unit`: the reads a
// token needs from an empty cache when adjacent records are read together.
double MeanRunsPerToken(const ChoiceLog& log, const std::vector<uint32_t>& slot_of_unit);

// InputError when `out_path` exists and !force, or is `in_path` itself:
// what WritePlacedBundle refuses, checkable before the work of placing.
void CheckPlacedOutput(const std::string& in_path, const std::string& out_path, bool force);

// Writes `out_path` (through a temporary file renamed at the end; an
// existing file only with `force`, never `in` itself): `in` with group i's
// permutation replaced by slot_of_unit[i] and its records moved to match,
// `description` stored as sparrow.placement, and `in`'s calibration, if
// any, carried over. Every record is verified as it is copied.
// progress(done, total) counts bytes written. InputError for I/O errors or
// a corrupted input.
void WritePlacedBundle(const bundle::Bundle& in,
                       const std::vector<std::vector<uint32_t>>& slot_of_unit,
                       const std::string& description, const std::string& out_path, bool force,
                       const std::function<void(uint64_t, uint64_t)>& progress = nullptr);

}  // namespace sparrow
