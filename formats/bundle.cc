// Bundle reader: validates the whole header at open so that later reads can
// trust every offset and size, then checks the resident section's and each
// record's CRC32C as they are read.
#include "formats/bundle.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>

#include "base/checked_math.h"
#include "base/crc32c.h"
#include "base/error.h"
#include "base/huge_pages.h"

namespace sparrow::bundle {
namespace {

// Every read of a bundle here names exactly the bytes it wants. Without
// this the kernel's read-ahead past the magic, the header or the resident
// section pulled megabytes of records into the page cache: DRAM outside
// the budget, left behind even by --io direct. Every descriptor needs it:
// one plain read marks pages for read-ahead, and a later read of them
// starts it again, whatever that descriptor was advised (Linux 6.18).
void AdviseExactReads(int fd) {
#if defined(POSIX_FADV_RANDOM)
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
#else
  (void)fd;
#endif
}

}  // namespace

class BundleFile {
 public:
  explicit BundleFile(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) {
      const int err = errno;
      ThrowInputError("cannot open '", path, "': ", std::strerror(err));
    }
    AdviseExactReads(fd_);
  }
  BundleFile(const BundleFile&) = delete;
  BundleFile& operator=(const BundleFile&) = delete;
  ~BundleFile() { ::close(fd_); }

  int fd() const { return fd_; }

  uint64_t Size() const {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) {
      const int err = errno;
      ThrowInputError("cannot stat '", path_, "': ", std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) ThrowInputError(path_, ": not a regular file");
    return static_cast<uint64_t>(st.st_size);
  }

  // Reads exactly `n` bytes at `offset`; InputError naming `what` otherwise.
  // With `uncached`, the page cache is asked to forget each 64 MiB as soon as
  // it is copied out: the caller keeps its own copy, and a second one in the
  // page cache would take DRAM that the budget does not see (it counts
  // against a cgroup memory limit, and evicts neurons we could cache).
  void ReadAt(void* dst, uint64_t n, uint64_t offset, const char* what,
              bool uncached = false) const {
    auto* p = static_cast<uint8_t*>(dst);
    while (n > 0) {
      const size_t chunk = static_cast<size_t>(
          std::min<uint64_t>(n, uncached ? uint64_t{64} << 20 : uint64_t{1} << 30));
      const ssize_t got = ::pread(fd_, p, chunk, static_cast<off_t>(offset));
      if (got < 0) {
        if (errno == EINTR) continue;
        const int err = errno;
        ThrowInputError(path_, ": cannot read the ", what, ": ", std::strerror(err));
      }
      if (got == 0) {
        ThrowInputError(path_, ": truncated: the file ends inside the ", what);
      }
#if defined(POSIX_FADV_DONTNEED)
      if (uncached) {
        // To the end of the file, not just the bytes read, and from the
        // start of the page holding the first byte: the kernel drops only
        // whole folios inside the range, so a read that starts inside a
        // page (one embedding row) or a large folio (or read-ahead)
        // reaching past the last byte read would keep them cached.
        static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
        (void)::posix_fadvise(fd_, static_cast<off_t>(offset / page * page), 0,
                              POSIX_FADV_DONTNEED);
      }
#endif
      p += got;
      n -= static_cast<uint64_t>(got);
      offset += static_cast<uint64_t>(got);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
};

int Bundle::fd() const { return file_->fd(); }

namespace {

uint32_t LoadLE32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) |
         (uint32_t{p[3]} << 24);
}

uint64_t LoadLE64(const uint8_t* p) {
  return uint64_t{LoadLE32(p)} | (uint64_t{LoadLE32(p + 4)} << 32);
}

std::string Hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

// Typed access to the header body's sparrow.* keys: present, exactly the
// type the format defines, or an InputError naming the key.
class HeaderKeys {
 public:
  HeaderKeys(const gguf::GgufFile& header, const std::string& path)
      : header_(header), path_(path) {}

