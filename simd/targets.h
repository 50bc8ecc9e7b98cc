// Which SIMD targets were compiled in, which one dispatch picks, and a way to
// force one (tests, `sparrow info`, and SPARROW_SIMD_TARGET for debugging).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace sparrow::simd {

struct Target {
  int64_t bits;      // Highway's HWY_* bit
  std::string name;  // "AVX3_DL", "NEON", "EMU128", ...
};

// Compiled-in targets this CPU supports, best first.
std::vector<Target> AvailableTargets();
// The target dynamic dispatch uses now.
std::string CurrentTargetName();
// Restricts dispatch to `bits` (one target); 0 restores the default.
void ForceTarget(int64_t bits);
// Applies SPARROW_SIMD_TARGET=<name>[,<name>...] if set: only the named
// targets are used from then on (dispatch picks the best of them, and
// AvailableTargets/ForEachTarget see just them). InputError for an unknown or
// unavailable name. Called by the CLI and the SIMD test runner at start-up.
void ApplyTargetFromEnvironment();
// CPU features relevant to our kernels, e.g. "avx2 avx512f avx512vnni".
std::string CpuFeatures();
// Whether this is an Arm CPU with the NEON dot-product extension (`sdot`;
// Linux HWCAP_ASIMDDP). Read once; false on other architectures.
bool CpuHasArmDotProd();
// Whether this is an Arm CPU with the int8 matrix-multiply extension
// (`smmla`; Linux HWCAP2_I8MM). Read once; false on other architectures.
bool CpuHasArmI8mm();
// Whether this is an x86 CPU with vpdpbusd in the EVEX form (AVX-512 VNNI
// and VL, evex=true) or the VEX form (AVX-VNNI, evex=false). Read once.
bool CpuHasX86Vnni(bool evex);
// Whether this is an x86 CPU with AVX512_BF16 (vcvtneps2bf16). Read once.
bool CpuHasX86Bf16();
// Whether the decode GEMV's row streams are left to the hardware
// prefetchers (true) or also prefetched in software (false). Software
// prefetches keep a stream ahead across the 4 KiB pages that a hardware
// prefetcher may not cross; on AMD CPUs with AVX-512 (Zen 4 and later) they
// only held the streams back (simd/gemv-inl.h: HardwarePrefetch; the
// gather's DotRows over rows in order, gather-inl.h), so there the answer
// is true. SPARROW_PREFETCH=software|hardware overrides it (for
// measuring both on one CPU); read once. Results do not depend on it.
bool CpuStreamsRowsItself();
// Tests: makes CpuStreamsRowsItself answer `itself` (both policies run on
// any CPU); ResetStreamsRowsItselfForTest returns it to the CPU's answer.
void SetStreamsRowsItselfForTest(bool itself);
void ResetStreamsRowsItselfForTest();
// Makes the four functions above answer false while `hidden` (tests: the
// kernels' forms for CPUs without these extensions run on any CPU).
void HideCpuExtensionsForTest(bool hidden);

// Runs `body` once per available target with dispatch forced to it, then
// restores the default. For tests: every kernel is checked on every target.
void ForEachTarget(const std::function<void(const Target&)>& body);
// ForEachTarget with the CPU extensions above visible, then again with them
// hidden (HideCpuExtensionsForTest), so that kernels which choose a form at
// run time are checked in every form; `hidden` says which pass this is.
// Leaves them visible.
void ForEachTargetAndCpuForm(const std::function<void(const Target&, bool hidden)>& body);
// Names of the targets ForEachTarget ran a body on since the last call, in
// order; the test runner prints them so logs show what each test exercised.
std::vector<std::string> TakeTargetsVisited();

}  // namespace sparrow::simd
