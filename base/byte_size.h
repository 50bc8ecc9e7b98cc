// Sizes in messages: one formatter for every layer, so an error about a
// full disk reads like the budget's own lines.
#pragma once

#include <cstdint>
#include <string>

namespace sparrow {

// "512 B", "1.5 KiB", "310.2 MiB", "1.2 GiB": binary units, one decimal
// (bytes below 1 KiB are exact). Used in messages and the stats summary.
std::string FormatByteSize(uint64_t bytes);

}  // namespace sparrow
