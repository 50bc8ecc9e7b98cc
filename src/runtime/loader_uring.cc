// --io uring: one io_uring with `threads` entries keeps that many reads in
// flight from the calling thread alone: no thread pool, one system call
// per batch of submissions and completions instead of one per read.
// O_DIRECT when the filesystem takes it (the same refusal warning and
// fallback as --io direct, here to buffered reads through the ring).
// Built only where meson found liburing, and never for Android.
#include "src/runtime/loader_internal.h"

#if SPARROW_IO_HAVE_URING

#include <liburing.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"

namespace sparrow::io {
namespace {

// io_uring_prep_read takes a 32-bit length.
constexpr uint64_t kMaxSqeBytes = 1u << 30;

class UringLoader final : public Loader {
 public:
  UringLoader(const LoaderSource& source, int depth) : path_(source.path), depth_(depth) {
    DirectOpen opened = OpenDirectOrWarn(source, "io_uring will read through the page cache");
    if (opened.direct) {
      fd_ = std::move(opened.fd);
      alignment_ = opened.alignment;
    } else {
      fd_ = OpenOrThrow(source, 0);
#if defined(POSIX_FADV_RANDOM)
      (void)::posix_fadvise(fd_.get(), 0, 0, POSIX_FADV_RANDOM);
#endif
      alignment_ = 1;
    }
    file_size_ = FileSizeOf(fd_.get(), path_);
    readable_end_ = (file_size_ + alignment_ - 1) / alignment_ * alignment_;
    const int rc = io_uring_queue_init(static_cast<unsigned>(depth), &ring_, 0);
    if (rc < 0) {
      ThrowInputError("io_uring is not available here (io_uring_setup: ", std::strerror(-rc),
                      "); use --io direct or --io pread");
    }
    // Reads the kernel cannot start without blocking (buffered reads, or
    // O_DIRECT reads whose block mapping is not cached yet) go to io_uring's
    // worker threads, by default at most 4 per CPU: on a 2-core machine that
    // would cap the queue depth at 8. Allow one worker per entry instead.
    // (Linux 5.15+; older kernels keep their default.)
    unsigned workers[2] = {static_cast<unsigned>(depth), static_cast<unsigned>(depth)};
    (void)io_uring_register_iowq_max_workers(&ring_, workers);
    // A registered file saves the kernel a file-table lookup per read.
    const int file = fd_.get();
    fixed_file_ = io_uring_register_files(&ring_, &file, 1) == 0;
    // Ring memory: submission entries (64 B) and twice as many completion
    // entries (16 B) for the power of two at or above `depth`, page-rounded.
    uint64_t entries = 1;
    while (entries < static_cast<uint64_t>(depth)) entries *= 2;
    ring_bytes_ = (entries * 64 + 4095) / 4096 * 4096 +
                  (entries * (2 * 16 + 4) + 256 + 4095) / 4096 * 4096;
    slots_.resize(static_cast<size_t>(depth));
  }

  ~UringLoader() override { io_uring_queue_exit(&ring_); }

  using Loader::ReadAll;
  ReadTotals ReadAll(const std::vector<ReadOp>& ops, const LandedFn& landed) override {
    MakeReadTasks(ops, alignment_, readable_end_, file_size_, path_, depth_, &tasks_);
    ReadTotals totals;
    free_.clear();
    for (size_t s = slots_.size(); s-- > 0;) free_.push_back(s);
    retry_.clear();
    size_t next = 0;
    size_t in_flight = 0;
    // On an error, stop queueing and drain what is in flight first: the
    // kernel is still writing into the caller's buffers.
    std::exception_ptr error;
    // Queues tasks (retries first) into free slots.
    auto fill = [&] {
      while (!error) {
        size_t s;
        if (!retry_.empty()) {
          s = retry_.back();
          retry_.pop_back();
        } else if (!free_.empty() && next < tasks_.size()) {
          s = free_.back();
          free_.pop_back();
          const ReadTask& task = tasks_[next];
          slots_[s] = Slot{task.offset, task.length, task.dest, task.dest, task.length};
          ++next;
        } else {
          break;
        }
        Queue(s);
        ++in_flight;
        ++totals.calls;  // one read request (a retried short read is another)
      }
    };
    auto submit = [&](unsigned wait_for) {
      int rc;
      do {
        rc = io_uring_submit_and_wait(&ring_, wait_for);
      } while (rc == -EINTR || rc == -EAGAIN || rc == -EBUSY);
      if (rc < 0) {
        // Reads may still be in flight into the caller's buffers, and we
        // cannot wait for them: the ring is unusable. Never seen in practice.
        throw std::runtime_error(StrCat("io_uring_enter failed for '", path_, "': ",
                                        std::strerror(-rc)));
      }
    };
    while (in_flight > 0 || (!error && (next < tasks_.size() || !retry_.empty()))) {
      fill();
      submit(1);
      io_uring_cqe* cqe;
      unsigned head;
      unsigned seen = 0;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        ++seen;
        const size_t s = static_cast<size_t>(io_uring_cqe_get_data64(cqe));
        --in_flight;
        try {
          if (Complete(s, cqe->res, &totals.bytes)) {
            free_.push_back(s);
            if (landed) landed_.emplace_back(slots_[s].start, slots_[s].length);
          } else {
            retry_.push_back(s);
          }
        } catch (...) {
          if (!error) error = std::current_exception();
          free_.push_back(s);
        }
      }
      io_uring_cq_advance(&ring_, seen);
      if (error) retry_.clear();
      if (!landed_.empty()) {
        // The freed slots go back to the device before the caller works on
        // what landed, so the reads continue meanwhile.
        fill();
        if (in_flight > 0) submit(0);
        for (const auto& [start, length] : landed_) {
          if (error) break;  // only draining now
          try {
            landed(start, length);
          } catch (...) {
            error = std::current_exception();
            retry_.clear();
          }
        }
        landed_.clear();
      }
    }
    if (error) std::rethrow_exception(error);
    return totals;
  }

