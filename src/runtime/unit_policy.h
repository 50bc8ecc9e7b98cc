// Which feed-forward units each token needs: the sparsity policies of
// Dynamic Input Pruning (DIP, ../shared/papers/dynamic-input-pruning.txt)
// and its baselines. A policy ranks a group's units by the magnitude of the
// activations that multiply them and keeps each token's top K; it never
// reads files or allocates from the budget.
//
//   policy  layout  up/gate                            down
//   dense   any     all                                all
//   dip     dip     top-K of |x| input columns         top-K of |GLU| columns (GLU from the pruned up/gate)
//   dip-ca  dip     the same, ranked by |x|*(c + gamma(1-c)), c = 1 for units in the cache (Eq. 10)
//   glu     dip     all input columns                  top-K of |GLU| columns
//   up      split   all up rows; top-K of |W_up x|     the same neurons' down columns
//                   picks the gate rows
//   gate    split   all gate rows; top-K of |SiLU(W_gate x)| picks the up rows, and the down columns
//
// --mlp-density D is the fraction of FFN weight bytes one token uses. In the
// dip layout the input records hold 2/3 of the FFN (up and gate) and the
// down columns 1/3, so D = (2 f_in + f_out) / 3 with f the fraction of each
// group's units kept per token. By default f_in = f_out = D for dip and
// dip-ca; the bundle's calibration, when it has one, replaces that (see
// WithCalibratedSplit), and --input-fraction replaces both;
// glu keeps f_in = 1, so it needs D >= 2/3; up and gate read one matrix
// whole, so they need D >= 1/3.
//
// Masks are per token: in a batch the union of the tokens' units is loaded,
// but each token is computed with its own top K (ApplyMask zeroes the
// activations of units outside it), so a batch gives what token-by-token
// evaluation gives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "formats/bundle.h"

namespace sparrow {

class UnitCache;

enum class SparsityKind { kDense, kDip, kDipCa, kGlu, kUp, kGate };

// Where dip/dip-ca's split of the density comes from.
enum class SplitSource {
  kDefault,     // f_in = f_out = density
  kCalibrated,  // the bundle's calibration (formats/calibration.h)
  kExplicit,    // --input-fraction
};

struct SparsityOptions {
  SparsityKind kind = SparsityKind::kDense;
  double density = 1.0;  // --mlp-density, in (0, 1]
  double gamma = 0.2;    // dip-ca's penalty for units not in the cache
  // dip/dip-ca: the fraction of input columns a token keeps (the rest of the
  // density goes to down columns); unset: equal to the density.
  std::optional<double> input_fraction;
  SplitSource split_source = SplitSource::kDefault;  // of input_fraction
};

// True for the policies whose density is split between input and down
// columns: dip and dip-ca.
bool HasInputSplit(SparsityKind kind);
// `options` with the calibrated split for its density when the policy has a
// split, none was given (input_fraction unset) and `calibration` covers the
// density (Calibration::InputFractionFor); otherwise `options` unchanged.
// The engine applies it when it opens a bundle; `sparrow info` shows its
// result.
SparsityOptions WithCalibratedSplit(SparsityOptions options,
                                    const std::optional<bundle::Calibration>& calibration);
// "input 0.42 / down 0.66 (calibrated)": the fractions a dip/dip-ca token
// keeps and where they come from; "" for other policies.
std::string DescribeSplit(const SparsityOptions& options);

// One row per policy: its name, the layout it needs (nullopt: any) and what
// it does, for --help and error messages.
struct PolicyInfo {
  SparsityKind kind;
  const char* name;
  std::optional<bundle::Layout> layout;
  double min_density;
  const char* summary;
};
const std::vector<PolicyInfo>& Policies();
const PolicyInfo& GetPolicyInfo(SparsityKind kind);
// InputError naming --sparsity and the valid names otherwise.
SparsityKind ParseSparsityKind(const std::string& name);
// "dense, dip, dip-ca, glu, up, gate"; without dense when pruning_only.
std::string PolicyNames(bool pruning_only = false);
// InputError unless the density is in (0, 1] and, below 1, the policy prunes.
void CheckDensity(const SparsityOptions& o);

// The units of one group that a batch of tokens keeps: each token's own
// top-K list and the sorted union of them all.
class TokenMasks {
 public:
  // Room for n tokens of up to `k` units among `n_units`.
  void Reset(size_t n, size_t k, uint32_t n_units);
  bool all() const { return all_; }
  size_t k() const { return k_; }
  uint32_t* token(size_t t) { return indices_.data() + t * k_; }
  const uint32_t* token(size_t t) const { return indices_.data() + t * k_; }
  void SetAll(uint32_t n_units, size_t n);
  // Fills `union` with the sorted distinct units of all tokens.
  void BuildUnion(std::vector<uint32_t>* units);
  // dst[t * stride + u] = src[t * stride + u] for u in token t's list, 0 for
  // the other u < n_units (entries past n_units are left as they are).
  // src may equal dst.
  void ApplyMask(const float* src, size_t stride, float* dst);
  // Bytes this holds at most for (n, k, n_units): for the budget.
  static uint64_t MemoryBytes(size_t n, size_t k, uint32_t n_units);

 private:
  bool all_ = true;
  size_t n_ = 0, k_ = 0;
  uint32_t n_units_ = 0;
  std::vector<uint32_t> indices_;
  std::vector<uint8_t> seen_;
  std::vector<uint64_t> sort_bits_;  // BuildUnion's (SortDistinctBelow)
  std::vector<float> kept_;  // ApplyMask's chosen values of one token
};

class UnitPolicy {
 public:
  // InputError when the bundle's layout is not the one the policy needs, or
  // the density cannot be reached by it.
  UnitPolicy(const SparsityOptions& options, bundle::Layout layout);

  SparsityKind kind() const { return options_.kind; }
  const SparsityOptions& options() const { return options_; }
  std::string name() const { return GetPolicyInfo(options_.kind).name; }
  // Fraction of a group's units each token keeps (1: all, no ranking).
  double Fraction(bundle::RecordKind kind) const;
  // Units per token for a group of n_units: round(fraction * n_units), at
  // least 1.
  size_t UnitsPerToken(bundle::RecordKind kind, uint32_t n_units) const;
  // Split layout: the matrix read whole whose activations rank the neurons
  // (up for `up`, gate for `gate`); nullopt when neither ranks (dense, glu).
  std::optional<bundle::RecordKind> SplitLeader() const;

  // Selects, for n tokens, the units of `group` to use: scores[t * stride +
  // u] for u < group.n_units are the activations that multiply unit u for
  // token t (x for input columns, GLU for down columns, the leader's
  // activations for split-layout rows). `cache`, the group's unit cache,
  // is read (not copied) by dip-ca. `scratch` holds n_units floats.
  void Select(const bundle::UnitGroup& group, const UnitCache& cache, const float* scores,
              size_t n, size_t stride, float* scratch, TokenMasks* masks) const;

 private:
  SparsityOptions options_;
};

// Checks `options` against the layout (see UnitPolicy) without building one.
void CheckSparsity(const SparsityOptions& options, bundle::Layout layout);

}  // namespace sparrow
