#include "src/model/workspace.h"

#include <algorithm>

#include "simd/attention.h"
#include "src/ops/ops.h"

namespace sparrow {

size_t AttentionQueriesPerItem(const ModelConfig& c) {
  return std::min<size_t>(c.n_heads / c.n_kv_heads, simd::kMaxAttentionQueries);
}

WorkspacePlan WorkspacePlan::For(const ModelConfig& c, size_t n_ctx, size_t batch,
                                 size_t logits_rows, size_t threads, bool dense_ffn) {
  WorkspacePlan p;
  p.batch = std::max<size_t>(batch, 1);
  p.n_ctx = n_ctx;
  p.threads = std::max<size_t>(threads, 1);
  p.attention_queries = AttentionQueriesPerItem(c);
  p.logits_rows = std::max<size_t>(logits_rows, 1);
  p.d_model = c.d_model;
  p.q_dim = c.q_dim();
  p.kv_dim = c.kv_dim();
  p.rope_pairs = c.rope_dims / 2;
  p.d_ff = c.d_ff;
  p.n_vocab = c.n_vocab;
  p.dense_ffn = dense_ffn;
  return p;
}

uint64_t WorkspacePlan::Bytes() const {
  const uint64_t floats = 3ull * hidden() + 2ull * queries() + 2ull * keys() + 2ull * rope() +
                          scores() + logits() + 2ull * ffn();
  // Batched products multiply matrices of at most `widest` columns; the
  // tallest is the output matrix (n_vocab rows) where logits are batched.
  const size_t widest = std::max({d_model, q_dim, d_ff});
  const size_t tallest = std::max({widest, n_vocab});
  return floats * sizeof(float) + ops::MatMulScratchBytes(widest, tallest, batch);
}

Workspace::Workspace(const WorkspacePlan& p) : plan(p) {
  x.Reset(plan.hidden());
  h.Reset(plan.hidden());
  o.Reset(plan.hidden());
  q.Reset(plan.queries());
  att.Reset(plan.queries());
  k.Reset(plan.keys());
  v.Reset(plan.keys());
  rope_cos.Reset(plan.rope());
  rope_sin.Reset(plan.rope());
  scores.Reset(plan.scores());
  logits.Reset(plan.logits());
  if (plan.ffn() > 0) {
    ffn_gate.Reset(plan.ffn());
    ffn_up.Reset(plan.ffn());
  }
}

}  // namespace sparrow
