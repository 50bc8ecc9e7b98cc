// Which cached units to drop when room is needed. The cache calls OnUse for
// every unit a token uses (hits and newly loaded), and asks for victims
// among the cached units that the current token does not need.
//   window: keeps the units used by the last K tokens; a unit unused for K
//           tokens is dropped at the start of the next token even when
//           there is room (the paper's sliding window; the streamed FFN
//           asks only when its cache cannot hold every unit), and when
//           still short of room, the least recently used go first;
//   lru:    least recently used first, only when room is needed;
//   lfu:    least frequently used first (ties: least recently used).
//
// Definitions (all policies):
// - "Token t" is the span between BeginToken(t) and the next BeginToken.
//   Tokens must strictly increase (by one in normal use; a gap counts as
//   tokens that used nothing). std::logic_error if one goes backwards.
// - Recency is exact: every OnUse takes the next tick of a use clock, so
//   "least recently used" orders even the uses within one token (by call
//   order). Units never used since the policy was made are the least
//   recent of all, and among themselves go in unit order.
// - Frequency (lfu) is the number of distinct tokens that used the unit
//   since the policy was made; repeated OnUse calls within one token count
//   once, and OnRemove does not forget it, so a hot unit that was evicted
//   comes back with its history.
// - Window of K tokens: when token t begins, the window is the K tokens
//   before it, t-K .. t-1. A unit is expired at token t when neither those
//   tokens nor t itself used it: its last use is before token t-K, or it
//   was never used. Example, K = 2: a unit used at token 1 and not at
//   tokens 2 or 3 is kept during token 3 (window 1..2) and is expired from
//   token 4 on (window 2..3). K = 0: nothing survives a token boundary
//   unless the new token uses it before Expired is asked.
//   Call Expired after OnUse for the current token's hits, so a unit the
//   current token needs is never dropped just to be read again.
//
// Costs, n = units passed in, c = count asked for: BeginToken, OnUse,
// OnRemove O(1); Expired O(n); ChooseVictims O(n + c log c) (packs each
// candidate's order into one 16-byte key, selects the c smallest with
// nth_element, then sorts only those). Memory: 40 bytes per unit of the
// group (usage record + selection scratch, EvictionPolicyMemoryBytes), all
// allocated when the policy is made. A unit's frequency saturates at 2^32-1
// tokens in the victim order.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sparrow {

enum class EvictionKind { kWindow, kLru, kLfu };
// "window", "lru" or "lfu"; InputError naming --cache otherwise.
EvictionKind ParseEvictionKind(const std::string& name);
const char* EvictionKindName(EvictionKind kind);

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  // A new token starts; `token` increases by one each time.
  virtual void BeginToken(uint64_t token) = 0;
  virtual void OnUse(uint32_t unit) = 0;
  virtual void OnRemove(uint32_t unit) = 0;
  // Units to drop now regardless of room (window expiry), among `cached`,
  // in the order given; replaces *out. Always empty for lru and lfu.
  virtual void Expired(const std::vector<uint32_t>& cached,
                       std::vector<uint32_t>* out) = 0;
  // Up to `count` victims among `candidates` (cached, not needed now),
  // best victim first; replaces *out. Fewer only when there are fewer
  // candidates.
  virtual void ChooseVictims(const std::vector<uint32_t>& candidates,
                             size_t count, std::vector<uint32_t>* out) = 0;
  virtual EvictionKind kind() const = 0;
  // Bytes this policy holds, for the budget.
  virtual uint64_t memory_bytes() const = 0;
};

// Units must be < n_units (std::out_of_range otherwise, in every call).
// `window_tokens` is K for kWindow and ignored by the others.
std::unique_ptr<EvictionPolicy> MakeEvictionPolicy(EvictionKind kind,
                                                   uint32_t n_units,
                                                   uint32_t window_tokens);
// What MakeEvictionPolicy(kind, n_units, ...)->memory_bytes() will be.
uint64_t EvictionPolicyMemoryBytes(EvictionKind kind, uint32_t n_units);

}  // namespace sparrow
