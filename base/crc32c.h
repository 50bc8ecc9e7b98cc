// CRC32C (Castagnoli), the checksum of bundle headers, sections and records.
// Uses the CPU's CRC32 instruction where present (x86 SSE4.2, ARMv8 CRC),
// chosen at run time, and a table-driven fallback elsewhere.
//
// The value is the standard one (reflected polynomial 0x82F63B78, initial
// value and final XOR 0xFFFFFFFF): Crc32c("123456789", 9) == 0xE3069283, as
// iSCSI, ext4 and SSE4.2-based libraries compute it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sparrow {

// Extends `crc` (0 to start) over `n` bytes: Crc32c(b, nb, Crc32c(a, na))
// equals the CRC of a followed by b.
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);
// The portable version, for tests of the accelerated one.
uint32_t Crc32cPortable(const void* data, size_t n, uint32_t crc = 0);
// "x86 sse4.2", "arm crc" or "portable": what Crc32c uses on this CPU.
const char* Crc32cImplementation();

}  // namespace sparrow
