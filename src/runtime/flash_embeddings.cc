#include "src/runtime/flash_embeddings.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "base/crc32c.h"
#include "base/error.h"

namespace sparrow {
namespace {

// A row's checksum: its bytes, seeded with its index, so that a row moved
// to another place in the file does not pass for the one wanted.
uint32_t RowCrc(uint32_t token, const uint8_t* row, size_t bytes) {
  return Crc32c(row, bytes, Crc32c(&token, sizeof token));
}

}  // namespace

FlashEmbeddings::FlashEmbeddings(int fd, std::string path, uint64_t file_offset,
                                 const ops::MatrixView& table)
    : fd_(fd), path_(std::move(path)), file_offset_(file_offset), shape_(table) {
  if (table.packed) throw std::logic_error("FlashEmbeddings: a packed table");
  shape_.data = nullptr;
  row_crc_.resize(table.rows);
  for (size_t r = 0; r < table.rows; ++r) {
    row_crc_[r] = RowCrc(static_cast<uint32_t>(r), table.row(r), table.row_bytes);
  }
}

void FlashEmbeddings::Row(uint32_t token, float* out) const {
  if (token >= row_crc_.size()) {
    throw std::out_of_range("FlashEmbeddings::Row: token past the table");
  }
  thread_local std::vector<uint8_t> row;
  row.resize(shape_.row_bytes);
  const uint64_t at = file_offset_ + uint64_t{token} * shape_.row_bytes;
  for (size_t done = 0; done < row.size();) {
    const ssize_t got = ::pread(fd_, row.data() + done, row.size() - done,
                                static_cast<off_t>(at + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int err = errno;
      ThrowInputError("cannot read the embedding of token ", token, " from '", path_,
                      "' at offset ", at, ": ", std::strerror(err));
    }
    if (got == 0) {
      ThrowInputError("unexpected end of '", path_, "' reading the embedding of token ", token,
                      " at offset ", at, " (truncated while in use?)");
    }
    done += static_cast<size_t>(got);
  }
#if defined(POSIX_FADV_DONTNEED)
  // The row is ours now: the page cache is asked to forget it, as for
  // every other read of a bundle (DRAM the budget does not see; a cgroup
  // memory limit counts it). FADV_RANDOM (set at open) kept read-ahead
  // from caching more than the pages the row spans.
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t first = at / page * page;
  const uint64_t end = (at + row.size() + page - 1) / page * page;
  (void)::posix_fadvise(fd_, static_cast<off_t>(first), static_cast<off_t>(end - first),
                        POSIX_FADV_DONTNEED);
#endif
  if (RowCrc(token, row.data(), row.size()) != row_crc_[token]) {
    ThrowInputError(path_, ": the embedding of token ", token, " (file offset ", at,
                    ") differs from the one loaded: the bundle changed while in use");
  }
  ops::MatrixView one = shape_;
  one.data = row.data();
  one.rows = 1;
  ops::GetRow(one, 0, out);
}

}  // namespace sparrow