  const gguf::Value& Require(std::string_view key, gguf::ValueType type) const {
    const gguf::Value* v = header_.Find(key);
    if (v == nullptr) ThrowInputError(path_, ": bundle header lacks '", key, "'");
    if (v->type != type) {
      ThrowInputError(path_, ": bundle header key '", key, "' is ", gguf::TypeDescription(*v),
                      ", expected ", gguf::ValueTypeName(type));
    }
    return *v;
  }
  uint64_t U64(std::string_view key) const {
    return *Require(key, gguf::ValueType::kU64).AsUInt();
  }
  uint32_t U32(std::string_view key) const {
    return static_cast<uint32_t>(*Require(key, gguf::ValueType::kU32).AsUInt());
  }
  std::string String(std::string_view key) const {
    return *Require(key, gguf::ValueType::kString).AsString();
  }
  // An array of `element` integers, `count` long when count is given.
  std::vector<uint64_t> UIntArray(std::string_view key, gguf::ValueType element,
                                  std::optional<size_t> count) const {
    const gguf::Array& a = *Require(key, gguf::ValueType::kArray).AsArray();
    if (a.element_type != element) {
      ThrowInputError(path_, ": bundle header key '", key, "' is an array of ",
                      gguf::ValueTypeName(a.element_type), ", expected ",
                      gguf::ValueTypeName(element));
    }
    if (count && a.elements.size() != *count) {
      ThrowInputError(path_, ": bundle header key '", key, "' has ", a.elements.size(),
                      " elements, expected ", *count);
    }
    std::vector<uint64_t> out;
    out.reserve(a.elements.size());
    for (const gguf::Value& e : a.elements) out.push_back(*e.AsUInt());
    return out;
  }
  // An array of `count` f32, or nothing where the key is absent.
  std::vector<float> OptionalFloatArray(std::string_view key, size_t count) const {
    if (header_.Find(key) == nullptr) return {};
    const gguf::Array& a = *Require(key, gguf::ValueType::kArray).AsArray();
    if (a.element_type != gguf::ValueType::kF32 || a.elements.size() != count) {
      ThrowInputError(path_, ": bundle header key '", key, "' is not an array of ", count, " ",
                      gguf::ValueTypeName(gguf::ValueType::kF32));
    }
    std::vector<float> out;
    out.reserve(count);
    for (const gguf::Value& e : a.elements) out.push_back(static_cast<float>(*e.AsFloat()));
    return out;
  }

 private:
  const gguf::GgufFile& header_;
  const std::string& path_;
};

// One of the model's <arch>.* dimensions, as the model config reads it.
uint32_t ModelDim(const gguf::GgufFile& header, const std::string& path,
                  const std::string& arch, const char* name) {
  const std::string key = arch + "." + name;
  const std::optional<uint64_t> v = header.GetUInt(key);
  if (!v) ThrowInputError(path, ": bundle header lacks the model's '", key, "'");
  if (*v == 0 || *v > std::numeric_limits<uint32_t>::max()) {
    ThrowInputError(path, ": bundle header '", key, "' = ", *v, " is out of range");
  }
  return static_cast<uint32_t>(*v);
}

// The calibration trailer after the bundle's declared end. A broken one
// makes the file unusable (it would silently change how runs prune), so it
// is refused, with how to drop it: the bundle's own bytes are intact.
Calibration ReadCalibrationTrailer(const BundleFile& file, const Bundle& b) {
  const uint64_t extra = b.file_size() - b.bundle_bytes();
  const std::string drop = StrCat("; `truncate -s ", b.bundle_bytes(), " ", b.path(),
                                  "` drops it and keeps the bundle");
  if (extra > kMaxCalibrationTrailerBytes) {
    ThrowInputError(b.path(), ": the file has ", b.file_size(), " bytes but the bundle header says ",
                    b.bundle_bytes(), ", and the ", extra,
                    " bytes after it are too many for a calibration section", drop);
  }
  std::vector<uint8_t> trailer(extra);
  file.ReadAt(trailer.data(), trailer.size(), b.bundle_bytes(), "calibration section");
  try {
    return ParseCalibration(trailer.data(), trailer.size(), b.header_crc(), b.path());
  } catch (const InputError& e) {
    throw InputError(e.what() + drop);
  }
}

// Not the bundle magic, but a damaged copy of it: most of its bytes, or a
// .sparrow file that is not a GGUF either.
bool DamagedBundleMagic(const uint8_t* magic, const std::string& path) {
  if (std::memcmp(magic, "GGUF", 4) == 0) return false;
  int same = 0;
  for (size_t i = 0; i < sizeof(kMagic); ++i) same += magic[i] == static_cast<uint8_t>(kMagic[i]);
  const std::string_view suffix = ".sparrow";
  const bool named = path.size() >= suffix.size() &&
                     std::string_view(path).substr(path.size() - suffix.size()) == suffix;
  return same >= 5 || named;
}

std::string GroupName(const UnitGroup& g) {
  return StrCat("layer ", g.layer, " ", RecordKindName(g.kind), " section");
}

}  // namespace

