#include "base/byte_size.h"

#include <cmath>
#include <cstdio>

#include "base/error.h"

namespace sparrow {

std::string FormatByteSize(uint64_t bytes, int decimals) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return StrCat(bytes, " B");
  double value = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  // Switch unit before printf would round up to "1024.0".
  const double switch_at = 1024.0 - 0.5 * std::pow(10.0, -decimals);
  while (value >= switch_at && unit + 1 < 6) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), "%.*f %s", decimals, value, kUnits[unit]);
  return text;
}

}  // namespace sparrow
