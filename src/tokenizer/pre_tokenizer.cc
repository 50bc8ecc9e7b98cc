// Each split below is one regex, matched the way a backtracking regex engine
// does: at each position the alternatives are tried in order and the first
// that matches wins, so the code tests them in the regex's order. The regexes
// run one after another (kDefault chains four), each over the pieces the
// previous one left; lookahead never sees past the end of a piece, and text
// that no alternative matches becomes a piece of its own.
#include "src/tokenizer/pre_tokenizer.h"

#include <cstddef>
#include <cstdint>

#include "src/tokenizer/unicode.h"

namespace sparrow {
namespace {

using unicode::kLetter;
using unicode::kNumber;
using unicode::kPunctuation;
using unicode::kWhitespace;

struct Span {
  size_t begin;
  size_t end;
};

// The decoded text with each codepoint's class, plus helpers that read as
// the regex classes do and answer false outside the piece being split.
class Piece {
 public:
  Piece(const std::vector<uint32_t>& cps, const std::vector<uint8_t>& classes, Span span)
      : cps_(cps), classes_(classes), end_(span.end) {}

  bool In(size_t i) const { return i < end_; }
  uint32_t At(size_t i) const { return In(i) ? cps_[i] : 0xFFFFFFFFu; }
  bool Letter(size_t i) const { return In(i) && (classes_[i] & kLetter); }
  bool Number(size_t i) const { return In(i) && (classes_[i] & kNumber); }
  bool Space(size_t i) const { return In(i) && (classes_[i] & kWhitespace); }
  // [^\s\p{L}\p{N}]
  bool Other(size_t i) const {
    return In(i) && !(classes_[i] & (kLetter | kNumber | kWhitespace));
  }
  bool Newline(size_t i) const { return At(i) == '\r' || At(i) == '\n'; }

 private:
  const std::vector<uint32_t>& cps_;
  const std::vector<uint8_t>& classes_;
  size_t end_;
};

uint32_t AsciiLower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + ('a' - 'A') : c; }

// Length of the contraction ('s 't 're 've 'm 'll 'd) at `pos`, 0 if none.
// Llama 3 and Qwen2 match them case-insensitively (no non-ASCII character
// lowercases to one of these letters, so ASCII folding is exact).
size_t Contraction(const Piece& p, size_t pos, bool any_case) {
  if (p.At(pos) != '\'' || !p.In(pos + 1)) return 0;
  auto fold = [&](uint32_t c) { return any_case ? AsciiLower(c) : c; };
  const uint32_t c1 = fold(p.At(pos + 1));
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if (!p.In(pos + 2)) return 0;
  const uint32_t c2 = fold(p.At(pos + 2));
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
    return 3;
  }
  return 0;
}

// The end of the whitespace alternatives at `pos` (a whitespace character):
// \s*[\r\n]+ (Llama 3 and Qwen2 only), then \s+(?!\S), then \s+.
size_t WhitespaceEnd(const Piece& p, size_t pos, bool newline_rule) {
  size_t end = pos;
  size_t after_last_newline = 0;
  while (p.Space(end)) {
    if (p.Newline(end)) after_last_newline = end + 1;
    ++end;
  }
  // \s*[\r\n]+: backtracking leaves the run's last newline to [\r\n]+.
  if (newline_rule && after_last_newline != 0) return after_last_newline;
  // \s+(?!\S): before a non-space, give the last space back to what follows.
  if (end - pos > 1 && p.In(end)) return end - 1;
  return end;  // \s+ (a single space before a non-space, or a trailing run)
}

// Llama 3 (max_digits 3) and Qwen2 (max_digits 1).
void SplitLlama3Style(const Piece& p, Span span, size_t max_digits, std::vector<Span>& out) {
  size_t pos = span.begin;
  while (pos < span.end) {
    const size_t start = pos;
    const uint32_t c = p.At(pos);
    if (size_t n = Contraction(p, pos, /*any_case=*/true)) {
      pos += n;
    } else if (!p.Newline(pos) && !p.Number(pos) && (p.Letter(pos) || p.Letter(pos + 1))) {
      // [^\r\n\p{L}\p{N}]?\p{L}+
      ++pos;
      while (p.Letter(pos)) ++pos;
    } else if (p.Number(pos)) {
      // \p{N}{1,max_digits}
      while (p.Number(pos) && pos - start < max_digits) ++pos;
    } else if (p.Other(c == ' ' ? pos + 1 : pos)) {
      //  ?[^\s\p{L}\p{N}]+[\r\n]*
      pos += (c == ' ');
      while (p.Other(pos)) ++pos;
      while (p.Newline(pos)) ++pos;
    } else if (p.Space(pos)) {
      pos = WhitespaceEnd(p, pos, /*newline_rule=*/true);
    } else {
      ++pos;  // unreachable: every class is covered above
    }
    out.push_back({start, pos});
  }
}

void SplitGpt2(const Piece& p, Span span, std::vector<Span>& out) {
  size_t pos = span.begin;
  while (pos < span.end) {
    const size_t start = pos;
    const size_t after_space = p.At(pos) == ' ' ? pos + 1 : pos;  // the " ?" prefix
    if (size_t n = Contraction(p, pos, /*any_case=*/false)) {
      pos += n;
    } else if (p.Letter(after_space)) {
      pos = after_space;
      while (p.Letter(pos)) ++pos;
    } else if (p.Number(after_space)) {
      pos = after_space;
      while (p.Number(pos)) ++pos;
    } else if (p.Other(after_space)) {
      pos = after_space;
      while (p.Other(pos)) ++pos;
    } else if (p.Space(pos)) {
      pos = WhitespaceEnd(p, pos, /*newline_rule=*/false);
    } else {
      ++pos;
    }
    out.push_back({start, pos});
  }
}

