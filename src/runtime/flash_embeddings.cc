#include "src/runtime/flash_embeddings.h"

#include <stdexcept>
#include <utility>

#include "base/crc32c.h"
#include "base/error.h"

namespace sparrow {
uint32_t FlashEmbeddings::RowChecksum(uint32_t token, const uint8_t* row, size_t bytes) {
  return Crc32c(row, bytes, Crc32c(&token, sizeof token));
}

FlashEmbeddings::FlashEmbeddings(std::shared_ptr<const bundle::Bundle> bundle,
                                 uint64_t section_offset, const ops::MatrixView& table,
                                 std::vector<uint32_t> row_checksums)
    : bundle_(std::move(bundle)),
      section_offset_(section_offset),
      shape_(table),
      row_crc_(std::move(row_checksums)) {
  if (table.packed) throw std::logic_error("FlashEmbeddings: a packed table");
  if (row_crc_.size() != table.rows) {
    throw std::logic_error("FlashEmbeddings: a checksum per row expected");
  }
  shape_.data = nullptr;
}

void FlashEmbeddings::Row(uint32_t token, float* out) const {
  if (token >= row_crc_.size()) {
    throw std::out_of_range("FlashEmbeddings::Row: token past the table");
  }
  thread_local std::vector<uint8_t> row;
  row.resize(shape_.row_bytes);
  const uint64_t at = section_offset_ + uint64_t{token} * shape_.row_bytes;
  bundle_->ReadResidentBytes(at, row.size(), row.data(), "embedding table");
  if (RowChecksum(token, row.data(), row.size()) != row_crc_[token]) {
    ThrowInputError(bundle_->path(), ": the embedding of token ", token, " (file offset ",
                    bundle_->resident_offset() + at,
                    ") differs from the one loaded: the bundle changed while in use");
  }
  ops::MatrixView one = shape_;
  one.data = row.data();
  one.rows = 1;
  ops::GetRow(one, 0, out);
}

}  // namespace sparrow
