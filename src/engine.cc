#include "src/engine.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <stdexcept>

#include "base/error.h"
#include "sparrow_config.h"
#include "formats/bundle.h"
#include "formats/gguf.h"
#include "formats/tokenizer_data.h"
#include "base/threads.h"
#include "src/runtime/flash_embeddings.h"

namespace sparrow {
namespace {

size_t ResolveContext(const ModelConfig& c, size_t requested, size_t used_at_most) {
  if (requested > 0) {
    if (c.context_length > 0 && requested > c.context_length) {
      // Allowed, as llama.cpp allows it, but positions past the trained
      // context are ones the model never saw.
      std::fprintf(stderr,
                   "warning: the context (-c %zu) is longer than the model's trained context "
                   "(%u tokens); text past that may degrade\n",
                   requested, static_cast<unsigned>(c.context_length));
    }
    return requested;
  }
  const size_t model_default = std::min<size_t>(c.context_length, 4096);
  return used_at_most > 0 ? std::min(model_default, used_at_most) : model_default;
}

// Bytes the tokenizer and metadata occupy once parsed: strings plus their
// bookkeeping, roughly.
uint64_t MetadataBytes(const gguf::GgufFile& header) {
  return header.file_size() * 3 + (1u << 20);
}

struct BundleStorage {
  std::shared_ptr<bundle::Bundle> bundle;
  std::shared_ptr<gguf::GgufFile> resident;
};

// The shape of the sessions a run of these options holds.
SessionShape ShapeFor(const EngineOptions& options, size_t n_ctx, size_t max_batch,
                      size_t n_seqs) {
  SessionShape shape;
  shape.n_ctx = n_ctx;
  shape.max_batch = max_batch;
  shape.kv_types = options.kv_types;
  shape.n_seqs = std::max<size_t>(n_seqs, 1);
  shape.logits_rows = options.logits_rows;
  shape.threads = static_cast<size_t>(ThreadCount());
  return shape;
}

// Under a budget, an embedding table the output head does not share stays
// on flash (FlashEmbeddings): LoadResident passes its rows through a small
// buffer, taking each row's checksum, and the table's pages are never
// backed, nor charged. (Tied, the output head reads the whole table every
// token: it stays in DRAM.)
struct EmbeddingsOnFlash {
  gguf::TensorInfo table;     // from the resident section's header
  uint64_t section_offset = 0;  // of its first byte in the resident section
  uint64_t unbacked = 0;      // resident-section bytes never backed (whole pages)
};

std::optional<EmbeddingsOnFlash> PlanEmbeddingsOnFlash(const bundle::Bundle& bndl,
                                                       const ModelConfig& config) {
  std::optional<gguf::GgufFile> read;
  try {
    read = bndl.ReadResidentHeader();
  } catch (const InputError&) {
    // A damaged section: loading it whole names the damage (its checksum).
    return std::nullopt;
  }
  const gguf::GgufFile& header = *read;
  const TensorNames& names = config.architecture->names;
  const gguf::TensorInfo* table = header.FindTensor(names.token_embd);
  if (table == nullptr || header.FindTensor(names.output) == nullptr) return std::nullopt;
  EmbeddingsOnFlash plan;
  plan.table = *table;
  plan.section_offset = header.data_offset() + table->offset;
  plan.unbacked = bundle::Bundle::PassedTensorBytes(header, *table);
  return plan;
}

// What a bundle run charges to the budget before its unit caches:
// everything fixed, then the least the streamed FFN can work with.
struct BundleCharges {
  uint64_t process = 0, metadata = 0, resident = 0, session = 0, ffn_minimum = 0;
  uint64_t embedding_checksums = 0;  // with the table on flash
  static constexpr uint64_t kLoaderBuffers = 256u << 10;
  uint64_t Minimum() const {
    return process + metadata + resident + session + embedding_checksums + ffn_minimum +
           kLoaderBuffers;
  }
};

BundleCharges ChargesOf(const bundle::Bundle& bndl, const ModelConfig& config,
                        const EngineOptions& options, size_t n_ctx, size_t max_batch,
                        const std::optional<EmbeddingsOnFlash>& flash) {
  BundleCharges c;
  c.process = ProcessFootprintBytes(ThreadCount(), options.stream.io_threads);
  c.metadata = MetadataBytes(bndl.header());
  // The resident section, and what moving its matrices for decoding adds.
  c.resident = bndl.resident_bytes() +
               DecodeMatricesOverheadBytes(DecodeMatrixCount(config, /*with_ffn=*/false),
                                           bndl.resident_bytes());
  c.session = Session::MemoryBytes(config, ShapeFor(options, n_ctx, max_batch, options.n_seqs),
                                   /*dense_ffn=*/false);
  c.ffn_minimum = StreamedFeedForward::MinimumBytes(bndl, options.stream, config, max_batch);
  if (flash.has_value()) {
    c.resident -= flash->unbacked;
    c.embedding_checksums = FlashEmbeddings::MemoryBytes(config.n_vocab);
  }
  return c;
}

std::string BlockNote(size_t chosen, size_t top, const MemoryBudget& budget,
                      const ModelConfig& config, size_t n_ctx, KvCacheTypes kv_types) {
  const uint64_t kv = KvCache::Bytes(KvShape{config.n_layers, n_ctx, config.n_kv_heads,
                                             config.head_dim}, kv_types);
  char line[256];
  std::snprintf(line, sizeof line, "block auto: %zu sequences (at most %zu; KV cache %.2f MiB "
                "per sequence; %s)", chosen, top, kv / 1048576.0,
                budget.unlimited() ? "no --dram-budget" :
                chosen < top ? "the most the budget holds" : "the budget holds more");
  return line;
}

LoadedModel OpenBundle(const std::string& path, const EngineOptions& options) {
  if (!options.lora.empty()) {
    ThrowInputError("--lora: a bundle's weights are fused at conversion: sparrow convert -m "
                    "BASE.gguf --lora ADAPTER -o OUT.sparrow");
  }
  auto bndl = std::make_shared<bundle::Bundle>(bundle::Bundle::Open(path));
  ModelConfig config = ModelConfig::FromGguf(bndl->header());
  TokenizerData tokenizer_data = TokenizerData::FromGguf(bndl->header());
  config.n_vocab = static_cast<uint32_t>(tokenizer_data.tokens.size());

  LoadedModel out;
  out.format = "bundle";
  out.kv_types = options.kv_types;
  out.n_ctx = ResolveContext(config, options.n_ctx, options.n_ctx_used_at_most);
  out.max_batch = options.max_batch > 0 ? options.max_batch : 64;
  out.budget = std::make_shared<MemoryBudget>(options.dram_budget);
  MemoryBudget& budget = *out.budget;
  const std::optional<EmbeddingsOnFlash> flash =
      budget.unlimited() ? std::nullopt : PlanEmbeddingsOnFlash(*bndl, config);

  EngineOptions opts = options;
  if (opts.n_seqs == 0) {
    const size_t top = std::max<size_t>(opts.max_auto_seqs, 1);
    const uint64_t limit = budget.unlimited() ? UINT64_MAX : budget.limit();
    size_t b = top;
    for (; b > 1; --b) {
      opts.n_seqs = b;
      if (ChargesOf(*bndl, config, opts, out.n_ctx, out.max_batch, flash).Minimum() <= limit) {
        break;
      }
    }
    opts.n_seqs = b;
    out.block_note = BlockNote(b, top, budget, config, out.n_ctx, options.kv_types);
  }
  out.n_seqs = std::max<size_t>(opts.n_seqs, 1);
  const BundleCharges fixed = ChargesOf(*bndl, config, opts, out.n_ctx, out.max_batch, flash);
  const uint64_t process = fixed.process, metadata = fixed.metadata, resident = fixed.resident,
                 session = fixed.session, minimum = fixed.Minimum();
  budget.Charge(process, "process (code, libraries, stacks)", minimum);
  budget.Charge(metadata, "metadata and tokenizer", minimum);
  budget.Charge(resident,
                flash ? "resident weights (attention, output; embeddings read from flash)"
                      : "resident weights (attention, embeddings, output)",
                minimum);
  budget.Charge(session, "KV cache and activations", minimum);

  auto storage = std::make_shared<BundleStorage>();
  storage->bundle = bndl;
  std::vector<uint32_t> row_checksums;
  std::optional<bundle::Bundle::PassedTensor> pass;
  if (flash) {
    budget.Charge(fixed.embedding_checksums, "embedding row checksums", minimum);
    row_checksums.reserve(flash->table.rows());
    const uint64_t row_bytes = flash->table.n_bytes / flash->table.rows();
    pass = bundle::Bundle::PassedTensor{
        flash->table.name,
        [&row_checksums, row_bytes](uint64_t first_row, uint64_t count, const uint8_t* bytes) {
          for (uint64_t r = 0; r < count; ++r) {
            row_checksums.push_back(FlashEmbeddings::RowChecksum(
                static_cast<uint32_t>(first_row + r), bytes + r * row_bytes, row_bytes));
          }
        }};
  }
  storage->resident = std::make_shared<gguf::GgufFile>(bndl->LoadResident(pass ? &*pass : nullptr));
  ModelWeights weights = BindWeights(config, storage->resident->tensors(), path, /*with_ffn=*/false);
  std::unique_ptr<Tokenizer> tokenizer = Tokenizer::Create(tokenizer_data);
  out.model = std::make_unique<Model>(std::move(config), std::move(tokenizer), std::move(weights),
                                      storage);
  if (flash) {
    const ops::MatrixView& view = out.model->weights().token_embd;
    if (view.packed) throw std::logic_error("OpenBundle: the embedding table left on flash was packed");
    auto rows = std::make_shared<FlashEmbeddings>(bndl, flash->section_offset, view,
                                                  std::move(row_checksums));
    out.model->ReadEmbeddingsWith([rows](uint32_t token, float* o) { rows->Row(token, o); });
  }
  // dip/dip-ca without an explicit split use the one calibrated for this
  // bundle (sparrow calibrate), when it covers the density.
  const SparsityOptions sparsity = WithCalibratedSplit(options.sparsity, bndl->calibration());
  auto ffn = std::make_unique<StreamedFeedForward>(*bndl, out.model->config(), options.stream,
                                                   out.max_batch, budget, sparsity);
  // Weights a token reads outside the FFN: the resident section less the
  // embedding table (one row per token) unless the output head shares it.
  StreamStats::TraceHeader& trace = ffn->stats().trace_header();
  trace.resident_bytes = bndl->resident_bytes();
  const TensorNames& names = out.model->config().architecture->names;
  const gguf::TensorInfo* embedding = storage->resident->FindTensor(names.token_embd);
  if (embedding != nullptr && storage->resident->FindTensor(names.output) != nullptr) {
    trace.resident_bytes -= std::min(trace.resident_bytes, embedding->n_bytes);
  }
  trace.dram_budget = options.dram_budget;
  trace.threads = ThreadCount();
  out.streamed = ffn.get();
  out.ffn = std::move(ffn);
  out.logits_rows = HeldLogitsRows(ShapeFor(options, out.n_ctx, out.max_batch, out.n_seqs));
  return out;
}

LoadedModel OpenGguf(const std::string& path, const EngineOptions& options) {
  if (options.sparsity.kind != SparsityKind::kDense || options.sparsity.density != 1.0) {
    ThrowInputError("--sparsity ", GetPolicyInfo(options.sparsity.kind).name, " --mlp-density ",
                    options.sparsity.density, " needs a bundle: a GGUF runs every weight resident "
                    "(sparrow convert --layout dip makes one)");
  }
  LoadedModel out;
  out.format = "gguf";
  out.kv_types = options.kv_types;
  out.n_seqs = std::max<size_t>(options.n_seqs, 1);
  uint64_t fused_bytes = 0;
  if (options.lora.empty()) {
    out.model = Model::Open(path);
  } else {
    auto file = std::make_shared<gguf::GgufFile>(gguf::GgufFile::Open(path));
    auto fused = std::make_shared<FusedLora>(FusedLora::Fuse(*file, options.lora,
                                                             options.lora_progress));
    fused->ApplyTo(*file);
    fused_bytes = fused->bytes();
    out.model = Model::Open(file, fused);
  }
  const ModelConfig& c = out.model->config();
  out.n_ctx = ResolveContext(c, options.n_ctx, options.n_ctx_used_at_most);
  out.max_batch = options.max_batch > 0 ? options.max_batch : 512;
  out.budget = std::make_shared<MemoryBudget>(options.dram_budget);
  const uint64_t process = ProcessFootprintBytes(ThreadCount(), 0);
  const uint64_t weights =
      out.model->weight_bytes() + DecodeMatricesOverheadBytes(DecodeMatrixCount(c, /*with_ffn=*/true),
                                                              out.model->weight_bytes());
  auto session_bytes = [&](size_t n_seqs) {
    return Session::MemoryBytes(c, ShapeFor(options, out.n_ctx, out.max_batch, n_seqs),
                                /*dense_ffn=*/true);
  };
  if (options.n_seqs == 0) {
    const size_t top = std::max<size_t>(options.max_auto_seqs, 1);
    size_t b = top;
    while (b > 1 && !out.budget->unlimited() &&
           process + weights + fused_bytes + session_bytes(b) > out.budget->limit()) {
      --b;
    }
    out.n_seqs = b;
    out.block_note = BlockNote(b, top, *out.budget, c, out.n_ctx, options.kv_types);
  }
  out.logits_rows = HeldLogitsRows(ShapeFor(options, out.n_ctx, out.max_batch, out.n_seqs));
  if (!out.budget->unlimited()) {
    // A GGUF runs with every weight resident: the whole file must fit.
    const uint64_t session = session_bytes(out.n_seqs);
    const uint64_t minimum = process + weights + fused_bytes + session;
    if (minimum > out.budget->limit()) {
      ThrowInputError("--dram-budget: this GGUF needs ", minimum >> 20,
                      " MiB resident (weights, KV cache, activations); convert it with "
                      "`sparrow convert` to stream its feed-forward from flash within a smaller budget");
    }
    out.budget->Charge(process, "process", minimum);
    out.budget->Charge(weights, "weights", minimum);
    if (fused_bytes > 0) out.budget->Charge(fused_bytes, "LoRA-fused weights", minimum);
    out.budget->Charge(session, "KV cache and activations", minimum);
  }
  return out;
}

}  // namespace

uint64_t ProcessFootprintBytes(size_t compute_threads, size_t io_threads) {
  // Computed, not measured: the resident set size at open varies by a few
  // hundred KiB from run to run (the kernel maps library pages around each
  // fault when they are in the page cache), and charging it made the same
  // command get different unit caches, hit rates and, under dip-ca,
  // different text. Measured on x86-64 Debian 12 while a stories260K
  // bundle decodes (/proc/PID/status and pmap, AVX-512 machine): 11.3 MiB
  // file-backed (the sparrow binary 2.1, OpenSSL's libcrypto 2.8, pulled
  // in by Debian's cpp-httplib, oneDNN 1.5, libstdc++ 1.3, libc 1.0, the
  // rest below 0.5 each) + ~0.7 MiB of heap beyond what the budget charges.
  // (At open, before most code has run, it is about half of that.)
  constexpr uint64_t kCodeLibrariesAndHeap = 12ull << 20;
  // Each thread's stack as far as Sparrow's calls go (8 MiB reserved,
  // a few pages touched) plus the allocator's per-thread arena start.
  constexpr uint64_t kPerThread = 64ull << 10;
  // oneDNN, once a batch has run through it: its JIT kernels, primitive
  // cache and scratchpads, beyond our own panels (charged with the session).
  // Measured (x86-64 AVX-512, oneDNN 2.6; peak RSS with --kernels fast minus
  // --kernels reference, less our panels): 8.3 MiB on stories260K as a
  // bundle (perplexity -c 128) and on a 125M-shaped Q8_0 GGUF alike.
  constexpr uint64_t kOneDnnAtWork = SPARROW_HAVE_ONEDNN ? (9ull << 20) : 0;
  return kCodeLibrariesAndHeap + kOneDnnAtWork + kPerThread * (compute_threads + io_threads);
}


std::unique_ptr<Session> LoadedModel::NewSession(size_t ctx, size_t seqs) const {
  SessionShape shape;
  shape.n_ctx = ctx > 0 ? ctx : n_ctx;
  shape.max_batch = max_batch;
  shape.kv_types = kv_types;
  shape.n_seqs = seqs > 0 ? seqs : n_seqs;
  shape.logits_rows = logits_rows;
  return std::make_unique<Session>(*model, shape, ffn.get());
}

LoadedModel OpenModel(const std::string& path, const EngineOptions& options) {
  if (bundle::Bundle::LooksLikeBundle(path)) return OpenBundle(path, options);
  return OpenGguf(path, options);
}

}  // namespace sparrow
