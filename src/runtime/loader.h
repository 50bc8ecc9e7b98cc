// Loaders turn a list of byte ranges of the bundle into bytes in memory, as
// fast as the device allows. They never decide what is needed (the read
// planner does) and never verify contents (the bundle's record CRCs are
// checked by the caller).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace sparrow {

enum class IoMode { kPread, kDirect, kMmap, kUring };
IoMode ParseIoMode(const std::string& name);  // InputError if unknown/unavailable
std::string IoModeName(IoMode mode);
// Reads in flight when the user does not say (--io-threads). An io_uring
// entry costs a few bytes and the kernel a worker only while it blocks, so
// the ring is deep; the other modes pay a thread per read in flight.
// Measured on a 2 vCPU Zen 4 VM's virtio disk, 1.1B-shaped synthetic Q8_0
// dip bundle under memcap at half its size, dip-ca at density 0.5, 2
// threads, alternated: uring 16 -> 64 entries 2.37-2.51 -> 2.73-3.07
// tok/s (more of a layer's small scattered reads in flight at once);
// dense streaming unchanged (2.22-2.66 against 2.21-2.91); O_DIRECT with
// 64 threads 2.53-2.64 -> 2.56-2.94, within noise.
int DefaultIoParallelism(IoMode mode);

struct ReadOp {
  uint64_t offset = 0;   // file offset
  uint64_t length = 0;   // bytes
  uint8_t* dest = nullptr;
};

struct ReadTotals {
  uint64_t bytes = 0;  // bytes transferred from the file
  // Read requests issued: pread calls; ring entries for kUring (each one
  // read the device serves, however many are submitted per system call, so
  // traces and `simulate` see the same reads in every mode); madvise calls
  // for kMmap (its page faults are not counted).
  uint64_t calls = 0;
};

// Called as soon as `length` bytes at `dest` (a piece of one op's
// destination) are in place, on the thread that completed them: an I/O
// thread for pread and direct (so work on the bytes, such as checksums,
// runs beside the reads still in flight), the caller's for uring and mmap.
// Pieces of one ReadAll may arrive concurrently and in any order; together
// they cover every op exactly once. If it throws, ReadAll lets the reads in
// flight finish and rethrows the first exception.
using LandedFn = std::function<void(const uint8_t* dest, uint64_t length)>;

class Loader {
 public:
  virtual ~Loader() = default;
  // Performs every op, `parallelism` at a time where the mode allows, and
  // returns when all are complete. Ops must satisfy alignment() in offset,
  // length and dest. InputError naming the file and offset on an I/O error
  // or a short read (truncated file). One ReadAll at a time per loader.
  // For kDirect (and kUring on O_DIRECT), an op may reach into the block
  // holding the file's last byte; the bytes past the end read as zeros.
  // `landed`, if set, hears about each piece as it lands.
  virtual ReadTotals ReadAll(const std::vector<ReadOp>& ops, const LandedFn& landed) = 0;
  ReadTotals ReadAll(const std::vector<ReadOp>& ops) { return ReadAll(ops, nullptr); }
  // Required alignment of offset, length and dest: 4096 when reading with
  // O_DIRECT (kDirect, and kUring where the filesystem takes it), else 1.
  virtual size_t alignment() const = 0;
  virtual IoMode mode() const = 0;
  // Bytes of memory this loader holds (thread stacks aside), for the budget.
  virtual uint64_t memory_bytes() const = 0;
};

// The file a loader reads: its path (for messages) and, when the caller
// already holds it open (a Bundle does), that descriptor. Loaders then open
// the file the descriptor refers to, never whatever the path names now, so
// a file renamed over the path while a model runs is never mixed in.
struct LoaderSource {
  LoaderSource(std::string file_path, int open_fd = -1)  // NOLINT: a path alone is a source
      : path(std::move(file_path)), fd(open_fd) {}
  LoaderSource(const char* file_path) : LoaderSource(std::string(file_path)) {}  // NOLINT
  std::string path;
  int fd = -1;
};

// Opens `source` for the given mode with `threads` I/O threads (or queue
// depth, for io_uring). For kDirect, if the filesystem refuses O_DIRECT,
// prints one warning line on stderr and falls back to kPread.
std::unique_ptr<Loader> MakeLoader(IoMode mode, const LoaderSource& source, int threads);

}  // namespace sparrow
