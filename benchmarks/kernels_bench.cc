// Micro-benchmark of the small kernels (simd/: norm, rope, softmax,
// activation, attention, topk, vector_ops) against their scalar references,
// at the sizes decoding meets: model widths, FFN widths, a 150k vocabulary,
// a 2k context. Times are this thread's CPU time (not wall time), best of
// several repetitions: on a shared machine that is the least disturbed
// figure, and for these single-threaded kernels it equals wall time on an
// idle one.
//
//   kernels_bench [--filter SUBSTRING] [--reps N]
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <ctime>
#include <vector>

#include "simd/activation.h"
#include "simd/attention.h"
#include "simd/norm.h"
#include "simd/rope.h"
#include "simd/softmax.h"
#include "simd/targets.h"
#include "simd/topk.h"
#include "simd/vector_ops.h"

namespace sparrow::simd {
namespace {

std::vector<float> Normal(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

double ThreadSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Best time per call in microseconds: `body` runs `inner` times per
// repetition so that each repetition lasts long enough to time.
double BestMicros(int reps, const std::function<void()>& body) {
  double once = ThreadSeconds();
  body();
  once = ThreadSeconds() - once;
  const int inner = std::max(1, static_cast<int>(2e-3 / std::max(once, 1e-7)));
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double t0 = ThreadSeconds();
    for (int i = 0; i < inner; ++i) body();
    best = std::min(best, (ThreadSeconds() - t0) / inner);
  }
  return best * 1e6;
}

struct Bench {
  std::string name;
  std::function<void()> simd, reference;
};

}  // namespace
}  // namespace sparrow::simd

