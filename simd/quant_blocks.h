// ggml's block layouts for the quantized weight types we compute with, as
// they sit in GGUF tensor data (little-endian, packed, no padding). The
// structs are only used through memcpy'd copies or byte pointers: blocks in a
// file start at any 2-byte boundary (Q8_0 is 34 bytes, Q4_0 18, Q6_K 210).
//
// Element order inside each block (i = element index within the block):
//   Q8_0 (32):  x[i] = d * qs[i]                       (qs int8)
//   Q4_0 (32):  x[i] = d * ((qs[i] & 15) - 8),  x[i+16] = d * ((qs[i] >> 4) - 8)
//               for i < 16.
//   Q4_K (256): eight sub-blocks of 32 with a 6-bit scale sc[s] and min m[s];
//               x = d * sc[s] * q - dmin * m[s]. The 128 nibble bytes form four
//               groups of 32: byte j of group g holds element 64g + j (low
//               nibble, sub-block 2g) and element 64g + 32 + j (high nibble,
//               sub-block 2g + 1). The 12 scale bytes pack sc/m (see
//               UnpackQ4KScales).
//   Q6_K (256): sixteen groups of 16 with an int8 scale; x = d * sc[g] * (q - 32)
//               with q 6 bits: low 4 in ql, high 2 in qh. Two halves of 128
//               (h = 0, 1) use ql[64h..64h+63], qh[32h..32h+31], sc[8h..8h+7];
//               for l < 32, with e = 128h + l:
//                 e      : ql[64h+l]    & 15 | ((qh[32h+l] >> 0) & 3) << 4
//                 e + 32 : ql[64h+32+l] & 15 | ((qh[32h+l] >> 2) & 3) << 4
//                 e + 64 : ql[64h+l]    >> 4 | ((qh[32h+l] >> 4) & 3) << 4
//                 e + 96 : ql[64h+32+l] >> 4 | ((qh[32h+l] >> 6) & 3) << 4
//               and element e' uses scale sc[e' / 16].
//
// Q4_0S is Sparrow's own record layout of Q4_0 (never in a GGUF file): the
// same blocks, values and bytes per row, with a row's f16 scales stored
// together in front (2 bytes each) and its blocks' 16 nibble bytes after
// them. The kernels then load 16 scales with one load instead of picking
// them out of 288 interleaved bytes, and four blocks' nibbles with one
// (gemv-inl.h: Q4_0SplitQuads). Its layout depends on the row's length, so
// it is quantized and dequantized one whole row at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace sparrow::simd {

inline constexpr size_t kQ8_0Elems = 32;
inline constexpr size_t kQ4_0Elems = 32;
inline constexpr size_t kQKElems = 256;  // K-quant super-block

struct BlockQ8_0 {
  uint16_t d;      // f16 scale
  int8_t qs[32];
};

struct BlockQ4_0 {
  uint16_t d;      // f16 scale
  uint8_t qs[16];  // two 4-bit quants per byte, offset by 8
};

struct BlockQ4_K {
  uint16_t d;          // f16 scale of the sub-block scales
  uint16_t dmin;       // f16 scale of the sub-block mins
  uint8_t scales[12];  // eight 6-bit scales and eight 6-bit mins
  uint8_t qs[128];     // 4-bit quants
};

struct BlockQ6_K {
  uint8_t ql[128];    // low 4 bits
  uint8_t qh[64];     // high 2 bits
  int8_t scales[16];  // per 16 elements
  uint16_t d;         // f16 super-block scale
};

// Where a Q4_0 or Q4_0S row of `nblocks` blocks keeps block b's f16 scale
// and its 16 nibble bytes.
struct Q4_0Layout {
  size_t scale_stride;   // bytes from one block's scale to the next's
  size_t nibbles_at;     // offset of block 0's nibbles
  size_t nibble_stride;  // bytes from one block's nibbles to the next's

  static constexpr Q4_0Layout Interleaved() { return {18, 2, 18}; }
  static constexpr Q4_0Layout Split(size_t nblocks) { return {2, 2 * nblocks, 16}; }
  static constexpr Q4_0Layout For(bool split, size_t nblocks) {
    return split ? Split(nblocks) : Interleaved();
  }
  const uint8_t* Scale(const uint8_t* row, size_t b) const { return row + b * scale_stride; }
  uint8_t* Scale(uint8_t* row, size_t b) const { return row + b * scale_stride; }
  const uint8_t* Nibbles(const uint8_t* row, size_t b) const {
    return row + nibbles_at + b * nibble_stride;
  }
  uint8_t* Nibbles(uint8_t* row, size_t b) const { return row + nibbles_at + b * nibble_stride; }
};

static_assert(sizeof(BlockQ8_0) == 34 && offsetof(BlockQ8_0, qs) == 2);
static_assert(sizeof(BlockQ4_0) == 18 && offsetof(BlockQ4_0, qs) == 2);
static_assert(sizeof(BlockQ4_K) == 144 && offsetof(BlockQ4_K, scales) == 4 &&
              offsetof(BlockQ4_K, qs) == 16);
static_assert(sizeof(BlockQ6_K) == 210 && offsetof(BlockQ6_K, qh) == 128 &&
              offsetof(BlockQ6_K, scales) == 192 &&
              offsetof(BlockQ6_K, d) == 208);

// The 6-bit scales and mins of a Q4_K super-block: sub-blocks 0..3 keep
// theirs in the low 6 bits of bytes 0..3 (scales) and 4..7 (mins); sub-blocks
// 4..7 keep the low 4 bits in byte 8..11 (scale: low nibble, min: high nibble)
// and the high 2 bits in the top bits of bytes 0..3 (scales) and 4..7 (mins).
inline void UnpackQ4KScales(const uint8_t* packed, uint8_t sc[8],
                            uint8_t m[8]) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = packed[j] & 63;
    m[j] = packed[j + 4] & 63;
    sc[j + 4] = (packed[j + 8] & 15) | ((packed[j] >> 6) << 4);
    m[j + 4] = (packed[j + 8] >> 4) | ((packed[j + 4] >> 6) << 4);
  }
}

inline void PackQ4KScales(const uint8_t sc[8], const uint8_t m[8],
                          uint8_t packed[12]) {
  for (int j = 0; j < 4; ++j) {
    packed[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    packed[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    packed[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
}

// IEEE half bits to float, exact (subnormals, inf and NaN payloads kept).
// Inline and branch-light for the per-block scales in kernels; the public
// F16ToF32 (quantize.h) is the same function.
inline float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;  // exponent and mantissa
  uint32_t bits;
  if (em >= 0x0400u && em < 0x7c00u) {
    bits = (em << 13) + (112u << 23);  // rebias the exponent: 127 - 15
  } else if (em >= 0x7c00u) {
    bits = 0x7f800000u | ((em & 0x03ffu) << 13);  // inf, NaN
  } else {
    // Zero or subnormal: em * 2^-24 is exact in float and needs no
    // subnormal float arithmetic (safe under flush-to-zero modes).
    const float f = static_cast<float>(em) * 0x1p-24f;
    std::memcpy(&bits, &f, 4);
  }
  bits |= sign;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

}  // namespace sparrow::simd
