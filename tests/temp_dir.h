// A fresh scratch directory for one test, removed with everything in it when
// the object goes away. Under $TMPDIR (or /tmp) unless given a parent.
#ifndef SPARROW_TESTS_TEMP_DIR_H_
#define SPARROW_TESTS_TEMP_DIR_H_

#include <doctest/doctest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace sparrow::testing {

class TempDir {
 public:
  TempDir() : TempDir(DefaultParent()) {}
  explicit TempDir(const std::string& parent) {
    std::string pattern = parent + "/sparrow_test_XXXXXX";
    REQUIRE_MESSAGE(::mkdtemp(pattern.data()) != nullptr, "mkdtemp under " << parent);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  // The names in the directory, sorted.
  std::vector<std::string> Entries() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(path_)) {
      names.push_back(e.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }
  size_t EntryCount() const { return Entries().size(); }

 private:
  static std::string DefaultParent() {
    const char* base = std::getenv("TMPDIR");
    return base != nullptr && *base != '\0' ? base : "/tmp";
  }

  std::string path_;
};

}  // namespace sparrow::testing

#endif  // SPARROW_TESTS_TEMP_DIR_H_
