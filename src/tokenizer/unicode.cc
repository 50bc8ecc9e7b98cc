#include "src/tokenizer/unicode.h"

#include <algorithm>
#include <array>
#include <iterator>

namespace sparrow::unicode {
namespace {

struct ClassRange {
  uint32_t first;  // the class holds from here up to the next range's first
  uint8_t bits;
};

constexpr ClassRange kClassRanges[] = {
#include "src/tokenizer/unicode_tables.inc"
};

// Most text is ASCII or Latin-1; look those up directly.
constexpr std::array<uint8_t, 256> MakeLatin1Classes() {
  std::array<uint8_t, 256> classes{};
  size_t r = 0;
  for (uint32_t cp = 0; cp < 256; ++cp) {
    while (r + 1 < std::size(kClassRanges) && kClassRanges[r + 1].first <= cp) ++r;
    classes[cp] = kClassRanges[r].bits;
  }
  return classes;
}

constexpr std::array<uint8_t, 256> kLatin1Classes = MakeLatin1Classes();

struct ByteAlphabet {
  std::array<std::string, 256> byte_to_utf8;
  std::array<int16_t, 0x144> char_to_byte;  // the alphabet ends at U+0143
};

ByteAlphabet MakeByteAlphabet() {
  ByteAlphabet alphabet;
  alphabet.char_to_byte.fill(-1);
  auto printable = [](int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  uint32_t next_extra = 0x100;  // the others, in byte order
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = printable(b) ? static_cast<uint32_t>(b) : next_extra++;
    AppendUtf8(cp, alphabet.byte_to_utf8[b]);
    alphabet.char_to_byte[cp] = static_cast<int16_t>(b);
  }
  return alphabet;
}

const ByteAlphabet& Alphabet() {
  static const ByteAlphabet alphabet = MakeByteAlphabet();
  return alphabet;
}

bool IsContinuation(uint8_t byte) { return (byte & 0xC0) == 0x80; }

}  // namespace

uint8_t ClassOf(uint32_t cp) {
  if (cp < 256) return kLatin1Classes[cp];
  if (cp > kMaxCodepoint) return 0;
  const auto it = std::upper_bound(std::begin(kClassRanges), std::end(kClassRanges), cp,
                                   [](uint32_t c, const ClassRange& r) { return c < r.first; });
  return std::prev(it)->bits;
}

std::vector<uint32_t> DecodeUtf8(std::string_view text) {
  std::vector<uint32_t> cps;
  cps.reserve(text.size());
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t b0 = s[i];
    size_t len = 0;
    uint32_t cp = 0;
    if (b0 < 0x80) {
      len = 1;
      cp = b0;
    } else if ((b0 & 0xE0) == 0xC0) {
      len = 2;
      cp = b0 & 0x1F;
    } else if ((b0 & 0xF0) == 0xE0) {
      len = 3;
      cp = b0 & 0x0F;
    } else if ((b0 & 0xF8) == 0xF0) {
      len = 4;
      cp = b0 & 0x07;
    }
    // len == 0: a continuation byte or F8..FF where a lead byte should be.
    bool ok = len != 0 && n - i >= len;
    for (size_t k = 1; ok && k < len; ++k) {
      ok = IsContinuation(s[i + k]);
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if (ok) {
      cps.push_back(cp);
      i += len;
    } else {
      cps.push_back(kReplacementCharacter);
      i += 1;
    }
  }
  return cps;
}

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp > kMaxCodepoint) cp = kReplacementCharacter;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string_view ByteToChar(uint8_t byte) { return Alphabet().byte_to_utf8[byte]; }

int CharToByte(uint32_t cp) {
  const auto& table = Alphabet().char_to_byte;
  return cp < table.size() ? table[cp] : -1;
}

}  // namespace sparrow::unicode
