// Dispatch, argument checks and the scalar reference of the integer
// AxpyRows (axpy_int.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "simd/axpy_int.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "simd/axpy_int-inl.h"
#include "simd/axpy_int.h"

HWY_BEFORE_NAMESPACE();
namespace sparrow::simd {
namespace HWY_NAMESPACE {

void AxpyIntAddT(TensorType type, const uint8_t* const* rows, size_t count, size_t cols,
                 size_t first, size_t width, const float* a, float inv_step, int32_t* sums,
                 size_t offset, size_t parts) {
  AxpyIntAddImpl(type, rows, count, cols, first, width, a, inv_step, sums, offset, parts);
}

void AxpyIntFinishT(size_t width, const int32_t* sums, float step, float* y) {
  AxpyIntFinishImpl(width, sums, step, y);
}

bool AxpyIntFastT() { return AxpyIntFastImpl(); }

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "base/error.h"
#include "simd/quant_blocks.h"

namespace sparrow::simd {

HWY_EXPORT(AxpyIntAddT);
HWY_EXPORT(AxpyIntFinishT);
HWY_EXPORT(AxpyIntFastT);

namespace {

// Throws std::invalid_argument unless `type` is one AxpyIntAdd takes and
// [first, first + width) is a nonempty run of whole blocks inside rows of
// `cols` elements.
void CheckArguments(const char* what, TensorType type, size_t cols, size_t first, size_t width) {
  if (!AxpyIntSupports(type)) {
    throw std::invalid_argument(StrCat(what, ": no integer kernel for ", TensorTypeName(type)));
  }
  if (cols == 0 || cols % 32 != 0 || width == 0 || first % 32 != 0 || width % 32 != 0 ||
      first > cols || width > cols - first) {
    throw std::invalid_argument(StrCat(what, ": columns [", first, ", ", first + width,
                                       ") are not whole blocks of 32 inside rows of ", cols));
  }
}

}  // namespace

bool AxpyIntSupports(TensorType type) {
  return type == TensorType::kQ4_0S || type == TensorType::kQ4_0;
}

bool AxpyIntFast() { return HWY_DYNAMIC_DISPATCH(AxpyIntFastT)(); }

void AxpyIntAdd(TensorType type, const uint8_t* const* rows, size_t count, size_t cols,
                size_t first, size_t width, const float* a, float inv_step, int32_t* sums,
                size_t offset, size_t parts) {
  CheckArguments("AxpyIntAdd", type, cols, first, width);
  if (parts == 0) throw std::invalid_argument("AxpyIntAdd: rows of no parts");
  HWY_DYNAMIC_DISPATCH(AxpyIntAddT)
  (type, rows, count, cols, first, width, a, inv_step, sums, offset, parts);
}

void AxpyIntFinish(size_t width, const int32_t* sums, float step, float* y) {
  HWY_DYNAMIC_DISPATCH(AxpyIntFinishT)(width, sums, step, y);
}

void AxpyIntReference(TensorType type, const uint8_t* const* rows, size_t count, size_t cols,
                      size_t first, size_t width, const float* a, float inv_step, float step,
                      float* y) {
  CheckArguments("AxpyIntReference", type, cols, first, width);
  const Q4_0Layout layout = Q4_0Layout::For(type == TensorType::kQ4_0S, cols / 32);
  std::vector<int64_t> total(width, 0);
  for (size_t k = 0; k < count; ++k) {
    if (a[k] == 0.0f) continue;
    const float s = a[k] * inv_step;
    for (size_t j = 0; j < width / 32; ++j) {
      const size_t b = first / 32 + j;
      uint16_t bits;
      std::memcpy(&bits, layout.Scale(rows[k], b), 2);
      float p = HalfBitsToFloat(bits) * s;
      if (std::isnan(p)) p = 0.0f;
      const float limit = static_cast<float>(kAxpyIntMaxMultiple);
      p = std::min(std::max(p, -limit), limit);
      const int64_t m = static_cast<int64_t>(std::nearbyint(p));
      const uint8_t* nibbles = layout.Nibbles(rows[k], b);
      for (size_t i = 0; i < 16; ++i) {
        total[32 * j + i] += m * ((nibbles[i] & 15) - 8);
        total[32 * j + 16 + i] += m * ((nibbles[i] >> 4) - 8);
      }
    }
  }
  for (size_t e = 0; e < width; ++e) {
    y[e] += static_cast<float>(static_cast<double>(step) * static_cast<double>(total[e]));
  }
}

}  // namespace sparrow::simd

#endif  // HWY_ONCE
