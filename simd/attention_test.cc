#include "simd/attention.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include "simd/quantize.h"
#include "simd/targets.h"

namespace sparrow::simd {
namespace {

constexpr double kU = 0x1p-24;  // unit roundoff of f32

std::vector<float> Normal(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// A KV cache laid out like the engine's: position-major rows of `stride`
// floats, this head's slice at `offset` within the row.
struct Cache {
  size_t stride, offset;
  std::vector<float> k, v;
  const float* K() const { return k.data() + offset; }
  const float* V() const { return v.data() + offset; }
  KvRows KRows() const { return KvRows{KvType::kF32, K(), stride * sizeof(float)}; }
  KvRows VRows() const { return KvRows{KvType::kF32, V(), stride * sizeof(float)}; }
};

Cache MakeCache(size_t n_pos, size_t head_dim, uint32_t seed) {
  Cache c;
  c.offset = head_dim + 3;           // not vector-aligned
  c.stride = 3 * head_dim + 5;       // other heads and padding in between
  c.k = Normal(n_pos * c.stride + c.offset, seed);
  c.v = Normal(n_pos * c.stride + c.offset, seed + 1);
  return c;
}

// Double-precision attention plus an error bound for the f32 kernel:
// - score s_t: the dot errs by <= (head_dim / 4 + 8) u sum|q k| (see the Dot
//   test), the scale product by u |s_t|: delta_t.
// - p_t: softmax(s) moves by <= 2 max(delta) relative when the scores move
//   by delta, plus softmax's own rounding (softmax_test.cc):
//   u (|s_t - max| + 2) + S + 2u.
// - out_j = sum_t p_t v_tj, one f32 multiply-add per position: each of the
//   n_pos steps adds <= 2u (unfused) of the running magnitude.
// Tolerance for out_j: sum_t p_t |v_tj| (2 max(delta) + max_t r_t + S + 2u +
// 2 (n_pos + 1) u), with 5% margin.
struct Expected {
  std::vector<double> out, tol;
};

// dot_chain: how many f32 additions in a row the kernel's dot may make per
// element, as a fraction of head_dim (1/4: four accumulators).
Expected ExactAttention(const std::vector<float>& q, const Cache& c,
                        size_t n_pos, size_t head_dim, float scale,
                        double dot_chain = 0.25) {
  std::vector<double> s(n_pos);
  double max_delta = 0.0;
  for (size_t t = 0; t < n_pos; ++t) {
    double dot = 0.0, abs = 0.0;
    for (size_t j = 0; j < head_dim; ++j) {
      const double prod = static_cast<double>(q[j]) * c.K()[t * c.stride + j];
      dot += prod;
      abs += std::fabs(prod);
    }
    s[t] = dot * scale;
    const double delta = (head_dim * dot_chain + 8) * kU * abs * scale +
                         kU * std::fabs(s[t]);
    max_delta = std::max(max_delta, delta);
  }
  const double max = n_pos ? *std::max_element(s.begin(), s.end()) : 0.0;
  std::vector<double> p(n_pos);
  double sum = 0.0, weighted = 0.0, max_r = 0.0;
  for (size_t t = 0; t < n_pos; ++t) {
    p[t] = std::exp(s[t] - max);
    const double r = kU * (std::fabs(s[t] - max) + 2);
    sum += p[t];
    weighted += p[t] * r;
    max_r = std::max(max_r, r);
  }
  const double rel = 2 * max_delta + max_r + weighted / sum + 2 * kU +
                     2 * (n_pos + 1) * kU;
  Expected e{std::vector<double>(head_dim, 0.0),
             std::vector<double>(head_dim, 0.0)};
  for (size_t t = 0; t < n_pos; ++t) {
    p[t] /= sum;
    for (size_t j = 0; j < head_dim; ++j) {
      const double vj = c.V()[t * c.stride + j];
      e.out[j] += p[t] * vj;
      e.tol[j] += p[t] * std::fabs(vj);
    }
  }
  for (double& t : e.tol) t = 1.05 * rel * t + 1e-30;
  return e;
}

TEST_CASE("AttentionHead matches double-precision attention") {
  const size_t kHeadDims[] = {1, 8, 17, 64, 80, 128, 256};
  const size_t kPositions[] = {1, 2, 3, 16, 17, 100, 1000};
  ForEachTarget([&](const Target& t) {
    for (size_t head_dim : kHeadDims) {
      for (size_t n_pos : kPositions) {
        CAPTURE(t.name);
        CAPTURE(head_dim);
        CAPTURE(n_pos);
        const Cache c = MakeCache(n_pos, head_dim, 51 + head_dim + n_pos);
        const std::vector<float> q = Normal(head_dim, 53 + head_dim);
        const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
        const Expected e = ExactAttention(q, c, n_pos, head_dim, scale);
        std::vector<float> scratch(n_pos), out(head_dim);
        AttentionHead(q.data(), c.KRows(), c.VRows(), n_pos, head_dim, scale,
                      scratch.data(), out.data());
        std::vector<float> ref_scratch(n_pos), ref(head_dim);
        AttentionHeadReference(q.data(), c.KRows(), c.VRows(), n_pos, head_dim,
                               scale, ref_scratch.data(), ref.data());
        size_t bad = 0, bad_ref = 0;
        for (size_t j = 0; j < head_dim; ++j) {
          bad += !(std::fabs(out[j] - e.out[j]) <= e.tol[j]);
          bad_ref += !(std::fabs(ref[j] - e.out[j]) <= e.tol[j]);
        }
        CHECK(bad == 0);
        CHECK(bad_ref == 0);
        // scratch ends up holding the probabilities.
        double total = 0.0;
        for (float p : scratch) total += p;
        CHECK(total == doctest::Approx(1.0).epsilon(1e-5));
      }
    }
  });
}

TEST_CASE("AttentionHead: one position returns its V exactly") {
  ForEachTarget([](const Target& t) {
    for (size_t head_dim : {size_t{1}, size_t{8}, size_t{33}, size_t{128}}) {
      CAPTURE(t.name);
      CAPTURE(head_dim);
      const Cache c = MakeCache(1, head_dim, 61 + head_dim);
      const std::vector<float> q = Normal(head_dim, 62);
      float scratch[1];
      std::vector<float> out(head_dim);
      AttentionHead(q.data(), c.KRows(), c.VRows(), 1, head_dim, 0.125f,
                    scratch, out.data());
      CHECK(scratch[0] == 1.0f);  // exp(0) / exp(0)
      CHECK(std::equal(out.begin(), out.end(), c.V()));
    }
  });
}

TEST_CASE("AttentionHead: equal keys average V; a dominant key selects its V") {
  ForEachTarget([](const Target& t) {
    CAPTURE(t.name);
    const size_t head_dim = 20, n_pos = 5;
    Cache c = MakeCache(n_pos, head_dim, 71);
    const std::vector<float> q = Normal(head_dim, 72);
    // Same key everywhere: uniform weights, out = mean of the V rows.
    for (size_t p = 1; p < n_pos; ++p) {
      std::copy(c.K(), c.K() + head_dim, c.k.data() + c.offset + p * c.stride);
    }
    std::vector<float> scratch(n_pos), out(head_dim);
    AttentionHead(q.data(), c.KRows(), c.VRows(), n_pos, head_dim, 1.0f,
                  scratch.data(), out.data());
    for (float p : scratch) CHECK(p == doctest::Approx(0.2).epsilon(1e-6));
    for (size_t j = 0; j < head_dim; ++j) {
      double mean = 0.0;
      for (size_t p = 0; p < n_pos; ++p) mean += c.V()[p * c.stride + j];
      CHECK(out[j] == doctest::Approx(mean / n_pos).epsilon(1e-5));
    }
    // Key 3 parallel to q and long: with a large scale it takes everything.
    for (size_t j = 0; j < head_dim; ++j) {
      c.k[c.offset + 3 * c.stride + j] = 10.0f * q[j];
    }
    AttentionHead(q.data(), c.KRows(), c.VRows(), n_pos, head_dim, 100.0f,
                  scratch.data(), out.data());
    CHECK(scratch[3] == 1.0f);
    for (size_t j = 0; j < head_dim; ++j) {
      CHECK(out[j] == c.V()[3 * c.stride + j]);
    }
    // No positions: zeros.
    std::vector<float> none(head_dim, 5.0f);
    AttentionHead(q.data(), c.KRows(), c.VRows(), 0, head_dim, 1.0f, nullptr,
                  none.data());
    CHECK(none == std::vector<float>(head_dim, 0.0f));
  });
}

constexpr KvType kStoredTypes[] = {KvType::kF32, KvType::kF16, KvType::kQ8_0, KvType::kQ4_0};

const char* Name(KvType type) {
  switch (type) {
    case KvType::kF32: return "f32";
    case KvType::kF16: return "f16";
    case KvType::kQ8_0: return "q8_0";
    case KvType::kQ4_0: return "q4_0";
  }
  return "?";
}

// A cache of one type laid out like the engine's: each position's row holds
// this head at `offset` bytes between other heads' bytes.
struct StoredCache {
  KvType type;
  size_t head_bytes, offset, stride;
  std::vector<uint8_t> bytes;
  KvRows Rows() const { return KvRows{type, bytes.data() + offset, stride}; }
};

StoredCache Store(KvType type, const std::vector<float>& heads, size_t n_pos, size_t head_dim) {
  StoredCache c{type, KvHeadBytes(type, head_dim), 0, 0, {}};
  c.offset = c.head_bytes + 6;  // another head and some odd padding first
  c.stride = 3 * c.head_bytes + 10;
  c.bytes.assign(n_pos * c.stride + c.offset, 0xAB);
  for (size_t t = 0; t < n_pos; ++t) {
    StoreKvHeads(type, heads.data() + t * head_dim, 1, head_dim,
                 c.bytes.data() + t * c.stride + c.offset);
  }
  return c;
}

// The stored cache widened back to f32, as a Cache for ExactAttention.
Cache Widen(const StoredCache& s, size_t n_pos, size_t head_dim) {
  Cache c{head_dim, 0, std::vector<float>(n_pos * head_dim), {}};
  for (size_t t = 0; t < n_pos; ++t) {
    LoadKvHead(s.type, s.bytes.data() + t * s.stride + s.offset, head_dim,
               c.k.data() + t * head_dim);
  }
  return c;
}

TEST_CASE("KvHeadBytes: f32, f16, and Q8_0 blocks with a short last block") {
  CHECK(KvHeadBytes(KvType::kF32, 64) == 256);
  CHECK(KvHeadBytes(KvType::kF16, 64) == 128);
  CHECK(KvHeadBytes(KvType::kQ8_0, 64) == 68);   // two ggml blocks of 34
  CHECK(KvHeadBytes(KvType::kQ8_0, 8) == 10);    // one short block
  CHECK(KvHeadBytes(KvType::kQ8_0, 40) == 44);   // 34 + (2 + 8)
  CHECK(KvHeadBytes(KvType::kQ8_0, 128) == 136);
  CHECK(KvHeadBytes(KvType::kQ4_0, 64) == 36);   // two ggml blocks of 18
  CHECK(KvHeadBytes(KvType::kQ4_0, 8) == 10);    // low nibbles of 8 bytes
  CHECK(KvHeadBytes(KvType::kQ4_0, 17) == 18);   // all 16 bytes, one high nibble used
  CHECK(KvHeadBytes(KvType::kQ4_0, 40) == 28);   // 18 + (2 + 8)
  CHECK(KvHeadBytes(KvType::kQ4_0, 128) == 72);
}

TEST_CASE("StoreKvHeads: f16 rounds each value; Q8_0 is ggml's block; LoadKvHead inverts") {
  for (size_t head_dim : {size_t{1}, size_t{8}, size_t{32}, size_t{40}, size_t{64}, size_t{100}}) {
    CAPTURE(head_dim);
    const size_t n_heads = 3;
    std::vector<float> src = Normal(n_heads * head_dim, 81 + head_dim);
    src[0] = 0.0f;
    std::vector<float> back(head_dim);
    // f32: exact.
    std::vector<uint8_t> f32(n_heads * KvHeadBytes(KvType::kF32, head_dim));
    StoreKvHeads(KvType::kF32, src.data(), n_heads, head_dim, f32.data());
    LoadKvHead(KvType::kF32, f32.data() + KvHeadBytes(KvType::kF32, head_dim), head_dim,
               back.data());
    CHECK(std::equal(back.begin(), back.end(), src.begin() + head_dim));
    // f16: each value rounded to the nearest half.
    std::vector<uint8_t> f16(n_heads * KvHeadBytes(KvType::kF16, head_dim));
    StoreKvHeads(KvType::kF16, src.data(), n_heads, head_dim, f16.data());
    for (size_t h = 0; h < n_heads; ++h) {
      LoadKvHead(KvType::kF16, f16.data() + h * KvHeadBytes(KvType::kF16, head_dim), head_dim,
                 back.data());
      for (size_t i = 0; i < head_dim; ++i) {
        CHECK(back[i] == F16ToF32(F32ToF16(src[h * head_dim + i])));
      }
    }
    // Q8_0: each value within half a step of its block's scale; the scale
    // is the block's absmax / 127 (as an f16).
    const size_t q8_bytes = KvHeadBytes(KvType::kQ8_0, head_dim);
    std::vector<uint8_t> q8(n_heads * q8_bytes);
    StoreKvHeads(KvType::kQ8_0, src.data(), n_heads, head_dim, q8.data());
    for (size_t h = 0; h < n_heads; ++h) {
      const float* x = src.data() + h * head_dim;
      LoadKvHead(KvType::kQ8_0, q8.data() + h * q8_bytes, head_dim, back.data());
      for (size_t start = 0; start < head_dim; start += 32) {
        const size_t len = std::min<size_t>(32, head_dim - start);
        float amax = 0.0f;
        for (size_t i = 0; i < len; ++i) amax = std::max(amax, std::fabs(x[start + i]));
        const float d = F16ToF32(F32ToF16(amax / 127.0f));
        for (size_t i = 0; i < len; ++i) {
          CHECK(std::fabs(back[start + i] - x[start + i]) <= 0.5f * d + 0.002f * amax);
        }
      }
      if (head_dim % 32 == 0) {
        // Bit-equal to ggml's Q8_0 row of the same values.
        std::vector<uint8_t> ggml(q8_bytes);
        QuantizeRow(TensorType::kQ8_0, x, head_dim, ggml.data());
        CHECK(std::equal(ggml.begin(), ggml.end(), q8.begin() + h * q8_bytes));
      }
    }
    // Q4_0: each value within half a step of its block's scale, the value
    // of largest magnitude / -8 (as an f16), which itself comes back
    // exactly as -8 steps; values of the other sign past 7.5 steps are cut
    // to 7 (within a step).
    const size_t q4_bytes = KvHeadBytes(KvType::kQ4_0, head_dim);
    std::vector<uint8_t> q4(n_heads * q4_bytes + 1, 0xCD);
    StoreKvHeads(KvType::kQ4_0, src.data(), n_heads, head_dim, q4.data());
    CHECK(q4.back() == 0xCD);  // nothing written past the heads
    for (size_t h = 0; h < n_heads; ++h) {
      const float* x = src.data() + h * head_dim;
      LoadKvHead(KvType::kQ4_0, q4.data() + h * q4_bytes, head_dim, back.data());
      for (size_t start = 0; start < head_dim; start += 32) {
        const size_t len = std::min<size_t>(32, head_dim - start);
        float amax = 0.0f, max = 0.0f;
        for (size_t i = 0; i < len; ++i) {
          if (std::fabs(x[start + i]) > amax) {
            amax = std::fabs(x[start + i]);
            max = x[start + i];
          }
        }
        const float d = F16ToF32(F32ToF16(max / -8.0f));
        for (size_t i = 0; i < len; ++i) {
          CAPTURE(i);
          const bool cut = x[start + i] / (max / -8.0f) >= 7.5f;
          CHECK(std::fabs(back[start + i] - x[start + i]) <=
                (cut ? 1.0f : 0.5f) * std::fabs(d) + 0.002f * amax);
          if (cut) CHECK(back[start + i] == 7.0f * d);
          if (x[start + i] == max) CHECK(back[start + i] == -8.0f * d);
        }
      }
      if (head_dim % 32 == 0) {
        std::vector<uint8_t> ggml(q4_bytes);
        QuantizeRow(TensorType::kQ4_0, x, head_dim, ggml.data());
        CHECK(std::equal(ggml.begin(), ggml.end(), q4.begin() + h * q4_bytes));
      }
    }
  }
}

TEST_CASE("AttentionHead on f32, f16, Q8_0 and Q4_0 caches matches double-precision attention") {
  const size_t kHeadDims[] = {1, 8, 17, 24, 32, 40, 56, 64, 128};
  const size_t kPositions[] = {1, 3, 17, 100};
  ForEachTarget([&](const Target& target) {
    for (KvType kt : kStoredTypes) {
      for (KvType vt : kStoredTypes) {
        for (size_t head_dim : kHeadDims) {
          for (size_t n_pos : kPositions) {
            CAPTURE(target.name);
            CAPTURE(Name(kt));
            CAPTURE(Name(vt));
            CAPTURE(head_dim);
            CAPTURE(n_pos);
            const uint32_t seed = static_cast<uint32_t>(91 + head_dim * 7 + n_pos);
            const std::vector<float> keys = Normal(n_pos * head_dim, seed);
            const std::vector<float> values = Normal(n_pos * head_dim, seed + 1);
            const StoredCache k = Store(kt, keys, n_pos, head_dim);
            const StoredCache v = Store(vt, values, n_pos, head_dim);
            // The exact answer for the values as stored (widening is exact).
            Cache widened = Widen(k, n_pos, head_dim);
            widened.v = Widen(v, n_pos, head_dim).k;
            const std::vector<float> q = Normal(head_dim, seed + 2);
            const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
            // Stored types sum each block in two chains and scale it.
            const Expected e = ExactAttention(q, widened, n_pos, head_dim, scale, 0.5);
            std::vector<float> scratch(n_pos), out(head_dim), ref_scratch(n_pos), ref(head_dim);
            AttentionHead(q.data(), k.Rows(), v.Rows(), n_pos, head_dim, scale, scratch.data(),
                          out.data());
            AttentionHeadReference(q.data(), k.Rows(), v.Rows(), n_pos, head_dim, scale,
                                   ref_scratch.data(), ref.data());
            size_t bad = 0, bad_ref = 0;
            for (size_t j = 0; j < head_dim; ++j) {
              bad += !(std::fabs(out[j] - e.out[j]) <= 2 * e.tol[j]);
              bad_ref += !(std::fabs(ref[j] - e.out[j]) <= 2 * e.tol[j]);
            }
            CHECK(bad == 0);
            CHECK(bad_ref == 0);
          }
        }
      }
    }
  });
}

TEST_CASE("AttentionGroup: each query gets what AttentionHead gives it alone, bit for bit") {
  const size_t kHeadDims[] = {8, 17, 40, 64, 128};
  ForEachTarget([&](const Target& target) {
    for (KvType kt : kStoredTypes) {
      for (KvType vt : kStoredTypes) {
        for (size_t head_dim : kHeadDims) {
          for (size_t n_queries = 1; n_queries <= kMaxAttentionQueries; ++n_queries) {
            CAPTURE(target.name);
            CAPTURE(Name(kt));
            CAPTURE(Name(vt));
            CAPTURE(head_dim);
            CAPTURE(n_queries);
            const size_t n_pos = 23;
            const uint32_t seed = static_cast<uint32_t>(7 + head_dim + 100 * n_queries);
            const StoredCache k = Store(kt, Normal(n_pos * head_dim, seed), n_pos, head_dim);
            const StoredCache v = Store(vt, Normal(n_pos * head_dim, seed + 1), n_pos, head_dim);
            // Queries and outputs at strides wider than a head, as in the
            // model's rows of all heads.
            const size_t q_stride = head_dim + 3, out_stride = head_dim + 5;
            const std::vector<float> q = Normal(n_queries * q_stride, seed + 2);
            AttentionQueries a;
            a.q = q.data();
            a.q_stride = q_stride;
            a.n_queries = n_queries;
            a.k = k.Rows();
            a.v = v.Rows();
            a.n_pos = n_pos;
            a.head_dim = head_dim;
            a.scale = 0.3f;
            std::vector<float> scratch(n_queries * n_pos), out(n_queries * out_stride, -7.0f);
            a.scratch = scratch.data();
            a.out = out.data();
            a.out_stride = out_stride;
            AttentionGroup(a);
            std::vector<float> ref_scratch(n_queries * n_pos), ref(n_queries * out_stride, -7.0f);
            a.scratch = ref_scratch.data();
            a.out = ref.data();
            AttentionGroupReference(a);
            for (size_t g = 0; g < n_queries; ++g) {
              std::vector<float> s1(n_pos), alone(head_dim);
              AttentionHead(q.data() + g * q_stride, k.Rows(), v.Rows(), n_pos, head_dim, 0.3f,
                            s1.data(), alone.data());
              const float* got = out.data() + g * out_stride;
              CHECK(std::equal(alone.begin(), alone.end(), got));
              CHECK(std::equal(s1.begin(), s1.end(), scratch.begin() + g * n_pos));
              double err = 0.0;
              for (size_t j = 0; j < head_dim; ++j) {
                err = std::max(err, std::fabs(double{got[j]} - ref[g * out_stride + j]));
              }
              CHECK(err < 1e-4);
              // Nothing written between the heads' outputs.
              for (size_t j = head_dim; j < out_stride; ++j) CHECK(got[j] == -7.0f);
            }
          }
        }
      }
    }
  });
  AttentionQueries none;
  none.n_queries = 5;
  CHECK_THROWS_AS(AttentionGroup(none), std::invalid_argument);
  none.n_queries = 0;
  CHECK_THROWS_AS(AttentionGroupReference(none), std::invalid_argument);
}

TEST_CASE("AttentionHead: a quantized cache stays close to the f32 answer") {
  // What the storage costs in accuracy, on attention-like data: f16 keeps
  // ~3 decimal digits, Q8_0 ~2, Q4_0 ~1 (per value: 2^-11, 1/254 and 1/16
  // of the block's absmax).
  const size_t head_dim = 64, n_pos = 200;
  const std::vector<float> keys = Normal(n_pos * head_dim, 101);
  const std::vector<float> values = Normal(n_pos * head_dim, 102);
  const std::vector<float> q = Normal(head_dim, 103);
  const float scale = 1.0f / 8.0f;
  std::vector<float> scratch(n_pos), exact(head_dim), out(head_dim);
  const StoredCache k32 = Store(KvType::kF32, keys, n_pos, head_dim);
  const StoredCache v32 = Store(KvType::kF32, values, n_pos, head_dim);
  AttentionHeadReference(q.data(), k32.Rows(), v32.Rows(), n_pos, head_dim, scale,
                         scratch.data(), exact.data());
  for (KvType type : {KvType::kF16, KvType::kQ8_0, KvType::kQ4_0}) {
    CAPTURE(Name(type));
    const StoredCache k = Store(type, keys, n_pos, head_dim);
    const StoredCache v = Store(type, values, n_pos, head_dim);
    AttentionHead(q.data(), k.Rows(), v.Rows(), n_pos, head_dim, scale, scratch.data(),
                  out.data());
    double max_err = 0.0, max_abs = 0.0;
    for (size_t j = 0; j < head_dim; ++j) {
      max_err = std::max(max_err, std::fabs(double{out[j]} - exact[j]));
      max_abs = std::max(max_abs, std::fabs(double{exact[j]}));
    }
    CHECK(max_err <= (type == KvType::kF16 ? 2e-3 : type == KvType::kQ8_0 ? 3e-2 : 2e-1) * max_abs);
    CHECK(max_err > 0.0);  // the storage did round something
  }
}

}  // namespace
}  // namespace sparrow::simd
