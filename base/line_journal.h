// An output of many lines that survives the process being stopped part way.
//
// A long job (sparrow batch over thousands of prompts) writes its result
// lines to TARGET.partial, each made durable (write + fdatasync) as soon as
// it is appended, and renames the file over TARGET once the last line is
// in, so TARGET only ever appears complete. If the process is killed
// (Ctrl-C, SIGKILL, power loss), TARGET.partial keeps every line finished
// before; a later run opened with `resume` keeps them and appends the rest.
// A crash can cut the last line short: a trailing line without its newline
// is dropped (cut off the file) when resuming. Two processes cannot append
// to the same journal: it is locked (flock) while open.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace sparrow {

class LineJournal {
 public:
  // Opens TARGET.partial, creating it if needed. Without `resume` an
  // existing one (an interrupted run's) is refused, so that nothing is
  // overwritten by accident; with it, its complete lines are kept. Every
  // failure is an InputError naming the file and the reason.
  LineJournal(std::string target, bool resume);
  LineJournal(const LineJournal&) = delete;
  LineJournal& operator=(const LineJournal&) = delete;
  // Closes the file, which stays for a later resume unless committed.
  ~LineJournal();

  static std::string PartialPath(const std::string& target) { return target + ".partial"; }
  const std::string& path() const { return path_; }
  // The lines found when resuming, without their newlines.
  const std::vector<std::string>& kept() const { return kept_; }
  // Appends `line` (which must end with '\n') and waits until it is on disk.
  void Append(std::string_view line);
  // Renames the file over the target (after which nothing may be appended).
  void Commit();

 private:
  std::string target_;
  std::string path_;
  int fd_ = -1;
  std::vector<std::string> kept_;
};

}  // namespace sparrow
