// --io direct: O_DIRECT reads bypass the page cache, so what we read is
// held only in our own (budgeted) buffers and the kernel does no copying.
// Offsets, lengths and buffers must be aligned to the device's block, 512
// or 4096 bytes (probed at open; the read planner widens extents for it). Some filesystems refuse O_DIRECT, at open or
// at the first read, with EINVAL: then we say so once and read through
// the page cache instead.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "base/aligned_buffer.h"
#include "base/error.h"
#include "src/runtime/loader_internal.h"

namespace sparrow::io {
namespace {

std::atomic<DirectRefusal> g_simulated_refusal{DirectRefusal::kNone};

void WarnRefused(const std::string& path, const char* reason, const char* fallback) {
  std::fprintf(stderr, "warning: '%s': the filesystem refuses O_DIRECT (%s); %s\n", path.c_str(),
               reason, fallback);
  std::fflush(stderr);
}

}  // namespace

void SimulateDirectRefusalForTesting(DirectRefusal refusal) { g_simulated_refusal.store(refusal); }

DirectOpen OpenDirectOrWarn(const LoaderSource& source, const char* fallback) {
  const std::string& path = source.path;
  DirectOpen result;
#if defined(O_DIRECT)
  const DirectRefusal simulated = g_simulated_refusal.load();
  const int fd = simulated == DirectRefusal::kAtOpen ? -EINVAL : OpenReadOnly(source, O_DIRECT);
  if (fd == -EINVAL) {
    // Tell a missing file from a refusal: the plain open reports the real
    // problem, if there is one.
    FileDescriptor plain = OpenOrThrow(source, 0);
    WarnRefused(path, std::strerror(EINVAL), fallback);
    return result;
  }
  if (fd < 0) ThrowInputError("cannot open '", path, "': ", std::strerror(-fd));
  FileDescriptor owned(fd);
  // One aligned block from the start of the file: filesystems that accept
  // the flag but not the reads (or need larger blocks) fail here, before
  // any real work depends on it.
  if (FileSizeOf(owned.get(), path) > 0) {
    AlignedBuffer<uint8_t> block(kDirectAlignment, kDirectAlignment);
    ssize_t n;
    do {
      n = simulated == DirectRefusal::kAtFirstRead
              ? (errno = EINVAL, -1)
              : ::pread(owned.get(), block.data(), kDirectAlignment, 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
      if (errno == EINVAL) {
        WarnRefused(path, "reads fail with Invalid argument", fallback);
        return result;
      }
      ThrowReadError(path, 0, kDirectAlignment, errno);
    }
    // Then a fine block at a fine (not coarse) file offset and address:
    // where the device's logical block is 512 bytes, it works.
    if (n == static_cast<ssize_t>(kDirectAlignment)) {
      do {
        n = ::pread(owned.get(), block.data() + kDirectFineAlignment, kDirectFineAlignment,
                    kDirectFineAlignment);
      } while (n < 0 && errno == EINTR);
      if (n == static_cast<ssize_t>(kDirectFineAlignment)) {
        result.alignment = kDirectFineAlignment;
      } else if (n < 0 && errno != EINVAL) {
        ThrowReadError(path, kDirectFineAlignment, kDirectFineAlignment, errno);
      }
    }
  }
  result.fd = std::move(owned);
  result.direct = true;
#else
  (void)OpenOrThrow(source, 0);
  WarnRefused(path, "not supported on this platform", fallback);
#endif
  return result;
}

std::unique_ptr<Loader> MakeDirectLoader(const LoaderSource& source, int threads) {
  DirectOpen opened = OpenDirectOrWarn(
      source, "falling back to --io pread (reads go through the page cache)");
  if (!opened.direct) return MakePreadLoader(source, threads);
  return MakeFdLoader(std::move(opened.fd), source.path, threads, IoMode::kDirect,
                      opened.alignment);
}

}  // namespace sparrow::io
