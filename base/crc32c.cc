// CRC32C with the CPU's CRC instruction where it has one.
//
// Why raw CRC instructions here when the project's rule is "all SIMD through
// Highway": the CRC32 instructions (x86 SSE4.2 `crc32`, ARMv8 `crc32c*`) are
// scalar integer instructions, not vector ones, and Highway 1.0.3 has no
// CRC op. They are reached through the compilers' builtins with a per-function
// target attribute and chosen at run time, like Highway's dynamic dispatch,
// so the binary still runs on CPUs without them.
//
// Speed: one CRC instruction folds 8 bytes but has a latency of ~3 cycles
// and a throughput of one per cycle, so a single dependency chain runs at a
// third of the instruction's rate. Large buffers are therefore cut into three
// adjacent blocks whose CRCs run as three independent chains; the chains are
// then joined with the identity CRC(A || B) = Shift_len(B)(CRC(A)) ^ CRC(B)
// (in the raw, un-inverted register domain), where Shift_L advances a register
// over L zero bytes. Shift_L is linear over GF(2), so for the two fixed block
// lengths used it is precomputed as four 256-entry tables (one per register
// byte).
#include "base/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SPARROW_CRC_X86 1
#elif defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#define SPARROW_CRC_ARM 1
#include <arm_acle.h>
#if defined(__linux__) || defined(__ANDROID__)
#include <sys/auxv.h>
#ifndef HWCAP_CRC32
#define HWCAP_CRC32 (1 << 7)  // Linux arm64 uapi value
#endif
#endif
#endif

namespace sparrow {
namespace {

constexpr uint32_t kPolyReflected = 0x82F63B78u;

// kTables[k][b]: the register after byte b followed by k zero bytes, from a
// zero register. Slicing-by-8 folds eight bytes with one lookup per byte.
constexpr std::array<std::array<uint32_t, 256>, 8> MakeTables() {
  std::array<std::array<uint32_t, 256>, 8> t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t r = b;
    for (int bit = 0; bit < 8; ++bit) r = (r >> 1) ^ ((r & 1u) ? kPolyReflected : 0u);
    t[0][b] = r;
  }
  for (int k = 1; k < 8; ++k) {
    for (uint32_t b = 0; b < 256; ++b) {
      const uint32_t prev = t[k - 1][b];
      t[k][b] = (prev >> 8) ^ t[0][prev & 0xFF];
    }
  }
  return t;
}
constexpr auto kTables = MakeTables();

inline uint64_t LoadLE64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}

// Raw register update (no inversion) over `n` bytes, table-driven.
uint32_t UpdatePortable(uint32_t s, const uint8_t* p, size_t n) {
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    s = (s >> 8) ^ kTables[0][(s ^ *p++) & 0xFF];
    --n;
  }
  while (n >= 8) {
    const uint64_t w = LoadLE64(p) ^ s;
    s = kTables[7][w & 0xFF] ^ kTables[6][(w >> 8) & 0xFF] ^
        kTables[5][(w >> 16) & 0xFF] ^ kTables[4][(w >> 24) & 0xFF] ^
        kTables[3][(w >> 32) & 0xFF] ^ kTables[2][(w >> 40) & 0xFF] ^
        kTables[1][(w >> 48) & 0xFF] ^ kTables[0][w >> 56];
    p += 8;
    n -= 8;
  }
  while (n > 0) {
    s = (s >> 8) ^ kTables[0][(s ^ *p++) & 0xFF];
    --n;
  }
  return s;
}

#if defined(SPARROW_CRC_X86) || defined(SPARROW_CRC_ARM)

// Advancing a register over a fixed number of zero bytes, as four lookups.
struct ZeroShift {
  uint32_t table[4][256];

  explicit ZeroShift(size_t zero_bytes) {
    // The images of the 32 basis registers, by running zeros through them;
    // a few hundred thousand table steps, once per process.
    uint32_t basis[32];
    for (int bit = 0; bit < 32; ++bit) {
      uint32_t s = 1u << bit;
      for (size_t i = 0; i < zero_bytes; ++i) s = (s >> 8) ^ kTables[0][s & 0xFF];
      basis[bit] = s;
    }
    for (int k = 0; k < 4; ++k) {
      for (uint32_t b = 0; b < 256; ++b) {
        uint32_t image = 0;
        for (int bit = 0; bit < 8; ++bit) {
          if ((b >> bit) & 1u) image ^= basis[8 * k + bit];
        }
        table[k][b] = image;
      }
    }
  }
  uint32_t operator()(uint32_t s) const {
    return table[0][s & 0xFF] ^ table[1][(s >> 8) & 0xFF] ^
           table[2][(s >> 16) & 0xFF] ^ table[3][s >> 24];
  }
};

// Block lengths of the three-chain loop: long blocks for bulk data, short
// ones so records of a few KiB also run three chains.
constexpr size_t kLongBlock = 8192;
constexpr size_t kShortBlock = 256;

