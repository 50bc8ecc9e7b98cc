// libFuzzer target for the bundle reader (formats/bundle.h): the fixed
// header, the header body's sparrow.* structure, the resident section and
// the records.
//
// Each input is a whole bundle file. It must open, load its resident
// section and verify every record, or be rejected with an InputError whose
// message is one non-empty line. An opened bundle must hold what Open()
// promises: every group inside the file, sections not overlapping, the
// permutations permutations. Any other exception or a broken invariant
// aborts, which libFuzzer records as a crash.
//
// Nearly every mutation breaks the header CRC, which a fuzzer cannot fix
// up, so each input is tried twice: as it is, and with the header CRC
// recomputed (which lets mutations reach the structural checks).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/crc32c.h"
#include "base/error.h"
#include "formats/bundle.h"
#include "tests/fuzz/scratch_path.h"

namespace {

using namespace sparrow;
using namespace sparrow::bundle;

[[noreturn]] void Violated(const char* what, const std::string& detail = "") {
  std::fprintf(stderr, "bundle_fuzzer: invariant violated: %s %s\n", what, detail.c_str());
  std::abort();
}

void CheckMessage(const InputError& e) {
  const std::string msg = e.what();
  if (msg.empty() || msg.find('\n') != std::string::npos) Violated("message not one line:", msg);
}

void CheckOpened(const Bundle& b) {
  if (b.bundle_bytes() > b.file_size()) Violated("bundle longer than its file");
  if (b.resident_offset() + b.resident_bytes() > b.bundle_bytes()) Violated("resident section");
  for (const UnitGroup& g : b.groups()) {
    if (g.offset + g.section_bytes() > b.bundle_bytes()) Violated("group past the end");
    if (g.slot_of_unit.size() != g.n_units) Violated("permutation length");
    std::vector<bool> seen(g.n_units, false);
    for (uint32_t slot : g.slot_of_unit) {
      if (slot >= g.n_units || seen[slot]) Violated("not a permutation");
      seen[slot] = true;
    }
  }
}

void OpenAndCheck(const std::string& path) {
  try {
    const Bundle b = Bundle::Open(path);
    CheckOpened(b);
    b.VerifyAll();  // the resident section and every record
  } catch (const InputError& e) {
    CheckMessage(e);
  }
}

uint64_t Load64(const std::vector<uint8_t>& v, size_t at) {
  uint64_t x = 0;
  for (int i = 0; i < 8; ++i) x |= uint64_t{v[at + i]} << (8 * i);
  return x;
}

// Stores the header CRC over [0, 60) and [64, H) where H, the header's end,
// lies inside the input; false when it does not.
bool Restamp(std::vector<uint8_t>& bytes) {
  if (bytes.size() < kFixedHeaderBytes) return false;
  const uint64_t end = Load64(bytes, 16);
  if (end <= kFixedHeaderBytes || end > bytes.size()) return false;
  const uint32_t crc = Crc32c(bytes.data() + kFixedHeaderBytes, end - kFixedHeaderBytes,
                              Crc32c(bytes.data(), 60));
  for (int i = 0; i < 4; ++i) bytes[60 + i] = static_cast<uint8_t>(crc >> (8 * i));
  return true;
}

void WriteFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) Violated("cannot create the scratch file", path);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) Violated("cannot write the scratch file", path);
    done += static_cast<size_t>(n);
  }
  ::close(fd);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = sparrow::fuzz::ScratchPath("bundle_fuzzer", ".sparrow");
  std::vector<uint8_t> bytes(data, data + size);
  WriteFile(path, bytes);
  OpenAndCheck(path);
  if (Restamp(bytes)) {
    WriteFile(path, bytes);
    OpenAndCheck(path);
  }
  return 0;
}
