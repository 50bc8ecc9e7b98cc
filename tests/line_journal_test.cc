// LineJournal: lines survive the process, an interrupted journal is kept
// only on request, a torn last line is dropped, a second writer is refused.
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
#include "base/line_journal.h"
#include "tests/error_test_util.h"
#include "tests/gguf_test_util.h"  // TempDir

namespace sparrow {
namespace {

using testing::Contains;
using testing::ErrorOf;
using testing::TempDir;

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

bool Exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

TEST_CASE("LineJournal appends lines to TARGET.partial and renames it whole") {
  TempDir dir;
  const std::string target = dir.File("out.jsonl");
  {
    LineJournal j(target, /*resume=*/false);
    CHECK(j.kept().empty());
    j.Append("a\n");
    j.Append("b b\n");
    CHECK(Slurp(target + ".partial") == "a\nb b\n");  // on disk before Commit
    CHECK_FALSE(Exists(target));
    j.Commit();
  }
  CHECK(Slurp(target) == "a\nb b\n");
  CHECK_FALSE(Exists(target + ".partial"));
}

TEST_CASE("LineJournal keeps an interrupted run's lines only with resume") {
  TempDir dir;
  const std::string target = dir.File("out.jsonl");
  {
    LineJournal j(target, false);
    j.Append("one\n");
    j.Append("two\n");
  }  // destroyed without Commit: the process stopped part way
  CHECK(Slurp(target + ".partial") == "one\ntwo\n");
  CHECK(Contains(ErrorOf([&] { LineJournal again(target, false); }), "--resume"));
  CHECK(Slurp(target + ".partial") == "one\ntwo\n");  // refused, untouched
  LineJournal j(target, /*resume=*/true);
  CHECK(j.kept() == std::vector<std::string>{"one", "two"});
  j.Append("three\n");
  j.Commit();
  CHECK(Slurp(target) == "one\ntwo\nthree\n");
}

TEST_CASE("LineJournal drops a last line that a crash cut short") {
  TempDir dir;
  const std::string target = dir.File("out.jsonl");
  std::ofstream(target + ".partial") << "x\ny\n{\"id\": 3, \"te";
  LineJournal j(target, true);
  CHECK(j.kept() == std::vector<std::string>{"x", "y"});
  CHECK(Slurp(target + ".partial") == "x\ny\n");
  j.Append("z\n");
  CHECK(Slurp(target + ".partial") == "x\ny\nz\n");
}

TEST_CASE("LineJournal with resume and nothing to resume starts empty") {
  TempDir dir;
  LineJournal j(dir.File("o"), true);
  CHECK(j.kept().empty());
  j.Append("q\n");
  j.Commit();
  CHECK(Slurp(dir.File("o")) == "q\n");
}

TEST_CASE("LineJournal refuses a second writer, also from another process") {
  TempDir dir;
  const std::string target = dir.File("out.jsonl");
  LineJournal first(target, false);
  CHECK(Contains(ErrorOf([&] { LineJournal second(target, true); }), "another process"));
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    try {
      LineJournal second(target, true);
      ::_exit(0);
    } catch (const InputError&) {
      ::_exit(3);
    }
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 3);
}

TEST_CASE("LineJournal refuses what is not a regular file, and misuse") {
  TempDir dir;
  REQUIRE(::mkdir(dir.File("d.partial").c_str(), 0755) == 0);
  CHECK(!ErrorOf([&] { LineJournal j(dir.File("d"), true); }).empty());
  CHECK(!ErrorOf([&] { LineJournal j(dir.File("missing/x"), false); }).empty());
  LineJournal j(dir.File("ok"), false);
  CHECK_THROWS_AS(j.Append("no newline"), std::logic_error);
  j.Commit();
  CHECK_THROWS_AS(j.Append("late\n"), std::logic_error);
}

}  // namespace
}  // namespace sparrow
