// The token embedding table left on flash: a decode step needs one row of
// it per token (2-8 KiB), while holding it takes n_vocab rows of DRAM
// (66 MiB for a 32000 x 2048 Q8_0 table, 1 GiB for Llama 3 8B's in F16),
// memory the unit caches use better under a --dram-budget. Each row is
// read from the file when a token needs it and checked against a CRC32C
// taken when the table was loaded and verified whole, so a file that
// changes under the run is refused rather than read.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "formats/bundle.h"
#include "src/ops/ops.h"

namespace sparrow {

class FlashEmbeddings {
 public:
  // `table`: the table as loaded (verified) into memory from `bundle`'s
  // resident section, where its bytes start at `section_offset`. Takes each
  // row's checksum from it; the table's memory is not used afterwards.
  FlashEmbeddings(std::shared_ptr<const bundle::Bundle> bundle, uint64_t section_offset,
                  const ops::MatrixView& table);

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
