// Bundle writer. The header body's size is fixed before anything else is
// written (every sparrow.* number has a fixed width in GGUF), so it is
// written once with placeholder offsets to reserve its space and learn where
// the resident section starts, and again with the real values at the end;
// the fixed header with the CRC goes in last.
#include "formats/bundle_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <random>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "base/aligned_buffer.h"
#include "base/checked_math.h"
#include "base/crc32c.h"
#include "base/error.h"
#include "formats/lora_adapter.h"

namespace sparrow::bundle {
namespace {

constexpr size_t kFileBufferBytes = size_t{4} << 20;

bool Exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Distinct for every bundle ever written (64 random bits), never zero.
uint64_t RandomBundleId() {
  std::random_device device;
  uint64_t id = 0;
  while (id == 0) id = (uint64_t{device()} << 32) ^ device();
  return id;
}

gguf::Value UIntArray(gguf::ValueType type, const std::vector<uint64_t>& values) {
  gguf::Array array;
  array.element_type = type;
  array.elements.reserve(values.size());
  for (uint64_t v : values) {
    // Not a braced {type, v}: with it GCC 12 warns of a variant used
    // uninitialized (-Wmaybe-uninitialized, a false alarm).
    gguf::Value e;
    e.type = type;
    e.data = v;
    array.elements.push_back(std::move(e));
  }
  gguf::Value value;
  value.type = gguf::ValueType::kArray;
  value.data.emplace<gguf::Array>(std::move(array));
  return value;
}

void StoreLE(uint8_t* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

}  // namespace

BundleWriter::BundleWriter(std::string path, bool overwrite)
    : path_(std::move(path)), overwrite_(overwrite) {
  if (!overwrite_ && Exists(path_)) {
    ThrowInputError("'", path_, "' exists (use --force to overwrite)");
  }
  tmp_ = std::make_unique<TempFile>(path_, O_RDWR);
  fd_ = tmp_->fd();
  file_ = ::fdopen(fd_, "w+b");
  if (file_ == nullptr) {
    const int err = errno;
    ThrowInputError("cannot write '", path_, "': ", std::strerror(err));
  }
  (void)tmp_->ReleaseFd();  // the stream owns it now
  bundle_id_ = RandomBundleId();
  std::setvbuf(file_, nullptr, _IOFBF, kFileBufferBytes);
}

BundleWriter::~BundleWriter() {
  resident_.reset();
  if (file_ != nullptr) std::fclose(file_);
  // tmp_ removes the temporary file unless Finish() committed it.
}

void BundleWriter::Misuse(const std::string& what) const {
  throw std::logic_error(StrCat("bundle writer for '", path_, "': ", what));
}

void BundleWriter::Seek(uint64_t offset) {
  if (::fseeko(file_, static_cast<off_t>(offset), SEEK_SET) != 0) {
    const int err = errno;
    ThrowInputError("cannot write '", path_, "': ", std::strerror(err));
  }
}

uint64_t BundleWriter::Position() {
  const off_t pos = ::ftello(file_);
  if (pos < 0) {
    const int err = errno;
    ThrowInputError("cannot write '", path_, "': ", std::strerror(err));
  }
  return static_cast<uint64_t>(pos);
}

void BundleWriter::Write(const void* data, size_t bytes) {
  if (bytes != 0 && std::fwrite(data, 1, bytes, file_) != bytes) {
    const int err = errno;
    ThrowInputError("cannot write '", path_, "': ", std::strerror(err));
  }
}

void BundleWriter::PadTo(uint64_t offset) {
  static constexpr uint8_t kZeros[4096] = {};
  uint64_t pos = Position();
  if (pos > offset) Misuse("wrote past a section boundary");
  while (pos < offset) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(offset - pos, sizeof(kZeros)));
    Write(kZeros, chunk);
    pos += chunk;
  }
}

uint32_t BundleWriter::ReadBackCrc(uint64_t offset, uint64_t bytes, uint32_t crc) {
  if (std::fflush(file_) != 0) {
    const int err = errno;
    ThrowInputError("cannot write '", path_, "': ", std::strerror(err));
  }
  AlignedBuffer<uint8_t> buffer(kFileBufferBytes);
  while (bytes > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(bytes, buffer.size()));
    const ssize_t got = ::pread(fd_, buffer.data(), chunk, static_cast<off_t>(offset));
    if (got <= 0) {
      if (got < 0 && errno == EINTR) continue;
      const int err = got < 0 ? errno : EIO;
      ThrowInputError("cannot read back '", tmp_->path(), "': ", std::strerror(err));
    }
    crc = Crc32c(buffer.data(), static_cast<size_t>(got), crc);
    offset += static_cast<uint64_t>(got);
    bytes -= static_cast<uint64_t>(got);
  }
  return crc;
}

void BundleWriter::AddMetadata(std::string key, gguf::Value value) {
  if (stage_ != Stage::kMetadata) Misuse("metadata added after DeclareGroups()");
  // sparrow.lora.fused is the one sparrow.* key a caller writes: what it
  // fused into the weights it hands over.
  if ((key.rfind("sparrow.", 0) == 0 && key != kFusedAdaptersKey) || key == "general.alignment") {
    Misuse(StrCat("metadata key '", gguf::Printable(key), "' is reserved for the writer"));
  }
  metadata_.push_back({std::move(key), std::move(value)});
}

