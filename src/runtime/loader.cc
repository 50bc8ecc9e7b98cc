// Mode names, the factory, and what every loader mode shares: opening,
// sizing, checking ops, the I/O thread pool and the retrying read loop.
#include "src/runtime/loader.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>
#if defined(__linux__)
#include <linux/fs.h>  // BLKGETSIZE64
#endif

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "base/error.h"
#include "src/runtime/loader_internal.h"

namespace sparrow {

IoMode ParseIoMode(const std::string& name) {
  if (name == "auto") {
    // The fastest mode measured under a DRAM cap (1.1B-shaped Q8_0 bundle at
    // half its size, 2 threads: uring 2.44-2.47 tok/s, direct 1.85-1.87),
    // where the kernel offers it; O_DIRECT otherwise.
#if SPARROW_IO_HAVE_URING
    if (io::UringAvailable()) return IoMode::kUring;
#endif
    return IoMode::kDirect;
  }
  if (name == "pread") return IoMode::kPread;
  if (name == "direct") return IoMode::kDirect;
  if (name == "mmap") return IoMode::kMmap;
  if (name == "uring") {
#if SPARROW_IO_HAVE_URING
    return IoMode::kUring;
#else
    ThrowInputError("--io uring: this build has no io_uring support (liburing was not "
                    "found when it was configured, or the target is Android); use "
                    "--io direct or --io pread");
#endif
  }
  ThrowInputError("unknown I/O mode '", name, "' (expected auto, pread, direct, mmap or uring)");
}

std::string IoModeName(IoMode mode) {
  switch (mode) {
    case IoMode::kPread: return "pread";
    case IoMode::kDirect: return "direct";
    case IoMode::kMmap: return "mmap";
    case IoMode::kUring: return "uring";
  }
  return "unknown";
}

int DefaultIoParallelism(IoMode mode) { return mode == IoMode::kUring ? 64 : 16; }

std::unique_ptr<Loader> MakeLoader(IoMode mode, const LoaderSource& path, int threads) {
  io::CheckThreadCount(threads);
  switch (mode) {
    case IoMode::kPread: return io::MakePreadLoader(path, threads);
    case IoMode::kDirect: return io::MakeDirectLoader(path, threads);
    case IoMode::kMmap: return io::MakeMmapLoader(path, threads);
    case IoMode::kUring:
#if SPARROW_IO_HAVE_URING
      return io::MakeUringLoader(path, threads);
#else
      ThrowInputError("--io uring: this build has no io_uring support");
#endif
  }
  throw std::invalid_argument("MakeLoader: unknown I/O mode");
}

namespace io {

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

FileDescriptor::~FileDescriptor() {
  if (fd_ >= 0) ::close(fd_);
}

namespace {

int OpenPath(const std::string& path, int flags) {
  for (;;) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | flags);
    if (fd >= 0) return fd;
    if (errno != EINTR) return -errno;
  }
}

bool SameFile(int a, int b) {
  struct stat sa {}, sb {};
  return ::fstat(a, &sa) == 0 && ::fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

}  // namespace

int OpenReadOnly(const LoaderSource& source, int extra_flags) {
  if (source.fd < 0) return OpenPath(source.path, extra_flags);
#if defined(__linux__)
  // The same file as the descriptor, even if renamed, replaced or deleted
  // since; ENOENT only where /proc is not mounted.
  const int fd = OpenPath("/proc/self/fd/" + std::to_string(source.fd), extra_flags);
  if (fd != -ENOENT) return fd;
#endif
  const int by_path = OpenPath(source.path, extra_flags);
  if (by_path >= 0 && !SameFile(by_path, source.fd)) {
    ::close(by_path);
    ThrowInputError("'", source.path, "' was replaced by another file while in use; run again");
  }
  return by_path;
}

FileDescriptor OpenOrThrow(const LoaderSource& source, int extra_flags) {
  const int fd = OpenReadOnly(source, extra_flags);
  if (fd < 0) ThrowInputError("cannot open '", source.path, "': ", std::strerror(-fd));
  return FileDescriptor(fd);
}

uint64_t FileSizeOf(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) ThrowInputError("cannot stat '", path, "': ", std::strerror(errno));
  if (S_ISREG(st.st_mode)) return static_cast<uint64_t>(st.st_size);
#if defined(__linux__) && defined(BLKGETSIZE64)
  if (S_ISBLK(st.st_mode)) {
    uint64_t bytes = 0;
    if (::ioctl(fd, BLKGETSIZE64, &bytes) != 0) {
      ThrowInputError("cannot get the size of block device '", path, "': ", std::strerror(errno));
    }
    return bytes;
  }
#endif
  ThrowInputError("'", path, "' is not a regular file or block device");
}

void CheckThreadCount(int threads) {
  if (threads < 1 || threads > kMaxThreads) {
    throw std::invalid_argument(StrCat("I/O thread count ", threads, " outside [1, ", kMaxThreads, "]"));
  }
}

// --- IoThreadPool -----------------------------------------------------------

IoThreadPool::IoThreadPool(int threads) {
  CheckThreadCount(threads);
  threads_.reserve(static_cast<size_t>(threads));
  try {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this, i] { WorkerLoop(i); });
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_cv_.notify_all();
    for (std::thread& t : threads_) t.join();
    throw;
  }
}

