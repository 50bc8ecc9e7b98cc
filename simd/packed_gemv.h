// Q4_0, Q4_K and Q8_0 matrices repacked at load for decoding: eight rows
// interleaved so that one step of the kernel multiplies the same four
// activations into all eight rows, with 8-bit activations.
//
// Why: the plain GEMV kernels (gemv.h) for these types are bound by
// arithmetic at one thread on CPUs without a wide integer dot product: they
// widen nibbles and activations to int16, and decode each row's block
// scales on their own. Interleaved, eight rows' scales are one load, and on
// x86 each 32-byte load of nibbles takes two 8-bit pairwise multiply-adds
// for 256 products (int8_dot-inl.h). Measured in a stand-alone prototype on
// an AMD EPYC (Zen 3, AVX2) with a 4096x4096 Q4_0 matrix, one thread: 13.2
// GB/s from DRAM and 24-28 GB/s from L2, against 6-8 and 9-12 GB/s for
// per-row kernels; gemv_bench's figures are in the README.
// Q8_0's plain kernel keeps up with memory for one token, but several
// tokens at once (block decoding, short prompts) are bound by its per-block
// int16 steps; packed, each block's 8 chunks serve every token with one
// 8-bit dot product each. Measured on Sapphire Rapids (2 vCPU VM), AVX3_DL,
// alternating, synthetic files: 125M-shaped `sparrow bench -p 16 -n 0 -r 3
// -t 1` 391-403 tok/s plain, 743-768 packed; 1.1B-shaped `sparrow batch
// --block 16 -t 2` (benchmarks/batch_bench.sh, 16 prompts x 16 tokens)
// 59.2 plain, 80.0 packed. One token (tg64, 125M-shaped, 1 thread) is 2-5%
// slower packed: 132-133 against 135-140 tok/s.
//
// A packed group of 8 rows takes the bytes of the 8 rows it replaces. Per
// block (Q4_0: 32 elements, 8 x 18 bytes; Q8_0: 32 elements, 8 x 34; Q4_K:
// 256 elements, 8 x 144), in order:
//   Q4_0: 16 bytes: the rows' f16 scales d, row 0 first;
//         4 chunks of 32 bytes: chunk k holds at bytes 4r..4r+3 the nibble
//         bytes qs[4k..4k+3] of row r (byte i: element i low, i + 16 high).
//   Q8_0: the same with 8 chunks: chunk k holds row r's qs[4k..4k+3].
//   Q4_K: 16 bytes d[8], 16 bytes dmin[8];
//         64 bytes: at 8s + r, row r's sub-block s scale sc (6 bits) with
//         the top 2 bits of its min m in bits 6-7;
//         32 bytes: at 8t + r, the low 4 bits of m for sub-blocks 2t (low
//         nibble) and 2t + 1 (high nibble);
//         4 groups g of 8 chunks of 32 bytes: chunk (g, k) holds at bytes
//         4r..4r+3 row r's qs[32g + 4k .. 32g + 4k + 3] (low nibbles:
//         sub-block 2g, elements 4k..; high: sub-block 2g + 1).
//
// Activations are quantized per block of 32 to int8 (largest magnitude to
// +-127, round to nearest even): |x - q * scale| <= max|x_block| / 254, the
// error llama.cpp's Q8_K / Q8_0 activations have too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "base/aligned_buffer.h"
#include "base/tensor_type.h"

