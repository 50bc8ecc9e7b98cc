#include "base/output_file.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "base/byte_size.h"
#include "base/error.h"

namespace sparrow {
namespace {

// The temporary files that exist now, for the signal handlers. Fixed
// storage, no allocation and no locks on the handler's side: a slot's path
// is written while the slot is kBusy and read only while it is kReady.
constexpr int kSlots = 32;
constexpr size_t kMaxPath = 4096;
enum SlotState : int { kFree = 0, kBusy = 1, kReady = 2 };
std::atomic<int> g_slot_state[kSlots];
char g_slot_path[kSlots][kMaxPath];

constexpr int kCleanupSignals[] = {SIGINT, SIGTERM, SIGHUP};

void RemoveRegisteredAndReraise(int sig) {
  for (int i = 0; i < kSlots; ++i) {
    if (g_slot_state[i].load(std::memory_order_acquire) == kReady) ::unlink(g_slot_path[i]);
  }
  // The signal's usual effect (termination, with the status a parent sees).
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

// For signals still at their default action: one ignored (nohup, a
// background job) stays ignored, and one somebody else handles is theirs.
// Checked at every registration (a sigaction call), not once, so a forked
// child that reset a signal to its default gets the handler too.
void InstallSignalHandlers() {
  for (int sig : kCleanupSignals) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) != 0) continue;
    if ((old.sa_flags & SA_SIGINFO) != 0 || old.sa_handler != SIG_DFL) continue;
    struct sigaction sa {};
    sa.sa_handler = RemoveRegisteredAndReraise;
    sigemptyset(&sa.sa_mask);
    for (int other : kCleanupSignals) sigaddset(&sa.sa_mask, other);
    (void)::sigaction(sig, &sa, nullptr);
  }
}

int Register(const std::string& path) {
  InstallSignalHandlers();
  if (path.size() >= kMaxPath) return -1;
  for (int i = 0; i < kSlots; ++i) {
    int expected = kFree;
    if (g_slot_state[i].compare_exchange_strong(expected, kBusy, std::memory_order_acquire)) {
      std::memcpy(g_slot_path[i], path.c_str(), path.size() + 1);
      g_slot_state[i].store(kReady, std::memory_order_release);
      return i;
    }
  }
  return -1;  // more than kSlots at once: still removed by the destructor
}

void Unregister(int slot) {
  if (slot >= 0) g_slot_state[slot].store(kFree, std::memory_order_release);
}

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string BaseNameOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// "<pid>.<n>" with both parts decimal; the pid, or 0 if it is not that.
pid_t ParseTempSuffix(std::string_view suffix) {
  const size_t dot = suffix.find('.');
  if (dot == 0 || dot == std::string_view::npos || dot + 1 == suffix.size() || dot > 9) return 0;
  for (size_t i = 0; i < suffix.size(); ++i) {
    if (i != dot && (suffix[i] < '0' || suffix[i] > '9')) return 0;
  }
  return static_cast<pid_t>(std::strtol(std::string(suffix.substr(0, dot)).c_str(), nullptr, 10));
}

}  // namespace

int RemoveStaleTemporaries(const std::string& target) {
  const std::string prefix = BaseNameOf(target) + ".tmp.";
  const std::string dir = DirectoryOf(target);
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return 0;
  int removed = 0;
  while (const dirent* entry = ::readdir(d)) {
    const std::string_view name(entry->d_name);
    if (name.size() <= prefix.size() || name.substr(0, prefix.size()) != prefix) continue;
    const pid_t pid = ParseTempSuffix(name.substr(prefix.size()));
    if (pid <= 0 || pid == ::getpid()) continue;
    // ESRCH: no such process. EPERM means it exists (another user's).
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;
    const std::string path = dir + "/" + std::string(name);
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::unlink(path.c_str()) == 0) {
      ++removed;
    }
  }
  ::closedir(d);
  return removed;
}

