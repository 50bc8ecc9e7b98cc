// CRC32C (Castagnoli), the checksum of bundle headers, sections and records.
// Uses the CPU's CRC32 instruction where present (x86 SSE4.2, ARMv8 CRC),
// chosen at run time, and a table-driven fallback elsewhere.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sparrow {

// Extends `crc` (0 to start) over `n` bytes.
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);
// The portable version, for tests of the accelerated one.
uint32_t Crc32cPortable(const void* data, size_t n, uint32_t crc = 0);

}  // namespace sparrow