namespace sparrow::simd {

inline constexpr size_t kPackedRows = 8;

// The packed kernels read a range of groups for one input as
// kPackedStreams streams, its parts front to back side by side (group g
// with g + part, g + 2 * part, ...; packed_gemv-inl.h: PackedGroups), what
// is left in pairs, then alone. They prefetch each line
// kPackedPrefetchAhead bytes ahead of where they read (StreamPrefetcher),
// except on CPUs whose hardware follows the streams itself
// (CpuStreamsRowsItself). gemv_bench's `--read` reference reads the same way.
inline constexpr size_t kPackedStreams = 4;
inline constexpr size_t kPackedPrefetchAhead = 2048;

// That order for `groups` groups from `first` on: fn(streams, first, part)
// for each set of streams (kPackedStreams, then 2, then 1) that has groups,
// whose groups first + i + j * part (i < part, j < streams) are read
// together. The kernels and gemv_bench's `--read` both follow it.
template <class Fn>
void ForEachPackedStreamSet(size_t first, size_t groups, Fn&& fn) {
  for (const size_t streams : {kPackedStreams, size_t{2}, size_t{1}}) {
    const size_t part = groups / streams;
    if (part == 0) continue;
    fn(streams, first, part);
    first += streams * part;
    groups -= streams * part;
  }
}

// Types with a packed layout (TypeAbility::kPack in base/tensor_type.cc:
// Q4_0, Q4_K and Q8_0).
bool PackedGemvSupports(TensorType type);

// Packs 8 rows (`row_bytes` apart, `cols` elements each) of a supported
// type into one group at `out` (8 plain rows' bytes, not overlapping them).
void PackGroup(TensorType type, const uint8_t* rows, size_t row_bytes, size_t cols,
               uint8_t* out);
// Writes row r (< 8) of a packed group back in the type's plain blocks.
void UnpackRow(TensorType type, const uint8_t* group, size_t cols, size_t r, uint8_t* row);
// Row r as bfloat16 bits, bit for bit DequantizeRowToBF16 of UnpackRow's
// row (oneDNN's bf16 panels of packed matrices): Q4_0 straight from the
// group where the CPU has AVX512_BF16, other cases through `scratch` (a
// plain row's bytes). Measured on Sapphire Rapids (2 vCPU VM), `sparrow
// bench -p 64 -n 0 -r 3`, synthetic Q4_0, alternating, tok/s: unpacked then
// converted / each value converted from the group / the block's 16 values
// converted once and looked up (quantize-inl.h: Q4_0BlockToBF16):
// 1.1B-shaped, 1 thread 138-140 / 142 / 151-156, 2 threads 235-236 /
// 249-251 / 260-261; 125M-shaped, 1 thread 1201-1268 / 1299-1312 /
// 1330-1369. Q4_K rows are unpacked, then converted by sub-block lookup
// tables (quantize-inl.h: Q4_KBlockToBF16): 125M-shaped Q4_K, 1 thread
// 1100-1110 -> 1204-1232, 2 threads 1792-1842 -> 1923-1969.
void UnpackRowToBF16(TensorType type, const uint8_t* group, size_t cols, size_t r,
                     uint8_t* scratch, uint16_t* dst);
// All 8 rows of a group, row r at dst + r * dst_stride, each bit for bit
// UnpackRowToBF16's: Q8_0 by transposing each block's chunks in registers
// where the CPU has AVX512_BF16, other cases row by row through `scratch`.
// Measured on Sapphire Rapids (2 vCPU VM), `sparrow bench -p 64 -n 0 -r 3
// -t 1`, 125M-shaped synthetic Q8_0, alternating, tok/s: plain rows (not
// packed) 1377-1424; packed, row by row 1174-1183; packed, by group
// 1420-1435.
void UnpackGroupToBF16(TensorType type, const uint8_t* group, size_t cols, uint8_t* scratch,
                       uint16_t* dst, size_t dst_stride);
// Packs the whole groups of a matrix whose rows are back to back (no
// padding), in place; rows past the last whole group stay as they are.
void PackMatrix(TensorType type, uint8_t* data, size_t rows, size_t cols);

// Whether the dispatched target has the packed kernels' fast path (a native
// 8-bit dot product or pairwise multiply-add); elsewhere the plain kernels
// are faster, and the engine does not pack.
bool PackedGemvPreferred();
// The 8-bit dot-product form the packed kernels use with the dispatched
// target on this CPU: "vpdpbusd (AVX-512 VNNI)", "vpdpbusd (AVX-VNNI)",
// "pmaddubsw", "sdot (SVE)", "sdot (NEON dotprod)" or "emulated", and on Arm
// with i8mm ", smmla (i8mm) for pairs of Q4_0 tokens" after the sdot form.
const char* PackedGemvDotForm();

// The activation vector in the packed kernels' form; prepare it once, then
// use it from any number of threads.
class PackedGemvInput {
 public:
  // `n` must be a multiple of 32 (InputError otherwise).
  void Prepare(const float* x, size_t n);
  // Bytes Prepare allocates for `n` elements (for the DRAM budget).
  static uint64_t Bytes(size_t n) { return n * sizeof(int8_t) + 2 * (n / 32) * sizeof(float); }
  size_t size() const { return n_; }
  const int8_t* quantized() const { return q_.data(); }
  // Per block of 32: x ~ quantized * scale (NaN if the block has a
  // non-finite value), and the exact sum of the quantized values.
  const float* scales() const { return scales_.data(); }
  const float* sums() const { return sums_.data(); }

 private:
  size_t n_ = 0;
  AlignedBuffer<int8_t> q_;
  AlignedBuffer<float> scales_;
  AlignedBuffer<float> sums_;
};

// y[8 * g + r] = dot(row r of group g, x) for groups [group_begin,
// group_end) of a packed matrix at `data` (groups 8 plain rows apart).
// std::invalid_argument if x was prepared for another size or the type or
// size is not one the kernels take.
void PackedGemv(TensorType type, const uint8_t* data, size_t cols, const PackedGemvInput& x,
                size_t group_begin, size_t group_end, float* y);
// The same for n inputs (y[t * y_stride + ...]): each group is read once
// for all of them, and each input's results are bit for bit PackedGemv's.
void PackedGemvBatch(TensorType type, const uint8_t* data, size_t cols,
                     const PackedGemvInput* x, size_t n, size_t group_begin, size_t group_end,
                     float* y, size_t y_stride);

// Scalar reference: unpacks each row and runs GemvReference (f32 x,
// double sums).
void PackedGemvReference(TensorType type, const uint8_t* data, size_t cols, const float* x,
                         size_t group_begin, size_t group_end, float* y);

}  // namespace sparrow::simd
