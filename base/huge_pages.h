// Memory for large arrays that decoding streams through (the resident
// weight matrices): anonymous, 2 MiB aligned and advised for transparent
// huge pages. Each matrix-vector product reads every byte of its matrix
// once per token; on 4 KiB pages that is a TLB miss and page walk every
// 4 KiB, on huge pages one per 2 MiB. Measured on Sapphire Rapids (2 vCPU
// VM, THP in madvise mode), `sparrow bench -p 0 -n 64 -t 1`, alternating:
// 1.1B-shaped synthetic Q4_0 24.7-25.7 -> 26.5-26.6 tok/s, Q8_0 13.7 ->
// 14.4-14.5.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sparrow {

// Whether the kernel gives huge pages to regions advised for them (Linux
// with transparent huge pages in "always" or "madvise" mode). Read once.
bool TransparentHugePagesAvailable();
// Whether it gives them to every anonymous mapping, advised or not
// ("always" mode): then a mapping's last huge page is backed whole.
bool TransparentHugePagesAlways();

// The size of one transparent huge page where the system has them (2 MiB).
inline constexpr uint64_t kHugePageBytes = uint64_t{2} << 20;

// The size HugePageBuffer maps for `bytes`: whole 2 MiB pages.
uint64_t HugePageBufferBytes(uint64_t bytes);

class HugePageBuffer {
 public:
  HugePageBuffer() = default;
  // Maps HugePageBufferBytes(bytes) of zeroed memory; std::bad_alloc if the
  // system refuses. Physical pages are taken as they are first written:
  // without `advise_huge_pages`, 4 KiB at a time, so that a range never
  // written is never backed, even beside written ones.
  explicit HugePageBuffer(size_t bytes, bool advise_huge_pages = true);
  HugePageBuffer(HugePageBuffer&& other) noexcept;
  HugePageBuffer& operator=(HugePageBuffer&& other) noexcept;
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;
  ~HugePageBuffer();

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Advises transparent huge pages for the whole 2 MiB pages inside [p, p + n)
// (none if the system has none), leaving the rest on small pages; returns the
// bytes advised.
size_t AdviseWholeHugePages(void* p, size_t n);

// A HugePageBuffer for `bytes` whose whole 2 MiB pages within those bytes
// are advised for huge pages when `huge_pages` (AdviseWholeHugePages), the
// rest left on small pages: once written, it takes `bytes` rounded to a page
// (short of "always" mode), not to a huge page.
HugePageBuffer MapWithWholeHugePages(size_t bytes, bool huge_pages = true);

// Gives the physical pages wholly inside [p, p + n) back to the system,
// for memory whose contents are no longer needed: a private file mapping
// (later reads see the file again) or anonymous memory (later reads see
// zeros). Pages that [p, p + n) shares with neighbours are kept. Returns
// the bytes of the pages given back.
size_t ReleaseWholePages(const void* p, size_t n);

// The system's page size.
size_t PageBytes();
// Bytes of the pages wholly inside bytes [offset, offset + n) of a
// page-aligned buffer: what a range never written leaves unbacked.
uint64_t WholePageBytesWithin(uint64_t offset, uint64_t n);

}  // namespace sparrow