TempFile::TempFile(std::string target, int access_flags, mode_t mode) : target_(std::move(target)) {
  RemoveStaleTemporaries(target_);
  static std::atomic<unsigned> counter{0};
  for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
    path_ = StrCat(target_, ".tmp.", ::getpid(), ".", counter++);
    fd_ = ::open(path_.c_str(), access_flags | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd_ < 0 && errno != EEXIST && errno != EINTR) break;
  }
  if (fd_ < 0) {
    const int err = errno;
    ThrowInputError("cannot write '", target_, "': cannot create '", path_, "': ",
                    std::strerror(err));
  }
  slot_ = Register(path_);
}

TempFile::~TempFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) {
    Unregister(slot_);
    ::unlink(path_.c_str());
  }
}

int TempFile::ReleaseFd() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void TempFile::Write(const void* data, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ThrowInputError("cannot write '", target_, "': ", std::strerror(err));
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void TempFile::Commit() {
  if (fd_ >= 0) {
    int err = ::fsync(fd_) != 0 ? errno : 0;
    if (::close(fd_) != 0 && err == 0) err = errno;
    fd_ = -1;
    if (err != 0) ThrowInputError("cannot write '", target_, "': ", std::strerror(err));
  }
  if (::rename(path_.c_str(), target_.c_str()) != 0) {
    const int err = errno;
    ThrowInputError("cannot write '", target_, "': cannot rename '", path_, "' over it: ",
                    std::strerror(err));
  }
  Unregister(slot_);
  committed_ = true;
  // The rename is durable once the directory is synced. Some file systems
  // cannot sync a directory (EINVAL); the file itself already is.
  const int dir = ::open(DirectoryOf(target_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    const int err = ::fsync(dir) != 0 ? errno : 0;
    ::close(dir);
    if (err != 0 && err != EINVAL) {
      ThrowInputError("wrote '", target_, "' but could not sync its directory: ",
                      std::strerror(err));
    }
  }
}

void WriteFileAtomically(const std::string& path, std::string_view text, std::string_view what) {
  try {
    TempFile out(path);
    out.Write(text.data(), text.size());
    out.Commit();
  } catch (const InputError& e) {
    ThrowInputError(what, ": ", e.what());
  }
}

bool IsSameFile(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

void CheckWritable(const std::string& path, std::string_view what) {
  const auto fail = [&](const std::string& why) {
    ThrowInputError("cannot write ", what, " '", path, "': ", why);
  };
  if (path.empty()) fail("empty path");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) fail(std::strerror(EISDIR));
    if (!S_ISREG(st.st_mode)) fail("not a regular file");
  } else if (errno != ENOENT) {
    fail(std::strerror(errno));
  }
  // The file is replaced by a rename, so what matters is the directory.
  const std::string dir = DirectoryOf(path);
  if (::stat(dir.c_str(), &st) != 0) fail(StrCat("directory '", dir, "': ", std::strerror(errno)));
  if (!S_ISDIR(st.st_mode)) fail(StrCat("'", dir, "': ", std::strerror(ENOTDIR)));
  if (::access(dir.c_str(), W_OK) != 0) {
    fail(StrCat("directory '", dir, "': ", std::strerror(errno)));
  }
}

namespace {

}  // namespace

void CheckFreeSpace(const std::string& path, uint64_t bytes) {
  struct statvfs fs {};
  const std::string dir = DirectoryOf(path);
  if (::statvfs(dir.c_str(), &fs) != 0) return;  // unknown: the writes will tell
  const unsigned __int128 free_bytes =
      static_cast<unsigned __int128>(fs.f_bavail) * static_cast<unsigned __int128>(fs.f_frsize);
  if (bytes > free_bytes) {
    ThrowInputError("cannot write '", path, "': it needs ", FormatByteSize(bytes), " (", bytes,
                    " bytes) but the file system holding '", dir, "' has ",
                    FormatByteSize(static_cast<uint64_t>(free_bytes)), " free");
  }
}

}  // namespace sparrow
