#include "src/runtime/budget.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "base/error.h"

namespace sparrow {
namespace {

constexpr uint64_t KiB = 1024;
constexpr uint64_t MiB = KiB * 1024;
constexpr uint64_t GiB = MiB * 1024;
constexpr uint64_t TiB = GiB * 1024;

std::string ErrorOf(const std::string& text, uint64_t reference = 0) {
  try {
    ParseByteSize(text, reference, "--dram-budget");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST_CASE("ParseByteSize: accepted forms") {
  struct Case {
    const char* text;
    uint64_t expected;
  };
  const Case cases[] = {
      {"1", 1},
      {"300000000", 300000000},
      {"18446744073709551615", std::numeric_limits<uint64_t>::max()},
      {"1B", 1},
      {"17b", 17},
      {"1K", KiB},
      {"1k", KiB},
      {"1KB", KiB},
      {"1KiB", KiB},
      {"1kib", KiB},
      {"1Ki", KiB},
      {"512M", 512 * MiB},
      {"750MB", 750 * MiB},
      {"2GiB", 2 * GiB},
      {"2G", 2 * GiB},
      {"3T", 3 * TiB},
      {"1.5G", GiB + GiB / 2},
      {"1.5K", 1536},
      {"0.5M", MiB / 2},
      {"0.1K", 102},         // 102.4 rounded down
      {"1.999999999K", 2047},  // rounded down, not up
      {"1.25 GiB", GiB + GiB / 4},
      {"  64M  ", 64 * MiB},
      {"16777215.999T", 16777215 * TiB + (999 * TiB) / 1000},
      {"007M", 7 * MiB},
  };
  for (const Case& c : cases) {
    CAPTURE(c.text);
    CHECK(ParseByteSize(c.text, 0, "--dram-budget") == c.expected);
  }
}

TEST_CASE("ParseByteSize: percentages of the reference") {
  const uint64_t model = 1000 * MiB + 3;  // not a multiple of 100
  CHECK(ParseByteSize("100%", model, "--dram-budget") == model);
  CHECK(ParseByteSize("50%", model, "--dram-budget") == model / 2);
  CHECK(ParseByteSize("60%", 1000, "--dram-budget") == 600);
  CHECK(ParseByteSize("12.5%", 1000, "--dram-budget") == 125);
  CHECK(ParseByteSize("33.3333%", 300, "--dram-budget") == 99);  // 99.9999 down
  CHECK(ParseByteSize("150%", 1000, "--dram-budget") == 1500);
  CHECK(ParseByteSize("0.5%", 999, "--dram-budget") == 4);  // 4.995 down
  // Exact for sizes where a double would lose the last digits.
  const uint64_t big = (uint64_t{1} << 62) + 7;
  CHECK(ParseByteSize("100%", big, "--dram-budget") == big);
  CHECK(ParseByteSize("200%", big, "--dram-budget") == 2 * big);
  CHECK(ParseByteSize("25%", big, "--dram-budget") == big / 4);
  CHECK(ErrorOf("400%", big).find("too large") != std::string::npos);
  CHECK(ErrorOf("0%", 1000).find("zero") != std::string::npos);
  CHECK(ErrorOf("0.01%", 1000).find("zero") != std::string::npos);  // 0.1 byte
  CHECK(ErrorOf("50%", 0).find("reference size") != std::string::npos);
}

TEST_CASE("ParseByteSize: rejected forms name the flag and the text") {
  const char* bad[] = {
      "",      " ",     "M",     "abc",   "-1G",   "+1G",   "1e9",   "1.5",  "1.5B",
      "1.",    ".5G",   "1..5G", "1,5G",  "1 G B", "1GG",   "1iB",   "1P",   "1KiBB",
      "1 %",   "50%%",  "50%x",  "1M2",   "1 M",   "0x10",  "1\tM", "1 2",   "G1",
  };
  for (const char* text : bad) {
    CAPTURE(text);
    const std::string error = ErrorOf(text, 1000);
    // "1 M" and "1 %" are fine: one space may separate number and unit.
    if (std::string(text) == "1 M") {
      CHECK(error.empty());
      continue;
    }
    if (std::string(text) == "1 %") {
      CHECK(error.empty());
      continue;
    }
    CHECK(error.find("--dram-budget") == 0);
    CHECK(error.find(std::string("'") + text + "'") != std::string::npos);
    CHECK(error.find('\n') == std::string::npos);
  }
  CHECK(ErrorOf("0").find("zero") != std::string::npos);
  CHECK(ErrorOf("0G").find("zero") != std::string::npos);
  CHECK(ErrorOf("0.0000001K").find("zero") != std::string::npos);
  CHECK(ErrorOf("18446744073709551616").find("too large") != std::string::npos);
  CHECK(ErrorOf("16777216T").find("too large") != std::string::npos);  // 2^64
  CHECK(ErrorOf("99999999999999999999999G").find("too large") != std::string::npos);
}

TEST_CASE("FormatByteSize") {
  CHECK(FormatByteSize(0) == "0 B");
  CHECK(FormatByteSize(1023) == "1023 B");
  CHECK(FormatByteSize(1024) == "1.0 KiB");
  CHECK(FormatByteSize(1536) == "1.5 KiB");
  CHECK(FormatByteSize(MiB - 1) == "1.0 MiB");  // never "1024.0 KiB"
  CHECK(FormatByteSize(310 * MiB + MiB / 5) == "310.2 MiB");
  CHECK(FormatByteSize(3 * GiB / 2) == "1.5 GiB");
  CHECK(FormatByteSize(std::numeric_limits<uint64_t>::max()) == "16.0 EiB");
  CHECK(FormatByteSize(679232) == "663.3 KiB");
  // Two decimals, as the command line's tables print them.
  CHECK(FormatByteSize(1023, 2) == "1023 B");
  CHECK(FormatByteSize(1187, 2) == "1.16 KiB");
  CHECK(FormatByteSize(MiB - 6, 2) == "1023.99 KiB");
  CHECK(FormatByteSize(MiB - 5, 2) == "1.00 MiB");  // never "1024.00 KiB"
  CHECK(FormatByteSize(3 * GiB / 2, 2) == "1.50 GiB");
}

TEST_CASE("MemoryBudget: charges add up and items merge by name") {
  MemoryBudget budget(100 * MiB);
  CHECK_FALSE(budget.unlimited());
  CHECK(budget.Breakdown() == "nothing");
  budget.Charge(40 * MiB, "resident");
  budget.Charge(10 * MiB, "kv cache");
  budget.Charge(5 * MiB, "resident");
  CHECK(budget.used() == 55 * MiB);
  CHECK(budget.remaining() == 45 * MiB);
  REQUIRE(budget.items().size() == 2);
  CHECK(budget.items()[0].second == 45 * MiB);
  CHECK(budget.Breakdown() == "resident 45.0 MiB, kv cache 10.0 MiB");
  budget.Charge(45 * MiB, "unit cache");  // exactly to the limit
  CHECK(budget.remaining() == 0);
  CHECK_THROWS_AS(budget.Charge(1, "scratch"), InputError);
  budget.Charge(0, "nothing more");  // zero always fits
}

TEST_CASE("MemoryBudget: a charge over the limit fails whole, with a full message") {
  MemoryBudget budget(512 * MiB);
  budget.Charge(300 * MiB, "resident");
  budget.Charge(44 * MiB, "kv cache");
  std::string message;
  try {
    budget.Charge(200 * MiB, "unit cache", 3 * GiB / 2);
  } catch (const InputError& e) {
    message = e.what();
  }
  CHECK(message ==
        "--dram-budget 512.0 MiB is too small: unit cache needs 200.0 MiB but only "
        "168.0 MiB is left (344.0 MiB charged so far: resident 300.0 MiB, kv cache "
        "44.0 MiB); the minimum for this model is 1.5 GiB");
  // Nothing was charged by the failed call.
  CHECK(budget.used() == 344 * MiB);
  CHECK(budget.items().size() == 2);

  // Without a hint the minimum clause is left out.
  try {
    budget.Charge(169 * MiB, "scratch");
    FAIL("expected InputError");
  } catch (const InputError& e) {
    message = e.what();
  }
  CHECK(message.find("scratch needs 169.0 MiB") != std::string::npos);
  CHECK(message.find("minimum") == std::string::npos);
  CHECK(message.find('\n') == std::string::npos);
}

TEST_CASE("MemoryBudget: 64-bit overflow is an over-limit charge, not a wrap") {
  MemoryBudget budget(std::numeric_limits<uint64_t>::max());
  budget.Charge(std::numeric_limits<uint64_t>::max() - 5, "resident");
  CHECK_THROWS_AS(budget.Charge(10, "kv cache"), InputError);
  CHECK(budget.used() == std::numeric_limits<uint64_t>::max() - 5);
  budget.Charge(5, "kv cache");
  CHECK(budget.remaining() == 0);
}

TEST_CASE("MemoryBudget: unlimited counts but never refuses") {
  MemoryBudget budget(0);
  CHECK(budget.unlimited());
  CHECK(budget.remaining() == std::numeric_limits<uint64_t>::max());
  budget.Charge(std::numeric_limits<uint64_t>::max(), "resident");
  budget.Charge(12, "resident");  // saturates
  CHECK(budget.used() == std::numeric_limits<uint64_t>::max());
  CHECK(budget.remaining() == std::numeric_limits<uint64_t>::max());
}

}  // namespace
}  // namespace sparrow