void BundleWriter::SetSource(std::string name) {
  if (stage_ != Stage::kMetadata && stage_ != Stage::kGroups) Misuse("SetSource() after BeginResident()");
  source_ = std::move(name);
}

void BundleWriter::SetPlacement(std::string description) {
  if (stage_ != Stage::kMetadata && stage_ != Stage::kGroups) {
    Misuse("SetPlacement() after BeginResident()");
  }
  placement_ = std::move(description);
}

void BundleWriter::DeclareGroups(Layout layout, TensorType record_type, uint32_t n_layers,
                                 uint32_t d_model, uint32_t d_ff) {
  if (stage_ != Stage::kMetadata) Misuse("DeclareGroups() called twice");
  layout_ = layout;
  record_type_ = record_type;
  for (uint32_t layer = 0; layer < n_layers; ++layer) {
    for (RecordKind kind : LayoutKinds(layout)) {
      UnitGroup g = GroupGeometry(layer, kind, d_model, d_ff, record_type);
      g.slot_of_unit.resize(g.n_units);
      for (uint32_t u = 0; u < g.n_units; ++u) g.slot_of_unit[u] = u;
      groups_.push_back(std::move(g));
    }
  }
  stage_ = Stage::kGroups;
}

void BundleWriter::SetPermutation(size_t index, std::vector<uint32_t> slot_of_unit) {
  if (stage_ != Stage::kGroups) Misuse("SetPermutation() outside DeclareGroups()..BeginResident()");
  if (index >= groups_.size()) Misuse("SetPermutation(): no such group");
  UnitGroup& g = groups_[index];
  std::vector<bool> seen(g.n_units, false);
  if (slot_of_unit.size() != g.n_units) Misuse("SetPermutation(): wrong length");
  for (uint32_t slot : slot_of_unit) {
    if (slot >= g.n_units || seen[slot]) Misuse("SetPermutation(): not a permutation");
    seen[slot] = true;
  }
  g.slot_of_unit = std::move(slot_of_unit);
}

void BundleWriter::SetLargestScale(size_t index, float largest_scale) {
  if (stage_ == Stage::kMetadata || stage_ == Stage::kDone) {
    Misuse("SetLargestScale() outside DeclareGroups()..Finish()");
  }
  if (index >= groups_.size()) Misuse("SetLargestScale(): no such group");
  if (!(largest_scale >= 0.0f) || !std::isfinite(largest_scale)) {
    Misuse("SetLargestScale(): not a finite scale >= 0");
  }
  groups_[index].largest_scale = largest_scale;
}

void BundleWriter::WriteHeaderBody() {
  Seek(kFixedHeaderBytes);
  gguf::GgufWriter w(file_, path_ + " (bundle header)");
  for (const gguf::KeyValue& kv : metadata_) w.Add(kv.key, kv.value);
  using gguf::Value;
  using gguf::ValueType;
  w.Add(keys::kLayout, Value::String(std::string(LayoutName(layout_))));
  w.Add(keys::kRecordType, Value::String(std::string(TensorTypeName(record_type_))));
  if (!source_.empty()) w.Add(keys::kSource, Value::String(source_));
  if (!placement_.empty()) w.Add(keys::kPlacement, Value::String(placement_));
  w.Add(keys::kFileBytes, Value::U64(total_));
  w.Add(keys::kResidentOffset, Value::U64(resident_offset_));
  w.Add(keys::kResidentBytes, Value::U64(resident_bytes_));
  w.Add(keys::kResidentCrc, Value::U32(resident_crc_));
  const auto column = [&](auto field) {
    std::vector<uint64_t> v;
    v.reserve(groups_.size());
    for (const UnitGroup& g : groups_) v.push_back(field(g));
    return v;
  };
  const auto u32s = [&](const char* key, auto field) {
    w.Add(key, UIntArray(ValueType::kU32, column(field)));
  };
  u32s(keys::kGroupLayer, [](const UnitGroup& g) { return g.layer; });
  u32s(keys::kGroupKind, [](const UnitGroup& g) { return static_cast<uint32_t>(g.kind); });
  u32s(keys::kGroupUnits, [](const UnitGroup& g) { return g.n_units; });
  u32s(keys::kGroupParts, [](const UnitGroup& g) { return g.parts; });
  u32s(keys::kGroupPartElems, [](const UnitGroup& g) { return g.part_elems; });
  u32s(keys::kGroupPartPadded, [](const UnitGroup& g) { return g.part_padded_elems; });
  u32s(keys::kGroupPartBytes, [](const UnitGroup& g) { return g.part_bytes; });
  u32s(keys::kGroupRecordBytes, [](const UnitGroup& g) { return g.record_bytes; });
  w.Add(keys::kGroupOffset,
        UIntArray(ValueType::kU64, column([](const UnitGroup& g) { return g.offset; })));
  std::vector<float> largest_scales;
  for (const UnitGroup& g : groups_) largest_scales.push_back(g.largest_scale);
  w.Add(keys::kGroupLargestScale, Value::F32Array(largest_scales));
  for (size_t i = 0; i < groups_.size(); ++i) {
    const std::vector<uint32_t>& perm = groups_[i].slot_of_unit;
    w.Add(keys::GroupPermutationKey(i),
          UIntArray(ValueType::kU32, std::vector<uint64_t>(perm.begin(), perm.end())));
  }
  w.Finish();
}