std::string_view LayoutName(Layout layout) {
  switch (layout) {
    case Layout::kNeuron: return "neuron";
    case Layout::kDip: return "dip";
    case Layout::kSplit: return "split";
  }
  return "unknown";
}

std::optional<Layout> ParseLayout(std::string_view name) {
  if (name == "neuron") return Layout::kNeuron;
  if (name == "dip") return Layout::kDip;
  if (name == "split") return Layout::kSplit;
  return std::nullopt;
}

std::string_view RecordKindName(RecordKind kind) {
  switch (kind) {
    case RecordKind::kNeuron: return "neuron";
    case RecordKind::kDipInput: return "dip-input";
    case RecordKind::kDipOutput: return "dip-output";
    case RecordKind::kUpRow: return "up-row";
    case RecordKind::kGateRow: return "gate-row";
  }
  return "unknown";
}

std::vector<RecordKind> LayoutKinds(Layout layout) {
  if (layout == Layout::kDip) return {RecordKind::kDipInput, RecordKind::kDipOutput};
  if (layout == Layout::kSplit) {
    return {RecordKind::kUpRow, RecordKind::kGateRow, RecordKind::kDipOutput};
  }
  return {RecordKind::kNeuron};
}

bool IsRecordType(TensorType type) { return TensorTypeCan(type, TypeAbility::kRecord); }

std::string keys::GroupPermutationKey(size_t group_index) {
  return StrCat("sparrow.groups.", group_index, ".slot_of_unit");
}

UnitGroup GroupGeometry(uint32_t layer, RecordKind kind, uint32_t d_model, uint32_t d_ff,
                        TensorType record_type) {
  if (!IsRecordType(record_type)) {
    ThrowInputError("records cannot be stored as ", TensorTypeName(record_type),
                    " (use ", TensorTypeNames(TypeAbility::kRecord), ")");
  }
  UnitGroup g;
  g.layer = layer;
  g.kind = kind;
  switch (kind) {
    case RecordKind::kNeuron:
      g.n_units = d_ff;
      g.parts = 3;
      g.part_elems = d_model;
      break;
    case RecordKind::kDipInput:
      g.n_units = d_model;
      g.parts = 2;
      g.part_elems = d_ff;
      break;
    case RecordKind::kDipOutput:
    case RecordKind::kUpRow:
    case RecordKind::kGateRow:
      g.n_units = d_ff;
      g.parts = 1;
      g.part_elems = d_model;
      break;
  }
  const uint64_t block = GetTensorTypeInfo(record_type).block_elems;
  uint64_t padded = 0, part_bytes = 0, payload = 0, record = 0;
  if (!CheckedAlignUp(g.part_elems, block, &padded) ||
      !TensorTypeBytes(record_type, padded, &part_bytes) ||
      !CheckedMul(part_bytes, g.parts, &payload) || !CheckedAlignUp(payload, 4, &record) ||
      !CheckedAdd(record, kRecordCrcBytes, &record) ||
      record > std::numeric_limits<uint32_t>::max()) {
    ThrowInputError("records of ", g.parts, " x ", g.part_elems, " ",
                    TensorTypeName(record_type), " elements are too large");
  }
  g.part_padded_elems = static_cast<uint32_t>(padded);
  g.part_bytes = static_cast<uint32_t>(part_bytes);
  g.payload_bytes = static_cast<uint32_t>(payload);
  g.record_bytes = static_cast<uint32_t>(record);
  return g;
}