IoThreadPool::~IoThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void IoThreadPool::Run(size_t count, const std::function<void(size_t, int)>& task) {
  if (count == 0) return;
  if (count == 1) {
    // One read: waking a worker would only add latency.
    task(0, 0);
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  task_ = &task;
  count_ = count;
  next_.store(0);
  failed_.store(false);
  error_ = nullptr;
  // Wake only as many workers as there are tasks: small batches are common
  // (a layer's few misses) and each wake-up costs a few microseconds.
  const int joiners = static_cast<int>(std::min<size_t>(count, threads_.size()));
  tickets_ = joiners;
  active_ = joiners;
  if (joiners == size()) {
    wake_cv_.notify_all();
  } else {
    for (int i = 0; i < joiners; ++i) wake_cv_.notify_one();
  }
  done_cv_.wait(lock, [this] { return active_ == 0; });
  task_ = nullptr;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void IoThreadPool::WorkerLoop(int worker) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    wake_cv_.wait(lock, [this] { return stop_ || tickets_ > 0; });
    if (stop_) return;
    --tickets_;
    lock.unlock();
    RunTasks(worker);
    lock.lock();
    if (--active_ == 0) done_cv_.notify_one();
  }
}

void IoThreadPool::RunTasks(int worker) {
  for (;;) {
    if (failed_.load(std::memory_order_relaxed)) return;
    const size_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= count_) return;
    try {
      (*task_)(i, worker);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
      failed_.store(true, std::memory_order_relaxed);
    }
  }
}

// --- ops, tasks and the read loop ------------------------------------------

namespace {

// Below this, splitting an op for parallelism costs more in system calls
// than it gains (the disk reaches full speed with 64 KiB+ reads).
constexpr uint64_t kMinSplitBytes = 256 << 10;
// pread returns at most 0x7ffff000 bytes on Linux; ask for no more.
constexpr uint64_t kMaxSyscallBytes = 1ull << 30;

bool Aligned(uint64_t value, size_t alignment) { return value % alignment == 0; }

}  // namespace

[[noreturn]] void ThrowReadError(const std::string& path, uint64_t offset, uint64_t length,
                                 int err) {
  ThrowInputError("read error in '", path, "' at offset ", offset, " (", length,
                  " bytes): ", std::strerror(err));
}

[[noreturn]] void ThrowEndOfFile(const std::string& path, uint64_t offset, uint64_t length,
                                 uint64_t file_size) {
  ThrowInputError("cannot read ", length, " bytes at offset ", offset, " of '", path,
                  "': the file ends at byte ", file_size, " (truncated?)");
}

void MakeReadTasks(const std::vector<ReadOp>& ops, size_t alignment, uint64_t readable_end,
                   uint64_t file_size, const std::string& path, int parallelism,
                   std::vector<ReadTask>* tasks) {
  tasks->clear();
  uint64_t total = 0;
  for (const ReadOp& op : ops) {
    if (op.length == 0) continue;
    if (op.dest == nullptr) throw std::invalid_argument("ReadOp with a null destination");
    if (!Aligned(op.offset, alignment) || !Aligned(op.length, alignment) ||
        !Aligned(reinterpret_cast<uintptr_t>(op.dest), alignment)) {
      throw std::invalid_argument(StrCat("ReadOp at offset ", op.offset, " of ", op.length,
                                         " bytes is not aligned to ", alignment));
    }
    if (op.offset > readable_end || op.length > readable_end - op.offset) {
      ThrowEndOfFile(path, op.offset, op.length, file_size);
    }
    total += op.length;
  }
  uint64_t piece = UINT64_MAX;
  if (ops.size() < static_cast<size_t>(parallelism)) {
    const uint64_t share = (total + static_cast<uint64_t>(parallelism) - 1) /
                           static_cast<uint64_t>(parallelism);
    piece = std::max(kMinSplitBytes, (share + alignment - 1) / alignment * alignment);
  }
  for (const ReadOp& op : ops) {
    for (uint64_t done = 0; done < op.length;) {
      const uint64_t n = std::min(piece, op.length - done);
      tasks->push_back(ReadTask{op.offset + done, n, op.dest + done});
      done += n;
    }
  }
}

void ReadFully(int fd, const std::string& path, const ReadTask& task, uint64_t file_size,
               uint64_t zero_fill_end, uint64_t* bytes, uint64_t* calls) {
  uint64_t pos = task.offset;
  uint64_t left = task.length;
  uint8_t* dst = task.dest;
  while (left > 0) {
    if (pos >= file_size) {
      if (pos + left <= zero_fill_end) {
        std::memset(dst, 0, left);
        return;
      }
      ThrowEndOfFile(path, pos, left, file_size);
    }
    const size_t want = static_cast<size_t>(std::min(left, kMaxSyscallBytes));
    const ssize_t n = ::pread(fd, dst, want, static_cast<off_t>(pos));
    ++*calls;
    if (n < 0) {
      if (errno == EINTR) continue;
      ThrowReadError(path, pos, left, errno);
    }
    if (n == 0) {
      ThrowInputError("unexpected end of '", path, "' at offset ", pos, " (", left,
                      " more bytes wanted; it had ", file_size,
                      " bytes when opened: truncated while in use?)");
    }
    const uint64_t got = static_cast<uint64_t>(n);
    *bytes += got;
    pos += got;
    dst += got;
    left -= got;
  }
}

}  // namespace io
}  // namespace sparrow
