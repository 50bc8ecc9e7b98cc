// Target discovery and forcing. The per-target function below exists only so
// dynamic dispatch can tell us which target it picked.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "simd/targets.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace sparrow::simd {
namespace HWY_NAMESPACE {

int64_t DispatchedTarget() { return HWY_TARGET; }

}  // namespace HWY_NAMESPACE
}  // namespace sparrow::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include <atomic>
#include <cstdlib>
#include <string>

#include "base/error.h"
#include "simd/targets.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#include <sys/prctl.h>
#endif

namespace sparrow::simd {

HWY_EXPORT(DispatchedTarget);

namespace {

#if defined(__aarch64__) && defined(__linux__)
// Bits of the kernel's uapi asm/hwcap.h, spelled out because older
// (Android NDK) headers lack the newer names.
constexpr unsigned long kHwcapAsimdDp = 1UL << 20;  // HWCAP_ASIMDDP
constexpr unsigned long kHwcap2I8mm = 1UL << 13;    // HWCAP2_I8MM
#endif

// Highway 1.0.3 counts NEON as supported only with the AES extension, which
// some Arm cores lack (Raspberry Pi 3 and 4): there it finds no usable
// target, silently falls back to the compiler's baseline code and prints
// "WARNING: CPU supports ..." on stderr at every detection. On such CPUs we
// tell it what the CPU has instead (NEON is part of every AArch64 CPU, and
// our kernels use no AES instructions). 0 elsewhere: Highway's detection is
// right there, including the SVE vector-length variants.
int64_t SupportedTargetsOverride() {
#if defined(__aarch64__) && defined(__linux__)
  static const int64_t bits = [] {
    const unsigned long hw = getauxval(AT_HWCAP);
    if (hw & (1UL << 3)) return int64_t{0};  // HWCAP_AES
    int64_t t = HWY_NEON | HWY_SCALAR | HWY_EMU128;
    if (hw & (1UL << 22)) t |= HWY_SVE;  // HWCAP_SVE
    return t;
  }();
  return bits;
#else
  return 0;
#endif
}

// Installed before main(), ahead of the first dynamic dispatch anywhere.
[[maybe_unused]] const bool kOverrideInstalled = [] {
  if (SupportedTargetsOverride() != 0) {
    hwy::SetSupportedTargetsForTest(SupportedTargetsOverride());
  }
  return true;
}();

}  // namespace

std::vector<Target> AvailableTargets() {
  std::vector<Target> out;
  // Highway's bits are ordered best (lowest bit) to worst.
  for (int64_t bits : hwy::SupportedAndGeneratedTargets()) {
    out.push_back(Target{bits, hwy::TargetName(bits)});
  }
  // Highway 1.0.3's SupportedTargets() initialises dispatch before it probes
  // the SVE vector length, so a first call from here would leave dispatch on
  // plain SVE/SVE2 even where SVE_256 (256-bit SVE) or SVE2_128 (128-bit
  // SVE2) was detected. Re-choosing from the full set fixes that; while a
  // target is forced, SupportedTargets() returns just that one.
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
  return out;
}

std::string CurrentTargetName() {
  return hwy::TargetName(HWY_DYNAMIC_DISPATCH(DispatchedTarget)());
}

void ForceTarget(int64_t bits) {
  hwy::SetSupportedTargetsForTest(bits != 0 ? bits : SupportedTargetsOverride());
  // Make the next dispatch re-read the (mocked) supported set.
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
}

namespace {
// SPARROW_PREFETCH: "" or "auto" -> -1 (the CPU decides), "software" -> 0,
// "hardware" -> 1; anything else -> 2 (refused by ApplyTargetFromEnvironment).
int PrefetchOverride() {
  static const int value = [] {
    const char* v = std::getenv("SPARROW_PREFETCH");
    const std::string s = v == nullptr ? "" : v;
    if (s.empty() || s == "auto") return -1;
    if (s == "software") return 0;
    if (s == "hardware") return 1;
    return 2;
  }();
  return value;
}
}  // namespace

void ApplyTargetFromEnvironment() {
  if (PrefetchOverride() == 2) {
    ThrowInputError("SPARROW_PREFETCH=", std::getenv("SPARROW_PREFETCH"),
                    ": want auto, software or hardware");
  }
  const char* wanted = std::getenv("SPARROW_SIMD_TARGET");
  if (wanted == nullptr || *wanted == '\0') return;
  const std::vector<Target> available = AvailableTargets();
  int64_t keep = 0;
  const std::string list = wanted;
  for (size_t begin = 0; begin <= list.size();) {
    size_t end = list.find(',', begin);
    if (end == std::string::npos) end = list.size();
    const std::string name = list.substr(begin, end - begin);
    begin = end + 1;
    bool found = false;
    for (const Target& t : available) {
      if (t.name == name) {
        keep |= t.bits;
        found = true;
      }
    }
    if (!found) {
      std::string names;
      for (const Target& t : available) names += names.empty() ? t.name : " " + t.name;
      ThrowInputError("SPARROW_SIMD_TARGET=", wanted, ": '", name,
                      "' is not available here (available: ", names, ")");
    }
  }
  // A mask rather than ForceTarget's mock: it lasts through ForEachTarget,
  // which forces each allowed target in turn and then restores the default.
  hwy::DisableTargets(~keep);
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
}

std::string CpuFeatures() {
  std::string out;
  auto add = [&out](bool has, const char* name) {
    if (!has) return;
    if (!out.empty()) out += ' ';
    out += name;
  };
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  add(__builtin_cpu_supports("sse4.2"), "sse4.2");
  add(__builtin_cpu_supports("avx2"), "avx2");
  add(__builtin_cpu_supports("fma"), "fma");
  // clang 14 (the fuzzers' compiler) does not know "f16c" here: CPUID.1:ECX.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  add(__get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0, "f16c");
  add(__builtin_cpu_supports("avx512f"), "avx512f");
  add(__builtin_cpu_supports("avx512bw"), "avx512bw");
  add(__builtin_cpu_supports("avx512vl"), "avx512vl");
  add(__builtin_cpu_supports("avx512vnni"), "avx512vnni");
  add(__builtin_cpu_supports("avx512vbmi"), "avx512vbmi");
  add(__builtin_cpu_supports("avx512bf16"), "avx512bf16");
#elif defined(__aarch64__) && defined(__linux__)
  // Bit numbers from the kernel's uapi asm/hwcap.h, spelled out because
  // older (Android NDK) headers lack the newer names.
  const unsigned long hw = getauxval(AT_HWCAP);
  const unsigned long hw2 = getauxval(AT_HWCAP2);
  add(hw & (1UL << 1), "asimd");       // HWCAP_ASIMD
  add(hw & (1UL << 3), "aes");         // HWCAP_AES
  add(hw & (1UL << 10), "asimdhp");    // HWCAP_ASIMDHP (fp16 vector math)
  add(hw & kHwcapAsimdDp, "asimddp");  // int8 dot product
  add(hw2 & kHwcap2I8mm, "i8mm");
  add(hw2 & (1UL << 14), "bf16");      // HWCAP2_BF16
  add(hw & (1UL << 22), "sve");        // HWCAP_SVE
  add(hw2 & (1UL << 1), "sve2");       // HWCAP2_SVE2
  if (hw & (1UL << 22)) {
    // SVE code is vector-length agnostic; the length still decides which
    // Highway target wins (SVE_256, SVE2_128), so report it.
    constexpr int kGetVectorLength = 51;  // PR_SVE_GET_VL
    const int vl = prctl(kGetVectorLength, 0, 0, 0, 0);
    if (vl > 0) out += StrCat(" sve_bits=", (vl & 0xffff) * 8);
  }
#endif
  return out.empty() ? "none detected" : out;
}

namespace {
std::atomic<bool> extensions_hidden{false};
}  // namespace

void HideCpuExtensionsForTest(bool hidden) { extensions_hidden = hidden; }

bool CpuHasArmDotProd() {
#if defined(__aarch64__) && defined(__linux__)
  static const bool has = (getauxval(AT_HWCAP) & kHwcapAsimdDp) != 0;
  return has && !extensions_hidden;
#else
  return false;
#endif
}

bool CpuHasArmI8mm() {
#if defined(__aarch64__) && defined(__linux__)
  static const bool has = (getauxval(AT_HWCAP2) & kHwcap2I8mm) != 0;
  return has && !extensions_hidden;
#else
  return false;
#endif
}

#if defined(__x86_64__) || defined(__i386__)
namespace {
// CPUID leaf 7: subleaf 0's registers, and subleaf 1's EAX (zero where the
// CPU reports no subleaf 1: subleaf 0's EAX is the highest subleaf), read
// once for every feature below.
struct Leaf7 {
  unsigned a0 = 0, b0 = 0, c0 = 0, d0 = 0, a1 = 0;
};
const Leaf7& CpuidLeaf7() {
  static const Leaf7 leaf = [] {
    Leaf7 l;
    unsigned unused = 0;
    if (__get_cpuid_count(7, 0, &l.a0, &l.b0, &l.c0, &l.d0) == 0) return Leaf7{};
    if (l.a0 >= 1) __get_cpuid_count(7, 1, &l.a1, &unused, &unused, &unused);
    return l;
  }();
  return leaf;
}
}  // namespace
#endif

bool CpuHasX86Vnni(bool evex) {
#if defined(__x86_64__) || defined(__i386__)
  // Subleaf 0 ECX bit 11 is AVX512_VNNI, EBX bit 31 AVX512VL; subleaf 1 EAX
  // bit 4 is AVX-VNNI. The callers run on targets whose own check already
  // found the OS saving the vector state they use.
  const Leaf7& l = CpuidLeaf7();
  const bool has = evex ? (l.c0 & (1u << 11)) != 0 && (l.b0 & (1u << 31)) != 0
                        : (l.a1 & (1u << 4)) != 0;
  return has && !extensions_hidden;
#else
  (void)evex;
  return false;
#endif
}

bool CpuHasX86Bf16() {
#if defined(__x86_64__) || defined(__i386__)
  // Subleaf 1 EAX bit 5: AVX512_BF16 (Cooper Lake, Sapphire Rapids and
  // later, Zen 4 and later).
  return (CpuidLeaf7().a1 & (1u << 5)) != 0 && !extensions_hidden;
#else
  return false;
#endif
}

namespace {
bool IsAmdWithAvx512() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned max_leaf = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &max_leaf, &b, &c, &d) == 0) return false;
  // "AuthenticAMD" in EBX, EDX, ECX; leaf 7 EBX bit 16 is AVX512F.
  const bool amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;
  return amd && (CpuidLeaf7().b0 & (1u << 16)) != 0;