uint32_t RecordSeed(uint64_t bundle_id, const UnitGroup& group, uint32_t unit) {
  uint8_t place[20];
  for (int i = 0; i < 8; ++i) place[i] = static_cast<uint8_t>(bundle_id >> (8 * i));
  const uint32_t words[3] = {group.layer, static_cast<uint32_t>(group.kind), unit};
  for (int w = 0; w < 3; ++w) {
    for (int i = 0; i < 4; ++i) place[8 + 4 * w + i] = static_cast<uint8_t>(words[w] >> (8 * i));
  }
  return Crc32c(place, sizeof(place));
}

void SealRecord(const UnitGroup& group, uint64_t bundle_id, uint32_t unit, uint8_t* record) {
  const uint32_t crc_at = group.record_bytes - kRecordCrcBytes;
  std::memset(record + group.payload_bytes, 0, crc_at - group.payload_bytes);
  const uint32_t crc = Crc32c(record, crc_at, RecordSeed(bundle_id, group, unit));
  for (uint32_t i = 0; i < 4; ++i) record[crc_at + i] = static_cast<uint8_t>(crc >> (8 * i));
}

bool RecordCrcMatches(const UnitGroup& group, uint64_t bundle_id, uint32_t unit,
                      const uint8_t* record) {
  const uint32_t crc_at = group.record_bytes - kRecordCrcBytes;
  return Crc32c(record, crc_at, RecordSeed(bundle_id, group, unit)) == LoadLE32(record + crc_at);
}

bool Bundle::LooksLikeBundle(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  AdviseExactReads(fd);
  uint8_t magic[sizeof(kMagic)];
  const ssize_t got = ::pread(fd, magic, sizeof(magic), 0);
  ::close(fd);
  if (got != static_cast<ssize_t>(sizeof(magic))) return false;
  // A bundle whose magic was damaged is still a bundle (Open() then says
  // so), not "not a GGUF".
  return std::memcmp(magic, kMagic, sizeof(magic)) == 0 || DamagedBundleMagic(magic, path);
}