  size_t alignment() const override { return alignment_; }
  IoMode mode() const override { return IoMode::kUring; }
  uint64_t memory_bytes() const override { return ring_bytes_; }

 private:
  struct Slot {
    uint64_t offset = 0;
    uint64_t left = 0;
    uint8_t* dest = nullptr;
    const uint8_t* start = nullptr;  // the whole task, for `landed`
    uint64_t length = 0;
  };

  void Queue(size_t s) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    // The ring has `depth` entries and at most `depth` slots are queued
    // between submissions, so this cannot fail.
    if (sqe == nullptr) throw std::logic_error("io_uring submission queue full");
    const Slot& slot = slots_[s];
    const unsigned n = static_cast<unsigned>(std::min(slot.left, kMaxSqeBytes));
    io_uring_prep_read(sqe, fixed_file_ ? 0 : fd_.get(), slot.dest, n, slot.offset);
    if (fixed_file_) sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data64(sqe, s);
  }

  // Applies a completion to its slot: true when the slot's task is done,
  // false when the rest must be queued again (short read, EINTR, EAGAIN).
  bool Complete(size_t s, int res, uint64_t* bytes) {
    Slot& slot = slots_[s];
    if (res == -EINTR || res == -EAGAIN) return false;
    if (res < 0) ThrowReadError(path_, slot.offset, slot.left, -res);
    if (res == 0) {
      if (slot.offset >= file_size_ && slot.offset + slot.left <= readable_end_) {
        std::memset(slot.dest, 0, slot.left);  // O_DIRECT tail block past the end
        return true;
      }
      if (slot.offset >= file_size_) ThrowEndOfFile(path_, slot.offset, slot.left, file_size_);
      ThrowInputError("unexpected end of '", path_, "' at offset ", slot.offset, " (", slot.left,
                      " more bytes wanted; it had ", file_size_,
                      " bytes when opened: truncated while in use?)");
    }
    const uint64_t got = static_cast<uint64_t>(res);
    *bytes += got;
    slot.offset += got;
    slot.dest += got;
    slot.left -= got;
    if (slot.left == 0) return true;
    if (slot.offset >= file_size_ && slot.offset + slot.left <= readable_end_) {
      std::memset(slot.dest, 0, slot.left);
      return true;
    }
    return false;
  }

  std::string path_;
  int depth_;
  FileDescriptor fd_;
  size_t alignment_ = 1;
  uint64_t file_size_ = 0;
  uint64_t readable_end_ = 0;
  io_uring ring_{};
  bool fixed_file_ = false;
  uint64_t ring_bytes_ = 0;
  std::vector<Slot> slots_;
  std::vector<size_t> free_;
  std::vector<size_t> retry_;
  std::vector<std::pair<const uint8_t*, uint64_t>> landed_;  // pieces not yet handed on
  std::vector<ReadTask> tasks_;
};

}  // namespace

std::unique_ptr<Loader> MakeUringLoader(const LoaderSource& source, int threads) {
  return std::make_unique<UringLoader>(source, threads);
}

bool UringAvailable() {
  static const bool available = [] {
    io_uring ring{};
    if (io_uring_queue_init(2, &ring, 0) < 0) return false;
    io_uring_queue_exit(&ring);
    return true;
  }();
  return available;
}

}  // namespace sparrow::io

#endif  // SPARROW_IO_HAVE_URING
