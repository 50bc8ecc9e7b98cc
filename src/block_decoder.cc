#include "src/block_decoder.h"

#include <memory>
#include <optional>

#include "base/error.h"
#include "base/timer.h"

namespace sparrow {

namespace {

// One slot of the block: the request it runs and where that stands.
struct Slot {
  size_t request = 0;
  std::unique_ptr<Sampler> sampler;
  BlockResult result;
  bool prompt_pending = false;  // its prompt goes into the next pass
  int32_t next = 0;             // else: the token the next pass appends
};

}  // namespace

BlockDecoder::BlockDecoder(const Model& model, Session& session)
    : model_(model), session_(session) {}

void BlockDecoder::Run(const std::vector<BlockRequest>& requests,
                       const std::function<void(BlockResult&&)>& on_done,
                       const std::function<void(const BlockProgress&)>& on_progress) {
  const size_t n_ctx = session_.n_ctx();
  for (size_t i = 0; i < requests.size(); ++i) {
    const size_t n = requests[i].prompt.size();
    if (n == 0) ThrowInputError("request ", i + 1, ": the prompt has no tokens");
    if (n >= n_ctx) {
      ThrowInputError("request ", i + 1, ": the prompt has ", n,
                      " tokens, which leaves no room in a context of ", n_ctx);
    }
  }
  const Tokenizer& tok = model_.tokenizer();
  const size_t n_vocab = model_.config().n_vocab;
  const double t0 = NowSeconds();
  BlockProgress progress;
  progress.total = requests.size();

  std::vector<std::optional<Slot>> slots(session_.n_seqs());
  size_t next_request = 0;
  auto finish = [&](std::optional<Slot>& slot, const char* why) {
    slot->result.stop = why;
    slot->result.finish_seconds = NowSeconds() - t0;
    ++progress.done;
    on_done(std::move(slot->result));
    slot.reset();
  };
  std::vector<BatchToken> batch;
  std::vector<size_t> row_slot;  // the slot of each logits row
  while (true) {
    // Free slots take the next requests (one with nothing to generate is
    // done at once: no pass needed).
    for (size_t s = 0; s < slots.size(); ++s) {
      while (!slots[s] && next_request < requests.size()) {
        const size_t r = next_request++;
        slots[s].emplace();
        Slot& slot = *slots[s];
        slot.request = r;
        slot.result.request = r;
        slot.result.start_seconds = NowSeconds() - t0;
        slot.sampler = std::make_unique<Sampler>(requests[r].sampling);
        slot.sampler->Accept(requests[r].prompt);  // counted by the penalties
        slot.prompt_pending = true;
        session_.Reset(s);
        if (requests[r].n_predict == 0) finish(slots[s], "length");
      }
    }
    batch.clear();
    row_slot.clear();
    for (size_t s = 0; s < slots.size(); ++s) {
      if (!slots[s]) continue;
      Slot& slot = *slots[s];
      const uint32_t seq = static_cast<uint32_t>(s);
      if (slot.prompt_pending) {
        const std::vector<int32_t>& p = requests[slot.request].prompt;
        for (size_t i = 0; i < p.size(); ++i) batch.push_back({p[i], seq, i + 1 == p.size()});
        slot.prompt_pending = false;
      } else {
        batch.push_back({slot.next, seq, true});
      }
      row_slot.push_back(s);
    }
    if (batch.empty()) break;  // every request done
    const float* logits = session_.EvalBatch(batch);
    ++progress.passes;
    for (size_t row = 0; row < row_slot.size(); ++row) {
      std::optional<Slot>& slot = slots[row_slot[row]];
      const int32_t token = slot->sampler->Sample(logits + row * n_vocab, n_vocab);
      if (tok.IsEndOfGeneration(token)) {
        finish(slot, "eos");
        continue;
      }
      slot->result.generated.push_back(token);
      ++progress.generated;
      if (slot->result.generated.size() >= requests[slot->request].n_predict) {
        finish(slot, "length");
      } else if (session_.n_past(row_slot[row]) >= n_ctx) {
        finish(slot, "context");
      } else {
        slot->next = token;
      }
    }
    progress.seconds = NowSeconds() - t0;
    if (on_progress) on_progress(progress);
  }
}

}  // namespace sparrow
