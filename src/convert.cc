// GGUF -> bundle. The resident tensors are copied byte for byte; the FFN
// matrices are re-laid out as records. Records need columns of the stored
// matrices (down's always, up's and gate's in the dip layout), so each
// group is built a tile of units at a time: the tile's columns are
// dequantized from every row of the (mapped) source matrix and transposed
// into contiguous f32 columns, a few MiB at a time, and each record part is
// then quantized along its length. Nothing proportional to the model is
// ever held in memory.
#include "src/convert.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/error.h"
#include "base/huge_pages.h"
#include "base/output_file.h"
#include "formats/bundle_writer.h"
#include "formats/gguf.h"
#include "formats/tokenizer_data.h"
#include "simd/quantize.h"
#include "src/model/config.h"
#include "src/model/weights.h"
#include "base/threads.h"

namespace sparrow {
namespace {

// What a fused model records: the adapters fused into its source before,
// then these.
std::vector<std::string> FusedList(const gguf::GgufFile& src, const FusedLora& fused) {
  std::vector<std::string> list = src.GetStringArray(kFusedAdaptersKey);
  for (std::string& line : fused.Describe()) list.push_back(std::move(line));
  return list;
}

}  // namespace

namespace {

// Rows dequantized together before transposing: one cache line of floats
// per column.
constexpr uint64_t kTransposeRows = 16;
// Resident data is copied in chunks of this size (for progress).
constexpr uint64_t kCopyChunkBytes = uint64_t{16} << 20;

const char* const kFfnMatrices[] = {"ffn_gate", "ffn_up", "ffn_down"};

std::string FfnName(uint32_t layer, const char* matrix) {
  return StrCat("blk.", layer, ".", matrix, ".weight");
}

// True for blk.<layer>.ffn_{gate,up,down}.weight with layer < n_layers:
// the tensors that become records instead of resident data.
bool IsStreamed(const std::string& name, uint32_t n_layers) {
  if (name.rfind("blk.", 0) != 0) return false;
  size_t pos = 4;
  uint64_t layer = 0;
  const size_t digits_start = pos;
  while (pos < name.size() && name[pos] >= '0' && name[pos] <= '9' && pos - digits_start < 10) {
    layer = layer * 10 + static_cast<uint64_t>(name[pos] - '0');
    ++pos;
  }
  if (pos == digits_start || layer >= n_layers || pos >= name.size() || name[pos] != '.') {
    return false;
  }
  const std::string rest = name.substr(pos + 1);
  for (const char* m : kFfnMatrices) {
    if (rest == std::string(m) + ".weight") return true;
  }
  return false;
}

uint64_t RowBytes(const gguf::TensorInfo& t) {
  uint64_t bytes = 0;
  if (!TensorTypeBytes(t.type, t.row_elems(), &bytes)) {
    ThrowInputError("tensor '", t.name, "': rows are not whole blocks");
  }
  return bytes;
}

struct FfnTensors {
  const gguf::TensorInfo* gate;
  const gguf::TensorInfo* up;
  const gguf::TensorInfo* down;
};

// The layer's FFN matrices, checked: present, shaped [d_ff x d_model] for
// gate and up and [d_model x d_ff] for down, in a type we can dequantize.
FfnTensors FindFfn(const gguf::GgufFile& src, const ModelConfig& c, uint32_t layer) {
  const gguf::TensorInfo* found[3];
  for (int i = 0; i < 3; ++i) {
    const std::string name = FfnName(layer, kFfnMatrices[i]);
    const gguf::TensorInfo* t = src.FindTensor(name);
    if (t == nullptr) ThrowInputError(src.name(), ": missing tensor '", name, "'");
    const bool is_down = i == 2;
    const uint64_t cols = is_down ? c.d_ff : c.d_model;
    const uint64_t rows = is_down ? c.d_model : c.d_ff;
    if (t->dims.size() != 2 || t->dims[0] != cols || t->dims[1] != rows) {
      ThrowInputError(src.name(), ": tensor '", name, "' is not ", rows, " x ", cols);
    }
    if (!simd::CanConvert(t->type)) {
      ThrowInputError(src.name(), ": tensor '", name, "' has type ", TensorTypeName(t->type),
                      ", which the converter cannot read (", TensorTypeNames(TypeAbility::kConvert),
                      " can be converted)");
    }
    found[i] = t;
  }
  return {found[0], found[1], found[2]};
}

// Where a record part's values come from: a row of a matrix (unit = row
// index) or a column (unit = column index).
struct PartSource {
  const gguf::TensorInfo* matrix;
  bool column;
};

std::vector<PartSource> PartSources(bundle::RecordKind kind, const FfnTensors& f) {
  switch (kind) {
    case bundle::RecordKind::kNeuron: return {{f.gate, false}, {f.up, false}, {f.down, true}};
    case bundle::RecordKind::kDipInput: return {{f.up, true}, {f.gate, true}};
    case bundle::RecordKind::kDipOutput: return {{f.down, true}};
    case bundle::RecordKind::kUpRow: return {{f.up, false}};
    case bundle::RecordKind::kGateRow: return {{f.gate, false}};
  }
  return {};
}

// Columns [c0, c1) of a matrix as contiguous f32 vectors of `rows` values.
class ColumnTile {
 public:
  void Load(const gguf::TensorInfo& t, uint64_t c0, uint64_t c1) {
    const TensorTypeInfo& info = GetTensorTypeInfo(t.type);
    rows_ = t.rows();
    c0_ = c0;
    const uint64_t width = c1 - c0;
    if (values_.size() < rows_ * width) values_.Reset(rows_ * width);
    const uint64_t row_bytes = RowBytes(t);
    const uint64_t skip = c0 / info.block_elems * info.block_bytes;
    const uint64_t batches = (rows_ + kTransposeRows - 1) / kTransposeRows;
    std::vector<AlignedBuffer<float>> scratch(static_cast<size_t>(ThreadCount()));
    ParallelFor(batches, 1, [&](size_t begin, size_t end, int thread) {
      AlignedBuffer<float>& tmp = scratch[static_cast<size_t>(thread)];
      if (tmp.size() < kTransposeRows * width) tmp.Reset(kTransposeRows * width);
      for (size_t batch = begin; batch < end; ++batch) {
        const uint64_t r0 = batch * kTransposeRows;
        const uint64_t n = std::min(kTransposeRows, rows_ - r0);
        for (uint64_t r = 0; r < n; ++r) {
          simd::DequantizeRow(t.type, t.data + (r0 + r) * row_bytes + skip, width,
                              tmp.data() + r * width);
        }
        for (uint64_t k = 0; k < width; ++k) {
          float* column = values_.data() + k * rows_ + r0;
          for (uint64_t r = 0; r < n; ++r) column[r] = tmp[r * width + k];
        }
      }
    });
  }
  const float* Column(uint64_t c) const { return values_.data() + (c - c0_) * rows_; }

