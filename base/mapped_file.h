// A read-only memory mapping of a whole file, with errors as InputError.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace sparrow {

class MappedFile {
 public:
  // Maps `path` read-only. Throws InputError naming the path when it cannot
  // be opened or mapped. An empty file maps to size() == 0, data() == nullptr.
  explicit MappedFile(const std::string& path);
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

// Makes the pages holding [p, p + n) writable, so that data bound from a
// private mapping (or from our own buffers) can be rewritten in place: a
// private file mapping copies a page on its first write, so the file is
// never changed. Returns false (and changes nothing) if the system refuses.
bool MakeWritable(const uint8_t* p, size_t n);

}  // namespace sparrow
