#include "src/runtime/unit_policy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "base/error.h"
#include "base/sort_unique.h"
#include "simd/topk.h"
#include "src/runtime/unit_cache.h"

namespace sparrow {
namespace {

using bundle::Layout;
using bundle::RecordKind;

// Density tolerance: 2/3 typed as 0.6667 still counts as reachable by glu.
constexpr double kDensitySlack = 1e-3;

}  // namespace

const std::vector<PolicyInfo>& Policies() {
  static const std::vector<PolicyInfo> kPolicies = {
      {SparsityKind::kDense, "dense", std::nullopt, 1.0, "every unit (density 1)"},
      {SparsityKind::kDip, "dip", Layout::kDip, 0.0,
       "top-K of |x| input columns, then top-K of |GLU| down columns"},
      {SparsityKind::kDipCa, "dip-ca", Layout::kDip, 0.0,
       "dip ranked by |x| (c + gamma (1 - c)), c = 1 for cached units"},
      {SparsityKind::kGlu, "glu", Layout::kDip, 2.0 / 3.0,
       "all input columns, top-K of |GLU| down columns"},
      {SparsityKind::kUp, "up", Layout::kSplit, 1.0 / 3.0,
       "all up rows; top-K of |W_up x| picks gate rows and down columns"},
      {SparsityKind::kGate, "gate", Layout::kSplit, 1.0 / 3.0,
       "all gate rows; top-K of |SiLU(W_gate x)| picks up rows and down columns"},
  };
  return kPolicies;
}

const PolicyInfo& GetPolicyInfo(SparsityKind kind) {
  for (const PolicyInfo& p : Policies()) {
    if (p.kind == kind) return p;
  }
  return Policies().front();
}

std::string PolicyNames(bool pruning_only) {
  std::string names;
  for (const PolicyInfo& p : Policies()) {
    if (pruning_only && p.kind == SparsityKind::kDense) continue;
    names += (names.empty() ? "" : ", ") + std::string(p.name);
  }
  return names;
}

SparsityKind ParseSparsityKind(const std::string& name) {
  for (const PolicyInfo& p : Policies()) {
    if (name == p.name) return p.kind;
  }
  ThrowInputError("--sparsity must be one of ", PolicyNames(), " (got '", name, "')");
}

void CheckDensity(const SparsityOptions& o) {
  if (!(o.density > 0.0 && o.density <= 1.0)) {
    ThrowInputError("--mlp-density must be in (0, 1], not ", o.density);
  }
  if (o.kind == SparsityKind::kDense && o.density != 1.0) {
    ThrowInputError("--mlp-density ", o.density, " needs a pruning --sparsity policy (",
                    PolicyNames(/*pruning_only=*/true), "); dense uses every unit");
  }
}

void CheckSparsity(const SparsityOptions& o, Layout layout) {
  const PolicyInfo& info = GetPolicyInfo(o.kind);
  CheckDensity(o);
  if (info.layout && *info.layout != layout) {
    ThrowInputError("--sparsity ", info.name, " needs a bundle in the ", LayoutName(*info.layout),
                    " layout (sparrow convert --layout ", LayoutName(*info.layout),
                    "); this one is ", LayoutName(layout));
  }
  if (o.density + kDensitySlack < info.min_density) {
    ThrowInputError("--sparsity ", info.name, " cannot go below --mlp-density ",
                    std::round(info.min_density * 1000) / 1000,
                    " (it reads a whole matrix every token); asked for ", o.density);
  }
  if (!(o.gamma >= 0.0 && o.gamma <= 1.0)) {
    ThrowInputError("--gamma must be in [0, 1], not ", o.gamma);
  }
  if (o.input_fraction) {
    if (!HasInputSplit(o.kind)) {
      ThrowInputError("--input-fraction applies to --sparsity dip and dip-ca, not ", info.name);
    }
    const double f_in = *o.input_fraction;
    const double f_out = 3.0 * o.density - 2.0 * f_in;
    if (!(f_in > 0.0 && f_in <= 1.0)) {
      ThrowInputError("--input-fraction must be in (0, 1], not ", f_in);
    }
    if (f_out <= 0.0 || f_out > 1.0 + kDensitySlack) {
      ThrowInputError("--input-fraction ", f_in, " cannot make --mlp-density ", o.density,
                      " (the down columns would need a fraction of ", f_out,
                      "; it must be between ", std::max(0.0, (3.0 * o.density - 1.0) / 2.0),
                      " and ", std::min(1.0, 1.5 * o.density), ")");
    }
  }
}

bool HasInputSplit(SparsityKind kind) {
  return kind == SparsityKind::kDip || kind == SparsityKind::kDipCa;
}

SparsityOptions WithCalibratedSplit(SparsityOptions o,
                                    const std::optional<bundle::Calibration>& calibration) {
  if (!HasInputSplit(o.kind) || o.input_fraction || !calibration) return o;
  if (const std::optional<double> f_in = calibration->InputFractionFor(o.density)) {
    o.input_fraction = *f_in;
    o.split_source = SplitSource::kCalibrated;
  }
  return o;
}

std::string DescribeSplit(const SparsityOptions& o) {
  if (!HasInputSplit(o.kind)) return "";
  const double f_in = o.input_fraction.value_or(o.density);
  const double f_out = std::clamp(3.0 * o.density - 2.0 * f_in, 0.0, 1.0);
  const char* source = o.split_source == SplitSource::kCalibrated ? "calibrated"
                       : o.split_source == SplitSource::kExplicit ? "explicit"
                                                                  : "default";
  char text[96];
  std::snprintf(text, sizeof(text), "input %.4g / down %.4g (%s)", f_in, f_out, source);
  return text;
}

UnitPolicy::UnitPolicy(const SparsityOptions& options, Layout layout) : options_(options) {
  CheckSparsity(options, layout);
}

double UnitPolicy::Fraction(RecordKind kind) const {
  const double d = options_.density;
  switch (options_.kind) {
    case SparsityKind::kDense:
      return 1.0;
    case SparsityKind::kDip:
    case SparsityKind::kDipCa: {
      const double f_in = options_.input_fraction.value_or(d);
      if (kind == RecordKind::kDipInput) return f_in;
      return std::clamp(3.0 * d - 2.0 * f_in, 0.0, 1.0);
    }
    case SparsityKind::kGlu:
      return kind == RecordKind::kDipOutput ? std::clamp(3.0 * d - 2.0, 0.0, 1.0) : 1.0;
    case SparsityKind::kUp:
    case SparsityKind::kGate: {
      if (SplitLeader() == kind) return 1.0;
      return std::clamp((3.0 * d - 1.0) / 2.0, 0.0, 1.0);
    }
  }
  return 1.0;
}

size_t UnitPolicy::UnitsPerToken(RecordKind kind, uint32_t n_units) const {
  const double f = Fraction(kind);
  if (f >= 1.0) return n_units;
  const auto k = static_cast<size_t>(std::llround(f * n_units));
  return std::clamp<size_t>(k, 1, n_units);
}

std::optional<RecordKind> UnitPolicy::SplitLeader() const {
  if (options_.kind == SparsityKind::kUp) return RecordKind::kUpRow;
  if (options_.kind == SparsityKind::kGate) return RecordKind::kGateRow;
  return std::nullopt;
}

void UnitPolicy::Select(const bundle::UnitGroup& group, const UnitCache& cache,
                        const float* scores, size_t n, size_t stride, float* scratch,
                        TokenMasks* masks) const {
  const size_t k = UnitsPerToken(group.kind, group.n_units);
  if (k >= group.n_units) {
    masks->SetAll(group.n_units, n);
    return;
  }
  masks->Reset(n, k, group.n_units);
  const bool cache_aware = options_.kind == SparsityKind::kDipCa;
  for (size_t t = 0; t < n; ++t) {
    const float* s = scores + t * stride;
    if (cache_aware) {
      simd::CacheWeightedMagnitudes(s, cache.row_of_unit_data(), static_cast<float>(options_.gamma),
                                    group.n_units, scratch);
      simd::TopK(scratch, group.n_units, k, simd::TopKOrder::kLargest, masks->token(t));
    } else {
      simd::TopK(s, group.n_units, k, simd::TopKOrder::kLargestAbs, masks->token(t));
    }
  }
}

void TokenMasks::Reset(size_t n, size_t k, uint32_t n_units) {
  all_ = false;
  n_ = n;
  k_ = k;
  n_units_ = n_units;
  if (indices_.size() < n * k) indices_.resize(n * k);
  if (seen_.size() < n_units) seen_.resize(n_units, 0);
  if (kept_.size() < k) kept_.resize(k);
}

void TokenMasks::SetAll(uint32_t n_units, size_t n) {
  all_ = true;
  n_ = n;
  k_ = n_units;
  n_units_ = n_units;
}

void TokenMasks::BuildUnion(std::vector<uint32_t>* units) {
  units->clear();
  if (all_) {
    units->resize(n_units_);
    for (uint32_t u = 0; u < n_units_; ++u) (*units)[u] = u;
    return;
  }
  for (size_t t = 0; t < n_; ++t) {
    for (size_t i = 0; i < k_; ++i) {
      const uint32_t u = token(t)[i];
      if (!seen_[u]) {
        seen_[u] = 1;
        units->push_back(u);
      }
    }
  }
  for (uint32_t u : *units) seen_[u] = 0;
  SortDistinctBelow(units, static_cast<uint32_t>(n_units_), &sort_bits_);
}

void TokenMasks::ApplyMask(const float* src, size_t stride, float* dst) {
  for (size_t t = 0; t < n_; ++t) {
    const float* s = src + t * stride;
    float* d = dst + t * stride;
    if (all_) {
      if (s != d) std::memcpy(d, s, n_units_ * sizeof(float));
      continue;
    }
    // Keep the chosen values aside, clear the row, put them back: works in
    // place and touches each row twice.
    const uint32_t* chosen = token(t);
    for (size_t i = 0; i < k_; ++i) kept_[i] = s[chosen[i]];
    std::fill(d, d + n_units_, 0.0f);
    for (size_t i = 0; i < k_; ++i) d[chosen[i]] = kept_[i];
  }
}

uint64_t TokenMasks::MemoryBytes(size_t n, size_t k, uint32_t n_units) {
  return uint64_t{n} * k * sizeof(uint32_t) + n_units + uint64_t{k} * sizeof(float) +
         SortDistinctScratchBytes(n_units);
}

}  // namespace sparrow
