#include "base/huge_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <fstream>
#include <new>
#include <string>
#include <utility>

namespace sparrow {
namespace {

// The selected mode of /sys/kernel/mm/transparent_hugepage/enabled
// ("[madvise]" of "always [madvise] never"), or "" where there is none.
const std::string& ThpMode() {
  static const std::string mode = [] {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string modes;
    std::getline(f, modes);
    for (const char* m : {"[always]", "[madvise]"}) {
      if (modes.find(m) != std::string::npos) return std::string(m);
    }
#endif
    return std::string();
  }();
  return mode;
}

}  // namespace

bool TransparentHugePagesAvailable() { return !ThpMode().empty(); }

bool TransparentHugePagesAlways() { return ThpMode() == "[always]"; }

size_t AdviseWholeHugePages(void* p, size_t n) {
  if (!TransparentHugePagesAvailable()) return 0;
  const uintptr_t begin =
      (reinterpret_cast<uintptr_t>(p) + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n) / kHugePageBytes * kHugePageBytes;
  if (end <= begin) return 0;
#if defined(MADV_HUGEPAGE)
  if (::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE) != 0) return 0;
#endif
  return end - begin;
}

uint64_t HugePageBufferBytes(uint64_t bytes) {
  return (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
}

HugePageBuffer::HugePageBuffer(size_t bytes, bool advise_huge_pages) {
  if (bytes == 0) return;
  const size_t size = HugePageBufferBytes(bytes);
  // Map one huge page more than needed and trim both ends to alignment.
  void* raw = ::mmap(nullptr, size + kHugePageBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  if (aligned > start) ::munmap(raw, aligned - start);
  const uintptr_t tail = start + size + kHugePageBytes - (aligned + size);
  if (tail > 0) ::munmap(reinterpret_cast<void*>(aligned + size), tail);
  data_ = reinterpret_cast<uint8_t*>(aligned);
  size_ = size;
#if defined(MADV_HUGEPAGE)
  if (advise_huge_pages) ::madvise(data_, size_, MADV_HUGEPAGE);  // small pages if refused
#endif
}

HugePageBuffer MapWithWholeHugePages(size_t bytes, bool huge_pages) {
  HugePageBuffer buffer(bytes, /*advise_huge_pages=*/false);
  if (huge_pages) AdviseWholeHugePages(buffer.data(), bytes);
  return buffer;
}

HugePageBuffer::HugePageBuffer(HugePageBuffer&& other) noexcept { *this = std::move(other); }

HugePageBuffer& HugePageBuffer::operator=(HugePageBuffer&& other) noexcept {
  std::swap(data_, other.data_);
  std::swap(size_, other.size_);
  return *this;
}

HugePageBuffer::~HugePageBuffer() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

size_t PageBytes() { return static_cast<size_t>(::sysconf(_SC_PAGESIZE)); }

uint64_t WholePageBytesWithin(uint64_t offset, uint64_t n) {
  const uint64_t page = PageBytes();
  const uint64_t begin = (offset + page - 1) / page * page;
  const uint64_t end = (offset + n) / page * page;
  return end > begin ? end - begin : 0;
}

size_t ReleaseWholePages(const void* p, size_t n) {
  const uintptr_t page = PageBytes();
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n) / page * page;
  if (end <= begin) return 0;
  ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
  return end - begin;
}

}  // namespace sparrow
