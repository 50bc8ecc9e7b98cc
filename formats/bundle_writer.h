// Writing Sparrow bundles (formats/bundle.h describes the file).
//
// The writer streams: metadata and the group table are declared first, then
// the resident section is written through a GgufWriter, then every group's
// records in file order, a few at a time. Memory use is the metadata plus
// whatever the caller buffers. Everything goes to a temporary file beside
// the target, renamed into place by Finish(); a writer destroyed before
// Finish() removes it.
//
// Call order (anything else is a std::logic_error):
//   BundleWriter w(path, overwrite);
//   w.AddMetadata(...)...;                     // model keys, tokenizer
//   w.DeclareGroups(layout, type, n_layers, d_model, d_ff);
//   [w.SetPermutation(group, slot_of_unit)...]
//   gguf::GgufWriter& r = w.BeginResident();  // AddTensor..., WriteTensorData...
//   w.EndResident();
//   while (const UnitGroup* g = w.NextGroup()) w.AppendRecords(records, n);
//   w.Finish();
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "base/output_file.h"
#include "formats/bundle.h"
#include "formats/gguf.h"

namespace sparrow::bundle {

class BundleWriter {
 public:
  // InputError when `path` exists and !overwrite, or when the temporary file
  // cannot be created.
  BundleWriter(std::string path, bool overwrite);
  BundleWriter(const BundleWriter&) = delete;
  BundleWriter& operator=(const BundleWriter&) = delete;
  ~BundleWriter();

  // A header metadata entry (the model's keys and tokenizer). sparrow.* keys
  // are the writer's own and general.alignment means nothing in a header
  // without tensors: both are refused.
  void AddMetadata(std::string key, gguf::Value value);
  // The source file's name, recorded as sparrow.source (informational);
  // before BeginResident().
  void SetSource(std::string name);
  // How the permutations were chosen, recorded as sparrow.placement
  // (informational, one line); before BeginResident().
  void SetPlacement(std::string description);

  // The FFN sections: one group per layer and kind of `layout`, identity
  // permutations. InputError for a record type bundles cannot store.
  void DeclareGroups(Layout layout, TensorType record_type, uint32_t n_layers,
                     uint32_t d_model, uint32_t d_ff);
  // Replaces group `index`'s unit -> slot map (must be a permutation).
  // Records are still appended in slot order.
  void SetPermutation(size_t index, std::vector<uint32_t> slot_of_unit);
  // Records group `index`'s largest |block scale| (keys::kGroupLargestScale;
  // finite, >= 0), any time before Finish(). Groups without one store 0.
  void SetLargestScale(size_t index, float largest_scale);
  // Offsets are filled in by EndResident().
  const std::vector<UnitGroup>& groups() const { return groups_; }

  // The resident section, a GGUF image written in place; add its tensors and
  // data through the returned writer, then call EndResident().
  gguf::GgufWriter& BeginResident(uint64_t alignment = 64);
  void EndResident();

  // The group AppendRecords fills next; nullptr once every record is in.
  const UnitGroup* NextGroup() const;
  // Appends `count` (at most the records NextGroup() still lacks) records of
  // NextGroup(), record_bytes each, in disk-slot order. The caller fills the
  // payloads; the writer zeroes the padding and stores each CRC32C, so
  // `records` is modified.
  void AppendRecords(uint8_t* records, size_t count);

  // The file's final size, known from EndResident() on.
  uint64_t total_bytes() const { return total_; }

  // Writes the final header, syncs, and renames the file into place.
  void Finish();

 private:
  enum class Stage { kMetadata, kGroups, kResident, kRecords, kDone };
  void WriteHeaderBody();
  void Seek(uint64_t offset);
  uint64_t Position();
  void Write(const void* data, size_t bytes);
  void PadTo(uint64_t offset);  // zeros from the current position
  uint32_t ReadBackCrc(uint64_t offset, uint64_t bytes, uint32_t crc);
  [[noreturn]] void Misuse(const std::string& what) const;

  std::string path_;
  std::unique_ptr<TempFile> tmp_;
  uint64_t bundle_id_ = 0;       // random, seeds the record CRCs
  std::vector<uint32_t> unit_of_slot_;  // of the group being appended
  bool overwrite_ = false;
  std::FILE* file_ = nullptr;
  int fd_ = -1;  // file_'s descriptor
  Stage stage_ = Stage::kMetadata;

  std::vector<gguf::KeyValue> metadata_;
  std::string source_;
  std::string placement_;
  Layout layout_ = Layout::kNeuron;
  TensorType record_type_ = TensorType::kF32;
  std::vector<UnitGroup> groups_;

  uint64_t header_end_ = 0;
  uint64_t resident_offset_ = 0;
  uint64_t resident_bytes_ = 0;
  uint32_t resident_crc_ = 0;
  std::unique_ptr<gguf::GgufWriter> resident_;

  size_t group_ = 0;         // group being appended to
  uint32_t group_done_ = 0;  // its records written so far
  uint64_t total_ = 0;
};

}  // namespace sparrow::bundle
