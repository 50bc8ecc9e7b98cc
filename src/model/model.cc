// The forward pass of the llama family (Llama 2/3, Mistral, TinyLlama,
// SmolLM) and qwen2, for a batch of tokens, each at the position that
// follows on in its own sequence (a prompt: one sequence at consecutive
// positions; block decoding: one token of each of several sequences):
//
//   x = embedding[token]
//   per layer:  h = rmsnorm(x);  q,k,v = Wq h (+bq), Wk h (+bk), Wv h (+bv)
//               rope(q, k);  cache k, v;  a = softmax(q K^T / sqrt(d)) V
//               x += Wo a
//               x += FFN(rmsnorm(x))          <- dense or streamed
//   logits = Wout rmsnorm(x)
#include "src/model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <stdexcept>

#include "base/error.h"
#include "formats/gguf.h"
#include "formats/tokenizer_data.h"
#include "src/model/dense_ffn.h"
#include "src/ops/ops.h"
#include "base/threads.h"

namespace sparrow {

std::unique_ptr<Model> Model::Open(const std::string& path) {
  return Open(std::make_shared<gguf::GgufFile>(gguf::GgufFile::Open(path)), nullptr);
}

std::unique_ptr<Model> Model::Open(std::shared_ptr<const gguf::GgufFile> file,
                                   std::shared_ptr<const void> keep_alive) {
  ModelConfig config = ModelConfig::FromGguf(*file);
  TokenizerData tokenizer_data = TokenizerData::FromGguf(*file);
  config.n_vocab = static_cast<uint32_t>(tokenizer_data.tokens.size());
  std::unique_ptr<Tokenizer> tokenizer = Tokenizer::Create(tokenizer_data);
  ModelWeights weights =
      BindWeights(config, file->tensors(), file->name(), /*with_ffn=*/true);
  auto storage = std::make_shared<std::pair<std::shared_ptr<const gguf::GgufFile>,
                                            std::shared_ptr<const void>>>(file, keep_alive);
  return std::make_unique<Model>(std::move(config), std::move(tokenizer), std::move(weights),
                                 storage);
}

Model::Model(ModelConfig config, std::unique_ptr<Tokenizer> tokenizer,
             ModelWeights weights, std::shared_ptr<const void> storage)
    : config_(std::move(config)),
      tokenizer_(std::move(tokenizer)),
      weights_(std::move(weights)),
      storage_(std::move(storage)) {
  PrepareWeightsForDecode(weights_);
  Tally();
}

void Model::Tally() {
  std::map<std::string, uint64_t> bytes_by_type;
  auto matrix = [&](const ops::MatrixView& m) {
    if (m.data == nullptr) return;
    parameter_count_ += m.rows * m.cols;
    weight_bytes_ += m.rows * m.row_bytes;
    bytes_by_type[std::string(TensorTypeName(m.type))] += m.rows * m.row_bytes;
  };
  auto vec = [&](const std::vector<float>& v) {
    parameter_count_ += v.size();
    weight_bytes_ += v.size() * sizeof(float);
  };
  matrix(weights_.token_embd);
  if (weights_.output.data != weights_.token_embd.data) matrix(weights_.output);
  vec(weights_.output_norm);
  for (const LayerWeights& l : weights_.layers) {
    for (const ops::MatrixView* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down}) {
      matrix(*m);
    }
    for (const std::vector<float>* v : {&l.attn_norm, &l.ffn_norm, &l.bq, &l.bk, &l.bv}) {
      vec(*v);
    }
  }
  uint64_t best = 0;
  for (const auto& [type, bytes] : bytes_by_type) {
    if (bytes > best) {
      best = bytes;
      dominant_type_ = type;
    }
  }
}

namespace {

KvShape ShapeOf(const ModelConfig& c, size_t n_ctx) {
  return KvShape{c.n_layers, n_ctx, c.n_kv_heads, c.head_dim};
}

}  // namespace

bool Model::has_ffn_weights() const {
  return weights_.layers.empty() || weights_.layers[0].up.data != nullptr;
}

