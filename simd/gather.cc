// Dispatch, argument checks and the scalar references for the gather
// kernels.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "simd/gather.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "simd/gather-inl.h"
#include "simd/gather.h"

HWY_BEFORE_NAMESPACE();
namespace sparrow::simd {
namespace HWY_NAMESPACE {

void DotRowsT(TensorType type, const uint8_t* const* rows, size_t count, size_t cols,
              const GemvInput* x, size_t n, float* out, size_t out_stride) {
  DotRowsImpl(type, rows, count, cols, x, n, out, out_stride);
}

void AxpyRowsT(TensorType type, const uint8_t* const* rows, size_t count, size_t cols, size_t first,
               size_t width, size_t offset, const float* a, size_t a_stride, size_t n, float* y,
               size_t y_stride) {
  AxpyRowsImpl(type, rows, count, ColumnWindow{first, width, cols, offset}, a, a_stride, n, y,
               y_stride);
}

size_t AxpyRowsScratchBytesT(TensorType type, size_t cols) {
  return AxpyRowsScratchBytesImpl(type, cols);
}

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "base/error.h"
#include "simd/quantize.h"

namespace sparrow::simd {

HWY_EXPORT(DotRowsT);
HWY_EXPORT(AxpyRowsT);
HWY_EXPORT(AxpyRowsScratchBytesT);

namespace {

// Throws std::invalid_argument unless `type` has a gather kernel and `cols`
// is a positive whole number of its blocks.
void CheckRows(const char* what, TensorType type, size_t cols) {
  if (!GatherSupports(type)) {
    throw std::invalid_argument(
        StrCat(what, ": no gather kernel for ", TensorTypeName(type)));
  }
  const uint32_t block = GetTensorTypeInfo(type).block_elems;
  if (cols == 0 || cols % block != 0) {
    throw std::invalid_argument(StrCat(what, ": rows of ", cols, " ", TensorTypeName(type),
                                       " elements are not whole blocks of ", block));
  }
}

// Throws std::invalid_argument unless [first, first + width) is a nonempty
// run of whole blocks inside rows of `cols` elements.
void CheckWindow(const char* what, TensorType type, size_t cols, size_t first, size_t width) {
  const uint32_t block = GetTensorTypeInfo(type).block_elems;
  if (width == 0 || first % block != 0 || width % block != 0 || first > cols ||
      width > cols - first) {
    throw std::invalid_argument(StrCat(what, ": columns [", first, ", ", first + width,
                                       ") are not whole blocks of ", block, " inside ", cols));
  }
}

// Throws std::invalid_argument unless `type` has a gather kernel and rows
// of `cols` are `parts` rows of whole blocks.
void CheckParts(const char* what, TensorType type, size_t cols, size_t parts) {
  if (parts == 0 || cols % parts != 0) {
    throw std::invalid_argument(
        StrCat(what, ": rows of ", cols, " elements are not ", parts, " parts of equal length"));
  }
  CheckRows(what, type, cols / parts);
}

// Calls body(row_cols, first, width, offset, y_at) for the pieces of the
// window [first, first + width) of rows of `cols` that are `parts` rows
// back to back: the whole window where the parts read as one longer row,
// else a piece per part it covers (columns of that part's row, the part's
// byte offset, and where the piece starts in the window).
template <class Body>
void ForEachPartWindow(TensorType type, size_t cols, size_t first, size_t width, size_t parts,
                       const Body& body) {
  if (parts == 1 || !TensorTypeCan(type, TypeAbility::kWholeRowLayout)) {
    return body(cols, first, width, 0, 0);
  }
  const TensorTypeInfo& info = GetTensorTypeInfo(type);
  const size_t part_cols = cols / parts;
  const size_t part_bytes = part_cols / info.block_elems * info.block_bytes;
  for (size_t p = 0; p < parts; ++p) {
    const size_t lo = std::max(first, p * part_cols);
    const size_t hi = std::min(first + width, (p + 1) * part_cols);
    if (lo < hi) body(part_cols, lo - p * part_cols, hi - lo, p * part_bytes, lo - first);
  }
}

void CheckStride(const char* what, size_t n, size_t stride, size_t width) {
  if (n > 1 && stride < width) {
    throw std::invalid_argument(
        StrCat(what, ": stride ", stride, " is less than the row width ", width));
  }
}

}  // namespace

bool GatherSupports(TensorType type) { return TensorTypeCan(type, TypeAbility::kGather); }

void DotRows(TensorType type, const uint8_t* const* rows, size_t count, size_t cols,
             const GemvInput* x, size_t n, float* out, size_t out_stride) {
  if (count == 0 || n == 0) return;
  CheckRows("DotRows", type, cols);
  CheckStride("DotRows", n, out_stride, count);
  for (size_t t = 0; t < n; ++t) {
    if (x[t].weight_type() != type || x[t].size() != cols) {
      throw std::invalid_argument(StrCat(
          "DotRows: input ", t, " prepared for ", TensorTypeName(x[t].weight_type()), " x ",
          x[t].size(), ", used with ", TensorTypeName(type), " x ", cols));
    }
  }
  HWY_DYNAMIC_DISPATCH(DotRowsT)(type, rows, count, cols, x, n, out, out_stride);
}

size_t AxpyRowsScratchBytes(TensorType type, size_t cols) {
  return HWY_DYNAMIC_DISPATCH(AxpyRowsScratchBytesT)(type, cols);
}

void AxpyRows(TensorType type, const uint8_t* const* rows, size_t count, size_t cols,
              const float* a, size_t a_stride, size_t n, float* y, size_t y_stride) {
  AxpyRowColumns(type, rows, count, cols, 0, cols, a, a_stride, n, y, y_stride, 1);
}

void AxpyRowColumns(TensorType type, const uint8_t* const* rows, size_t count, size_t cols,
                    size_t first, size_t width, const float* a, size_t a_stride, size_t n, float* y,
                    size_t y_stride, size_t parts) {
  if (count == 0 || n == 0) return;
  CheckParts("AxpyRows", type, cols, parts);
  CheckWindow("AxpyRows", type, cols, first, width);
  CheckStride("AxpyRows", n, a_stride, count);
  CheckStride("AxpyRows", n, y_stride, width);
  ForEachPartWindow(
      type, cols, first, width, parts,
      [&](size_t part_cols, size_t part_first, size_t part_width, size_t offset, size_t y_at) {
        HWY_DYNAMIC_DISPATCH(AxpyRowsT)
        (type, rows, count, part_cols, part_first, part_width, offset, a, a_stride, n, y + y_at,
         y_stride);
      });
}

void DotRowsReference(TensorType type, const uint8_t* const* rows, size_t count,
                      size_t cols, const float* x, size_t n, float* out,
                      size_t out_stride) {
  if (count == 0 || n == 0) return;
  CheckRows("DotRowsReference", type, cols);
  CheckStride("DotRowsReference", n, out_stride, count);
  std::vector<float> w(cols);
  for (size_t k = 0; k < count; ++k) {
    DequantizeRowReference(type, rows[k], cols, w.data());
    for (size_t t = 0; t < n; ++t) {
      const float* xt = x + t * cols;
      double sum = 0.0;
      for (size_t i = 0; i < cols; ++i) sum += double(w[i]) * double(xt[i]);
      out[t * out_stride + k] = static_cast<float>(sum);
    }
  }
}

void AxpyRowsReference(TensorType type, const uint8_t* const* rows, size_t count,
                       size_t cols, const float* a, size_t a_stride, size_t n,
                       float* y, size_t y_stride) {
  AxpyRowColumnsReference(type, rows, count, cols, 0, cols, a, a_stride, n, y, y_stride, 1);
}

void AxpyRowColumnsReference(TensorType type, const uint8_t* const* rows, size_t count, size_t cols,
                             size_t first, size_t width, const float* a, size_t a_stride, size_t n,
                             float* y, size_t y_stride, size_t parts) {
  if (count == 0 || n == 0) return;
  CheckParts("AxpyRowsReference", type, cols, parts);
  CheckWindow("AxpyRowsReference", type, cols, first, width);
  CheckStride("AxpyRowsReference", n, a_stride, count);
  CheckStride("AxpyRowsReference", n, y_stride, width);
  std::vector<double> acc(n * width);
  for (size_t t = 0; t < n; ++t) {
    for (size_t i = 0; i < width; ++i) acc[t * width + i] = y[t * y_stride + i];
  }
  std::vector<float> w(cols);
  for (size_t k = 0; k < count; ++k) {
    bool needed = false;
    for (size_t t = 0; t < n; ++t) needed = needed || a[t * a_stride + k] != 0.0f;
    if (!needed) continue;
    // Part by part: each is a row of its own.
    const TensorTypeInfo& info = GetTensorTypeInfo(type);
    const size_t part_cols = cols / parts;
    const size_t part_bytes = part_cols / info.block_elems * info.block_bytes;
    for (size_t p = 0; p < parts; ++p) {
      DequantizeRowReference(type, rows[k] + p * part_bytes, part_cols, w.data() + p * part_cols);
    }
    for (size_t t = 0; t < n; ++t) {
      const double coeff = a[t * a_stride + k];
      if (coeff == 0.0) continue;
      double* at = acc.data() + t * width;
      for (size_t i = 0; i < width; ++i) at[i] += coeff * double(w[first + i]);
    }
  }
  for (size_t t = 0; t < n; ++t) {
    for (size_t i = 0; i < width; ++i) {
      y[t * y_stride + i] = static_cast<float>(acc[t * width + i]);
    }
  }
}

}  // namespace sparrow::simd

#endif  // HWY_ONCE