#else
  return false;
#endif
}

std::atomic<int> streams_itself_for_test{-1};  // -1: not forced
}  // namespace

bool CpuStreamsRowsItself() {
  static const bool itself = [] {
    const int o = PrefetchOverride();
    return o == 0 || o == 1 ? o == 1 : IsAmdWithAvx512();
  }();
  const int forced = streams_itself_for_test.load(std::memory_order_relaxed);
  return forced >= 0 ? forced == 1 : itself;
}

void SetStreamsRowsItselfForTest(bool itself) { streams_itself_for_test = itself ? 1 : 0; }
void ResetStreamsRowsItselfForTest() { streams_itself_for_test = -1; }

namespace {
std::vector<std::string>& TargetsVisited() {
  static std::vector<std::string> visited;
  return visited;
}
}  // namespace

std::vector<std::string> TakeTargetsVisited() {
  std::vector<std::string> out;
  out.swap(TargetsVisited());
  return out;
}

void ForEachTarget(const std::function<void(const Target&)>& body) {
  const std::vector<Target> targets = AvailableTargets();
  for (const Target& t : targets) {
    ForceTarget(t.bits);
    TargetsVisited().push_back(t.name);
    try {
      body(t);
    } catch (...) {
      ForceTarget(0);
      throw;
    }
  }
  ForceTarget(0);
}

void ForEachTargetAndCpuForm(const std::function<void(const Target&, bool hidden)>& body) {
  for (bool hidden : {false, true}) {
    HideCpuExtensionsForTest(hidden);
    try {
      ForEachTarget([&](const Target& t) { body(t, hidden); });
    } catch (...) {
      HideCpuExtensionsForTest(false);
      throw;
    }
  }
  HideCpuExtensionsForTest(false);
}

}  // namespace sparrow::simd

#endif  // HWY_ONCE
