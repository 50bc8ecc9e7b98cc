// A loaded model and the sessions that run it. The model is immutable and
// may serve any number of sessions; everything a forward pass writes (KV
// caches, activations, the FFN's state) belongs to a session. model.cc holds the whole
// forward pass of the supported architectures (llama, qwen2).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/aligned_buffer.h"
#include "src/model/config.h"
#include "src/model/feed_forward.h"
#include "src/model/kv_cache.h"
#include "src/model/weights.h"
#include "src/model/workspace.h"
#include "src/tokenizer/tokenizer.h"

namespace sparrow {

class Model {
 public:
  // Opens a GGUF file and binds all weights (mapped, not copied).
  // InputError for anything wrong with the file.
  static std::unique_ptr<Model> Open(const std::string& path);
  // The same for a file already open (e.g. with LoRA-fused tensors);
  // `keep_alive` holds whatever else its tensors point into.
  static std::unique_ptr<Model> Open(std::shared_ptr<const gguf::GgufFile> file,
                                     std::shared_ptr<const void> keep_alive);

  // Assembles a model from parts; `storage` keeps the weights' memory alive.
  Model(ModelConfig config, std::unique_ptr<Tokenizer> tokenizer,
        ModelWeights weights, std::shared_ptr<const void> storage);

  const ModelConfig& config() const { return config_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const ModelWeights& weights() const { return weights_; }
  // From now on, token embeddings come from `row` (ModelWeights::
  // embedding_row) instead of the table in memory. Before any session.
  void ReadEmbeddingsWith(std::function<void(uint32_t token, float* out)> row) {
    weights_.embedding_row = std::move(row);
  }
  // Whether the feed-forward weights are bound (a GGUF); a bundle's model
  // has none, and its sessions run the engine's streamed FFN.
  bool has_ffn_weights() const;

  // Parameters and bytes of all weight matrices and vectors.
  uint64_t parameter_count() const { return parameter_count_; }
  uint64_t weight_bytes() const { return weight_bytes_; }
  // The type of most weight bytes, e.g. "q4_0", for display.
  std::string dominant_type() const { return dominant_type_; }

 private:
  void Tally();

  ModelConfig config_;
  std::unique_ptr<Tokenizer> tokenizer_;
  ModelWeights weights_;
  std::shared_ptr<const void> storage_;
  uint64_t parameter_count_ = 0;
  uint64_t weight_bytes_ = 0;
  std::string dominant_type_;
};

// A token of a batch that may mix sequences: its id, the sequence it
// continues, and whether its logits are wanted.
struct BatchToken {
  int32_t token = 0;
  uint32_t seq = 0;
  bool logits = false;
};

// What a session holds: positions per sequence, tokens per forward pass
// (longer inputs are split), how keys and values are stored, sequences,
// logits rows a call keeps (perplexity: the context), attention threads
// (0: ThreadCount()).
struct SessionShape {
  size_t n_ctx = 0;
  size_t max_batch = 512;
  KvCacheTypes kv_types;
  size_t n_seqs = 1;
  size_t logits_rows = 1;
  size_t threads = 0;
};

// Rows of logits a session of this shape holds (and the budget charges):
// the rows asked for, at most one pass's tokens (a caller that wants more,
// as perplexity does for a whole chunk, takes them pass by pass), and at
// least one token of each sequence (sparrow batch's blocks). EvalBatch
// grows the buffer for a call that asks for more, outside the budget.
size_t HeldLogitsRows(const SessionShape& shape);

// A forward context: the sequences being evaluated (each its own KV cache
// and position), the workspace of its passes, and the feed-forward state
// they use. A pass may mix tokens of several sequences (block decoding:
// each weight read once serves every sequence); tokens of one sequence take
// the positions that follow on from its previous ones, in batch order. The
// single-sequence calls (Eval, n_past, Reset, Rewind) are about sequence 0.
class Session {
 public:
  // With ffn == nullptr the session runs a dense FFN of its own over the
  // model's weights (which must have them); otherwise `ffn` (the engine's
  // streamed FFN), which must outlive the session and serve one session's
  // pass at a time.
  Session(const Model& model, const SessionShape& shape, FeedForward* ffn = nullptr);
  // The same with a dense FFN of its own.
  Session(const Model& model, size_t n_ctx, size_t max_batch = 512,
          KvCacheTypes kv_types = {}, size_t n_seqs = 1);

  // Bytes a session of this shape allocates (KV caches and the workspace:
  // activations, attention scratch, logits, the dense FFN's scratch when
  // dense_ffn), for the DRAM budget: the plan its constructor allocates.
  static uint64_t MemoryBytes(const ModelConfig& config, const SessionShape& shape,
                              bool dense_ffn);

  // Runs `tokens` of sequence 0 at positions n_past() .. and returns their
  // logits: all of them (n x n_vocab, row-major) if all_logits, else the
  // last token's. InputError if a token id is out of range or the context
  // would overflow.
  const float* Eval(const int32_t* tokens, size_t n, bool all_logits);

  // Runs a batch that may mix sequences and returns the logits of the
  // tokens that asked for them, one row each, in batch order. InputError
  // (before anything runs) for a bad token id or sequence, or a sequence
  // whose context would overflow.
  const float* EvalBatch(const std::vector<BatchToken>& batch);

  size_t n_seqs() const { return kv_.size(); }
  // Tokens per forward pass: Eval cuts longer calls into passes of this many.
  size_t max_batch() const { return max_batch_; }
  // Rows of logits the session holds now (what the budget was charged
  // for): a call asking for more grows the buffer, outside the budget.
  size_t held_logits_rows() const { return ws_.logits.size() / std::max<size_t>(c_.n_vocab, 1); }
  size_t n_past(size_t seq = 0) const { return n_past_[seq]; }
  size_t n_ctx() const { return kv_[0].n_ctx(); }
  // Forgets sequence `seq` (its slot then starts a new one at position 0).
  void Reset(size_t seq = 0) { n_past_[seq] = 0; }
  // Forgets every position from n on (a chat keeps the prefix that a new
  // prompt shares with what the cache holds, and evaluates only the rest).
  void Rewind(size_t n) { n_past_[0] = n < n_past_[0] ? n : n_past_[0]; }

 private:
  // One pass over batch_[0..n): every token's sequence and position are in
  // seq_ and pos_; the logits of the rows listed in logit_rows_ go to
  // `logits`, one row each.
  void Forward(size_t n, float* logits);
  void Attention(uint32_t layer, size_t n);
  void RopeTables(size_t n);

  const Model& model_;
  const ModelConfig& c_;
  size_t max_batch_;
  std::vector<size_t> n_past_;  // per sequence
  std::vector<KvCache> kv_;     // per sequence
  Workspace ws_;
  std::unique_ptr<FeedForward> own_ffn_;  // the dense FFN, when the session runs its own
  FeedForward& ffn_;
  // The pass being run: token ids, sequences, positions, rows whose logits
  // are wanted.
  std::vector<int32_t> tokens_;
  std::vector<uint32_t> seq_;
  std::vector<size_t> pos_;
  std::vector<size_t> logit_rows_;
  std::vector<BatchToken> single_;  // Eval's batch (kept: one allocation)
  std::vector<size_t> added_;       // EvalBatch's tokens per sequence
};

}  // namespace sparrow