// Splits a piece into maximal runs of characters that `in_class` accepts and
// runs of those it does not: a regex of the form [class]+, whose matches and
// the text between them both become pieces.
template <typename InClass>
void SplitRuns(Span span, InClass in_class, std::vector<Span>& out) {
  size_t pos = span.begin;
  while (pos < span.end) {
    const size_t start = pos;
    const bool inside = in_class(pos);
    while (pos < span.end && in_class(pos) == inside) ++pos;
    out.push_back({start, pos});
  }
}

// [0-9][0-9][0-9]: consecutive groups of three ASCII digits, leftmost first.
void SplitDigitTriples(const std::vector<uint32_t>& cps, Span span, std::vector<Span>& out) {
  auto digit = [&](size_t i) { return i < span.end && cps[i] >= '0' && cps[i] <= '9'; };
  size_t unmatched = span.begin;
  size_t pos = span.begin;
  while (pos < span.end) {
    if (digit(pos) && digit(pos + 1) && digit(pos + 2)) {
      if (pos > unmatched) out.push_back({unmatched, pos});
      out.push_back({pos, pos + 3});
      pos += 3;
      unmatched = pos;
    } else {
      ++pos;
    }
  }
  if (span.end > unmatched) out.push_back({unmatched, span.end});
}

// One regex pass over every piece.
template <typename SplitOne>
std::vector<Span> Pass(const std::vector<Span>& pieces, SplitOne split_one) {
  std::vector<Span> out;
  out.reserve(pieces.size() * 2);
  for (const Span& span : pieces) split_one(span, out);
  return out;
}

}  // namespace

std::optional<PreTokenizerSpec> PreTokenizerFor(std::string_view pre) {
  // The names llama.cpp maps to these four splits. "gpt2" is not one of its
  // names: llama.cpp falls back to its default chain for it, and so do we.
  if (pre.empty() || pre == "default" || pre == "gpt2") {
    return PreTokenizerSpec{PreTokenizer::kDefault, false};
  }
  if (pre == "gpt-2" || pre == "phi-2" || pre == "mpt" || pre == "olmo") {
    return PreTokenizerSpec{PreTokenizer::kGpt2, false};
  }
  if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe") {
    return PreTokenizerSpec{PreTokenizer::kLlama3, true};
  }
  if (pre == "dbrx" || pre == "smaug-bpe") {
    return PreTokenizerSpec{PreTokenizer::kLlama3, false};
  }
  if (pre == "qwen2" || pre == "deepseek-r1-qwen" || pre == "stablelm2" || pre == "megrez") {
    return PreTokenizerSpec{PreTokenizer::kQwen2, false};
  }
  return std::nullopt;
}

std::vector<std::string> PreTokenize(PreTokenizer kind, std::string_view text) {
  const std::vector<uint32_t> cps = unicode::DecodeUtf8(text);
  std::vector<uint8_t> classes(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) classes[i] = unicode::ClassOf(cps[i]);

  std::vector<Span> pieces;
  if (!cps.empty()) pieces.push_back({0, cps.size()});

  auto regex_pass = [&](auto split) {
    pieces = Pass(pieces, [&](Span span, std::vector<Span>& out) {
      split(Piece(cps, classes, span), span, out);
    });
  };
  switch (kind) {
    case PreTokenizer::kLlama3:
      regex_pass([](const Piece& p, Span s, std::vector<Span>& out) {
        SplitLlama3Style(p, s, 3, out);
      });
      break;
    case PreTokenizer::kQwen2:
      regex_pass([](const Piece& p, Span s, std::vector<Span>& out) {
        SplitLlama3Style(p, s, 1, out);
      });
      break;
    case PreTokenizer::kGpt2:
      regex_pass([](const Piece& p, Span s, std::vector<Span>& out) { SplitGpt2(p, s, out); });
      break;
    case PreTokenizer::kDefault: {
      // [\p{P}\$\+<=>\^~\|]+
      pieces = Pass(pieces, [&](Span span, std::vector<Span>& out) {
        SplitRuns(span, [&](size_t i) {
          const uint32_t c = cps[i];
          return (classes[i] & kPunctuation) || c == '$' || c == '+' || c == '<' ||
                 c == '=' || c == '>' || c == '^' || c == '~' || c == '|';
        }, out);
      });
      regex_pass([](const Piece& p, Span s, std::vector<Span>& out) { SplitGpt2(p, s, out); });
      // \p{N}+
      pieces = Pass(pieces, [&](Span span, std::vector<Span>& out) {
        SplitRuns(span, [&](size_t i) { return (classes[i] & kNumber) != 0; }, out);
      });
      pieces = Pass(pieces, [&](Span span, std::vector<Span>& out) {
        SplitDigitTriples(cps, span, out);
      });
      break;
    }
  }

  std::vector<std::string> words;
  words.reserve(pieces.size());
  for (const Span& span : pieces) {
    std::string word;
    for (size_t i = span.begin; i < span.end; ++i) unicode::AppendUtf8(cps[i], word);
    words.push_back(std::move(word));
  }
  return words;
}

}  // namespace sparrow
