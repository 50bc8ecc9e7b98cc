// A fixed-size, aligned, uninitialised heap array. Used for weights, scratch
// and I/O buffers: kernels want 64-byte alignment, O_DIRECT wants 4096.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>
#include <utility>

namespace sparrow {

template <typename T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t count, size_t alignment = 64) {
    Reset(count, alignment);
  }
  AlignedBuffer(AlignedBuffer&& other) noexcept { *this = std::move(other); }
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { std::free(data_); }

  // Replaces the contents with `count` uninitialised elements.
  void Reset(size_t count, size_t alignment = 64) {
    std::free(data_);
    data_ = nullptr;
    size_ = 0;
    if (count == 0) return;
    size_t bytes = count * sizeof(T);
    if (bytes / sizeof(T) != count) throw std::bad_alloc();
    bytes = (bytes + alignment - 1) / alignment * alignment;  // aligned_alloc rule
    data_ = static_cast<T*>(std::aligned_alloc(alignment, bytes));
    if (data_ == nullptr) throw std::bad_alloc();
    size_ = count;
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace sparrow
