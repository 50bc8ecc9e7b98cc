// Which cached units to drop when room is needed. The cache calls OnUse for
// every unit a token uses (hits and newly loaded), and asks for victims
// among the cached units that the current token does not need.
//   window: keeps the units used by the last K tokens; a unit unused for K
//           tokens is dropped at the start of the next token even when
//           there is room (the paper's sliding window), and when still
//           short of room, the least recently used go first;
//   lru:    least recently used first, only when room is needed;
//   lfu:    least frequently used first (ties: least recently used).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sparrow {

enum class EvictionKind { kWindow, kLru, kLfu };
EvictionKind ParseEvictionKind(const std::string& name);  // InputError if unknown

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  // A new token starts; `token` increases by one each time.
  virtual void BeginToken(uint64_t token) = 0;
  virtual void OnUse(uint32_t unit) = 0;
  virtual void OnRemove(uint32_t unit) = 0;
  // Units to drop now regardless of room (window expiry), among `cached`.
  virtual void Expired(const std::vector<uint32_t>& cached,
                       std::vector<uint32_t>* out) = 0;
  // Up to `count` victims among `candidates` (cached, not needed now),
  // best victim first.
  virtual void ChooseVictims(const std::vector<uint32_t>& candidates,
                             size_t count, std::vector<uint32_t>* out) = 0;
};

std::unique_ptr<EvictionPolicy> MakeEvictionPolicy(EvictionKind kind,
                                                   uint32_t n_units,
                                                   uint32_t window_tokens);

}  // namespace sparrow
