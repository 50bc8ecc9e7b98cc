// The Sparrow bundle: a model laid out for streaming its feed-forward
// weights from flash (LLM in a flash, section 3).
//
// File layout (every section starts on a 4096-byte boundary so O_DIRECT can
// read it):
//   [0, 64)        fixed header (little-endian):
//                    [0, 8)   magic "SPRWBNDL"
//                    [8, 12)  u32 version (kVersion)
//                    [12, 16) zero
//                    [16, 24) u64 H, the end of the header region
//                    [24, 32) u64 bundle id: random, drawn when the bundle
//                             is written; seeds every record's CRC
//                    [32, 60) zero
//                    [60, 64) u32 CRC32C of bytes [0, 60) followed by [64, H)
//   [64, H)        header body: a GGUF image holding metadata only: the
//                  model's metadata and tokenizer (same keys as the source
//                  GGUF) plus sparrow.* keys (see namespace keys below):
//                  layout, record type, the resident section's offset,
//                  length and CRC32C, and per (layer, kind) group its
//                  geometry, offset and record permutation
//   resident       a GGUF image with every tensor except ffn_gate/up/down,
//                  in the source types, byte for byte; CRC32C checked when it
//                  is loaded
//   per layer and record kind, an FFN section of fixed-size records; each
//   record ends with the CRC32C of everything before it in the record
//   (payload and zero padding), checked whenever it is read. The CRC starts
//   from RecordSeed(bundle id, layer, kind, unit), so a record is valid only
//   in its own place of its own bundle: a record copied from another bundle
//   of the same shape, or a header whose offsets or permutations point at
//   another record, fails the check instead of being computed.
// Sections follow each other in that order, each on a 4096-byte boundary,
// gaps zero-filled; the bundle is padded to a multiple of 4096 bytes,
// sparrow.file_bytes in all. The file ends there, or is followed by exactly
// one calibration trailer (formats/calibration.h, written by `sparrow
// calibrate`); anything else after the bundle's end is refused.
//
// Records ("units"), each part quantized along its length in blocks of 32
// (parts are zero-padded to a whole number of blocks) or stored F16/F32:
//   neuron layout:  record j < d_ff     = [gate row j | up row j | down column j]
//   dip layout:     record i < d_model  = [up column i | gate column i]   (kind kDipInput)
//                   record j < d_ff     = [down column j]                 (kind kDipOutput)
//   split layout:   record j < d_ff     = [up row j]                      (kind kUpRow)
//                   record j < d_ff     = [gate row j]                    (kind kGateRow)
//                   record j < d_ff     = [down column j]                 (kind kDipOutput)
//                   (each matrix on its own, so one can be read in full and
//                   rank the neurons of the other two: the up/gate pruning
//                   baselines of the DIP paper)
// A per-(layer, kind) permutation maps unit id -> record slot on disk
// (identity until a placement step reorders neurons).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/calibration.h"
#include "formats/gguf.h"
#include "base/tensor_type.h"

