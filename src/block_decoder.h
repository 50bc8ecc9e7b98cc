// Block decoding (FlexGen's throughput mode): many prompts, up to `block`
// sequences decoded together in one session, one token of each sequence
// per forward pass, so that every weight a pass reads (from DRAM, or from
// flash for a bundle's FFN units: the union of what the block needs) serves
// the whole block. A slot whose sequence ends takes the next prompt at
// once, its prompt evaluated in the same pass as the others' next tokens.
// Each sequence has its own KV cache, sampler and stop, so its text does
// not depend on which others share its passes (up to the rounding of
// batched products).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "src/model/model.h"
#include "src/sampler.h"

namespace sparrow {

struct BlockRequest {
  std::vector<int32_t> prompt;  // tokens, at least one
  size_t n_predict = 0;         // tokens to generate at most
  SamplerParams sampling;
};

struct BlockResult {
  size_t request = 0;             // index into the requests
  std::vector<int32_t> generated;  // without the end-of-text token
  // Why generation stopped: "eos" (end of text), "length" (n_predict) or
  // "context" (the context is full).
  std::string stop;
  double start_seconds = 0.0;   // when its prompt's pass began (from Run's start)
  double finish_seconds = 0.0;  // when its last token was sampled
};

struct BlockProgress {
  size_t done = 0;        // requests finished
  size_t total = 0;
  size_t generated = 0;   // tokens sampled so far, all sequences
  size_t passes = 0;      // forward passes run
  double seconds = 0.0;   // since Run began
};

class BlockDecoder {
 public:
  // `session` holds the block: one sequence per slot (Session::n_seqs()).
  BlockDecoder(const Model& model, Session& session);

  // Runs every request, session.n_seqs() at a time, and calls on_done for
  // each as it finishes (in finishing order); on_progress after each pass.
  // InputError (before anything runs) for a request whose prompt is empty
  // or leaves no room in the context.
  void Run(const std::vector<BlockRequest>& requests,
           const std::function<void(BlockResult&&)>& on_done,
           const std::function<void(const BlockProgress&)>& on_progress = {});

 private:
  const Model& model_;
  Session& session_;
};

}  // namespace sparrow