namespace {

// Tokens per pass: at most what the sequences' contexts can take at once.
size_t PassTokens(const SessionShape& shape) {
  const size_t seqs = std::max<size_t>(shape.n_seqs, 1);
  return std::max<size_t>(1, std::min(shape.max_batch, shape.n_ctx * seqs));
}

const SessionShape& Checked(const SessionShape& shape) {
  if (shape.n_ctx == 0) ThrowInputError("context size must be at least 1");
  return shape;
}

WorkspacePlan PlanOf(const ModelConfig& c, const SessionShape& shape, bool dense_ffn) {
  const size_t threads =
      shape.threads > 0 ? shape.threads : static_cast<size_t>(std::max(ThreadCount(), 1));
  return WorkspacePlan::For(c, shape.n_ctx, PassTokens(shape), HeldLogitsRows(shape), threads,
                            dense_ffn);
}

}  // namespace

size_t HeldLogitsRows(const SessionShape& shape) {
  const size_t pass = std::min(shape.logits_rows, std::max<size_t>(shape.max_batch, 1));
  return std::max(pass, std::max<size_t>(shape.n_seqs, 1));
}

Session::Session(const Model& model, size_t n_ctx, size_t max_batch, KvCacheTypes kv_types,
                 size_t n_seqs)
    : Session(model, SessionShape{n_ctx, max_batch, kv_types, n_seqs, 1, 0}) {}

Session::Session(const Model& model, const SessionShape& shape, FeedForward* ffn)
    : model_(model),
      c_(model.config()),
      max_batch_(PassTokens(Checked(shape))),
      n_past_(std::max<size_t>(shape.n_seqs, 1), 0),
      ws_(PlanOf(model.config(), shape, ffn == nullptr)),
      own_ffn_(ffn != nullptr ? nullptr
                              : std::make_unique<DenseFeedForward>(
                                    model.weights(), ws_.ffn_gate.data(), ws_.ffn_up.data(),
                                    max_batch_)),
      ffn_(ffn != nullptr ? *ffn : *own_ffn_) {
  if (ffn == nullptr && !model.has_ffn_weights()) {
    throw std::logic_error("Session: a model without FFN weights needs the engine's streamed FFN");
  }
  kv_.reserve(n_past_.size());
  for (size_t i = 0; i < n_past_.size(); ++i) kv_.emplace_back(ShapeOf(c_, shape.n_ctx), shape.kv_types);
}

uint64_t Session::MemoryBytes(const ModelConfig& c, const SessionShape& shape, bool dense_ffn) {
  return std::max<size_t>(shape.n_seqs, 1) * KvCache::Bytes(ShapeOf(c, shape.n_ctx), shape.kv_types) +
         PlanOf(c, shape, dense_ffn).Bytes();
}

const float* Session::Eval(const int32_t* tokens, size_t n, bool all_logits) {
  single_.resize(n);
  for (size_t i = 0; i < n; ++i) single_[i] = {tokens[i], 0, all_logits || i + 1 == n};
  return EvalBatch(single_);
}

