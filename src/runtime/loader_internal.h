// Pieces the loader modes share (loader*.cc and their tests only; the rest
// of the engine uses loader.h): an owned file descriptor, the I/O thread
// pool, the retrying read loop, range checks, and one factory per mode.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sparrow_config.h"
#include "src/runtime/loader.h"

// io_uring only where meson found liburing, and never on Android, whose
// seccomp policy kills a process that calls io_uring_setup.
#if SPARROW_HAVE_URING && !defined(__ANDROID__)
#define SPARROW_IO_HAVE_URING 1
#else
#define SPARROW_IO_HAVE_URING 0
#endif

namespace sparrow::io {

// O_DIRECT alignment: 4096 works wherever O_DIRECT does; many devices
// (most NVMe and virtio disks, logical block 512) take 512, which cuts
// what a small scattered record costs to read (a 2 KiB record read in
// 4 KiB-aligned extents costs 4-8 KiB, in 512-byte ones 2.5-3 KiB).
constexpr size_t kDirectAlignment = 4096;
constexpr size_t kDirectFineAlignment = 512;
// Upper bound on --io-threads / queue depth: more buys nothing on any
// device we know and costs a thread stack (or ring entries) each.
constexpr int kMaxThreads = 256;

// Owns a file descriptor; closes it on destruction.
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(other.release()) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept;
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor();

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

// open(2) with O_RDONLY | O_CLOEXEC | extra_flags; returns -errno on failure
// instead of throwing so callers can react to EINVAL (O_DIRECT refused).
// With source.fd, the file that descriptor refers to is opened (through
// /proc/self/fd on Linux; elsewhere the path, and an InputError if it now
// names another file).
int OpenReadOnly(const LoaderSource& source, int extra_flags);
// Like OpenReadOnly, but InputError naming the path on failure.
FileDescriptor OpenOrThrow(const LoaderSource& source, int extra_flags);
// Size in bytes of a regular file or block device; InputError otherwise.
uint64_t FileSizeOf(int fd, const std::string& path);

// Throws std::invalid_argument when `threads` is out of [1, kMaxThreads]
// (the CLI validates the flag; reaching this is a caller bug).
void CheckThreadCount(int threads);

// A persistent pool of threads that block in system calls (reads, page
// faults). Not OpenMP: the engine's compute threads must not be tied up
// waiting for the disk, and these threads do almost no CPU work.
class IoThreadPool {
 public:
  explicit IoThreadPool(int threads);
  ~IoThreadPool();
  IoThreadPool(const IoThreadPool&) = delete;
  IoThreadPool& operator=(const IoThreadPool&) = delete;

  // Calls task(i, worker) for every i in [0, count), at most size() at a
  // time, and returns when all have returned. If a task throws, the tasks
  // not yet started are skipped and the first exception is rethrown here
  // once every running task has finished (so no one still writes to the
  // caller's buffers). One Run at a time.
  void Run(size_t count, const std::function<void(size_t, int)>& task);
  int size() const { return static_cast<int>(threads_.size()); }

 private:
  void WorkerLoop(int worker);
  void RunTasks(int worker);

  std::mutex mu_;
  std::condition_variable wake_cv_;
  std::condition_variable done_cv_;
  bool stop_ = false;
  int tickets_ = 0;  // workers still to join the current Run
  int active_ = 0;   // workers that joined and have not finished
  const std::function<void(size_t, int)>* task_ = nullptr;
  size_t count_ = 0;
  std::atomic<size_t> next_{0};
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;
  std::vector<std::thread> threads_;
};

// One unit of work for a thread or a ring slot: part or all of a ReadOp.
struct ReadTask {
  uint64_t offset;
  uint64_t length;
  uint8_t* dest;
};

// Checks every op against the loader's alignment and the readable end of
// the file, then cuts ops into tasks. Misaligned ops are a caller bug
// (std::invalid_argument); ops past `readable_end` are bad input
// (InputError naming the file and the offset). When there are fewer ops
// than `parallelism`, large ops are split so every thread gets work.
void MakeReadTasks(const std::vector<ReadOp>& ops, size_t alignment,
                   uint64_t readable_end, uint64_t file_size,
                   const std::string& path, int parallelism,
                   std::vector<ReadTask>* tasks);

// pread(2) until `task` is complete, retrying EINTR and short reads.
// Reaching the end of the file is an InputError unless the rest of the
// task lies in [file_size, zero_fill_end): O_DIRECT reads are widened to
// whole blocks, and the bytes past the end of a file whose size is not a
// multiple of the block are read as zeros. Adds to *bytes and *calls.
void ReadFully(int fd, const std::string& path, const ReadTask& task,
               uint64_t file_size, uint64_t zero_fill_end, uint64_t* bytes,
               uint64_t* calls);

[[noreturn]] void ThrowReadError(const std::string& path, uint64_t offset,
                                 uint64_t length, int err);
[[noreturn]] void ThrowEndOfFile(const std::string& path, uint64_t offset,
                                 uint64_t length, uint64_t file_size);

// O_DIRECT where the filesystem takes it. `fd` is invalid when it was
// refused (one warning line went to stderr, ending with `fallback`).
struct DirectOpen {
  FileDescriptor fd;
  bool direct = false;
  // kDirectFineAlignment when a read of that size and alignment succeeded
  // at open, else kDirectAlignment.
  size_t alignment = kDirectAlignment;
};
DirectOpen OpenDirectOrWarn(const LoaderSource& source, const char* fallback);

// Per-mode factories, called by MakeLoader.
std::unique_ptr<Loader> MakePreadLoader(const LoaderSource& source, int threads);
// Falls back to MakePreadLoader (with one warning) where O_DIRECT is refused.
std::unique_ptr<Loader> MakeDirectLoader(const LoaderSource& source, int threads);
std::unique_ptr<Loader> MakeMmapLoader(const LoaderSource& source, int threads);
// The file descriptor loader behind both pread and direct.
std::unique_ptr<Loader> MakeFdLoader(FileDescriptor fd, const std::string& path,
                                     int threads, IoMode mode, size_t alignment);
#if SPARROW_IO_HAVE_URING
std::unique_ptr<Loader> MakeUringLoader(const LoaderSource& source, int threads);
// Whether this process may set up a ring (kernels without io_uring, or
// seccomp filters and qemu-user that refuse it, say no). Probed once.
bool UringAvailable();
#endif

// Tests cannot count on a filesystem that refuses O_DIRECT (tmpfs takes
// it since Linux 6.6), so they can make OpenDirectOrWarn behave as if the
// open, or the first read, failed with EINVAL.
enum class DirectRefusal { kNone, kAtOpen, kAtFirstRead };
void SimulateDirectRefusalForTesting(DirectRefusal refusal);

}  // namespace sparrow::io
