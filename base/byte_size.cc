#include "base/byte_size.h"

#include <cstdio>

#include "base/error.h"

namespace sparrow {

std::string FormatByteSize(uint64_t bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return StrCat(bytes, " B");
  double value = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  // Switch unit before printf would round up to "1024.0".
  while (value >= 1023.95 && unit + 1 < 6) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f %s", value, kUnits[unit]);
  return text;
}

}  // namespace sparrow