Bundle Bundle::Open(const std::string& path) {
  Bundle b;
  b.path_ = path;
  b.file_ = std::make_shared<const BundleFile>(path);
  const BundleFile& file = *b.file_;
  b.file_size_ = file.Size();

  // Fixed header.
  if (b.file_size_ < kFixedHeaderBytes) {
    ThrowInputError(path, ": not a Sparrow bundle (", b.file_size_,
                    " bytes, too short for the 64-byte header)");
  }
  uint8_t fixed[kFixedHeaderBytes];
  file.ReadAt(fixed, sizeof(fixed), 0, "fixed header");
  if (std::memcmp(fixed, kMagic, sizeof(kMagic)) != 0) {
    if (DamagedBundleMagic(fixed, path)) {
      ThrowInputError(path, ": damaged Sparrow bundle: its first 8 bytes are '",
                      gguf::Printable(std::string(reinterpret_cast<const char*>(fixed), 8)),
                      "', not the bundle magic 'SPRWBNDL'");
    }
    const bool gguf = std::memcmp(fixed, "GGUF", 4) == 0;
    ThrowInputError(path, ": not a Sparrow bundle (bad magic",
                    gguf ? "; it is a GGUF file" : "", ")");
  }
  const uint32_t version = LoadLE32(fixed + 8);
  if (version == 1) {
    ThrowInputError(path, ": bundle version 1 was written by an older Sparrow (its records are "
                    "not bound to their place); re-convert it: sparrow convert -m SOURCE.gguf -o ",
                    path, " --force");
  }
  if (version != kVersion) {
    ThrowInputError(path, ": bundle version ", version,
                    " is not supported (this build reads version ", kVersion, ")");
  }
  const uint64_t header_end = LoadLE64(fixed + 16);
  if (header_end <= kFixedHeaderBytes || header_end > kMaxHeaderBytes) {
    ThrowInputError(path, ": corrupted bundle header (header region length ", header_end,
                    " is invalid)");
  }
  if (header_end > b.file_size_) {
    ThrowInputError(path, ": truncated: the header region ends at byte ", header_end,
                    " but the file has ", b.file_size_, " bytes");
  }
  std::vector<uint8_t> body(header_end - kFixedHeaderBytes);
  file.ReadAt(body.data(), body.size(), kFixedHeaderBytes, "header");
  const uint32_t stored_crc = LoadLE32(fixed + 60);
  const uint32_t crc = Crc32c(body.data(), body.size(), Crc32c(fixed, 60));
  if (crc != stored_crc) {
    ThrowInputError(path, ": header checksum mismatch (stored ", Hex32(stored_crc),
                    ", computed ", Hex32(crc), "): the bundle header is corrupted");
  }
  for (size_t i = 12; i < 60; ++i) {
    if ((i < 16 || i >= 32) && fixed[i] != 0) {
      ThrowInputError(path, ": bundle header has unknown flags (byte ", i,
                      " is not zero); written by a newer Sparrow?");
    }
  }
  b.header_bytes_ = header_end;
  b.bundle_id_ = LoadLE64(fixed + 24);
  b.header_ = std::make_shared<gguf::GgufFile>(
      gguf::GgufFile::FromBytes(std::move(body), path + " (bundle header)"));
  const gguf::GgufFile& header = *b.header_;
  if (!header.tensors().empty()) {
    ThrowInputError(path, ": bundle header holds ", header.tensors().size(),
                    " tensors (it must hold metadata only)");
  }

  // Layout, record type and the model's FFN shape.
  const HeaderKeys keys(header, path);
  const std::string layout_name = keys.String(keys::kLayout);
  const std::optional<Layout> layout = ParseLayout(layout_name);
  if (!layout) {
    ThrowInputError(path, ": unknown bundle layout '", gguf::Printable(layout_name), "'");
  }
  b.layout_ = *layout;
  const std::string type_name = keys.String(keys::kRecordType);
  const std::optional<TensorType> type = ParseTensorType(type_name);
  if (!type || !IsRecordType(*type)) {
    ThrowInputError(path, ": unsupported record type '", gguf::Printable(type_name), "'");
  }
  b.record_type_ = *type;
  const std::optional<std::string> arch = header.GetString("general.architecture");
  if (!arch) ThrowInputError(path, ": bundle header lacks general.architecture");
  b.n_layers_ = ModelDim(header, path, *arch, "block_count");
  b.d_model_ = ModelDim(header, path, *arch, "embedding_length");
  b.d_ff_ = ModelDim(header, path, *arch, "feed_forward_length");

  // The bundle must be exactly as long as written: a copy cut short
  // anywhere, even in the final padding, is reported as truncated. What
  // follows it must be a calibration trailer.
  const uint64_t file_bytes = keys.U64(keys::kFileBytes);
  if (file_bytes > b.file_size_) {
    ThrowInputError(path, ": truncated: the file has ", b.file_size_,
                    " bytes but the bundle header says ", file_bytes);
  }
  b.bundle_bytes_ = file_bytes;
  b.header_crc_ = stored_crc;
  if (file_bytes < b.file_size_) b.calibration_ = ReadCalibrationTrailer(file, b);

  // Sections: the resident one, then one per (layer, kind) in canonical order.
  struct Extent {
    uint64_t begin, end;
    std::string name;
  };
  std::vector<Extent> extents;
  const auto add_extent = [&](uint64_t offset, uint64_t bytes, const std::string& name) {
    uint64_t end = 0;
    if (offset % kSectionAlignment != 0) {
      ThrowInputError(path, ": ", name, " offset ", offset, " is not a multiple of ",
                      kSectionAlignment);
    }
    if (offset < header_end) {
      ThrowInputError(path, ": ", name, " at offset ", offset,
                      " overlaps the header region (which ends at ", header_end, ")");
    }
    if (!CheckedAdd(offset, bytes, &end) || end > file_bytes) {
      ThrowInputError(path, ": truncated: the ", name, " [", offset, ", +", bytes,
                      ") extends past the end of the bundle (", file_bytes, " bytes)");
    }
    extents.push_back({offset, end, name});
  };

  b.resident_offset_ = keys.U64(keys::kResidentOffset);
  b.resident_bytes_ = keys.U64(keys::kResidentBytes);
  b.resident_crc_ = keys.U32(keys::kResidentCrc);
  if (b.resident_bytes_ == 0) ThrowInputError(path, ": the resident section is empty");
  add_extent(b.resident_offset_, b.resident_bytes_, "resident section");

  const std::vector<RecordKind> kinds = LayoutKinds(b.layout_);
  const size_t n_groups = size_t{b.n_layers_} * kinds.size();
  using gguf::ValueType;
  const auto layer = keys.UIntArray(keys::kGroupLayer, ValueType::kU32, n_groups);
  const auto kind = keys.UIntArray(keys::kGroupKind, ValueType::kU32, n_groups);
  const auto units = keys.UIntArray(keys::kGroupUnits, ValueType::kU32, n_groups);
  const auto parts = keys.UIntArray(keys::kGroupParts, ValueType::kU32, n_groups);
  const auto part_elems = keys.UIntArray(keys::kGroupPartElems, ValueType::kU32, n_groups);
  const auto padded = keys.UIntArray(keys::kGroupPartPadded, ValueType::kU32, n_groups);
  const auto part_bytes = keys.UIntArray(keys::kGroupPartBytes, ValueType::kU32, n_groups);
  const auto record_bytes = keys.UIntArray(keys::kGroupRecordBytes, ValueType::kU32, n_groups);
  const auto offset = keys.UIntArray(keys::kGroupOffset, ValueType::kU64, n_groups);
  const std::vector<float> largest_scale =
      keys.OptionalFloatArray(keys::kGroupLargestScale, n_groups);

  b.groups_.reserve(n_groups);
  for (size_t i = 0; i < n_groups; ++i) {
    const uint32_t want_layer = static_cast<uint32_t>(i / kinds.size());
    const RecordKind want_kind = kinds[i % kinds.size()];
    UnitGroup g;
    try {
      g = GroupGeometry(want_layer, want_kind, b.d_model_, b.d_ff_, b.record_type_);
    } catch (const InputError& e) {
      ThrowInputError(path, ": ", e.what());
    }
    if (layer[i] != want_layer || kind[i] != static_cast<uint32_t>(want_kind)) {
      ThrowInputError(path, ": bundle group ", i, " is layer ", layer[i], " kind ", kind[i],
                      ", expected layer ", want_layer, " ", RecordKindName(want_kind),
                      " (groups must be in layer, kind order)");
    }
    const auto check = [&](const char* what, uint64_t stored, uint64_t expected) {
      if (stored != expected) {
        ThrowInputError(path, ": ", GroupName(g), " has ", what, " ", stored, ", expected ",
                        expected, " for a ", LayoutName(b.layout_), " ",
                        TensorTypeName(b.record_type_), " bundle of d_model ", b.d_model_,
                        ", d_ff ", b.d_ff_);
      }
    };
    check("n_units", units[i], g.n_units);
    check("parts", parts[i], g.parts);
    check("part_elems", part_elems[i], g.part_elems);
    check("part_padded_elems", padded[i], g.part_padded_elems);
    check("part_bytes", part_bytes[i], g.part_bytes);
    check("record_bytes", record_bytes[i], g.record_bytes);
    g.offset = offset[i];
    if (!largest_scale.empty()) {
      if (!(largest_scale[i] >= 0.0f) || !std::isfinite(largest_scale[i])) {
        ThrowInputError(path, ": ", GroupName(g), " has largest block scale ", largest_scale[i],
                        ", expected a finite value >= 0");
      }
      g.largest_scale = largest_scale[i];
    }
    add_extent(g.offset, g.section_bytes(), GroupName(g));

    const std::string perm_key = keys::GroupPermutationKey(i);
    const auto perm = keys.UIntArray(perm_key, ValueType::kU32, g.n_units);
    std::vector<bool> seen(g.n_units, false);
    g.slot_of_unit.resize(g.n_units);
    for (uint32_t u = 0; u < g.n_units; ++u) {
      if (perm[u] >= g.n_units || seen[perm[u]]) {
        ThrowInputError(path, ": ", GroupName(g), " permutation is not a permutation (unit ", u,
                        " -> slot ", perm[u], ")");
      }
      seen[perm[u]] = true;
      g.slot_of_unit[u] = static_cast<uint32_t>(perm[u]);
    }
    b.groups_.push_back(std::move(g));
  }

  std::sort(extents.begin(), extents.end(),
            [](const Extent& x, const Extent& y) { return x.begin < y.begin; });
  for (size_t i = 1; i < extents.size(); ++i) {
    if (extents[i].begin < extents[i - 1].end) {
      ThrowInputError(path, ": the ", extents[i - 1].name, " and the ", extents[i].name,
                      " overlap");
    }
  }
  return b;
}

