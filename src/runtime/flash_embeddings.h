// The token embedding table left on flash: a decode step needs one row of
// it per token (2-8 KiB), while holding it takes n_vocab rows of DRAM
// (66 MiB for a 32000 x 2048 Q8_0 table, 1 GiB for Llama 3 8B's in F16),
// memory the unit caches use better under a --dram-budget. Each row is
// read from the file when a token needs it and checked against a CRC32C
// taken as the resident section was read and verified (the table passing
// through a small buffer, never held whole), so a file that changes under
// the run is refused rather than read.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "formats/bundle.h"
#include "src/ops/ops.h"

namespace sparrow {

class FlashEmbeddings {
 public:
  // A row's checksum: its bytes, seeded with its index, so that a row moved
  // to another place in the file does not pass for the one wanted.
  static uint32_t RowChecksum(uint32_t token, const uint8_t* row, size_t bytes);

  // `table`: the table's shape (type, rows, cols, row_bytes; its data is
  // not read), at `section_offset` in `bundle`'s resident section;
  // `row_checksums`: RowChecksum of each row as the section was loaded and
  // verified (Bundle::LoadResident passing the table).
  FlashEmbeddings(std::shared_ptr<const bundle::Bundle> bundle, uint64_t section_offset,
                  const ops::MatrixView& table, std::vector<uint32_t> row_checksums);

  // Writes the row of `token`, dequantized, to out (table.cols floats).
  // InputError if the read fails or the row differs from the one loaded.
  void Row(uint32_t token, float* out) const;

  // The DRAM this keeps for a table of `rows` rows: the checksums.
  static uint64_t MemoryBytes(uint64_t rows) { return rows * sizeof(uint32_t); }

 private:
  std::shared_ptr<const bundle::Bundle> bundle_;
  uint64_t section_offset_;
  ops::MatrixView shape_;  // type, rows, cols, row_bytes; no data
  std::vector<uint32_t> row_crc_;
};

}  // namespace sparrow
