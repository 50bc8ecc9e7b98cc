// Scratch paths for the fuzzers whose readers take a path, not bytes.
//
// ScratchPath("bundle_fuzzer", ".sparrow") names a file or folder for this
// process under $TMPDIR (/tmp when unset) and removes it, whatever is in it,
// when the process exits normally: libFuzzer ends a -max_total_time run
// with exit(), so a clean run leaves nothing behind. A crashing run keeps
// its scratch for inspection; libFuzzer saves the reproducer separately.
#ifndef SPARROW_TESTS_FUZZ_SCRATCH_PATH_H_
#define SPARROW_TESTS_FUZZ_SCRATCH_PATH_H_

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace sparrow::fuzz {

inline std::vector<std::string>& ScratchPaths() {
  static std::vector<std::string>* paths = new std::vector<std::string>;  // outlives atexit
  return *paths;
}

inline void RemoveScratchPaths() {
  for (const std::string& path : ScratchPaths()) {
    std::error_code ignored;  // nothing to do about a path that will not go
    std::filesystem::remove_all(path, ignored);
  }
}

inline std::string ScratchPath(const std::string& stem, const std::string& suffix = "") {
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  const std::string path = dir + "/" + stem + "." + std::to_string(::getpid()) + suffix;
  if (ScratchPaths().empty()) std::atexit(RemoveScratchPaths);
  ScratchPaths().push_back(path);
  return path;
}

}  // namespace sparrow::fuzz

#endif  // SPARROW_TESTS_FUZZ_SCRATCH_PATH_H_
