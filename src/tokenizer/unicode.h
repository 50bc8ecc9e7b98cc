// The Unicode the tokenizers need, without ICU: codepoint classes for the
// pre-tokenizer regexes, UTF-8 decoding and encoding that treat malformed
// input the way llama.cpp does, and GPT-2's byte <-> character mapping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sparrow::unicode {

// Class bits of a codepoint (scripts/gen_unicode_tables.py writes the table).
// A codepoint with none of them is "other": a symbol, mark, control, format
// or separator character that is not whitespace, or an unassigned one.
inline constexpr uint8_t kLetter = 0x01;       // \p{L}
inline constexpr uint8_t kNumber = 0x02;       // \p{N}
inline constexpr uint8_t kPunctuation = 0x04;  // \p{P}
inline constexpr uint8_t kWhitespace = 0x08;   // \s (the White_Space property)

inline constexpr uint32_t kReplacementCharacter = 0xFFFD;
inline constexpr uint32_t kMaxCodepoint = 0x10FFFF;

// Class bits of `cp`; 0 for codepoints past U+10FFFF.
uint8_t ClassOf(uint32_t cp);

// Length of the UTF-8 sequence a byte starts, judged from its top four bits
// alone, as llama.cpp's SentencePiece tokenizer splits text: 1 for ASCII and
// for stray continuation bytes, 2, 3 or 4 for lead bytes.
inline size_t SequenceLength(uint8_t lead) {
  static constexpr uint8_t kLengths[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLengths[lead >> 4];
}

// Decodes UTF-8 leniently, exactly as llama.cpp does: a lead byte followed by
// the right number of continuation bytes decodes to what its bits say (no
// check for overlong forms or surrogates); any other byte decodes to U+FFFD
// and decoding resumes at the next byte.
std::vector<uint32_t> DecodeUtf8(std::string_view text);

// Appends the UTF-8 encoding of `cp`. Codepoints past U+10FFFF (which the
// lenient decoder can produce from F4..F7 lead bytes) are written as U+FFFD.
void AppendUtf8(uint32_t cp, std::string& out);

// GPT-2's byte-level alphabet: every byte is shown as a printable character
// (printable Latin-1 bytes as themselves, the rest as U+0100 onwards), so a
// vocabulary of strings can hold arbitrary bytes. Returns its UTF-8.
std::string_view ByteToChar(uint8_t byte);
// The byte a character of that alphabet stands for, or -1 for any other.
int CharToByte(uint32_t cp);

}  // namespace sparrow::unicode
