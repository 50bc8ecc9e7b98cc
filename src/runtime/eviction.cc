#include "src/runtime/eviction.h"

#include <algorithm>
#include <stdexcept>

#include "base/error.h"

namespace sparrow {
namespace {

// What the policies remember of one unit. One record per unit keeps a
// victim comparison to a single cache line.
struct Usage {
  uint64_t last_token_plus1 = 0;  // 0: never used
  uint64_t last_tick = 0;         // use clock at the last OnUse; 0: never
  uint64_t tokens_used = 0;       // distinct tokens that used the unit
};
static_assert(sizeof(Usage) == 24, "documented as 24 bytes per unit");

class UsagePolicy : public EvictionPolicy {
 public:
  UsagePolicy(EvictionKind kind, uint32_t n_units, uint32_t window_tokens)
      : kind_(kind), window_(window_tokens), usage_(n_units) {}

  void BeginToken(uint64_t token) override {
    if (begun_ && token <= token_) {
      throw std::logic_error(StrCat("EvictionPolicy::BeginToken: token ", token,
                                    " does not follow token ", token_));
    }
    begun_ = true;
    token_ = token;
  }

  void OnUse(uint32_t unit) override {
    Usage& usage = usage_[Check(unit)];
    if (usage.last_token_plus1 != token_ + 1) {
      usage.last_token_plus1 = token_ + 1;
      ++usage.tokens_used;
    }
    usage.last_tick = ++clock_;
  }

  // Usage is kept on removal: recency and frequency describe the unit, not
  // its stay in the cache.
  void OnRemove(uint32_t unit) override { Check(unit); }

  void Expired(const std::vector<uint32_t>& cached, std::vector<uint32_t>* out) override {
    out->clear();
    if (kind_ != EvictionKind::kWindow) return;
    for (const uint32_t unit : cached) {
      const uint64_t last_plus1 = usage_[Check(unit)].last_token_plus1;
      // Kept while token_ - last <= K; token_ >= last since tokens only grow.
      if (last_plus1 == 0 || token_ - (last_plus1 - 1) > window_) out->push_back(unit);
    }
  }

  void ChooseVictims(const std::vector<uint32_t>& candidates, size_t count,
                     std::vector<uint32_t>* out) override {
    out->clear();
    out->reserve(candidates.size());
    for (const uint32_t unit : candidates) out->push_back(Check(unit));
    count = std::min(count, out->size());
    if (kind_ == EvictionKind::kLfu) {
      SelectSmallest(out, count, [this](uint32_t a, uint32_t b) {
        const Usage& x = usage_[a];
        const Usage& y = usage_[b];
        if (x.tokens_used != y.tokens_used) return x.tokens_used < y.tokens_used;
        if (x.last_tick != y.last_tick) return x.last_tick < y.last_tick;
        return a < b;
      });
    } else {
      SelectSmallest(out, count, [this](uint32_t a, uint32_t b) {
        const uint64_t x = usage_[a].last_tick;
        const uint64_t y = usage_[b].last_tick;
        return x != y ? x < y : a < b;
      });
    }
  }

  EvictionKind kind() const override { return kind_; }
  uint64_t memory_bytes() const override { return usage_.size() * sizeof(Usage); }

 private:
  uint32_t Check(uint32_t unit) const {
    if (unit >= usage_.size()) {
      throw std::out_of_range(StrCat("EvictionPolicy: unit ", unit, " out of range (",
                                     usage_.size(), " units)"));
    }
    return unit;
  }

  // Leaves the `count` smallest of *units, sorted, in *units.
  template <typename Less>
  static void SelectSmallest(std::vector<uint32_t>* units, size_t count, Less less) {
    if (count < units->size()) {
      std::nth_element(units->begin(), units->begin() + static_cast<ptrdiff_t>(count),
                       units->end(), less);
      units->resize(count);
    }
    std::sort(units->begin(), units->end(), less);
  }

  EvictionKind kind_;
  uint64_t window_;
  std::vector<Usage> usage_;
  uint64_t token_ = 0;
  bool begun_ = false;
  uint64_t clock_ = 0;
};

}  // namespace

EvictionKind ParseEvictionKind(const std::string& name) {
  if (name == "window") return EvictionKind::kWindow;
  if (name == "lru") return EvictionKind::kLru;
  if (name == "lfu") return EvictionKind::kLfu;
  ThrowInputError("--cache '", name, "' is not a cache policy (expected window, lru or lfu)");
}

const char* EvictionKindName(EvictionKind kind) {
  switch (kind) {
    case EvictionKind::kWindow: return "window";
    case EvictionKind::kLru: return "lru";
    case EvictionKind::kLfu: return "lfu";
  }
  return "unknown";
}

std::unique_ptr<EvictionPolicy> MakeEvictionPolicy(EvictionKind kind, uint32_t n_units,
                                                   uint32_t window_tokens) {
  return std::make_unique<UsagePolicy>(kind, n_units, window_tokens);
}

uint64_t EvictionPolicyMemoryBytes(EvictionKind /*kind*/, uint32_t n_units) {
  return uint64_t{n_units} * sizeof(Usage);
}

}  // namespace sparrow
