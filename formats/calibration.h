// A bundle's calibration: for the dip policy family (dip, dip-ca), how to
// split --mlp-density D between the input columns (up and gate, a fraction
// f_in of them per token) and the down columns (f_out), with
// D = (2 f_in + f_out) / 3. `sparrow calibrate` measures perplexity on a
// text over the feasible splits and keeps the best per density (the DIP
// paper's Appendix B.1 calibration); runs then use it whenever no split is
// given (src/runtime/unit_policy.h, WithCalibratedSplit).
//
// It is stored as a trailer after the bundle's declared end
// (sparrow.file_bytes), so writing it never changes a byte of the bundle
// itself and the header's checksum stays valid. Trailer layout
// (little-endian), starting at sparrow.file_bytes, a multiple of 4096:
//   [0, 8)          magic "SPRWCALB"
//   [8, 12)         u32 version (kCalibrationVersion)
//   [12, 16)        u32 L, the body's length, at most kMaxCalibrationBodyBytes
//   [16, 16 + L)    body (below)
//   [16 + L, +4)    u32 CRC32C of the trailer's bytes [0, 16 + L)
//   then zeros to the next multiple of 4096: always written and required,
//   so the file stays a whole number of 4 KiB pages and nothing else may
//   follow the trailer.
// Body:
//   u32 header_crc  the bundle's header CRC32C (bytes [60, 64) of the
//                   bundle): a trailer copied onto another bundle is refused
//   u32 n           entries, 1 .. kMaxCalibrationEntries, densities strictly
//                   increasing; per entry:
//     f64 density             (0, 1)
//     f64 input_fraction      f_in in (0, 1], with f_out = 3 density - 2 f_in
//                             in (0, 1]
//     f64 perplexity          at that split; finite, > 0
//     f64 default_perplexity  at f_in = f_out = density; finite, > 0
//     u32 policy              what measured it: 0 dip, 1 dip-ca
//     u32 ctx                 tokens per perplexity chunk, >= 4
//     u32 chunks              chunks scored, >= 1
//     u64 text_tokens         tokens in the text, >= ctx * chunks
//     u32 name length, bytes  the text file's name (informational): at most
//                             kMaxCalibrationNameBytes, no control characters
//   nothing after the last entry.
// Per-layer splits are not stored: the policy keeps one K per record kind
// for every layer (the streamed FFN sizes its mask buffers from it), and a
// per-layer search would multiply the perplexity runs by the layer count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sparrow::bundle {

class Bundle;

inline constexpr char kCalibrationMagic[8] = {'S', 'P', 'R', 'W', 'C', 'A', 'L', 'B'};
inline constexpr uint32_t kCalibrationVersion = 1;
inline constexpr uint64_t kCalibrationAlignment = 4096;
inline constexpr uint32_t kMaxCalibrationEntries = 256;
inline constexpr uint32_t kMaxCalibrationNameBytes = 1024;
inline constexpr uint32_t kMaxCalibrationBodyBytes = 1u << 20;
// The longest trailer a reader accepts: the largest body, framing, padding.
inline constexpr uint64_t kMaxCalibrationTrailerBytes =
    kMaxCalibrationBodyBytes + 20 + kCalibrationAlignment;

enum class CalibrationPolicy : uint32_t { kDip = 0, kDipCa = 1 };
std::string_view CalibrationPolicyName(CalibrationPolicy policy);

struct CalibrationEntry {
  double density = 0.0;
  double input_fraction = 0.0;
  double perplexity = 0.0;
  double default_perplexity = 0.0;
  CalibrationPolicy policy = CalibrationPolicy::kDip;
  uint32_t ctx = 0;
  uint32_t chunks = 0;
  uint64_t text_tokens = 0;
  std::string text_name;

  double output_fraction() const { return 3.0 * density - 2.0 * input_fraction; }
};

struct Calibration {
  std::vector<CalibrationEntry> entries;  // densities strictly increasing

  // f_in for `density`: an entry's own at its density, linear interpolation
  // between the two entries around it (clamped with ClampSplit), nullopt
  // outside [first density, last density] (where nothing was measured).
  std::optional<double> InputFractionFor(double density) const;
};

// Whether f_in splits `density` feasibly: density in (0, 1], f_in in (0, 1]
// and f_out = 3 density - 2 f_in in (0, 1] (up to rounding).
bool IsFeasibleSplit(double density, double input_fraction);
// f_in moved into the feasible range for `density`; the default split
// (f_in = density) when nothing near it is feasible.
double ClampSplit(double density, double input_fraction);

// `fresh` entries added to `old`: one with the same density as an old entry
// replaces it, the others are kept; sorted by density.
Calibration MergeCalibration(const std::optional<Calibration>& old,
                             const std::vector<CalibrationEntry>& fresh);

// The trailer's bytes, padding included, for a bundle whose header CRC32C
// is `header_crc`. InputError for a calibration the reader would refuse.
std::vector<uint8_t> EncodeCalibration(const Calibration& calibration, uint32_t header_crc);

// Parses a trailer (`size` bytes, everything after the bundle's declared
// end). InputError, one line starting with `where`, for anything that is
// not exactly one valid trailer for the bundle with `header_crc`.
Calibration ParseCalibration(const uint8_t* data, size_t size, uint32_t header_crc,
                             const std::string& where);

// Stores `calibration` in `bundle`'s file, replacing any calibration it has,
// without modifying the file in place: the bundle's bytes and the new
// trailer go to a temporary file beside it (PATH.tmp.<pid>.<n>, created
// exclusively, with the bundle's mode), which is synced and renamed over it
// (and the directory synced). On any failure (read-only directory,
// full disk, the file replaced since it was opened) the temporary file is
// removed, the bundle is left as it was, and an InputError says why.
void WriteCalibration(const Bundle& bundle, const Calibration& calibration);
// The InputError WriteCalibration would give for a bundle file or directory
// it cannot write, found before a long search is spent on it.
void CheckCalibrationWritable(const Bundle& bundle);

}  // namespace sparrow::bundle
