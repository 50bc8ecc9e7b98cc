// libFuzzer target for the calibration trailer's parser (formats/calibration.h).
//
// Each input is parsed as the bytes after a bundle whose header CRC32C is
// kFuzzHeaderCrc (scripts/fuzz.sh writes seeds for it). It must parse or be
// rejected with an InputError whose message is one non-empty line. A parsed
// calibration must hold what the parser promises (densities increasing,
// every split feasible, values finite) and encode back to exactly the input,
// and the split lookup must give a feasible split or none at any density.
// Any other exception or a broken invariant aborts, which libFuzzer records
// as a crash.
//
// Nearly every mutation breaks the trailer's CRC, and a fuzzer cannot fix it
// up, so each input is parsed twice: as it is (which fuzzes the framing and
// the CRC check) and with the CRC recomputed where its length field puts it
// (which lets mutations reach the body's checks).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/crc32c.h"
#include "base/error.h"
#include "formats/calibration.h"

namespace {

using namespace sparrow;
using namespace sparrow::bundle;

constexpr uint32_t kFuzzHeaderCrc = 0x12345678;

[[noreturn]] void Violated(const char* what, const std::string& detail = "") {
  std::fprintf(stderr, "calibration_fuzzer: invariant violated: %s %s\n", what, detail.c_str());
  std::abort();
}

void CheckMessage(const InputError& e) {
  const std::string msg = e.what();
  if (msg.empty() || msg.find('\n') != std::string::npos) Violated("message not one line:", msg);
}

void CheckCalibration(const Calibration& c, const std::vector<uint8_t>& bytes) {
  if (c.entries.empty() || c.entries.size() > kMaxCalibrationEntries) Violated("entry count");
  for (size_t i = 0; i < c.entries.size(); ++i) {
    const CalibrationEntry& e = c.entries[i];
    if (i > 0 && !(e.density > c.entries[i - 1].density)) Violated("densities not increasing");
    if (!IsFeasibleSplit(e.density, e.input_fraction)) Violated("infeasible split accepted");
    if (!std::isfinite(e.perplexity) || !std::isfinite(e.default_perplexity)) {
      Violated("non-finite perplexity accepted");
    }
    if (e.text_name.size() > kMaxCalibrationNameBytes) Violated("name too long");
    if (*c.InputFractionFor(e.density) != e.input_fraction) Violated("lookup at an entry");
  }
  // Between and around the entries.
  for (int i = 0; i <= 64; ++i) {
    const double d = i / 64.0;
    if (const auto f = c.InputFractionFor(d); f && !IsFeasibleSplit(d, *f)) {
      Violated("lookup gave an infeasible split");
    }
  }
  if (EncodeCalibration(c, kFuzzHeaderCrc) != bytes) Violated("does not encode back to its bytes");
}

void ParseAndCheck(const std::vector<uint8_t>& bytes) {
  try {
    CheckCalibration(ParseCalibration(bytes.data(), bytes.size(), kFuzzHeaderCrc, "fuzz.sparrow"),
                     bytes);
  } catch (const InputError& e) {
    CheckMessage(e);
  }
}

// Stores the CRC32C of [0, 16 + L) after the body when the length field L
// puts it inside the input; false when it does not.
bool Restamp(std::vector<uint8_t>& bytes) {
  if (bytes.size() < 16) return false;
  uint32_t length = 0;
  for (int i = 0; i < 4; ++i) length |= uint32_t{bytes[12 + i]} << (8 * i);
  const uint64_t at = uint64_t{16} + length;
  if (at + 4 > bytes.size()) return false;
  const uint32_t crc = Crc32c(bytes.data(), at);
  for (int i = 0; i < 4; ++i) bytes[at + i] = static_cast<uint8_t>(crc >> (8 * i));
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  ParseAndCheck(bytes);
  if (Restamp(bytes)) ParseAndCheck(bytes);
  return 0;
}