const UnitGroup* Bundle::FindGroup(uint32_t layer, RecordKind kind) const {
  // Open() guarantees layer-major, kind-minor order with every pair present.
  const std::vector<RecordKind> kinds = LayoutKinds(layout_);
  const auto it = std::find(kinds.begin(), kinds.end(), kind);
  if (layer >= n_layers_ || it == kinds.end()) return nullptr;
  return &groups_[size_t{layer} * kinds.size() + static_cast<size_t>(it - kinds.begin())];
}

gguf::GgufFile Bundle::ReadResidentHeader() const {
  // The header is a few KiB (tensor names and shapes; the tokenizer is in
  // the bundle header): read a prefix, twice as long while it falls short,
  // up to kMaxResidentHeaderBytes (a damaged header is not read whole).
  const uint64_t most = std::min(resident_bytes_, kMaxResidentHeaderBytes);
  uint64_t n = std::min<uint64_t>(most, 64u << 10);
  for (;;) {
    std::vector<uint8_t> prefix(n);
    file_->ReadAt(prefix.data(), n, resident_offset_, "resident section", /*uncached=*/true);
    try {
      return gguf::GgufFile::HeaderFromPrefix(std::move(prefix), resident_bytes_,
                                              path_ + " (resident section)");
    } catch (const InputError&) {
      if (n == most) throw;
    }
    n = std::min(most, 2 * n);
  }
}

