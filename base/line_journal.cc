#include "base/line_journal.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "base/error.h"

namespace sparrow {

namespace {

// Journals are results, not inputs: past this the file is not one of ours.
constexpr off_t kMaxJournalBytes = off_t{1} << 32;

}  // namespace

LineJournal::LineJournal(std::string target, bool resume)
    : target_(std::move(target)), path_(PartialPath(target_)) {
  const auto fail = [&](const std::string& why) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    ThrowInputError("'", path_, "': ", why);
  };
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | (resume ? 0 : O_EXCL), 0666);
  if (fd_ < 0) {
    const int err = errno;
    if (err == EEXIST) {
      fail("an interrupted run's results are here: add --resume to keep them and go on, or "
           "delete the file to start over");
    }
    fail(std::strerror(err));
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    fail(err == EWOULDBLOCK ? "another process is writing it" : std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0) fail(std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail("not a regular file");
  if (st.st_size > kMaxJournalBytes) fail("larger than 4 GiB: not a results file");
  std::string text(static_cast<size_t>(st.st_size), '\0');
  for (size_t done = 0; done < text.size();) {
    const ssize_t got = ::pread(fd_, text.data() + done, text.size() - done,
                                static_cast<off_t>(done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail(std::strerror(errno));
    if (got == 0) fail("it shrank while being read");
    done += static_cast<size_t>(got);
  }
  // Keep the complete lines; cut off a last one the crash left unfinished.
  size_t complete = 0;
  for (size_t at = 0; at < text.size();) {
    const size_t end = text.find('\n', at);
    if (end == std::string::npos) break;
    kept_.emplace_back(text, at, end - at);
    complete = end + 1;
    at = end + 1;
  }
  if (complete < text.size() && ::ftruncate(fd_, static_cast<off_t>(complete)) != 0) {
    fail(std::strerror(errno));
  }
  if (::lseek(fd_, static_cast<off_t>(complete), SEEK_SET) < 0) fail(std::strerror(errno));
}

LineJournal::~LineJournal() {
  if (fd_ >= 0) ::close(fd_);  // also drops the lock
}

void LineJournal::Append(std::string_view line) {
  if (fd_ < 0) throw std::logic_error("LineJournal::Append after Commit");
  if (line.empty() || line.back() != '\n') {
    throw std::logic_error("LineJournal::Append: a line must end with a newline");
  }
  for (size_t done = 0; done < line.size();) {
    const ssize_t put = ::write(fd_, line.data() + done, line.size() - done);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) ThrowInputError("cannot write '", path_, "': ", std::strerror(errno));
    done += static_cast<size_t>(put);
  }
  if (::fdatasync(fd_) != 0) {
    ThrowInputError("cannot write '", path_, "': ", std::strerror(errno));
  }
}

void LineJournal::Commit() {
  if (fd_ < 0) throw std::logic_error("LineJournal::Commit twice");
  int err = ::fsync(fd_) != 0 ? errno : 0;
  // Renamed while still locked, so no other process can start appending to
  // the old name in between.
  if (err == 0 && ::rename(path_.c_str(), target_.c_str()) != 0) err = errno;
  ::close(fd_);
  fd_ = -1;
  if (err != 0) {
    ThrowInputError("cannot write '", target_, "' from '", path_, "': ", std::strerror(err));
  }
}

}  // namespace sparrow