gguf::GgufWriter& BundleWriter::BeginResident(uint64_t alignment) {
  if (stage_ != Stage::kGroups) Misuse("BeginResident() before DeclareGroups() or twice");
  if (alignment == 0 || kSectionAlignment % alignment != 0) {
    Misuse("resident alignment must divide the section alignment");
  }
  // Reserve the header region: same size as the final one, numbers differ.
  WriteHeaderBody();
  header_end_ = Position();
  if (header_end_ > kMaxHeaderBytes) {
    ThrowInputError("cannot write '", path_, "': the bundle header would take ", header_end_,
                    " bytes (at most ", kMaxHeaderBytes, " allowed)");
  }
  resident_offset_ = AlignUp(header_end_, kSectionAlignment);
  PadTo(resident_offset_);
  resident_ = std::make_unique<gguf::GgufWriter>(file_, path_ + " (resident section)", alignment);
  stage_ = Stage::kResident;
  return *resident_;
}

void BundleWriter::EndResident() {
  if (stage_ != Stage::kResident) Misuse("EndResident() without BeginResident()");
  resident_->Finish();
  resident_.reset();
  const uint64_t end = Position();
  resident_bytes_ = end - resident_offset_;
  resident_crc_ = ReadBackCrc(resident_offset_, resident_bytes_, 0);
  uint64_t pos = AlignUp(end, kSectionAlignment);
  for (UnitGroup& g : groups_) {
    g.offset = pos;
    pos = AlignUp(pos + g.section_bytes(), kSectionAlignment);
  }
  total_ = pos;
  // The rest of the file's size is known now (the records): refuse before
  // writing them into a file system that cannot hold them.
  CheckFreeSpace(path_, total_ - end);
  PadTo(groups_.empty() ? total_ : groups_.front().offset);
  group_ = 0;
  group_done_ = 0;
  stage_ = Stage::kRecords;
}

const UnitGroup* BundleWriter::NextGroup() const {
  if (stage_ != Stage::kRecords || group_ >= groups_.size()) return nullptr;
  return &groups_[group_];
}

void BundleWriter::AppendRecords(uint8_t* records, size_t count) {
  const UnitGroup* g = NextGroup();
  if (g == nullptr) Misuse("AppendRecords() with no group expecting records");
  if (count > g->n_units - group_done_) Misuse("AppendRecords(): more records than the group has");
  if (group_done_ == 0) {
    unit_of_slot_.assign(g->n_units, 0);
    for (uint32_t u = 0; u < g->n_units; ++u) unit_of_slot_[g->slot_of_unit[u]] = u;
  }
  for (size_t i = 0; i < count; ++i) {
    SealRecord(*g, bundle_id_, unit_of_slot_[group_done_ + i], records + i * g->record_bytes);
  }
  Write(records, count * g->record_bytes);
  group_done_ += static_cast<uint32_t>(count);
  if (group_done_ == g->n_units) {
    ++group_;
    group_done_ = 0;
    PadTo(group_ < groups_.size() ? groups_[group_].offset : total_);
  }
}

void BundleWriter::Finish() {
  if (stage_ != Stage::kRecords || group_ != groups_.size()) {
    Misuse("Finish() before every record was written");
  }
  WriteHeaderBody();
  if (Position() != header_end_) Misuse("the header body changed size");

  uint8_t fixed[kFixedHeaderBytes] = {};
  std::memcpy(fixed, kMagic, sizeof(kMagic));
  StoreLE(fixed + 8, kVersion, 4);
  StoreLE(fixed + 16, header_end_, 8);
  StoreLE(fixed + 24, bundle_id_, 8);
  const uint32_t crc =
      ReadBackCrc(kFixedHeaderBytes, header_end_ - kFixedHeaderBytes, Crc32c(fixed, 60));
  StoreLE(fixed + 60, crc, 4);
  Seek(0);
  Write(fixed, sizeof(fixed));

  std::FILE* file = file_;
  file_ = nullptr;
  bool ok = std::fflush(file) == 0;
  int err = ok ? 0 : errno;
  if (ok && ::fsync(fd_) != 0) {
    ok = false;
    err = errno;
  }
  if (std::fclose(file) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (!ok) ThrowInputError("cannot write '", path_, "': ", std::strerror(err));
  if (!overwrite_ && Exists(path_)) {
    ThrowInputError("'", path_, "' appeared while converting (use --force to overwrite)");
  }
  tmp_->Commit();
  stage_ = Stage::kDone;
}

}  // namespace sparrow::bundle
