// The file descriptor loader: a pool of threads, each doing blocking
// pread(2) calls, so `threads` reads are in flight at once. With a plain
// descriptor it is --io pread (through the page cache); with an O_DIRECT
// one it is --io direct (loader_direct.cc opens it).
#include <fcntl.h>

#include <string>
#include <utility>
#include <vector>

#include "src/runtime/loader_internal.h"

namespace sparrow::io {
namespace {

class FdLoader final : public Loader {
 public:
  FdLoader(FileDescriptor fd, std::string path, int threads, IoMode mode, size_t alignment)
      : fd_(std::move(fd)),
        path_(std::move(path)),
        mode_(mode),
        alignment_(alignment),
        file_size_(FileSizeOf(fd_.get(), path_)),
        // O_DIRECT reads whole blocks: the block holding the last byte may
        // be read in full, its bytes past the end arriving as zeros.
        readable_end_((file_size_ + alignment - 1) / alignment * alignment),
        pool_(threads),
        counters_(static_cast<size_t>(threads)) {}

  using Loader::ReadAll;
  ReadTotals ReadAll(const std::vector<ReadOp>& ops, const LandedFn& landed) override {
    MakeReadTasks(ops, alignment_, readable_end_, file_size_, path_, pool_.size(), &tasks_);
    for (Counters& c : counters_) c = Counters{};
    pool_.Run(tasks_.size(), [this, &landed](size_t i, int worker) {
      Counters& c = counters_[static_cast<size_t>(worker)];
      ReadFully(fd_.get(), path_, tasks_[i], file_size_, readable_end_, &c.bytes, &c.calls);
      if (landed) landed(tasks_[i].dest, tasks_[i].length);
    });
    ReadTotals totals;
    for (const Counters& c : counters_) {
      totals.bytes += c.bytes;
      totals.calls += c.calls;
    }
    return totals;
  }

  size_t alignment() const override { return alignment_; }
  IoMode mode() const override { return mode_; }
  uint64_t memory_bytes() const override { return 0; }  // reads land in the caller's memory

 private:
  struct alignas(64) Counters {  // one cache line per worker: no false sharing
    uint64_t bytes = 0;
    uint64_t calls = 0;
  };

  FileDescriptor fd_;
  std::string path_;
  IoMode mode_;
  size_t alignment_;
  uint64_t file_size_;
  uint64_t readable_end_;
  IoThreadPool pool_;
  std::vector<Counters> counters_;
  std::vector<ReadTask> tasks_;
};

}  // namespace

std::unique_ptr<Loader> MakeFdLoader(FileDescriptor fd, const std::string& path, int threads,
                                     IoMode mode, size_t alignment) {
  return std::make_unique<FdLoader>(std::move(fd), path, threads, mode, alignment);
}

std::unique_ptr<Loader> MakePreadLoader(const LoaderSource& source, int threads) {
  FileDescriptor fd = OpenOrThrow(source, 0);
  // We ask for exactly the bytes we need: kernel readahead around random
  // reads would only spend device bandwidth and page cache on neighbours.
#if defined(POSIX_FADV_RANDOM)
  (void)::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_RANDOM);
#endif
  return MakeFdLoader(std::move(fd), source.path, threads, IoMode::kPread, 1);
}

}  // namespace sparrow::io
