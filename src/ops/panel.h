// Inside the ops layer: the panels that batched products dequantize weight
// rows into before oneDNN multiplies them (MatMul: f32 or bf16 panels of a
// matrix; RowDots: f32 panels of gathered rows). One function gives both a
// panel's row count and the bytes its buffer holds, and the budget charges
// (MatMulScratchBytes, RowDotsScratchBytes) call the same one, so what is
// charged is what is allocated.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace sparrow::ops {

// Panels of about this many bytes: large enough for oneDNN to run at speed.
// f32 ones stay in L2/L3; bf16 ones hold a whole 125M-shaped matrix (fewer,
// larger oneDNN calls: `sparrow bench -p 64 -t 2` on a 125M-shaped Q8_0
// file went from 1689-1794 tok/s with 4 MiB bf16 panels to 1934-2000 with 8
// MiB; 1 thread 1156-1169 -> 1179-1201; 16 MiB gained nothing more).
inline constexpr uint64_t kF32PanelTarget = uint64_t{4} << 20;
inline constexpr uint64_t kBf16PanelTarget = uint64_t{8} << 20;

struct Panel {
  size_t rows;     // per panel: a multiple of 16, or the whole matrix if fewer
  uint64_t bytes;  // the buffer: at least rows x cols elements
};

// The panel for a matrix of `rows` x `cols` elements of `elem_bytes`: the
// target's worth of rows, at least 16 of them, at most the matrix. `bytes`
// never decreases as cols or rows grow, so the panel of the widest,
// tallest matrix a caller multiplies bounds every other panel's buffer.
inline Panel PanelFor(size_t cols, size_t rows, size_t elem_bytes, uint64_t target) {
  const uint64_t row = std::max<uint64_t>(1, uint64_t{cols} * elem_bytes);
  const uint64_t room = std::max(target, 16 * row);
  const uint64_t fit = room / row / 16 * 16;  // at least 16
  Panel p;
  p.rows = static_cast<size_t>(std::min<uint64_t>(rows, fit));
  p.bytes = std::min(uint64_t{rows} * row, room);
  return p;
}

inline Panel F32Panel(size_t cols, size_t rows) {
  return PanelFor(cols, rows, sizeof(float), kF32PanelTarget);
}
inline Panel Bf16Panel(size_t cols, size_t rows) {
  return PanelFor(cols, rows, sizeof(uint16_t), kBf16PanelTarget);
}

}  // namespace sparrow::ops