const float* Session::EvalBatch(const std::vector<BatchToken>& batch) {
  std::vector<size_t>& added = added_;
  added.assign(n_past_.size(), 0);
  size_t wanted = 0;
  for (const BatchToken& b : batch) {
    if (b.token < 0 || static_cast<uint32_t>(b.token) >= c_.n_vocab) {
      ThrowInputError("token id ", b.token, " is outside the vocabulary (", c_.n_vocab,
                      " tokens)");
    }
    if (b.seq >= n_past_.size()) {
      ThrowInputError("internal: sequence ", b.seq, " of a session holding ", n_past_.size());
    }
    ++added[b.seq];
    wanted += b.logits;
  }
  for (size_t s = 0; s < added.size(); ++s) {
    if (added[s] > n_ctx() - n_past_[s]) {
      ThrowInputError("context overflow: ", n_past_[s], " + ", added[s],
                      " tokens exceed the context size ", n_ctx());
    }
  }
  // More rows than planned (WorkspacePlan::logits_rows) grow the buffer.
  if (ws_.logits.size() < std::max<size_t>(wanted, 1) * c_.n_vocab) {
    ws_.logits.Reset(std::max<size_t>(wanted, 1) * c_.n_vocab);
  }
  float* out = ws_.logits.data();
  for (size_t done = 0; done < batch.size();) {
    const size_t n = std::min(max_batch_, batch.size() - done);
    tokens_.resize(n);
    seq_.resize(n);
    pos_.resize(n);
    logit_rows_.clear();
    for (size_t t = 0; t < n; ++t) {
      const BatchToken& b = batch[done + t];
      tokens_[t] = b.token;
      seq_[t] = b.seq;
      pos_[t] = n_past_[b.seq]++;
      if (b.logits) logit_rows_.push_back(t);
    }
    try {
      Forward(n, out);
    } catch (...) {
      // The pass did not complete: its tokens are not part of their
      // sequences (their KV rows may be half written).
      for (size_t t = 0; t < n; ++t) --n_past_[seq_[t]];
      throw;
    }
    out += logit_rows_.size() * c_.n_vocab;
    done += n;
  }
  return ws_.logits.data();
}

void Session::RopeTables(size_t n) {
  const size_t pairs = c_.rope_dims / 2;
  const std::vector<float>& factors = model_.weights().rope_freq_factors;
  for (size_t t = 0; t < n; ++t) {
    const float pos = static_cast<float>(pos_[t]) * c_.rope_position_scale;
    float* cos = ws_.rope_cos.data() + t * pairs;
    float* sin = ws_.rope_sin.data() + t * pairs;
    if (factors.empty()) {
      simd::RopeAngles(pos, c_.rope_dims, c_.rope_base, cos, sin);
      continue;
    }
    // Llama 3.1 style: each pair's frequency divided by its factor.
    const float ratio = std::pow(c_.rope_base, -2.0f / c_.rope_dims);
    float theta = pos;
    for (size_t i = 0; i < pairs; ++i) {
      cos[i] = std::cos(theta / factors[i]);
      sin[i] = std::sin(theta / factors[i]);
      theta *= ratio;
    }
  }
}

void Session::Attention(uint32_t layer, size_t n) {
  const size_t hd = c_.head_dim;
  const size_t group = c_.n_heads / c_.n_kv_heads;
  // Each work item is up to `per_item` heads of one KV head at one token:
  // they read its keys and values once between them.
  const size_t per_item = AttentionQueriesPerItem(c_);
  const size_t items_per_kv_head = (group + per_item - 1) / per_item;
  const size_t items_per_token = c_.n_kv_heads * items_per_kv_head;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const size_t threads = static_cast<size_t>(ThreadCount());
  const size_t rows = per_item * n_ctx();  // one thread's scores
  if (ws_.scores.size() < threads * rows) ws_.scores.Reset(threads * rows);  // more threads than planned
  // Enough items per chunk that a thread's share outweighs the cost of
  // waking it (~32K multiply-adds).
  const size_t longest = *std::max_element(pos_.begin(), pos_.begin() + n) + 1;
  const size_t work_per_item = longest * hd * 2 * per_item;
  const size_t grain = std::max<size_t>(1, 32768 / std::max<size_t>(work_per_item, 1));
  ParallelFor(n * items_per_token, grain, [&](size_t begin, size_t end, int thread) {
    simd::AttentionQueries a;
    a.q_stride = hd;
    a.out_stride = hd;
    a.head_dim = hd;
    a.scale = scale;
    a.scratch = ws_.scores.data() + thread * rows;
    for (size_t item = begin; item < end; ++item) {
      const size_t t = item / items_per_token;
      const size_t kv_head = item % items_per_token / items_per_kv_head;
      const size_t first = item % items_per_kv_head * per_item;  // within the group
      const size_t head = kv_head * group + first;
      const KvCache& kv = kv_[seq_[t]];
      a.q = ws_.q.data() + t * c_.q_dim() + head * hd;
      a.out = ws_.att.data() + t * c_.q_dim() + head * hd;
      a.n_queries = std::min(per_item, group - first);
      a.k = kv.Keys(layer, kv_head);
      a.v = kv.Values(layer, kv_head);
      a.n_pos = pos_[t] + 1;
      ops::AttentionGroup(a);
    }
  });
}

