// Inside the ops layer: how many rows of `cols` elements one dequantized f32
// panel holds (about 4 MiB: large enough for oneDNN to run at speed, small
// enough to stay in L2/L3), shared by MatMul and RowDots so that the two
// panels and their budget charges agree (MatMulScratchBytes).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace sparrow::ops {

inline size_t F32PanelRows(size_t cols) {
  return std::max<size_t>(16, (size_t{4} << 20) / (cols * sizeof(float)) / 16 * 16);
}

// The same for MatMul's bf16 panels: about 8 MiB, a whole 125M-shaped
// matrix. Fewer, larger oneDNN calls: `sparrow bench -p 64 -t 2` on a
// 125M-shaped Q8_0 file went from 1689-1794 tok/s with 4 MiB panels to
// 1934-2000 (1 thread 1156-1169 -> 1179-1201; 16 MiB gained nothing more).
inline size_t Bf16PanelRows(size_t cols) {
  return std::max<size_t>(16, (size_t{8} << 20) / (cols * sizeof(uint16_t)) / 16 * 16);
}

}  // namespace sparrow::ops
