// Inside the ops layer: how many rows of `cols` elements one dequantized f32
// panel holds (about 4 MiB: large enough for oneDNN to run at speed, small
// enough to stay in L2/L3), shared by MatMul and RowDots so that the two
// panels and their budget charges agree.
#pragma once

#include <algorithm>
#include <cstddef>

namespace sparrow::ops {

inline size_t F32PanelRows(size_t cols) {
  return std::max<size_t>(16, (size_t{4} << 20) / (cols * sizeof(float)) / 16 * 16);
}

}  // namespace sparrow::ops