uint64_t Bundle::PassedTensorBytes(const gguf::GgufFile& header, const gguf::TensorInfo& t) {
  return WholePageBytesWithin(header.data_offset() + t.offset, t.n_bytes);
}

gguf::GgufFile Bundle::LoadResident(const PassedTensor* pass) const {
  const BundleFile& file = *file_;
  const std::string name = path_ + " (resident section)";
  // A fresh anonymous mapping, on small pages: the pages of a passed
  // tensor, never written, are never backed.
  HugePageBuffer bytes(resident_bytes_, /*advise_huge_pages=*/false);
  uint64_t skip_begin = resident_bytes_, skip_end = resident_bytes_, row_bytes = 1;
  gguf::TensorInfo planned;
  if (pass != nullptr) {
    const gguf::GgufFile header = ReadResidentHeader();
    const gguf::TensorInfo* t = header.FindTensor(pass->name);
    if (t == nullptr) throw std::logic_error("Bundle::LoadResident: no tensor " + pass->name);
    planned = *t;
    skip_begin = header.data_offset() + t->offset;
    skip_end = skip_begin + t->n_bytes;
    row_bytes = t->n_bytes / std::max<uint64_t>(1, t->rows());
  }
  // [0, skip_begin) and [skip_end, size) into `bytes`; the passed tensor a
  // few rows at a time through `piece`; the checksum over all of it in order.
  uint32_t crc = 0;
  auto keep = [&](uint64_t from, uint64_t to) {
    if (to <= from) return;
    file.ReadAt(bytes.data() + from, to - from, resident_offset_ + from, "resident section",
                /*uncached=*/true);
    crc = Crc32c(bytes.data() + from, to - from, crc);
  };
  keep(0, skip_begin);
  if (skip_end > skip_begin) {
    const uint64_t per_piece = std::max<uint64_t>(1, (256u << 10) / row_bytes);
    std::vector<uint8_t> piece(per_piece * row_bytes);
    for (uint64_t row = 0, at = skip_begin; at < skip_end; row += per_piece) {
      const uint64_t n = std::min(per_piece * row_bytes, skip_end - at);
      file.ReadAt(piece.data(), n, resident_offset_ + at, "resident section", /*uncached=*/true);
      crc = Crc32c(piece.data(), n, crc);
      pass->rows(row, n / row_bytes, piece.data());
      at += n;
    }
  }
  keep(skip_end, resident_bytes_);
  if (crc != resident_crc_) {
    ThrowInputError(path_, ": resident section checksum mismatch (stored ", Hex32(resident_crc_),
                    ", computed ", Hex32(crc), "): the bundle is corrupted");
  }
  gguf::GgufFile file_out = gguf::GgufFile::FromBuffer(std::move(bytes), resident_bytes_, name);
  if (pass != nullptr) {
    const gguf::TensorInfo* t = file_out.FindTensor(pass->name);
    if (t == nullptr || t->offset != planned.offset || t->n_bytes != planned.n_bytes ||
        t->type != planned.type || t->dims != planned.dims ||
        file_out.data_offset() + t->offset != skip_begin) {
      ThrowInputError(path_, ": the resident section changed while it was loading");
    }
  }
  return file_out;
}

