#include "src/runtime/budget.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <limits>

#include "base/error.h"

namespace sparrow {
namespace {

using u128 = unsigned __int128;
constexpr uint64_t kMaxU64 = std::numeric_limits<uint64_t>::max();
// Fraction digits beyond this many only move the result by far less than a
// byte; keeping 18 lets every intermediate fit in 128 bits.
constexpr int kMaxFractionDigits = 18;

std::string Quoted(const std::string& text) { return StrCat("'", text, "'"); }

[[noreturn]] void ThrowUnparsable(const std::string& flag, const std::string& text,
                                  const char* why) {
  ThrowInputError(flag, " ", Quoted(text), ": ", why,
                  " (expected a size such as 512M, 1.5G, 2GiB, 300000000 or 60%)");
}

// The decimal number at the front of a size: integer digits, then optional
// '.' and fraction digits (kept as fraction / 10^fraction_digits).
struct Decimal {
  uint64_t integer = 0;
  uint64_t fraction = 0;
  uint64_t fraction_scale = 1;  // 10^(digits kept)
  bool has_fraction = false;
};

}  // namespace

void MemoryBudget::Charge(uint64_t bytes, const std::string& what,
                          uint64_t minimum_hint) {
  uint64_t total = 0;
  const bool overflow = __builtin_add_overflow(used_, bytes, &total);
  if (!unlimited() && (overflow || total > limit_)) {
    std::string message =
        StrCat("--dram-budget ", FormatByteSize(limit_), " is too small: ", what,
               " needs ", FormatByteSize(bytes), " but only ",
               FormatByteSize(remaining()), " is left (", FormatByteSize(used_),
               " charged so far: ", Breakdown(), ")");
    if (minimum_hint != 0) {
      message += StrCat("; the minimum for this model is ", FormatByteSize(minimum_hint));
    }
    throw InputError(message);
  }
  // Unlimited budgets still count, saturating: the total is only reported.
  used_ = overflow ? kMaxU64 : total;
  for (auto& item : items_) {
    if (item.first == what) {
      uint64_t sum = 0;
      item.second = __builtin_add_overflow(item.second, bytes, &sum) ? kMaxU64 : sum;
      return;
    }
  }
  items_.emplace_back(what, bytes);
}

uint64_t MemoryBudget::remaining() const {
  if (unlimited()) return kMaxU64;
  return used_ >= limit_ ? 0 : limit_ - used_;
}

std::string MemoryBudget::Breakdown() const {
  if (items_.empty()) return "nothing";
  std::string out;
  for (const auto& [what, bytes] : items_) {
    if (!out.empty()) out += ", ";
    out += StrCat(what, " ", FormatByteSize(bytes));
  }
  return out;
}


uint64_t ParseByteSize(const std::string& text, uint64_t reference_bytes,
                       const std::string& flag) {
  size_t pos = 0;
  const size_t n = text.size();
  while (pos < n && std::isspace(static_cast<unsigned char>(text[pos]))) ++pos;
  size_t end = n;
  while (end > pos && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  if (pos == end) ThrowUnparsable(flag, text, "is empty");

  Decimal number;
  const size_t digits_begin = pos;
  while (pos < end && std::isdigit(static_cast<unsigned char>(text[pos]))) {
    const uint64_t digit = static_cast<uint64_t>(text[pos] - '0');
    if (__builtin_mul_overflow(number.integer, 10, &number.integer) ||
        __builtin_add_overflow(number.integer, digit, &number.integer)) {
      ThrowInputError(flag, " ", Quoted(text), " is too large");
    }
    ++pos;
  }
  if (pos == digits_begin) ThrowUnparsable(flag, text, "does not start with a number");
  if (pos < end && text[pos] == '.') {
    ++pos;
    number.has_fraction = true;
    const size_t fraction_begin = pos;
    int kept = 0;
    while (pos < end && std::isdigit(static_cast<unsigned char>(text[pos]))) {
      if (kept < kMaxFractionDigits) {
        number.fraction = number.fraction * 10 + static_cast<uint64_t>(text[pos] - '0');
        number.fraction_scale *= 10;
        ++kept;
      }
      ++pos;
    }
    if (pos == fraction_begin) ThrowUnparsable(flag, text, "has no digits after '.'");
  }
  if (pos < end && text[pos] == ' ') ++pos;  // "512 MiB"

  // The suffix: "%", or [KMGT][i][B], or nothing.
  u128 value = 0;
  if (pos < end && text[pos] == '%') {
    if (pos + 1 != end) ThrowUnparsable(flag, text, "has text after '%'");
    if (reference_bytes == 0) {
      ThrowInputError(flag, " ", Quoted(text),
                      ": a percentage needs a reference size, which is not known here;"
                      " give a size such as 512M");
    }
    const u128 whole = u128{number.integer} * reference_bytes;
    const u128 rest = (whole % 100) * number.fraction_scale +
                      u128{number.fraction} * reference_bytes;
    value = whole / 100 + rest / (u128{100} * number.fraction_scale);
  } else {
    uint64_t multiplier = 1;
    if (pos < end) {
      switch (std::toupper(static_cast<unsigned char>(text[pos]))) {
        case 'K': multiplier = uint64_t{1} << 10; break;
        case 'M': multiplier = uint64_t{1} << 20; break;
        case 'G': multiplier = uint64_t{1} << 30; break;
        case 'T': multiplier = uint64_t{1} << 40; break;
        default: break;
      }
      if (multiplier != 1) {
        ++pos;
        if (pos < end && (text[pos] == 'i' || text[pos] == 'I')) ++pos;
      }
      if (pos < end && (text[pos] == 'B' || text[pos] == 'b')) ++pos;
      if (pos != end) ThrowUnparsable(flag, text, "has an unknown unit");
    }
    if (multiplier == 1 && number.has_fraction) {
      ThrowUnparsable(flag, text, "is a fraction of a byte");
    }
    value = u128{number.integer} * multiplier +
            u128{number.fraction} * multiplier / number.fraction_scale;
  }
  if (value > kMaxU64) ThrowInputError(flag, " ", Quoted(text), " is too large");
  if (value == 0) ThrowInputError(flag, " ", Quoted(text), " is zero; give a positive size");
  return static_cast<uint64_t>(value);
}

}  // namespace sparrow
