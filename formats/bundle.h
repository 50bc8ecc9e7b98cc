// The Sparrow bundle: a model laid out for streaming its feed-forward
// weights from flash (LLM in a flash, section 3).
//
// File layout (every section starts on a 4096-byte boundary so O_DIRECT can
// read it):
//   [0, 64)        fixed header: magic "SPRWBNDL", version, the header
//                  region's length and its CRC32C
//   [64, H)        header body: a GGUF image holding metadata only: the
//                  model's metadata and tokenizer (same keys as the source
//                  GGUF) plus sparrow.* keys: layout, record type, section
//                  offsets/lengths, the resident section's CRC32C, and the
//                  per-layer record permutations
//   resident       a GGUF image with every tensor except ffn_gate/up/down,
//                  in the source types; CRC32C checked when it is loaded
//   per layer and record kind, an FFN section of fixed-size records; each
//   record ends with the CRC32C of its payload, checked whenever it is read.
//
// Records ("units"), each part quantized along its length in blocks of 32
// (parts are zero-padded to a whole number of blocks) or stored F16/F32:
//   neuron layout:  record j < d_ff     = [gate row j | up row j | down column j]
//   dip layout:     record i < d_model  = [up column i | gate column i]   (kind kDipInput)
//                   record j < d_ff     = [down column j]                 (kind kDipOutput)
// A per-(layer, kind) permutation maps unit id -> record slot on disk
// (identity until a placement step reorders neurons).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/gguf.h"
#include "formats/tensor_type.h"

namespace sparrow::bundle {

inline constexpr char kMagic[8] = {'S', 'P', 'R', 'W', 'B', 'N', 'D', 'L'};
inline constexpr uint32_t kVersion = 1;
inline constexpr uint64_t kSectionAlignment = 4096;
inline constexpr uint32_t kRecordCrcBytes = 4;

enum class Layout : uint32_t { kNeuron = 0, kDip = 1 };
std::string_view LayoutName(Layout layout);
std::optional<Layout> ParseLayout(std::string_view name);

enum class RecordKind : uint32_t {
  kNeuron = 0,     // [gate row | up row | down column], one per FFN neuron
  kDipInput = 1,   // [up column | gate column], one per model input dim
  kDipOutput = 2,  // [down column], one per FFN neuron
};
std::string_view RecordKindName(RecordKind kind);

// The records of one (layer, kind): a run of `n_units` fixed-size records.
struct UnitGroup {
  uint32_t layer = 0;
  RecordKind kind = RecordKind::kNeuron;
  uint32_t n_units = 0;
  uint32_t parts = 0;              // sub-vectors per record (3, 2 or 1)
  uint32_t part_elems = 0;         // logical elements per part
  uint32_t part_padded_elems = 0;  // rounded up to the type's block size
  uint32_t part_bytes = 0;         // bytes of one stored part
  uint32_t payload_bytes = 0;      // parts * part_bytes
  uint32_t record_bytes = 0;       // payload + CRC (+ padding to 4 bytes)
  uint64_t offset = 0;             // file offset of disk slot 0
  std::vector<uint32_t> slot_of_unit;  // unit id -> disk slot

  uint64_t UnitOffset(uint32_t unit) const {
    return offset + uint64_t{slot_of_unit[unit]} * record_bytes;
  }
  uint64_t section_bytes() const { return uint64_t{n_units} * record_bytes; }
};

class Bundle {
 public:
  // Reads and validates the fixed header and the header body (CRC32C,
  // structure, section bounds against the file size). Reads nothing else.
  static Bundle Open(const std::string& path);
  // True when the file starts with the bundle magic (for format detection).
  static bool LooksLikeBundle(const std::string& path);

  const std::string& path() const { return path_; }
  uint64_t file_size() const { return file_size_; }
  // Metadata: the model's keys, its tokenizer, and sparrow.*.
  const gguf::GgufFile& header() const { return *header_; }
  Layout layout() const { return layout_; }
  TensorType record_type() const { return record_type_; }
  uint64_t resident_offset() const { return resident_offset_; }
  uint64_t resident_bytes() const { return resident_bytes_; }
  const std::vector<UnitGroup>& groups() const { return groups_; }
  // nullptr when the layout has no such kind.
  const UnitGroup* FindGroup(uint32_t layer, RecordKind kind) const;

  // Reads the resident section into memory, checks its CRC32C and parses it.
  // InputError ("... resident section checksum mismatch ...") on corruption.
  gguf::GgufFile LoadResident() const;

  // Checks the CRC32C at the end of a record just read; InputError naming
  // the file, layer, kind and unit when it does not match.
  void VerifyRecord(const UnitGroup& group, uint32_t unit,
                    const uint8_t* record) const;

 private:
  Bundle() = default;
  std::string path_;
  uint64_t file_size_ = 0;
  std::shared_ptr<gguf::GgufFile> header_;
  Layout layout_ = Layout::kNeuron;
  TensorType record_type_ = TensorType::kF32;
  uint64_t resident_offset_ = 0;
  uint64_t resident_bytes_ = 0;
  uint32_t resident_crc_ = 0;
  std::vector<UnitGroup> groups_;
};

// Writing bundles: formats/bundle_writer.h (BundleWriter). Converting a
// GGUF into a bundle (quantizing records) is the engine's job: src/convert.h.

}  // namespace sparrow::bundle