int main(int argc, char** argv) {
  using namespace sparrow::simd;
  std::string filter;
  int reps = 15;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--filter") && i + 1 < argc) filter = argv[++i];
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [--filter SUBSTRING] [--reps N]\n", argv[0]);
      return 2;
    }
  }

  const size_t kVocab = 151936, kDim = 4096, kFfn = 11008;
  const size_t kHeadDim = 128, kCtx = 2048, kHeads = 32;
  const std::vector<float> logits = Normal(kVocab, 1, 3.0f);
  const std::vector<float> x = Normal(kDim, 2), w = Normal(kDim, 3);
  const std::vector<float> gate = Normal(kFfn, 4), up = Normal(kFfn, 5);
  const std::vector<float> kv = Normal(kCtx * kHeadDim * 8, 6);
  const std::vector<float> q = Normal(kHeadDim, 7), q4 = Normal(4 * kHeadDim, 9);
  std::vector<float> buf(kVocab), out(kFfn), scratch(kCtx), scratch4(4 * kCtx);
  std::vector<float> heads = Normal(kHeads * kHeadDim, 8);
  std::vector<float> cs(kHeadDim / 2), sn(kHeadDim / 2);
  RopeAngles(1000.0f, kHeadDim, 10000.0f, cs.data(), sn.data());
  std::vector<uint32_t> idx(kVocab);
  volatile size_t sink = 0;

  std::vector<Bench> benches;
  auto add = [&](std::string name, std::function<void()> simd,
                 std::function<void()> reference) {
    benches.push_back({std::move(name), std::move(simd), std::move(reference)});
  };
  add("RmsNorm n=4096", [&] { RmsNorm(x.data(), w.data(), kDim, 1e-5f, out.data()); },
      [&] { RmsNormReference(x.data(), w.data(), kDim, 1e-5f, out.data()); });
  add("ApplyRope 32 heads x 128 adjacent",
      [&] { ApplyRope(heads.data(), kHeads, kHeadDim, kHeadDim, cs.data(), sn.data(), RopeStyle::kAdjacentPairs); },
      [&] { ApplyRopeReference(heads.data(), kHeads, kHeadDim, kHeadDim, cs.data(), sn.data(), RopeStyle::kAdjacentPairs); });
  add("ApplyRope 32 heads x 128 halves",
      [&] { ApplyRope(heads.data(), kHeads, kHeadDim, kHeadDim, cs.data(), sn.data(), RopeStyle::kHalves); },
      [&] { ApplyRopeReference(heads.data(), kHeads, kHeadDim, kHeadDim, cs.data(), sn.data(), RopeStyle::kHalves); });
  add("Softmax n=151936",
      [&] { std::copy(logits.begin(), logits.end(), buf.begin()); Softmax(buf.data(), kVocab); },
      [&] { std::copy(logits.begin(), logits.end(), buf.begin()); SoftmaxReference(buf.data(), kVocab); });
  add("SiluMul n=11008", [&] { SiluMul(gate.data(), up.data(), kFfn, out.data()); },
      [&] { SiluMulReference(gate.data(), up.data(), kFfn, out.data()); });
  // Eight heads laid out as the engine's KV cache does ([head][position]:
  // one head's rows contiguous), keys from head 0 and values from head 1, in
  // each KV cache type (bytes read per call: 2 x 2048 rows).
  struct StoredKv {
    const char* name;
    KvType type;
    std::vector<uint8_t> bytes;
  };
  std::vector<StoredKv> caches = {{"f32", KvType::kF32, {}}, {"f16", KvType::kF16, {}},
                                  {"q8_0", KvType::kQ8_0, {}}, {"q4_0", KvType::kQ4_0, {}}};
  for (StoredKv& c : caches) {
    const size_t head = KvHeadBytes(c.type, kHeadDim);
    c.bytes.resize(kCtx * 8 * head);
    for (size_t h = 0; h < 8; ++h) {
      for (size_t t = 0; t < kCtx; ++t) {
        StoreKvHeads(c.type, kv.data() + (t * 8 + h) * kHeadDim, 1, kHeadDim,
                     c.bytes.data() + (h * kCtx + t) * head);
      }
    }
  }
  for (const StoredKv& c : caches) {
    const size_t head = KvHeadBytes(c.type, kHeadDim);
    const KvRows keys{c.type, c.bytes.data(), head};
    const KvRows values{c.type, c.bytes.data() + kCtx * head, head};
    add(std::string("AttentionHead ") + c.name + " hd=128 n_pos=2048",
        [&, keys, values] { AttentionHead(q.data(), keys, values, kCtx, kHeadDim, 0.088f, scratch.data(), out.data()); },
        [&, keys, values] { AttentionHeadReference(q.data(), keys, values, kCtx, kHeadDim, 0.088f, scratch.data(), out.data()); });
    // Four query heads of one KV head (grouped-query attention): one pass
    // over the rows against four AttentionHead calls (the "reference"
    // column here).
    AttentionQueries group;
    group.q = q4.data();
    group.q_stride = kHeadDim;
    group.n_queries = 4;
    group.k = keys;
    group.v = values;
    group.n_pos = kCtx;
    group.head_dim = kHeadDim;
    group.scale = 0.088f;
    group.scratch = scratch4.data();
    group.out = out.data();
    group.out_stride = kHeadDim;
    add(std::string("AttentionGroup 4 queries vs 4 heads ") + c.name + " hd=128 n_pos=2048",
        [group] { AttentionGroup(group); },
        [&, keys, values] {
          for (size_t g = 0; g < 4; ++g) {
            AttentionHead(q4.data() + g * kHeadDim, keys, values, kCtx, kHeadDim, 0.088f,
                          scratch.data(), out.data() + g * kHeadDim);
          }
        });
  }
  add("Dot n=4096", [&] { sink = sink + static_cast<size_t>(Dot(x.data(), w.data(), kDim)); },
      [&] { sink = sink + static_cast<size_t>(DotReference(x.data(), w.data(), kDim)); });
  add("ArgMax n=151936", [&] { sink = sink + ArgMax(logits.data(), kVocab); },
      [&] { sink = sink + ArgMaxReference(logits.data(), kVocab); });
  for (size_t k : {size_t{1}, size_t{40}, size_t{1000}, kVocab / 10, kVocab / 2, kVocab}) {
    for (TopKOrder order : {TopKOrder::kLargest, TopKOrder::kLargestAbs}) {
      const char* o = order == TopKOrder::kLargest ? "largest" : "abs";
      add("TopK n=151936 k=" + std::to_string(k) + " " + o,
          [&, k, order] { TopK(logits.data(), kVocab, k, order, idx.data()); },
          [&, k, order] { TopKReference(logits.data(), kVocab, k, order, idx.data()); });
    }
  }

  std::printf("target %s; best of %d, microseconds per call\n",
              CurrentTargetName().c_str(), reps);
  std::printf("%-46s %12s %12s %8s\n", "kernel", "simd", "reference", "speedup");
  for (const Bench& b : benches) {
    if (!filter.empty() && b.name.find(filter) == std::string::npos) continue;
    const double s = BestMicros(reps, b.simd);
    const double r = BestMicros(std::max(3, reps / 5), b.reference);
    std::printf("%-46s %12.2f %12.2f %7.1fx\n", b.name.c_str(), s, r, r / s);
  }
  return 0;
}
