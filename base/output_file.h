// Output files written whole or not at all, whatever happens to the process.
//
// Every file Sparrow writes (GGUF, bundle, calibration, stats JSON, CSV,
// SVG) first goes to a temporary file beside its target,
// TARGET.tmp.<pid>.<n> (same file system, so the final rename is atomic),
// which is renamed over the target once complete. The temporary file is
// removed when its writer is destroyed without committing (an exception),
// when SIGINT, SIGTERM or SIGHUP ends the process while it exists, and, if
// the process died some other way (SIGKILL, power loss), by the next writer
// of the same target, which removes the temporaries of processes that no
// longer exist.
#pragma once

#include <fcntl.h>
#include <sys/types.h>

#include <cstdio>
#include <string>
#include <string_view>

namespace sparrow {

class TempFile {
 public:
  // Removes stale temporaries of `target`, then creates a new one
  // exclusively with open(2) flags O_CREAT | O_EXCL | O_CLOEXEC |
  // `access_flags` (O_WRONLY or O_RDWR). InputError naming the target and
  // the reason on failure.
  explicit TempFile(std::string target, int access_flags = O_WRONLY,
                    mode_t mode = 0666);
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  // Closes the descriptor if still owned; removes the file unless committed.
  ~TempFile();

  const std::string& path() const { return path_; }
  const std::string& target() const { return target_; }
  // The descriptor; -1 after ReleaseFd().
  int fd() const { return fd_; }
  // Gives up ownership of the descriptor (e.g. to fdopen). The file is
  // still removed unless Commit() is called.
  int ReleaseFd();
  // Writes all of `data` at the descriptor's position; InputError on failure.
  void Write(const void* data, size_t bytes);
  // fsync(2) and close(2) the descriptor if still owned, renames the file
  // over the target and syncs the directory, so the new file survives a
  // power loss. InputError naming the reason on failure (before the rename,
  // the temporary file is then removed by the destructor).
  void Commit();

 private:
  std::string target_;
  std::string path_;
  int fd_ = -1;
  int slot_ = -1;  // in the signal handlers' list of files to remove
  bool committed_ = false;
};

// `text` into `path` through a TempFile. InputError naming `what` (e.g.
// "stats JSON") and the reason on failure.
void WriteFileAtomically(const std::string& path, std::string_view text, std::string_view what);

// Checks, before any work, that `path` can be written as `what` (a flag
// name or a description): its directory exists and is writable, and if
// `path` exists it is a writable regular file. InputError with the reason
// (errno text) otherwise. Nothing is created.
void CheckWritable(const std::string& path, std::string_view what);

// True when both paths exist and name the same file (device and inode), so
// that writing one would replace the other: an output that is its input.
bool IsSameFile(const std::string& a, const std::string& b);

// Checks that the file system that will hold `path` has `bytes` free (for
// an unprivileged user), before a long write that would otherwise run
// until the disk is full. InputError with both figures otherwise.
void CheckFreeSpace(const std::string& path, uint64_t bytes);

// Removes TARGET.tmp.<pid>.<n> files beside `target` whose process no
// longer exists. Errors are ignored (it is housekeeping). Returns how many
// were removed.
int RemoveStaleTemporaries(const std::string& target);

}  // namespace sparrow
