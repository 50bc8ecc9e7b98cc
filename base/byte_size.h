// Sizes in messages: one formatter for every layer, so an error about a
// full disk reads like the budget's own lines.
#pragma once

#include <cstdint>
#include <string>

namespace sparrow {

// "512 B", "1.5 KiB", "310.2 MiB", "1.2 GiB": binary units with `decimals`
// decimals (bytes below 1 KiB are exact). Messages and the stats summary
// take one decimal; the command line's tables and progress lines two.
std::string FormatByteSize(uint64_t bytes, int decimals = 1);

}  // namespace sparrow
