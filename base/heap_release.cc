#include "base/heap_release.h"

#include <cstdlib>  // defines __GLIBC__ on glibc

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace sparrow {

void ReturnLargeBlocksOnFree() {
#if defined(__GLIBC__)
  // Setting the threshold explicitly also turns off its dynamic adjustment
  // (and that of the trim threshold, which stays at 128 KiB).
  (void)mallopt(M_MMAP_THRESHOLD, static_cast<int>(kLargeBlockBytes));
#endif
}

}  // namespace sparrow
