// Output files: written whole or not at all, temporaries removed on errors,
// on SIGINT/SIGTERM/SIGHUP and, for dead processes, by the next writer.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "base/error.h"
#include "base/output_file.h"
#include "tests/error_test_util.h"
#include "tests/temp_dir.h"

namespace sparrow {
namespace {

using testing::Contains;
using testing::ErrorOf;

using testing::TempDir;

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A pid that is certainly not running: a child that has exited and been
// reaped.
pid_t DeadPid() {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) ::_exit(0);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return pid;
}

TEST_CASE("TempFile: committed files replace the target whole; others leave nothing") {
  TempDir dir;
  const std::string target = dir.File("out.txt");
  WriteFileAtomically(target, "first", "test output");
  CHECK(Read(target) == "first");
  {
    TempFile file(target);
    file.Write("second", 6);
    CHECK(Read(target) == "first");  // not yet
    file.Commit();
  }
  CHECK(Read(target) == "second");
  {
    TempFile file(target);
    file.Write("lost", 4);
    // Destroyed without Commit (an exception on the way): removed.
  }
  CHECK(Read(target) == "second");
  CHECK(dir.Entries() == std::vector<std::string>{"out.txt"});
}

TEST_CASE("TempFile: a signal that ends the process removes the temporary file") {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    CAPTURE(sig);
    TempDir dir;
    const std::string target = dir.File("model.gguf");
    int ready[2];
    REQUIRE(::pipe(ready) == 0);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      ::close(ready[0]);
      // The test runner handles these signals itself; a sparrow process
      // starts with them at their defaults.
      for (int s : {SIGINT, SIGTERM, SIGHUP}) ::signal(s, SIG_DFL);
      TempFile file(target);
      file.Write("partial", 7);
      (void)::write(ready[1], "x", 1);
      for (;;) ::pause();
    }
    ::close(ready[1]);
    char byte;
    REQUIRE(::read(ready[0], &byte, 1) == 1);
    ::close(ready[0]);
    CHECK(dir.Entries().size() == 1);  // the temporary file exists
    REQUIRE(::kill(child, sig) == 0);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    // Ended by the signal, as without the handler (a parent sees the same).
    CHECK(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == sig);
    CHECK(dir.Entries().empty());
  }
}

TEST_CASE("TempFile: a later writer removes the temporaries of dead processes only") {
  TempDir dir;
  const std::string target = dir.File("model.sparrow");
  const pid_t dead = DeadPid();
  const std::string stale = StrCat(target, ".tmp.", dead, ".0");
  const std::string live = StrCat(target, ".tmp.", ::getppid(), ".3");  // a running process
  const std::string other = dir.File("other.sparrow.tmp.") + std::to_string(dead) + ".0";
  const std::string odd = target + ".tmp.notapid";
  for (const std::string& p : {stale, live, other, odd}) WriteFileAtomically(p, "x", "test");
  WriteFileAtomically(target, "new", "test output");
  CHECK(Read(target) == "new");
  struct stat st {};
  CHECK(::stat(stale.c_str(), &st) != 0);  // removed
  CHECK(::stat(live.c_str(), &st) == 0);   // its process may still finish it
  CHECK(::stat(other.c_str(), &st) == 0);  // another target's
  CHECK(::stat(odd.c_str(), &st) == 0);    // not ours
  CHECK(RemoveStaleTemporaries(target) == 0);
}

TEST_CASE("CheckWritable: says why an output path cannot be written, before any work") {
  TempDir dir;
  CheckWritable(dir.File("new.json"), "--stats-json");
  WriteFileAtomically(dir.File("old.json"), "{}", "test");
  CheckWritable(dir.File("old.json"), "--stats-json");
  std::string msg = ErrorOf([&] { CheckWritable(dir.path(), "--stats-json"); });
  CHECK(Contains(msg, "--stats-json"));
  CHECK(Contains(msg, "Is a directory"));
  msg = ErrorOf([&] { CheckWritable(dir.File("missing/x.json"), "--csv"); });
  CHECK(Contains(msg, "--csv"));
  CHECK(Contains(msg, "No such file or directory"));
  msg = ErrorOf([&] { CheckWritable(dir.File("old.json/x"), "--csv"); });
  CHECK(Contains(msg, "Not a directory"));
  CHECK(Contains(ErrorOf([&] { CheckWritable("/dev/null", "-o"); }), "not a regular file"));
  CHECK(dir.Entries() == std::vector<std::string>{"old.json"});  // nothing created
}

TEST_CASE("CheckFreeSpace: an output larger than the free space is refused in readable units") {
  TempDir dir;
  CheckFreeSpace(dir.File("small.bin"), 4096);
  const std::string msg = ErrorOf([&] { CheckFreeSpace(dir.File("huge.bin"), ~uint64_t{0}); });
  CHECK(Contains(msg, "huge.bin"));
  CHECK(Contains(msg, "needs 16.0 EiB (18446744073709551615 bytes)"));
  CHECK(Contains(msg, " free"));
  CHECK(dir.Entries().empty());
}

TEST_CASE("WriteFileAtomically: failures name the output and the reason") {
  TempDir dir;
  const std::string msg =
      ErrorOf([&] { WriteFileAtomically(dir.File("no/such/dir.csv"), "x", "the CSV"); });
  CHECK(Contains(msg, "the CSV"));
  CHECK(Contains(msg, "No such file or directory"));
}

}  // namespace
}  // namespace sparrow
