// --io mmap: the file is mapped read-only once; a batch first asks the
// kernel to start reading every range (MADV_WILLNEED, all ranges at once,
// so the device sees a deep queue), then the threads copy each range into
// its destination, and the pages just copied are unmapped from this
// process again with MADV_DONTNEED.
//
// Why DONTNEED: the DRAM budget is a hard limit on what Sparrow holds, and
// file pages mapped into our page tables count in our RSS. After DONTNEED
// they are only page cache, which the kernel (or a memory cgroup's limit)
// reclaims when memory is short, and which still serves a later read of
// the same range without I/O. Not MADV_COLD: it only ages the pages and
// leaves them mapped (RSS unchanged). Not MADV_PAGEOUT: it would throw the
// clean pages out of the page cache too, synchronously, for nothing the
// kernel would not do itself under pressure.
//
// Page faults may map neighbouring cached pages beyond a range
// ("fault-around", 64 KiB by default), so after the batch one more
// DONTNEED covers the span of the batch widened by that much.
//
// A file truncated while mapped turns reads of the lost pages into SIGBUS.
// Copies out of the mapping run under a SIGBUS handler that returns to the
// copy's caller, which reports the file as truncated while in use (the
// same error the other loaders give) instead of the process dying.
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "base/error.h"
#include "src/runtime/loader_internal.h"

namespace sparrow::io {
namespace {

// Linux's default fault_around_bytes.
constexpr uint64_t kFaultAroundSlack = 64 << 10;

// Where a guarded copy on this thread returns to on SIGBUS; null outside one.
// volatile: the compiler sees no reader between setting it and clearing it
// after memcpy, and would drop the store.
thread_local sigjmp_buf* volatile t_sigbus_return = nullptr;
struct sigaction g_previous_sigbus {};

void OnSigbus(int sig, siginfo_t* info, void* context) {
  if (sigjmp_buf* target = t_sigbus_return) siglongjmp(*target, 1);
  // Not a guarded copy: whatever handled SIGBUS before us (the default,
  // or a sanitizer's) handles it.
  if ((g_previous_sigbus.sa_flags & SA_SIGINFO) != 0 && g_previous_sigbus.sa_sigaction != nullptr) {
    g_previous_sigbus.sa_sigaction(sig, info, context);
    return;
  }
  if (g_previous_sigbus.sa_handler != SIG_DFL && g_previous_sigbus.sa_handler != SIG_IGN) {
    g_previous_sigbus.sa_handler(sig);
    return;
  }
  ::signal(SIGBUS, SIG_DFL);  // the fault repeats on return and ends the process
}

void InstallSigbusHandlerOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = OnSigbus;
    // SA_NODEFER: the handler leaves by siglongjmp, which (without a saved
    // mask) would otherwise leave SIGBUS blocked on this thread.
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    (void)::sigaction(SIGBUS, &sa, &g_previous_sigbus);
  });
}

// memcpy from a file mapping; false when the source pages are gone (the
// file shrank). Nothing with a destructor may live in this frame between
// sigsetjmp and the copy's end.
bool CopyFromMapping(uint8_t* dest, const uint8_t* src, size_t n) {
  sigjmp_buf jump;
  if (sigsetjmp(jump, 0) != 0) {
    t_sigbus_return = nullptr;
    return false;
  }
  t_sigbus_return = &jump;
  std::memcpy(dest, src, n);
  t_sigbus_return = nullptr;
  return true;
}

class MmapLoader final : public Loader {
 public:
  MmapLoader(const LoaderSource& source, int threads) : path_(source.path), pool_(threads) {
    InstallSigbusHandlerOnce();
    const std::string& path = source.path;
    FileDescriptor fd = OpenOrThrow(source, 0);
    size_ = FileSizeOf(fd.get(), path);
    page_ = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd.get(), 0);
      if (p == MAP_FAILED) {
        ThrowInputError("cannot map '", path, "' (", size_, " bytes): ", std::strerror(errno),
                        "; try --io pread");
      }
      base_ = static_cast<uint8_t*>(p);
      // We say exactly which ranges we need; readahead around faults would
      // read neighbours nobody asked for.
      (void)::madvise(base_, size_, MADV_RANDOM);
    }
    // The mapping keeps the file open; the descriptor closes here.
  }

  ~MmapLoader() override {
    if (base_ != nullptr) ::munmap(base_, size_);
  }

  using Loader::ReadAll;
  ReadTotals ReadAll(const std::vector<ReadOp>& ops, const LandedFn& landed) override {
    MakeReadTasks(ops, 1, size_, size_, path_, pool_.size(), &tasks_);
    if (tasks_.empty()) return ReadTotals{};
    // Phase 1: queue every range's reads (returns without waiting for them).
    pool_.Run(tasks_.size(), [this](size_t i, int) {
      Advise(tasks_[i].offset, tasks_[i].length, MADV_WILLNEED);
    });
    // Phase 2: copy (faults wait for the data), then drop the mapping.
    pool_.Run(tasks_.size(), [this, &landed](size_t i, int) {
      const ReadTask& t = tasks_[i];
      if (!CopyFromMapping(t.dest, base_ + t.offset, t.length)) {
        ThrowInputError("cannot read ", t.length, " bytes at offset ", t.offset, " of '", path_,
                        "': the file is shorter than its ", size_,
                        " bytes when opened (truncated while in use)");
      }
      Advise(t.offset, t.length, MADV_DONTNEED);
      if (landed) landed(t.dest, t.length);
    });
    uint64_t lo = UINT64_MAX;
    uint64_t hi = 0;
    ReadTotals totals;
    for (const ReadTask& t : tasks_) {
      lo = std::min(lo, t.offset);
      hi = std::max(hi, t.offset + t.length);
      totals.bytes += t.length;
    }
    lo = lo > kFaultAroundSlack ? lo - kFaultAroundSlack : 0;
    hi = std::min(size_, hi + kFaultAroundSlack);
    Advise(lo, hi - lo, MADV_DONTNEED);
    // Two madvise calls per range; page faults are not counted.
    totals.calls = 2 * tasks_.size() + 1;
    return totals;
  }

  size_t alignment() const override { return 1; }
  IoMode mode() const override { return IoMode::kMmap; }
  // Mapped pages are released after each batch; during one, at most the
  // batch's own bytes are mapped (they are being copied to the caller).
  uint64_t memory_bytes() const override { return 0; }

 private:
  void Advise(uint64_t offset, uint64_t length, int advice) {
    const uint64_t begin = offset / page_ * page_;
    const uint64_t end = std::min(size_, offset + length);
    if (end <= begin) return;
    // A failure here only costs speed or RSS, never correctness.
    (void)::madvise(base_ + begin, end - begin, advice);
  }

  std::string path_;
  uint64_t size_ = 0;
  uint64_t page_ = 4096;
  uint8_t* base_ = nullptr;
  IoThreadPool pool_;
  std::vector<ReadTask> tasks_;
};

}  // namespace

std::unique_ptr<Loader> MakeMmapLoader(const LoaderSource& source, int threads) {
  return std::make_unique<MmapLoader>(source, threads);
}

}  // namespace sparrow::io