 private:
  AlignedBuffer<float> values_;
  uint64_t rows_ = 0;
  uint64_t c0_ = 0;
};

// Writes one group's records (identity permutation: unit u in slot u);
// returns their largest block scale (simd::LargestBlockScale).
float WriteGroup(const bundle::UnitGroup& g, const std::vector<PartSource>& sources,
                 TensorType record_type, uint64_t column_tile_bytes, bundle::BundleWriter& writer,
                 const std::function<void(uint64_t)>& advance) {
  // Tile width: a whole number of every column source's blocks, sized so a
  // column tile stays near column_tile_bytes.
  uint64_t block = 1;
  uint64_t tile = g.n_units;
  for (const PartSource& s : sources) {
    if (!s.column) continue;
    const uint64_t b = GetTensorTypeInfo(s.matrix->type).block_elems;
    block = std::max(block, b);  // block sizes are powers of two
    tile = std::min(tile, column_tile_bytes / (s.matrix->rows() * sizeof(float)));
  }
  tile = std::max(block, tile / block * block);
  tile = std::min<uint64_t>(tile, g.n_units);

  std::vector<ColumnTile> columns(sources.size());
  AlignedBuffer<uint8_t> records(static_cast<size_t>(tile * g.record_bytes));
  std::vector<AlignedBuffer<float>> scratch(static_cast<size_t>(ThreadCount()));
  std::vector<float> largest(static_cast<size_t>(ThreadCount()), 0.0f);  // per thread
  for (uint64_t u0 = 0; u0 < g.n_units; u0 += tile) {
    const uint64_t u1 = std::min<uint64_t>(u0 + tile, g.n_units);
    for (size_t p = 0; p < sources.size(); ++p) {
      if (sources[p].column) columns[p].Load(*sources[p].matrix, u0, u1);
    }
    ParallelFor(u1 - u0, 4, [&](size_t begin, size_t end, int thread) {
      AlignedBuffer<float>& values = scratch[static_cast<size_t>(thread)];
      if (values.size() < g.part_padded_elems) values.Reset(g.part_padded_elems);
      std::fill(values.begin() + g.part_elems, values.begin() + g.part_padded_elems, 0.0f);
      for (size_t i = begin; i < end; ++i) {
        const uint64_t unit = u0 + i;
        uint8_t* record = records.data() + i * g.record_bytes;
        for (size_t p = 0; p < sources.size(); ++p) {
          const PartSource& s = sources[p];
          if (s.column) {
            std::memcpy(values.data(), columns[p].Column(unit), g.part_elems * sizeof(float));
          } else {
            simd::DequantizeRow(s.matrix->type, s.matrix->data + unit * RowBytes(*s.matrix),
                                g.part_elems, values.data());
          }
          uint8_t* part = record + p * g.part_bytes;
          simd::QuantizeRow(record_type, values.data(), g.part_padded_elems, part);
          float& most = largest[static_cast<size_t>(thread)];
          most = std::max(most, simd::LargestBlockScale(record_type, part, g.part_padded_elems));
        }
      }
    });
    writer.AppendRecords(records.data(), static_cast<size_t>(u1 - u0));
    advance((u1 - u0) * g.record_bytes);
  }
  return *std::max_element(largest.begin(), largest.end());
}

// Drops the pages of a finished tensor from this process's mapping of the
// source (they stay in the page cache), so that resident memory stays at a
// few tiles rather than growing to the model's size; under a memory cap the
// kernel could reclaim them anyway, but RSS would say otherwise.
void ReleasePages(const uint8_t* data, uint64_t bytes) {
  (void)ReleaseWholePages(data, static_cast<size_t>(bytes));
}

}  // namespace

TensorType DefaultRecordType(const gguf::GgufFile& source) {
  std::optional<TensorType> common;
  bool mixed = false;
  for (const gguf::TensorInfo& t : source.tensors()) {
    if (!IsStreamed(t.name, 0xFFFFFFFFu)) continue;
    if (common && *common != t.type) mixed = true;
    common = t.type;
  }
  // Q4_0 records are stored as Q4_0S: the same values and size, faster to
  // compute (simd/quant_blocks.h).
  if (common && !mixed && *common == TensorType::kQ4_0) return TensorType::kQ4_0S;
  if (common && !mixed && bundle::IsRecordType(*common)) return *common;
  return TensorType::kQ8_0;
}

void ConvertGgufToBundle(const std::string& gguf_path, const std::string& bundle_path,
                         const ConvertOptions& options,
                         const std::function<void(uint64_t, uint64_t)>& progress) {
  struct stat st {};
  if (!options.force && ::stat(bundle_path.c_str(), &st) == 0) {
    ThrowInputError("'", bundle_path, "' exists (use --force to overwrite)");
  }
  if (IsSameFile(gguf_path, bundle_path)) {
    ThrowInputError("convert: the output '", bundle_path, "' is the input model");
  }

  // The model must be one Sparrow runs: config, tokenizer and every tensor
  // (shapes and types) checked before anything is written.
  gguf::GgufFile src = gguf::GgufFile::Open(gguf_path);
  FusedLora fused;  // outlives every use of src's tensors
  if (!options.lora.empty()) {
    fused = FusedLora::Fuse(src, options.lora);
    fused.ApplyTo(src);
    PrintLoraChanges(fused);
  }
  ModelConfig config = ModelConfig::FromGguf(src);
  const TokenizerData tokenizer = TokenizerData::FromGguf(src);
  config.n_vocab = static_cast<uint32_t>(tokenizer.tokens.size());
  BindWeights(config, src.tensors(), gguf_path, /*with_ffn=*/true);
  std::vector<FfnTensors> ffn;
  for (uint32_t layer = 0; layer < config.n_layers; ++layer) {
    ffn.push_back(FindFfn(src, config, layer));
  }
  const TensorType record_type = options.record_type.value_or(DefaultRecordType(src));
  if (!bundle::IsRecordType(record_type)) {
    ThrowInputError("convert: records cannot be stored as ", TensorTypeName(record_type),
                    " (use ", TensorTypeNames(TypeAbility::kRecord), ")");
  }

  bundle::BundleWriter writer(bundle_path, options.force);
  for (const gguf::KeyValue& kv : src.metadata()) {
    // general.alignment describes the source's tensor data, and sparrow.*
    // keys are the bundle's own.
    if (kv.key == "general.alignment" || kv.key.rfind("sparrow.", 0) == 0) continue;
    writer.AddMetadata(kv.key, kv.value);
  }
  if (!options.lora.empty()) {
    writer.AddMetadata(kFusedAdaptersKey, gguf::Value::StringArray(FusedList(src, fused)));
  }
  writer.SetSource(gguf_path.substr(gguf_path.find_last_of('/') + 1));
  writer.DeclareGroups(options.layout, record_type, config.n_layers, config.d_model,
                       config.d_ff);

  std::vector<const gguf::TensorInfo*> resident;
  uint64_t total = 0, done = 0;
  for (const gguf::TensorInfo& t : src.tensors()) {
    if (IsStreamed(t.name, config.n_layers)) continue;
    resident.push_back(&t);
    total += t.n_bytes;
  }
  for (const bundle::UnitGroup& g : writer.groups()) total += g.section_bytes();
  const auto advance = [&](uint64_t bytes) {
    done += bytes;
    if (progress) progress(done, total);
  };

  gguf::GgufWriter& out = writer.BeginResident();
  for (const gguf::TensorInfo* t : resident) out.AddTensor(t->name, t->dims, t->type);
  for (const gguf::TensorInfo* t : resident) {
    for (uint64_t at = 0; at < t->n_bytes; at += kCopyChunkBytes) {
      const uint64_t n = std::min(kCopyChunkBytes, t->n_bytes - at);
      out.WriteTensorData(t->data + at, static_cast<size_t>(n));
      ReleasePages(t->data + at, n);
      advance(n);
    }
    ReleasePages(t->data, t->n_bytes);
  }
  writer.EndResident();

  while (const bundle::UnitGroup* g = writer.NextGroup()) {
    const bundle::UnitGroup group = *g;  // NextGroup() moves on as records go in
    const size_t index = static_cast<size_t>(g - writer.groups().data());
    const float largest = WriteGroup(group, PartSources(group.kind, ffn[group.layer]), record_type,
                                     options.column_tile_bytes, writer, advance);
    // A non-finite scale (a source with Inf weights) is not recorded.
    if (std::isfinite(largest)) writer.SetLargestScale(index, largest);
    const bundle::UnitGroup* next = writer.NextGroup();
    if (next == nullptr || next->layer != group.layer) {
      for (const gguf::TensorInfo* t : {ffn[group.layer].gate, ffn[group.layer].up,
                                        ffn[group.layer].down}) {
        ReleasePages(t->data, t->n_bytes);
      }
    }
  }
  writer.Finish();
}

void PrintLoraChanges(const FusedLora& fused) {
  for (const FusedLora::AdapterInfo& a : fused.adapters()) {
    std::fprintf(stderr, "lora: fused %s (%s, scale %g)\n", a.name.c_str(), a.format.c_str(),
                 a.scale);
  }
  for (const FusedLora::TensorChange& c : fused.changes()) {
    std::fprintf(stderr, "lora: %-32s relative change %.3e\n", c.name.c_str(), c.relative_change);
  }
}

GgufWriteSummary WriteGguf(const std::string& gguf_path, const std::string& out_path, bool force,
                           const std::vector<LoraSpec>& lora, std::optional<TensorType> type) {
  struct stat st {};
  if (!force && ::stat(out_path.c_str(), &st) == 0) {
    ThrowInputError("'", out_path, "' exists (use --force to overwrite)");
  }
  if (IsSameFile(gguf_path, out_path)) {
    ThrowInputError("convert: the output '", out_path, "' is the input model");
  }
  gguf::GgufFile src = gguf::GgufFile::Open(gguf_path);
  ModelConfig config = ModelConfig::FromGguf(src);
  config.n_vocab = static_cast<uint32_t>(TokenizerData::FromGguf(src).tokens.size());
  BindWeights(config, src.tensors(), gguf_path, /*with_ffn=*/true);
  FusedLora fused;
  if (!lora.empty()) {
    fused = FusedLora::Fuse(src, lora);
    fused.ApplyTo(src);
    PrintLoraChanges(fused);
  }
  if (type && !simd::CanConvert(*type)) {
    ThrowInputError("convert: cannot write ", TensorTypeName(*type), " tensors");
  }
  // The type each tensor is written in.
  const auto out_type = [&](const gguf::TensorInfo& t) {
    if (!type || t.dims.size() != 2 || t.type == *type) return t.type;
    return t.dims[0] % GetTensorTypeInfo(*type).block_elems == 0 ? *type : t.type;
  };
  GgufWriteSummary summary;
  for (const gguf::TensorInfo& t : src.tensors()) {
    if (!type || t.dims.size() != 2 || t.type == *type) continue;
    if (out_type(t) == *type) {
      ++summary.requantized;
    } else {
      ++summary.kept;
      if (summary.kept_row_elems == 0 || t.dims[0] < summary.kept_row_elems) {
        summary.kept_row_elems = t.dims[0];
      }
    }
  }
  if (type && lora.empty() && summary.requantized == 0 && summary.kept > 0) {
    ThrowInputError("convert: no weight can be re-quantized to ", TensorTypeName(*type),
                    ": rows of ", summary.kept_row_elems, " elements are not whole blocks of ",
                    GetTensorTypeInfo(*type).block_elems);
  }

  gguf::GgufWriter writer(out_path, src.alignment());
  for (const gguf::KeyValue& kv : src.metadata()) {
    if (kv.key == "general.alignment" || kv.key == kFusedAdaptersKey) continue;
    writer.Add(kv.key, kv.value);
  }
  const std::vector<std::string> fused_list = FusedList(src, fused);
  if (!fused_list.empty()) writer.Add(kFusedAdaptersKey, gguf::Value::StringArray(fused_list));
  for (const gguf::TensorInfo& t : src.tensors()) writer.AddTensor(t.name, t.dims, out_type(t));
  std::vector<float> row;
  std::vector<uint8_t> packed;
  for (const gguf::TensorInfo& t : src.tensors()) {
    const TensorType to = out_type(t);
    if (to == t.type) {
      writer.WriteTensorData(t.data, t.n_bytes);
      continue;
    }
    uint64_t in_row = 0, out_row = 0;
    (void)TensorTypeBytes(t.type, t.dims[0], &in_row);
    (void)TensorTypeBytes(to, t.dims[0], &out_row);
    row.resize(t.dims[0]);
    packed.resize(out_row);
    for (uint64_t r = 0; r < t.rows(); ++r) {
      simd::DequantizeRow(t.type, t.data + r * in_row, t.dims[0], row.data());
      simd::QuantizeRow(to, row.data(), t.dims[0], packed.data());
      writer.WriteTensorData(packed.data(), packed.size());
    }
  }
  writer.Finish();
  return summary;
}

}  // namespace sparrow