namespace sparrow::bundle {

inline constexpr char kMagic[8] = {'S', 'P', 'R', 'W', 'B', 'N', 'D', 'L'};
// Version 2: records' CRCs are seeded with their place (version 1 bundles
// are refused with a "re-convert" message).
inline constexpr uint32_t kVersion = 2;
inline constexpr uint64_t kSectionAlignment = 4096;
inline constexpr uint32_t kRecordCrcBytes = 4;
inline constexpr uint64_t kFixedHeaderBytes = 64;
// A header region larger than this is rejected before anything is allocated
// (a 256k-token vocabulary with merges needs tens of MiB).
inline constexpr uint64_t kMaxHeaderBytes = uint64_t{1} << 30;

// Metadata keys of the header body. Group geometry is stored as parallel
// arrays indexed by group; each group's permutation under its own key.
namespace keys {
inline constexpr char kLayout[] = "sparrow.layout";            // string: "neuron" | "dip" | "split"
inline constexpr char kRecordType[] = "sparrow.record_type";   // string: "f32" | "f16" | "q8_0" | "q4_0" | "q4_0s"
inline constexpr char kSource[] = "sparrow.source";            // string: source file name (informational)
inline constexpr char kPlacement[] = "sparrow.placement";      // string: how the records were placed (informational; absent: in unit order)
inline constexpr char kFileBytes[] = "sparrow.file_bytes";     // u64: the bundle's size (the file's, less any calibration trailer)
inline constexpr char kResidentOffset[] = "sparrow.resident.offset";  // u64
inline constexpr char kResidentBytes[] = "sparrow.resident.bytes";    // u64
inline constexpr char kResidentCrc[] = "sparrow.resident.crc32c";     // u32
inline constexpr char kGroupLayer[] = "sparrow.groups.layer";                  // u32[]
inline constexpr char kGroupKind[] = "sparrow.groups.kind";                    // u32[] (RecordKind)
inline constexpr char kGroupUnits[] = "sparrow.groups.n_units";                // u32[]
inline constexpr char kGroupParts[] = "sparrow.groups.parts";                  // u32[]
inline constexpr char kGroupPartElems[] = "sparrow.groups.part_elems";         // u32[]
inline constexpr char kGroupPartPadded[] = "sparrow.groups.part_padded_elems"; // u32[]
inline constexpr char kGroupPartBytes[] = "sparrow.groups.part_bytes";         // u32[]
inline constexpr char kGroupRecordBytes[] = "sparrow.groups.record_bytes";     // u32[]
inline constexpr char kGroupOffset[] = "sparrow.groups.offset";                // u64[]
// f32[]: the largest |block scale| in each group's records (quantized
// record types; optional: bundles written before it lack it, and it reads
// as 0, unknown). It bounds every term of a sum over the group's records
// before they are read (simd/axpy_int.h's step).
inline constexpr char kGroupLargestScale[] = "sparrow.groups.largest_scale";
// "sparrow.groups.<index>.slot_of_unit": u32[n_units], a permutation.
std::string GroupPermutationKey(size_t group_index);
}  // namespace keys

enum class Layout : uint32_t { kNeuron = 0, kDip = 1, kSplit = 2 };
std::string_view LayoutName(Layout layout);
std::optional<Layout> ParseLayout(std::string_view name);

enum class RecordKind : uint32_t {
  kNeuron = 0,     // [gate row | up row | down column], one per FFN neuron
  kDipInput = 1,   // [up column | gate column], one per model input dim
  kDipOutput = 2,  // [down column], one per FFN neuron (dip and split layouts)
  kUpRow = 3,      // [up row], one per FFN neuron (split layout)
  kGateRow = 4,    // [gate row], one per FFN neuron (split layout)
};
std::string_view RecordKindName(RecordKind kind);
inline constexpr int kRecordKinds = 5;
// The record kinds a layout stores for each layer, in file order.
std::vector<RecordKind> LayoutKinds(Layout layout);
// The types records may be stored in (TypeAbility::kRecord in
// base/tensor_type.cc: F32, F16, Q8_0, Q4_0, Q4_0S).
bool IsRecordType(TensorType type);

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
  float largest_scale = 0.0f;      // keys::kGroupLargestScale; 0: unknown
  std::vector<uint32_t> slot_of_unit;  // unit id -> disk slot

  uint64_t UnitOffset(uint32_t unit) const {
    return offset + uint64_t{slot_of_unit[unit]} * record_bytes;
  }
  uint64_t section_bytes() const { return uint64_t{n_units} * record_bytes; }
};

// The geometry (everything but offset and permutation) of a group for a
// model with these dimensions; InputError for a record type that is not one
// of IsRecordType's or sizes that overflow 32 bits.
UnitGroup GroupGeometry(uint32_t layer, RecordKind kind, uint32_t d_model,
                        uint32_t d_ff, TensorType record_type);

// The initial CRC of the record of `unit` in `group` of the bundle with this
// id: binds the record's checksum to its place.
uint32_t RecordSeed(uint64_t bundle_id, const UnitGroup& group, uint32_t unit);
// Zeroes the padding after the payload and stores the record's CRC32C in
// its last 4 bytes (writers); RecordCrcMatches checks it (readers).
void SealRecord(const UnitGroup& group, uint64_t bundle_id, uint32_t unit, uint8_t* record);
bool RecordCrcMatches(const UnitGroup& group, uint64_t bundle_id, uint32_t unit,
                      const uint8_t* record);

// The bundle's file, opened once by Bundle::Open and kept open: every later
// read (resident section, records, loaders) goes through this descriptor,
// so a file renamed over the path while a model runs is never mixed in.
class BundleFile;

class Bundle {
 public:
  // Opens the file (once: see BundleFile), reads and validates the fixed
  // header and the header body (CRC32C, structure, section bounds against
  // the file size), and the calibration trailer when the file has one.
  // Reads nothing else.
  static Bundle Open(const std::string& path);
  // True when the file starts with the bundle magic (for format detection).
  static bool LooksLikeBundle(const std::string& path);

