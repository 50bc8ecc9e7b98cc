// ReadWholeFile: exact contents, and the one-line refusals (missing file,
// directory, a file or an endless device over the limit).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <doctest/doctest.h>

#include "base/read_file.h"
#include "tests/error_test_util.h"

namespace sparrow {
namespace {

using testing::Contains;
using testing::ErrorOf;

TEST_CASE("ReadWholeFile returns every byte and refuses what it cannot read") {
  char tmpl[] = "/tmp/sparrow_read_file_XXXXXX";
  const int fd = ::mkstemp(tmpl);
  REQUIRE(fd >= 0);
  const std::string path = tmpl;
  std::string content(200000, '\0');  // longer than one read, with NULs
  for (size_t i = 0; i < content.size(); ++i) content[i] = static_cast<char>(i * 7 % 251);
  REQUIRE(::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size()));
  ::close(fd);

  CHECK(ReadWholeFile(path, "text") == content);
  const std::vector<uint8_t> bytes = ReadWholeFileBytes(path, "data", content.size());
  CHECK(std::string(bytes.begin(), bytes.end()) == content);

  CHECK(Contains(ErrorOf([&] { ReadWholeFile(path, "trace", content.size() - 1); }),
                 "trace '" + path + "' is 200000 bytes, more than the 199999"));
  CHECK(Contains(ErrorOf([] { ReadWholeFile("/nonexistent/x", "trace"); }),
                 "cannot open trace '/nonexistent/x': No such file"));
  CHECK(Contains(ErrorOf([] { ReadWholeFile("/tmp", "prompt file"); }),
                 "prompt file '/tmp' is a directory"));
  // A device without an end stops at the limit instead of filling memory.
  CHECK(Contains(ErrorOf([] { ReadWholeFile("/dev/zero", "text", 1000); }),
                 "'/dev/zero' is more than the 1000 bytes"));
  std::remove(path.c_str());
}

}  // namespace
}  // namespace sparrow
