// CRC32C: published check values, an independent bit-by-bit reference, and
// the accelerated path against the portable one on random lengths and
// alignments (including the three-chain block boundaries).
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/crc32c.h"

namespace sparrow {
namespace {

// The definition, one bit at a time: reflected polynomial 0x82F63B78,
// initial value and final XOR all ones. Shares nothing with the tables.
uint32_t BitwiseCrc32c(const uint8_t* p, size_t n, uint32_t crc = 0) {
  uint32_t s = ~crc;
  for (size_t i = 0; i < n; ++i) {
    s ^= p[i];
    for (int bit = 0; bit < 8; ++bit) s = (s >> 1) ^ (0x82F63B78u & (0u - (s & 1u)));
  }
  return ~s;
}

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST_CASE("crc32c check values") {
  MESSAGE("crc32c implementation: " << std::string(Crc32cImplementation()));
  const std::string check = "123456789";
  CHECK(Crc32c(check.data(), check.size()) == 0xE3069283u);
  CHECK(Crc32cPortable(check.data(), check.size()) == 0xE3069283u);
  CHECK(BitwiseCrc32c(reinterpret_cast<const uint8_t*>(check.data()), check.size()) ==
        0xE3069283u);
  CHECK(Crc32c(nullptr, 0) == 0u);
  CHECK(Crc32c(nullptr, 0, 0x12345678u) == 0x12345678u);

  // RFC 3720 (iSCSI) appendix B.4 vectors, 32 bytes each.
  uint8_t buf[32];
  std::memset(buf, 0, sizeof(buf));
  CHECK(Crc32c(buf, 32) == 0x8A9136AAu);
  CHECK(Crc32cPortable(buf, 32) == 0x8A9136AAu);
  std::memset(buf, 0xFF, sizeof(buf));
  CHECK(Crc32c(buf, 32) == 0x62A8AB43u);
  CHECK(Crc32cPortable(buf, 32) == 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) buf[i] = static_cast<uint8_t>(i);
  CHECK(Crc32c(buf, 32) == 0x46DD794Eu);
  CHECK(Crc32cPortable(buf, 32) == 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) buf[i] = static_cast<uint8_t>(31 - i);
  CHECK(Crc32c(buf, 32) == 0x113FDB5Cu);
  CHECK(Crc32cPortable(buf, 32) == 0x113FDB5Cu);
}

TEST_CASE("crc32c accelerated and portable agree with the bitwise definition") {
  // Lengths around every path boundary: byte tail, 8-byte words, the short
  // (3 x 256) and long (3 x 8192) three-chain blocks, and random ones.
  std::vector<size_t> lengths = {0, 1, 7, 8, 9, 15, 16, 63, 64, 255, 256, 767, 768, 769,
                                 1535, 1536, 2000, 13060, 24575, 24576, 24577, 49152,
                                 49152 + 768 + 13, 100003};
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) lengths.push_back(rng() % 70000);
  const std::vector<uint8_t> data = RandomBytes(100003 + 16, 11);
  for (size_t n : lengths) {
    for (size_t misalign : {size_t{0}, size_t{1}, size_t{3}, size_t{7}, size_t{8} + 5}) {
      if (misalign + n > data.size()) continue;
      const uint8_t* p = data.data() + misalign;
      const uint32_t want = BitwiseCrc32c(p, n);
      CAPTURE(n);
      CAPTURE(misalign);
      REQUIRE(Crc32cPortable(p, n) == want);
      REQUIRE(Crc32c(p, n) == want);
    }
  }
}

TEST_CASE("crc32c extends across split points") {
  const std::vector<uint8_t> data = RandomBytes(60000, 3);
  std::mt19937 rng(5);
  for (int i = 0; i < 100; ++i) {
    const size_t split = rng() % data.size();
    const uint32_t whole = Crc32c(data.data(), data.size());
    const uint32_t first = Crc32c(data.data(), split);
    CHECK(Crc32c(data.data() + split, data.size() - split, first) == whole);
    CHECK(Crc32cPortable(data.data() + split, data.size() - split,
                         Crc32cPortable(data.data(), split)) == whole);
  }
}

TEST_CASE("crc32c detects every single flipped bit") {
  std::vector<uint8_t> data = RandomBytes(13060, 9);
  const uint32_t good = Crc32c(data.data(), data.size());
  for (size_t i = 0; i < data.size(); i += 97) {
    for (int bit = 0; bit < 8; ++bit) {
      data[i] ^= static_cast<uint8_t>(1u << bit);
      CHECK(Crc32c(data.data(), data.size()) != good);
      data[i] ^= static_cast<uint8_t>(1u << bit);
    }
  }
}

// Figures, not a pass/fail test: bundle_tests -tc="crc32c throughput" --no-skip
// Each figure is the best of many short trials, so that a busy machine
// (other processes taking the cores) still shows what the code can do.
// "hot" repeats one buffer (in cache); "stream" walks 256 MiB (from DRAM).
TEST_CASE("crc32c throughput" * doctest::skip()) {
  const std::vector<uint8_t> data = RandomBytes(size_t{256} << 20, 1);
  const auto best_rate = [&](size_t n, size_t calls, bool stream, bool portable) {
    double best = 0.0;
    uint32_t sink = 0;
    size_t at = 0;
    for (int trial = 0; trial < 200; ++trial) {
      const auto start = std::chrono::steady_clock::now();
      for (size_t r = 0; r < calls; ++r) {
        if (stream) at = (at + n <= data.size()) ? at : 0;
        sink ^= portable ? Crc32cPortable(data.data() + at, n) : Crc32c(data.data() + at, n);
        if (stream) at += n;
      }
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      best = std::max(best, static_cast<double>(n) * calls / s / 1e9);
    }
    CHECK(sink != 0x12345678u);  // keeps the calls from being optimized away
    return best;
  };
  for (int portable = 0; portable < 2; ++portable) {
    const char* name = portable ? "portable" : Crc32cImplementation();
    for (size_t n : {size_t{64}, size_t{4096}, size_t{13060}, size_t{64} << 10}) {
      std::printf("crc32c %-10s hot    %8zu bytes: %6.2f GB/s\n", name, n,
                  best_rate(n, std::max<size_t>(1, (size_t{256} << 10) / n), false, portable));
    }
    std::printf("crc32c %-10s stream %8zu bytes: %6.2f GB/s\n", name, size_t{1} << 20,
                best_rate(size_t{1} << 20, 4, true, portable));
  }
}

}  // namespace
}  // namespace sparrow
