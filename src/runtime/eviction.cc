#include "src/runtime/eviction.h"

#include <algorithm>
#include <stdexcept>

#include "base/error.h"

namespace sparrow {
namespace {

// What the policies remember of one unit, in one record so that a use
// touches one cache line.
struct Usage {
  uint64_t last_token_plus1 = 0;  // 0: never used
  uint64_t last_tick = 0;         // use clock at the last OnUse; 0: never
  uint64_t tokens_used = 0;       // distinct tokens that used the unit
};
// Victim order as one number, smallest first (see KeyOf).
using VictimKey = unsigned __int128;
static_assert(sizeof(Usage) + sizeof(VictimKey) == 40, "documented as 40 bytes per unit");

class UsagePolicy : public EvictionPolicy {
 public:
  UsagePolicy(EvictionKind kind, uint32_t n_units, uint32_t window_tokens)
      : kind_(kind), window_(window_tokens), usage_(n_units) {
    keys_.reserve(n_units);  // candidates are distinct units: never more
  }

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
    // Select on packed keys in one contiguous array: the comparisons then
    // stream through memory instead of chasing two usage records each.
    keys_.clear();
    for (const uint32_t unit : candidates) keys_.push_back(KeyOf(Check(unit)));
    count = std::min(count, keys_.size());
    if (count < keys_.size()) {
      std::nth_element(keys_.begin(), keys_.begin() + static_cast<ptrdiff_t>(count), keys_.end());
      keys_.resize(count);
    }
    std::sort(keys_.begin(), keys_.end());
    out->clear();
    for (const Key key : keys_) out->push_back(static_cast<uint32_t>(key));
  }

  EvictionKind kind() const override { return kind_; }
  uint64_t memory_bytes() const override {
    return EvictionPolicyMemoryBytes(kind_, static_cast<uint32_t>(usage_.size()));
  }

 private:
  uint32_t Check(uint32_t unit) const {
    if (unit >= usage_.size()) {
      throw std::out_of_range(StrCat("EvictionPolicy: unit ", unit, " out of range (",
                                     usage_.size(), " units)"));
    }
    return unit;
  }

  // Victim order as one number, smallest first: [frequency (lfu only,
  // saturated to 32 bits) | last use tick | unit]. Ticks are unique among
  // used units; never-used units have tick 0 and fall back to unit order.
  using Key = VictimKey;
  Key KeyOf(uint32_t unit) const {
    const Usage& usage = usage_[unit];
    Key key = (Key{usage.last_tick} << 32) | unit;
    if (kind_ == EvictionKind::kLfu) {
      const uint64_t frequency = std::min<uint64_t>(usage.tokens_used, UINT32_MAX);
      key |= Key{frequency} << 96;
    }
    return key;
  }

  EvictionKind kind_;
  uint64_t window_;
  std::vector<Usage> usage_;
  uint64_t token_ = 0;
  bool begun_ = false;
  uint64_t clock_ = 0;
  std::vector<Key> keys_;  // ChooseVictims scratch
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
  return uint64_t{n_units} * (sizeof(Usage) + sizeof(VictimKey));
}

}  // namespace sparrow