  const std::string& path() const { return path_; }
  // The descriptor Open() read the header through, open as long as any copy
  // of this Bundle lives. Loaders read records through it (or reopen the
  // same file through it), never through the path.
  int fd() const;
  // The random id written in the fixed header (seeds the record CRCs).
  uint64_t bundle_id() const { return bundle_id_; }
  // The whole file, calibration trailer included.
  uint64_t file_size() const { return file_size_; }
  // The bundle's own bytes (sparrow.file_bytes): where a trailer starts.
  uint64_t bundle_bytes() const { return bundle_bytes_; }
  // The header CRC32C stored in (and checked against) the fixed header.
  uint32_t header_crc() const { return header_crc_; }
  // The trailer's calibration; nullopt when the file ends with the bundle.
  const std::optional<Calibration>& calibration() const { return calibration_; }
  // Metadata: the model's keys, its tokenizer, and sparrow.*.
  const gguf::GgufFile& header() const { return *header_; }
  Layout layout() const { return layout_; }
  TensorType record_type() const { return record_type_; }
  // The FFN shape the groups were checked against (from the model's
  // <arch>.block_count, embedding_length and feed_forward_length).
  uint32_t n_layers() const { return n_layers_; }
  uint32_t d_model() const { return d_model_; }
  uint32_t d_ff() const { return d_ff_; }
  // End of the header region (fixed header + header body).
  uint64_t header_bytes() const { return header_bytes_; }
  uint64_t resident_offset() const { return resident_offset_; }
  uint64_t resident_bytes() const { return resident_bytes_; }
  uint32_t resident_crc() const { return resident_crc_; }
  const std::vector<UnitGroup>& groups() const { return groups_; }
  // nullptr when the layout has no such kind.
  const UnitGroup* FindGroup(uint32_t layer, RecordKind kind) const;

  // The resident section's GGUF header alone (metadata and tensor infos,
  // null data pointers), parsed from its first bytes, for planning memory
  // before LoadResident. Not checksummed: LoadResident checks the section.
  // InputError if it does not parse from the first kMaxResidentHeaderBytes.
  static constexpr uint64_t kMaxResidentHeaderBytes = uint64_t{16} << 20;
  gguf::GgufFile ReadResidentHeader() const;

  // A resident tensor that LoadResident hands over a few rows at a time
  // instead of keeping: rows(first_row, count, bytes) sees every row once,
  // in order, before the section's checksum is known to match.
  struct PassedTensor {
    std::string name;
    std::function<void(uint64_t first_row, uint64_t count, const uint8_t* bytes)> rows;
  };

  // Reads the resident section into memory, checks its CRC32C and parses it.
  // InputError ("... resident section checksum mismatch ...") on corruption.
  // The returned file owns its bytes; tensor data pointers stay valid while
  // it lives. With `pass` naming a tensor of the section, that tensor is
  // read through a buffer of about 256 KiB instead: the whole pages of it
  // in the returned file's memory are never written and stay unbacked
  // (PassedTensorBytes), and its data pointer must not be read. The section
  // changing between the header's read and the load is an InputError.
  gguf::GgufFile LoadResident(const PassedTensor* pass = nullptr) const;
  // The DRAM that passing `t` (a tensor of `header`, ReadResidentHeader's)
  // leaves out of LoadResident's memory.
  static uint64_t PassedTensorBytes(const gguf::GgufFile& header, const gguf::TensorInfo& t);

  // Reads the whole file and checks every checksum (resident section, every
  // record), e.g. for `sparrow info --verify`; the first mismatch is thrown
  // as LoadResident/VerifyRecord would. progress(done, total) counts bytes.
  void VerifyAll(const std::function<void(uint64_t, uint64_t)>& progress = nullptr) const;

  // Reads the records in disk slots [first_slot, first_slot + count) of
  // `group` into dst (count * record_bytes bytes), not verified, leaving no
  // copy in the page cache. InputError on an I/O error or a short file.
  void ReadRecords(const UnitGroup& group, uint32_t first_slot, uint32_t count,
                   uint8_t* dst) const;

  // Reads bytes [offset, offset + n) of the resident section into dst, not
  // verified, leaving no copy in the page cache (one row of a table left on
  // flash). InputError naming `what` on an I/O error or a short file.
  void ReadResidentBytes(uint64_t offset, uint64_t n, uint8_t* dst, const char* what) const;

  // Checks the CRC32C at the end of a record just read (record_bytes bytes
  // at `record`); InputError naming the file, layer, kind, unit and file
  // offset when it does not match.
  void VerifyRecord(const UnitGroup& group, uint32_t unit,
                    const uint8_t* record) const;

 private:
  Bundle() = default;
  std::string path_;
  std::shared_ptr<const BundleFile> file_;
  uint64_t bundle_id_ = 0;
  uint64_t file_size_ = 0;
  uint64_t bundle_bytes_ = 0;
  uint32_t header_crc_ = 0;
  std::optional<Calibration> calibration_;
  std::shared_ptr<gguf::GgufFile> header_;
  Layout layout_ = Layout::kNeuron;
  TensorType record_type_ = TensorType::kF32;
  uint32_t n_layers_ = 0;
  uint32_t d_model_ = 0;
  uint32_t d_ff_ = 0;
  uint64_t header_bytes_ = 0;
  uint64_t resident_offset_ = 0;
  uint64_t resident_bytes_ = 0;
  uint32_t resident_crc_ = 0;
  std::vector<UnitGroup> groups_;
};

// Writing bundles: formats/bundle_writer.h (BundleWriter). Converting a
// GGUF into a bundle (quantizing records) is the engine's job: src/convert.h.

}  // namespace sparrow::bundle
