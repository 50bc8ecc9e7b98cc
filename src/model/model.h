// A loaded model and the sessions that run it. model.cc holds the whole
// forward pass of the supported architectures (llama, qwen2).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/aligned_buffer.h"
#include "src/model/config.h"
#include "src/model/feed_forward.h"
#include "src/model/kv_cache.h"
#include "src/model/weights.h"
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
  FeedForward& feed_forward() const { return *ffn_; }
  // Replaces the dense feed-forward (streamed runtimes).
  void set_feed_forward(std::unique_ptr<FeedForward> ffn) { ffn_ = std::move(ffn); }

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
  std::unique_ptr<FeedForward> ffn_;
  uint64_t parameter_count_ = 0;
  uint64_t weight_bytes_ = 0;
  std::string dominant_type_;
};

// One sequence being evaluated: its KV cache and scratch. Tokens are
// appended with Eval; positions follow on from the previous call.
class Session {
 public:
  // n_ctx: positions the KV cache holds. max_batch: tokens per forward pass;
  // longer inputs are split. kv_types: how keys and values are stored.
  Session(const Model& model, size_t n_ctx, size_t max_batch = 512,
          KvCacheTypes kv_types = {});

  // Bytes a session allocates (KV cache, activations, attention scratch,
  // logits for `logits_rows` tokens), for the DRAM budget.
  static uint64_t MemoryBytes(const ModelConfig& config, size_t n_ctx, size_t max_batch,
                              size_t logits_rows, int threads, KvCacheTypes kv_types);

  // Runs `tokens` at positions n_past() .. and returns their logits: all of
  // them (n x n_vocab, row-major) if all_logits, else the last token's.
  // InputError if a token id is out of range or the context would overflow.
  const float* Eval(const int32_t* tokens, size_t n, bool all_logits);

  size_t n_past() const { return n_past_; }
  size_t n_ctx() const { return kv_.n_ctx(); }
  void Reset() { n_past_ = 0; }
  // Forgets every position from n on (a chat keeps the prefix that a new
  // prompt shares with what the cache holds, and evaluates only the rest).
  void Rewind(size_t n) { n_past_ = n < n_past_ ? n : n_past_; }

 private:
  void Forward(const int32_t* tokens, size_t n, bool all_logits, float* logits);
  void Attention(uint32_t layer, size_t n);
  void RopeTables(size_t n);

  const Model& model_;
  const ModelConfig& c_;
  size_t max_batch_;
  size_t n_past_ = 0;
  KvCache kv_;
  // Per-batch activations, each max_batch rows.
  AlignedBuffer<float> x_, h_, q_, k_, v_, att_, o_;
  AlignedBuffer<float> rope_cos_, rope_sin_;  // max_batch x rope_dims/2
  AlignedBuffer<float> scores_;              // per thread: n_ctx
  std::vector<float> logits_;
};

}  // namespace sparrow
