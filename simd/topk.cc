// Top-K selection: dispatch of the SIMD passes, the selection strategy, and
// the scalar reference.
//
// Ranking. Each value becomes a 64-bit rank item: the complement of a 32-bit
// order key (monotone in the value or its magnitude, NaN lowest, -0 == +0)
// above the index. All items differ, and increasing item order is exactly
// "decreasing key, ties to the lower index", so any sort of the items gives
// the reference's answer.
//
// Strategy. For small k (sampling's top-k, a pruning policy's few percent)
// we avoid ranking all n values:
//   1. estimate from an evenly spaced sample a threshold t that at least k
//      values (but not many more) reach;
//   2. one SIMD pass collects the indices of the values that reach t;
//   3. if there are at least k of them, the top k are among them: rank and
//      order only those. Otherwise (an unlucky sample) fall back to 4.
//   4. Large k, small n, or fallback: rank items for all n values (SIMD),
//      then order them.
// Ordering: for small k, nth_element then sort the k; otherwise an LSD
// radix sort over the 32 key bits (3 passes), which is stable and so keeps
// the index order the items are built in.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "simd/topk.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "simd/topk-inl.h"

HWY_BEFORE_NAMESPACE();
namespace sparrow::simd {
namespace HWY_NAMESPACE {

size_t CollectAtLeastT(const float* v, size_t n, float t, bool abs,
                       uint32_t* out) {
  return CollectAtLeastImpl(hn::ScalableTag<float>(), v, n, t, abs, out);
}

size_t MakeRankItemsT(const float* v, size_t n, bool abs, uint64_t* items) {
  return MakeRankItemsImpl(v, n, abs, items);
}

size_t CacheWeightedMagnitudesT(const float* x, const int32_t* rows, float gamma,
                                size_t n, float* out) {
  return CacheWeightedMagnitudesImpl(hn::ScalableTag<float>(), x, rows, gamma, n, out);
}

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "base/error.h"
#include "simd/topk.h"

namespace sparrow::simd {

HWY_EXPORT(CollectAtLeastT);
HWY_EXPORT(MakeRankItemsT);
HWY_EXPORT(CacheWeightedMagnitudesT);

namespace {

// u32 lanes in the widest vector any target has (2048-bit SVE): the slack
// CollectAtLeast needs past n.
constexpr size_t kMaxLanes32 = 64;
// Values sampled to estimate the threshold.
constexpr size_t kSampleSize = 1024;
// Below this many values the filter pass is not worth its set-up.
constexpr size_t kMinFilterN = 2048;
// Up to this k, nth_element + sort beats radix-sorting all candidates.
constexpr size_t kMaxComparisonK = 512;
// Radix digits: 11 + 11 + 10 bits of the 32-bit key.
constexpr int kDigitBits = 11;
constexpr size_t kBuckets = size_t{1} << kDigitBits;

// Monotone 32-bit order key: a larger key ranks first; 0 only for NaN.
// OrderKeys in topk-inl.h is the vector version.
uint32_t OrderKey(float x, bool abs) {
  if (std::isnan(x)) return 0;
  if (x == 0.0f) x = 0.0f;  // -0 ranks equal to +0
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  if (abs) return (bits & 0x7FFFFFFFu) + 1;
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

uint64_t RankItem(float x, uint32_t index, bool abs) {
  return (static_cast<uint64_t>(~OrderKey(x, abs)) << 32) | index;
}

struct Scratch {
  std::vector<float> sample;
  std::vector<uint32_t> candidates;
  std::vector<uint64_t> items;
  std::vector<uint64_t> spare;
  uint32_t histogram[3][kBuckets];
};

// Stable LSD radix sort of items[0, c) by their high 32 bits. Returns where
// the sorted items are: `items` or `spare` (c entries each).
uint64_t* RadixSortByKey(uint64_t* items, uint64_t* spare, size_t c,
                         uint32_t (&histogram)[3][kBuckets]) {
  std::memset(histogram, 0, sizeof(histogram));
  for (size_t i = 0; i < c; ++i) {
    const uint32_t key = static_cast<uint32_t>(items[i] >> 32);
    ++histogram[0][key & (kBuckets - 1)];
    ++histogram[1][(key >> kDigitBits) & (kBuckets - 1)];
    ++histogram[2][key >> (2 * kDigitBits)];
  }
  uint64_t* from = items;
  uint64_t* to = spare;
  for (int pass = 0; pass < 3; ++pass) {
    uint32_t* counts = histogram[pass];
    const int shift = 32 + pass * kDigitBits;
    // A digit every item shares (typical of the top bits) orders nothing.
    const uint64_t first_digit = (from[0] >> shift) & (kBuckets - 1);
    if (counts[first_digit] == c) continue;
    uint32_t offset = 0;
    for (size_t b = 0; b < kBuckets; ++b) {
      const uint32_t count = counts[b];
      counts[b] = offset;
      offset += count;
    }
    for (size_t i = 0; i < c; ++i) {
      const uint64_t item = from[i];
      to[counts[(item >> shift) & (kBuckets - 1)]++] = item;
    }
    std::swap(from, to);
  }
  return from;
}

// Writes the indices of the k smallest items of items[0, c), in increasing
// item order; k <= c. Reorders `items`.
void WriteFirstK(Scratch& s, uint64_t* items, size_t c, size_t k,
                 uint32_t* out) {
  const uint64_t* sorted = items;
  if (k <= kMaxComparisonK) {
    if (k < c) std::nth_element(items, items + k, items + c);
    std::sort(items, items + k);
  } else {
    s.spare.resize(c);
    sorted = RadixSortByKey(items, s.spare.data(), c, s.histogram);
  }
  for (size_t i = 0; i < k; ++i) out[i] = static_cast<uint32_t>(sorted[i]);
}

// A threshold that about k + a few standard deviations of the values reach,
// judged from an evenly spaced sample; false if the sample cannot tell
// (k too close to n, or too many NaN).
bool EstimateThreshold(const float* v, size_t n, size_t k, bool abs,
                       std::vector<float>& sample, float* threshold) {
  const size_t m = std::min(n, kSampleSize);
  const size_t stride = n / m;
  sample.clear();
  for (size_t j = 0; j < m; ++j) {
    const float x = v[j * stride + stride / 2];
    if (!std::isnan(x)) sample.push_back(abs ? std::fabs(x) : x);
  }
  // Each sample point stands for n / m values; aim for lambda = k m / n
  // points plus 3 standard deviations (Poisson) plus 3 so that fewer than k
  // values reaching the threshold is rare, and only costs a slower path.
  const double lambda = static_cast<double>(k) * m / n;
  const size_t want =
      static_cast<size_t>(std::ceil(lambda + 3 * std::sqrt(lambda) + 3));
  if (want > sample.size() / 4) return false;  // would keep > ~n/4 values
  std::nth_element(sample.begin(), sample.begin() + (want - 1), sample.end(),
                   std::greater<float>());
  *threshold = sample[want - 1];
  return true;
}

}  // namespace

void TopK(const float* v, size_t n, size_t k, TopKOrder order, uint32_t* out) {
  k = std::min(k, n);
  if (k == 0) return;
  if (n > std::numeric_limits<uint32_t>::max()) {
    ThrowInputError("TopK over ", n, " values: at most 2^32 - 1 supported");
  }
  const bool abs = order == TopKOrder::kLargestAbs;
  thread_local Scratch s;
  float threshold;
  if (n >= kMinFilterN &&
      EstimateThreshold(v, n, k, abs, s.sample, &threshold)) {
    s.candidates.resize(n + kMaxLanes32);
    const size_t c = HWY_DYNAMIC_DISPATCH(CollectAtLeastT)(
        v, n, threshold, abs, s.candidates.data());
    if (c >= k) {
      s.items.resize(c);
      for (size_t i = 0; i < c; ++i) {
        const uint32_t index = s.candidates[i];
        s.items[i] = RankItem(v[index], index, abs);
      }
      WriteFirstK(s, s.items.data(), c, k, out);
      return;
    }
  }
  s.items.resize(n);
  size_t i = HWY_DYNAMIC_DISPATCH(MakeRankItemsT)(v, n, abs, s.items.data());
  for (; i < n; ++i) s.items[i] = RankItem(v[i], static_cast<uint32_t>(i), abs);
  WriteFirstK(s, s.items.data(), n, k, out);
}

namespace {
float CacheWeightedMagnitude(float x, int32_t row, float gamma) {
  return std::fabs(x) * (row < 0 ? gamma : 1.0f);
}
}  // namespace

void CacheWeightedMagnitudes(const float* x, const int32_t* row_of_unit, float gamma,
                             size_t n, float* out) {
  size_t i = HWY_DYNAMIC_DISPATCH(CacheWeightedMagnitudesT)(x, row_of_unit, gamma, n, out);
  for (; i < n; ++i) out[i] = CacheWeightedMagnitude(x[i], row_of_unit[i], gamma);
}

void CacheWeightedMagnitudesReference(const float* x, const int32_t* row_of_unit,
                                      float gamma, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = CacheWeightedMagnitude(x[i], row_of_unit[i], gamma);
}

void TopKReference(const float* v, size_t n, size_t k, TopKOrder order,
                   uint32_t* out) {
  k = std::min(k, n);
  const bool abs = order == TopKOrder::kLargestAbs;
  std::vector<uint32_t> order_of(n);
  for (size_t i = 0; i < n; ++i) order_of[i] = static_cast<uint32_t>(i);
  auto key = [&](uint32_t i) { return abs ? std::fabs(v[i]) : v[i]; };
  // Decreasing key, NaN after everything; stable, so equal keys (including
  // -0 and +0) keep increasing index order.
  std::stable_sort(order_of.begin(), order_of.end(),
                   [&](uint32_t a, uint32_t b) {
                     const float ka = key(a);
                     const float kb = key(b);
                     if (std::isnan(ka)) return false;
                     return std::isnan(kb) || ka > kb;
                   });
  std::copy(order_of.begin(), order_of.begin() + k, out);
}

}  // namespace sparrow::simd

#endif  // HWY_ONCE
