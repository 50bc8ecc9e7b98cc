// Opening a model for running, whatever its file: a GGUF runs dense with
// every weight resident (mapped); a Sparrow bundle runs with attention and
// the output head resident and the feed-forward streamed from flash within
// a DRAM budget (the embedding table resident too without a budget, else
// read a row per token). Frontends (the CLI) go through this.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/lora.h"
#include "src/model/model.h"
#include "src/runtime/budget.h"
#include "src/runtime/streamed_ffn.h"

namespace sparrow {

struct EngineOptions {
  uint64_t dram_budget = 0;  // bytes; 0 = no limit
  size_t n_ctx = 0;          // 0: the model's context length, at most 4096
  // With n_ctx 0: the most positions the caller will use (sparrow run: its
  // prompt and -n), so the default context is no longer than that and a
  // budget's memory goes to the unit caches instead of unreachable KV
  // cache. 0: unknown.
  size_t n_ctx_used_at_most = 0;
  size_t max_batch = 0;      // tokens per forward pass; 0: 512 resident, 64 streamed
  size_t logits_rows = 1;    // tokens whose logits are kept (perplexity: n_ctx)
  // Sequences a session holds (sparrow batch: the block). 0: as many as
  // the budget holds, up to max_auto_seqs (ChooseBlock below).
  size_t n_seqs = 1;
  size_t max_auto_seqs = 32;
  KvCacheTypes kv_types;     // how the KV cache stores keys and values
  StreamConfig stream;       // streamed models only
  SparsityOptions sparsity;  // which FFN units each token uses (bundles only)
  // LoRA adapters fused at load (GGUF models; bundles fuse them at
  // conversion), into memory charged to the budget; progress(done, total)
  // counts bytes of the tensors being fused.
  std::vector<LoraSpec> lora;
  std::function<void(uint64_t, uint64_t)> lora_progress;
};

struct LoadedModel {
  std::unique_ptr<Model> model;
  // The streamed FFN of a bundle (one per process: it owns the unit caches
  // the budget was charged for, and serves one session's pass at a time);
  // nullptr for a GGUF, whose sessions each run a dense FFN of their own.
  std::unique_ptr<FeedForward> ffn;
  size_t n_ctx = 0;
  size_t max_batch = 0;
  size_t n_seqs = 1;      // what the budget was charged for: sessions hold this many
  std::string block_note;  // how an automatic n_seqs was chosen (for --stats)
  KvCacheTypes kv_types;  // what the budget was charged for: sessions use it
  std::shared_ptr<MemoryBudget> budget;
  size_t logits_rows = 1;  // what sessions hold and the budget charged (HeldLogitsRows)
  StreamedFeedForward* streamed = nullptr;  // `ffn` when the FFN streams
  std::string format;                       // "gguf" or "bundle"

  // A session (forward context) over the model with the shape the budget
  // was charged for; ctx/seqs 0: n_ctx/n_seqs. A bundle's sessions run the
  // streamed FFN, one at a time.
  std::unique_ptr<Session> NewSession(size_t ctx = 0, size_t seqs = 0) const;
};

// InputError for a file that is neither, a broken file, or a budget that
// cannot hold the model (with the minimum).
//
// With options.n_seqs == 0 the block is chosen by FlexGen's reasoning for
// one decode pass of B sequences: it reads the weights the pass needs once
// (from flash, the FFN units the unit cache lacks: F - C(B), where each
// sequence's KV cache and activations come out of the cache C) and
// computes B tokens. Flash bytes per token, (F - C(1) + (B - 1) * kv) / B,
// fall as B grows while F exceeds what is cached, and a resident model's
// DRAM reads per token fall as 1 / B, so the largest block the budget holds
// wins until compute dominates; max_auto_seqs caps it there (and the
// prompts the caller has).
LoadedModel OpenModel(const std::string& path, const EngineOptions& options);

// The process's own footprint (code, libraries, heap bookkeeping, thread
// stacks) charged to --dram-budget before the model: a fixed estimate, so
// that the same command with the same budget always gets the same caches.
uint64_t ProcessFootprintBytes(size_t compute_threads, size_t io_threads);

}  // namespace sparrow