void Session::Forward(size_t n, float* logits) {
  const ModelWeights& w = model_.weights();
  const size_t d = c_.d_model;
  const size_t pairs = c_.rope_dims / 2;
  float* x = ws_.x.data();
  float* h = ws_.h.data();

  for (size_t t = 0; t < n; ++t) {
    const auto token = static_cast<uint32_t>(tokens_[t]);
    if (w.embedding_row) {
      w.embedding_row(token, x + t * d);
    } else {
      ops::GetRow(w.token_embd, token, x + t * d);
    }
  }
  RopeTables(n);

  // The feed-forward hears where each pass begins and ends, also when an
  // exception ends it early (EndPass(false) must not throw).
  FeedForward& ffn = ffn_;
  ffn.BeginPass(n);
  struct AbandonGuard {
    FeedForward& ffn;
    bool open = true;
    ~AbandonGuard() {
      if (open) ffn.EndPass(false);
    }
  } pass{ffn};

  for (uint32_t layer = 0; layer < c_.n_layers; ++layer) {
    const LayerWeights& l = w.layers[layer];
    for (size_t t = 0; t < n; ++t) {
      ops::RmsNorm(x + t * d, l.attn_norm.data(), d, c_.rms_eps, h + t * d);
    }
    ops::MatMul(l.wq, h, n, ws_.q.data());
    ops::MatMul(l.wk, h, n, ws_.k.data());
    ops::MatMul(l.wv, h, n, ws_.v.data());
    for (size_t t = 0; t < n; ++t) {
      float* q = ws_.q.data() + t * c_.q_dim();
      float* k = ws_.k.data() + t * c_.kv_dim();
      float* v = ws_.v.data() + t * c_.kv_dim();
      if (c_.qkv_bias) {
        ops::AddInPlace(l.bq.data(), q, c_.q_dim());
        ops::AddInPlace(l.bk.data(), k, c_.kv_dim());
        ops::AddInPlace(l.bv.data(), v, c_.kv_dim());
      }
      const float* cos = ws_.rope_cos.data() + t * pairs;
      const float* sin = ws_.rope_sin.data() + t * pairs;
      ops::ApplyRope(q, c_.n_heads, c_.head_dim, c_.rope_dims, cos, sin, c_.rope_style);
      ops::ApplyRope(k, c_.n_kv_heads, c_.head_dim, c_.rope_dims, cos, sin, c_.rope_style);
      kv_[seq_[t]].StoreKeys(layer, pos_[t], k);
      kv_[seq_[t]].StoreValues(layer, pos_[t], v);
    }
    Attention(layer, n);
    ops::MatMul(l.wo, ws_.att.data(), n, ws_.o.data());
    ops::AddInPlace(ws_.o.data(), x, n * d);

    for (size_t t = 0; t < n; ++t) {
      ops::RmsNorm(x + t * d, l.ffn_norm.data(), d, c_.rms_eps, h + t * d);
    }
    ffn.Forward(layer, h, n, ws_.o.data());
    ops::AddInPlace(ws_.o.data(), x, n * d);
  }
  pass.open = false;
  ffn.EndPass(true);

  if (!logit_rows_.empty()) {
    // Only the rows whose logits are wanted go through the output head,
    // gathered to the front of h.
    for (size_t i = 0; i < logit_rows_.size(); ++i) {
      ops::RmsNorm(x + logit_rows_[i] * d, w.output_norm.data(), d, c_.rms_eps, h + i * d);
    }
    ops::MatMul(w.output, h, logit_rows_.size(), logits);
  }
}

}  // namespace sparrow
