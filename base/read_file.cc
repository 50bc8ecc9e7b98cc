#include "base/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/error.h"

namespace sparrow {
namespace {

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

template <class Container>
Container ReadAll(const std::string& path, std::string_view what, uint64_t max_bytes) {
  const Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) ThrowInputError("cannot open ", what, " '", path, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    ThrowInputError("cannot read ", what, " '", path, "': ", std::strerror(errno));
  }
  // Reading a directory fails only at read(); say what it is instead.
  if (S_ISDIR(st.st_mode)) ThrowInputError(what, " '", path, "' is a directory");
  Container data;
  if (S_ISREG(st.st_mode)) {
    const auto size = static_cast<uint64_t>(st.st_size);
    if (size > max_bytes) {
      ThrowInputError(what, " '", path, "' is ", size, " bytes, more than the ", max_bytes,
                      " it may have");
    }
    data.reserve(static_cast<size_t>(size));
  }
  char buffer[1 << 16];
  for (;;) {
    const ssize_t got = ::read(fd.get(), buffer, sizeof(buffer));
    if (got < 0) {
      if (errno == EINTR) continue;
      ThrowInputError("cannot read ", what, " '", path, "': ", std::strerror(errno));
    }
    if (got == 0) break;
    if (data.size() + static_cast<uint64_t>(got) > max_bytes) {
      ThrowInputError(what, " '", path, "' is more than the ", max_bytes, " bytes it may have");
    }
    data.insert(data.end(), buffer, buffer + got);
  }
  return data;
}

}  // namespace

std::string ReadWholeFile(const std::string& path, std::string_view what, uint64_t max_bytes) {
  return ReadAll<std::string>(path, what, max_bytes);
}

std::vector<uint8_t> ReadWholeFileBytes(const std::string& path, std::string_view what,
                                        uint64_t max_bytes) {
  return ReadAll<std::vector<uint8_t>>(path, what, max_bytes);
}

}  // namespace sparrow
