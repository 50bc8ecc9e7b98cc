// The buffers a session's forward passes work in, sized by one plan: the
// same numbers charge the DRAM budget (WorkspacePlan::Bytes) and allocate
// (Workspace), so no estimate lives apart from its allocation.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/aligned_buffer.h"
#include "src/model/config.h"

namespace sparrow {

// Query heads that share one KV head and are attended together (one pass
// over its keys and values): the group, at most simd::kMaxAttentionQueries.
size_t AttentionQueriesPerItem(const ModelConfig& c);

struct WorkspacePlan {
  size_t batch = 0;        // tokens per forward pass
  size_t n_ctx = 0;        // positions per sequence (attention scores)
  size_t threads = 0;      // attention threads, each with its own score rows
  size_t attention_queries = 1;  // query heads attended together: score rows per thread
  size_t logits_rows = 0;  // tokens whose logits a call keeps
  size_t d_model = 0, q_dim = 0, kv_dim = 0, rope_pairs = 0, d_ff = 0, n_vocab = 0;
  bool dense_ffn = false;  // the session runs its own dense FFN (its scratch is here)

  static WorkspacePlan For(const ModelConfig& c, size_t n_ctx, size_t batch, size_t logits_rows,
                           size_t threads, bool dense_ffn);
  // Elements of each buffer.
  size_t hidden() const { return batch * d_model; }  // x, h, o
  size_t queries() const { return batch * q_dim; }   // q, att
  size_t keys() const { return batch * kv_dim; }     // k, v
  size_t rope() const { return batch * (rope_pairs + 1); }  // cos, sin
  size_t scores() const { return threads * attention_queries * n_ctx; }
  size_t logits() const { return logits_rows * n_vocab; }
  size_t ffn() const { return dense_ffn ? batch * d_ff : 0; }  // gate, up
  // Everything above, and the dequantized panel the batched products keep
  // per thread (ops::MatMulScratchBytes for the widest matrix).
  uint64_t Bytes() const;
};

// The buffers of a plan, allocated at construction. Logits for more rows
// than planned grow on demand (a caller that asks for them should plan them).
struct Workspace {
  explicit Workspace(const WorkspacePlan& plan);

  WorkspacePlan plan;
  AlignedBuffer<float> x, h, o;    // hidden states: residual, normalised, layer output
  AlignedBuffer<float> q, att;     // queries, attention output
  AlignedBuffer<float> k, v;       // this pass's keys and values
  AlignedBuffer<float> rope_cos, rope_sin;
  AlignedBuffer<float> scores;     // per thread: attention_queries * n_ctx
  AlignedBuffer<float> logits;
  AlignedBuffer<float> ffn_gate, ffn_up;  // the dense FFN's
};

}  // namespace sparrow
