// Error types shared by every layer.
//
// InputError is for anything wrong with what the user handed us: a malformed
// or truncated file, a missing file, a bad flag value, a memory budget that
// cannot work. The CLI turns it into one line on stderr and exit status 2.
// Everything else that escapes (std::bad_alloc, logic errors) is an internal
// error: exit status 1.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace sparrow {

class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Concatenates anything that streams into one string; used to build messages
// without pulling <format> (GCC 12 lacks it).
template <typename... Args>
std::string StrCat(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}

template <typename... Args>
[[noreturn]] void ThrowInputError(Args&&... args) {
  throw InputError(StrCat(std::forward<Args>(args)...));
}

}  // namespace sparrow
