// GGUF -> Sparrow bundle conversion (formats/bundle.h describes the file).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "formats/bundle.h"
#include "base/tensor_type.h"
#include "src/lora.h"

namespace sparrow {

struct ConvertOptions {
  // A TypeAbility::kRecord type; unset: DefaultRecordType() of the source.
  std::optional<TensorType> record_type;
  bundle::Layout layout = bundle::Layout::kNeuron;
  bool force = false;  // overwrite an existing output
  // f32 bytes a column tile may take (a tile is at least one source block
  // wide). Tuning only; tests shrink it to exercise tiling.
  uint64_t column_tile_bytes = uint64_t{16} << 20;
  // LoRA adapters fused into the weights first (W + scale * alpha/r * B A),
  // so the records and resident tensors hold the adapted weights; the
  // bundle records them under sparrow.lora.fused.
  std::vector<LoraSpec> lora;
};

// The record type chosen when none is asked for: the source's FFN type when
// every FFN matrix has the same one and records can store it (f32, f16,
// q8_0, q4_0: no re-quantization, no growth); otherwise q8_0, which keeps
// any source type (bf16, q4_K, q6_K, mixed) within ~0.5% of its quality.
TensorType DefaultRecordType(const gguf::GgufFile& source);

// Reads the GGUF tensor by tensor and writes the bundle through a temporary
// file renamed at the end. Memory: the source is mapped, not read in;
// records are built a tile of units at a time from at most two column tiles
// of f32 (~16 MiB each), so converting a 7B model needs a few tens of MiB.
// progress(done, total) counts bytes of output. InputError for a model
// Sparrow cannot run, an unsupported record type, or an existing output
// without force; a failed conversion leaves no output and no temporary file.
void ConvertGgufToBundle(const std::string& gguf_path,
                         const std::string& bundle_path,
                         const ConvertOptions& options,
                         const std::function<void(uint64_t, uint64_t)>& progress = nullptr);

// `convert [--lora ...] [--type T] -o OUT.gguf`: the base with the adapters
// fused (llama.cpp's export-lora; sparrow.lora.fused records them, and each
// adapted tensor's relative change goes to stderr), and with `type`, every
// 2-D weight whose rows are whole blocks of it re-quantized to it (the rest
// keep their type): a GGUF any reader can run. Same guarantees as the
// bundle conversion. A `type` that no tensor can take, with no adapter to
// fuse, is an InputError (the output would be a copy).
struct GgufWriteSummary {
  size_t requantized = 0;  // 2-D weights written in `type`
  size_t kept = 0;         // 2-D weights of another type whose rows are not whole blocks of it
  uint64_t kept_row_elems = 0;  // the shortest such row
};
GgufWriteSummary WriteGguf(const std::string& gguf_path, const std::string& out_path, bool force,
                           const std::vector<LoraSpec>& lora, std::optional<TensorType> type);

// The largest relative changes of a fusion, one stderr line per tensor.
void PrintLoraChanges(const FusedLora& fused);

}  // namespace sparrow