void Bundle::VerifyAll(const std::function<void(uint64_t, uint64_t)>& progress) const {
  uint64_t total = resident_bytes_, done = 0;
  for (const UnitGroup& g : groups_) total += g.section_bytes();
  LoadResident();
  done += resident_bytes_;
  if (progress) progress(done, total);
  std::vector<uint8_t> buffer;
  for (const UnitGroup& g : groups_) {
    std::vector<uint32_t> unit_of_slot(g.n_units);
    for (uint32_t u = 0; u < g.n_units; ++u) unit_of_slot[g.slot_of_unit[u]] = u;
    const uint32_t per_read = std::max<uint32_t>(1, (8u << 20) / g.record_bytes);
    buffer.resize(size_t{per_read} * g.record_bytes);
    for (uint32_t slot = 0; slot < g.n_units; slot += per_read) {
      const uint32_t n = std::min(per_read, g.n_units - slot);
      ReadRecords(g, slot, n, buffer.data());
      for (uint32_t i = 0; i < n; ++i) {
        VerifyRecord(g, unit_of_slot[slot + i], buffer.data() + size_t{i} * g.record_bytes);
      }
      done += uint64_t{n} * g.record_bytes;
      if (progress) progress(done, total);
    }
  }
}

void Bundle::ReadRecords(const UnitGroup& group, uint32_t first_slot, uint32_t count,
                         uint8_t* dst) const {
  if (uint64_t{first_slot} + count > group.n_units) {
    throw std::logic_error("Bundle::ReadRecords: slots past the group's end");
  }
  file_->ReadAt(dst, uint64_t{count} * group.record_bytes,
                group.offset + uint64_t{first_slot} * group.record_bytes, "records",
                /*uncached=*/true);
}

void Bundle::ReadResidentBytes(uint64_t offset, uint64_t n, uint8_t* dst, const char* what) const {
  if (offset > resident_bytes_ || n > resident_bytes_ - offset) {
    throw std::logic_error("Bundle::ReadResidentBytes: bytes past the resident section");
  }
  file_->ReadAt(dst, n, resident_offset_ + offset, what, /*uncached=*/true);
}

void Bundle::VerifyRecord(const UnitGroup& group, uint32_t unit, const uint8_t* record) const {
  if (RecordCrcMatches(group, bundle_id_, unit, record)) return;
  ThrowInputError(path_, ": record checksum mismatch in layer ", group.layer, " ",
                  RecordKindName(group.kind), " unit ", unit, " (file offset ",
                  unit < group.slot_of_unit.size() ? group.UnitOffset(unit) : 0,
                  "): the bundle is corrupted, or the record belongs to another place or "
                  "another bundle");
}

}  // namespace sparrow::bundle
