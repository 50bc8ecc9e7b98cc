// Q4_0 matrices repacked at load for decoding: eight rows interleaved so
// that one step of the kernel multiplies the same four activations into all
// eight rows, with 8-bit activations.
//
// Why: the plain Q4_0 GEMV (gemv.h) is bound by arithmetic at one thread on
// CPUs without a wide integer dot product (it widens nibbles and activations
// to int16, and gathers each block's scale on its own). Interleaved, eight
// rows' scales are one 16-byte load, and on x86 each 32-byte load of nibbles
// takes two 8-bit pairwise multiply-adds (SSSE3 pmaddubsw) for 256
// products. Measured in a stand-alone prototype on an AMD EPYC (Zen 3, AVX2)
// with a 4096x4096 matrix, one thread: 13.2 GB/s from DRAM and 24-28 GB/s
// from L2, against 6-8 and 9-12 GB/s for per-row kernels.
//
// Layout of one group of 8 rows with `nblocks` blocks each (8 * 18 * nblocks
// bytes, the size of the 8 rows it replaces): for each block b in order,
//   16 bytes: the 8 rows' f16 scales d, row 0 first;
//   4 chunks of 32 bytes: chunk k holds at bytes 4r..4r+3 the nibble bytes
//   qs[4k..4k+3] of row r's block b.
// Byte qs[i] of a block holds element i (low nibble) and i + 16 (high).
//
// Activations are quantized per block of 32 to int8 (largest magnitude to
// +-127, round to nearest even): |x - q * scale| <= max|x_block| / 254, the
// error llama.cpp's Q8_0 activations have too.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/aligned_buffer.h"

namespace sparrow::simd {

inline constexpr size_t kPackedRows = 8;

// Packs 8 Q4_0 rows (`row_bytes` apart, `cols` elements each) into one
// group at `out` (8 * 18 * cols / 32 bytes, not overlapping the rows).
void PackQ4_0Group(const uint8_t* rows, size_t row_bytes, size_t cols, uint8_t* out);
// Writes row r (< 8) of a packed group back in plain Q4_0 blocks.
void UnpackQ4_0Row(const uint8_t* group, size_t cols, size_t r, uint8_t* row);
// Packs the whole groups of a matrix whose rows are exactly 18 * cols / 32
// bytes apart, in place; rows past the last whole group stay as they are.
void PackQ4_0Matrix(uint8_t* data, size_t rows, size_t cols);

// Whether the dispatched target has the packed kernel's fast path (an 8-bit
// pairwise multiply-add); elsewhere the plain kernel is faster, and the
// engine does not pack.
bool PackedQ4_0Preferred();

// The activation vector in the packed kernel's form; prepare it once, then
// use it from any number of threads.
class PackedQ4_0Input {
 public:
  // `n` must be a multiple of 32 (InputError otherwise).
  void Prepare(const float* x, size_t n);
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
// group_end) of a packed matrix at `data` (groups 8 * 18 * cols / 32 bytes
// apart). std::invalid_argument if x was prepared for another size.
void PackedQ4_0Gemv(const uint8_t* data, size_t cols, const PackedQ4_0Input& x,
                    size_t group_begin, size_t group_end, float* y);

// Scalar reference: unpacks and dequantizes each row, f32 x, double sums.
void PackedQ4_0GemvReference(const uint8_t* data, size_t cols, const float* x,
                             size_t group_begin, size_t group_end, float* y);

}  // namespace sparrow::simd