struct Shifts {
  ZeroShift long_block{kLongBlock};
  ZeroShift short_block{kShortBlock};
};
const Shifts& GetShifts() {
  static const Shifts* shifts = new Shifts();  // never destroyed: used at exit
  return *shifts;
}

#if defined(SPARROW_CRC_X86)
#define SPARROW_CRC_TARGET __attribute__((target("sse4.2")))
SPARROW_CRC_TARGET inline uint32_t HwByte(uint32_t s, uint8_t v) {
  return __builtin_ia32_crc32qi(s, v);
}
SPARROW_CRC_TARGET inline uint32_t HwWord(uint32_t s, uint64_t v) {
  return static_cast<uint32_t>(__builtin_ia32_crc32di(s, v));
}
#else
#if defined(__clang__)
#define SPARROW_CRC_TARGET __attribute__((target("crc")))
#else
#define SPARROW_CRC_TARGET __attribute__((target("+crc")))
#endif
// Clang before 16 declares the ACLE __crc32c* functions only when CRC is on
// for the whole file (__ARM_FEATURE_CRC32); its builtins work per function.
#if defined(__clang__)
SPARROW_CRC_TARGET inline uint32_t HwByte(uint32_t s, uint8_t v) { return __builtin_arm_crc32cb(s, v); }
SPARROW_CRC_TARGET inline uint32_t HwWord(uint32_t s, uint64_t v) { return __builtin_arm_crc32cd(s, v); }
#else
SPARROW_CRC_TARGET inline uint32_t HwByte(uint32_t s, uint8_t v) { return __crc32cb(s, v); }
SPARROW_CRC_TARGET inline uint32_t HwWord(uint32_t s, uint64_t v) { return __crc32cd(s, v); }
#endif
#endif

// Three independent chains over [p, p+L), [p+L, p+2L), [p+2L, p+3L), joined.
template <size_t L>
SPARROW_CRC_TARGET inline uint32_t ThreeChains(uint32_t s, const uint8_t* p,
                                               const ZeroShift& shift) {
  uint32_t a = s, b = 0, c = 0;
  for (size_t i = 0; i < L; i += 8) {
    a = HwWord(a, LoadLE64(p + i));
    b = HwWord(b, LoadLE64(p + L + i));
    c = HwWord(c, LoadLE64(p + 2 * L + i));
  }
  return shift(shift(a) ^ b) ^ c;
}

SPARROW_CRC_TARGET uint32_t UpdateHardware(uint32_t s, const uint8_t* p, size_t n) {
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    s = HwByte(s, *p++);
    --n;
  }
  if (n >= 3 * kShortBlock) {
    const Shifts& shifts = GetShifts();
    while (n >= 3 * kLongBlock) {
      s = ThreeChains<kLongBlock>(s, p, shifts.long_block);
      p += 3 * kLongBlock;
      n -= 3 * kLongBlock;
    }
    while (n >= 3 * kShortBlock) {
      s = ThreeChains<kShortBlock>(s, p, shifts.short_block);
      p += 3 * kShortBlock;
      n -= 3 * kShortBlock;
    }
  }
  while (n >= 8) {
    s = HwWord(s, LoadLE64(p));
    p += 8;
    n -= 8;
  }
  while (n > 0) {
    s = HwByte(s, *p++);
    --n;
  }
  return s;
}

bool CpuHasCrc() {
#if defined(SPARROW_CRC_X86)
  return __builtin_cpu_supports("sse4.2");
#elif defined(__ARM_FEATURE_CRC32)
  return true;  // the compiler was told every target CPU has it
#elif defined(__linux__) || defined(__ANDROID__)
  return (getauxval(AT_HWCAP) & HWCAP_CRC32) != 0;
#else
  return false;
#endif
}

#endif  // SPARROW_CRC_X86 || SPARROW_CRC_ARM

using UpdateFn = uint32_t (*)(uint32_t, const uint8_t*, size_t);

struct Implementation {
  UpdateFn update;
  const char* name;
};

Implementation Choose() {
#if defined(SPARROW_CRC_X86)
  if (CpuHasCrc()) return {UpdateHardware, "x86 sse4.2"};
#elif defined(SPARROW_CRC_ARM)
  if (CpuHasCrc()) return {UpdateHardware, "arm crc"};
#endif
  return {UpdatePortable, "portable"};
}

const Implementation& Chosen() {
  static const Implementation chosen = Choose();
  return chosen;
}

}  // namespace

uint32_t Crc32c(const void* data, size_t n, uint32_t crc) {
  return ~Chosen().update(~crc, static_cast<const uint8_t*>(data), n);
}

uint32_t Crc32cPortable(const void* data, size_t n, uint32_t crc) {
  return ~UpdatePortable(~crc, static_cast<const uint8_t*>(data), n);
}

const char* Crc32cImplementation() { return Chosen().name; }

}  // namespace sparrow
