// Test helpers for checking InputError messages.
#pragma once

#include <doctest/doctest.h>

#include <string>

#include "base/error.h"

namespace sparrow::testing {

// The InputError message `f` throws; fails the test if it throws nothing.
template <typename F>
std::string ErrorOf(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  FAIL("expected an InputError");
  return "";
}

inline bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace sparrow::testing
