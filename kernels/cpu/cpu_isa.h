// Which x86-64 instructions the CPU kernels may use: what the CPU has, capped
// by the environment variable FLOVER_CPU_ISA. Every CPU kernel choice reads
// it here (our own kernels' and oneDNN's, whose cap ApplyToOneDnn sets), so
// one machine can run, and test, the code paths of older ones:
//
//   avx2         AVX2, FMA, F16C (Haswell and later; Zen 1-3)
//   avx2_vnni    the above and AVX-VNNI (Alder Lake and later client cores; Zen 5)
//   avx512       AVX-512 F/BW/DQ/VL, with AVX2/FMA/F16C (Skylake-X); no VNNI of either width
//   avx512_vnni  the above and AVX-512 VNNI (Cascade Lake; Ice Lake)
//   avx512_bf16  the above and AVX-512 BF16 (Cooper Lake, Sapphire Rapids; Zen 4, Zen 5)
//
// Unset: the CPU's own features. A cap naming a feature the CPU lacks is
// refused (CheckCpuIsa, which CpuBackend::Create calls) with a message that
// names it; nothing falls back silently. The variable is read once, at the
// first call of any function here.
#ifndef FLOVER_KERNELS_CPU_CPU_ISA_H_
#define FLOVER_KERNELS_CPU_CPU_ISA_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace flover::kernels {

// The environment variable's name, for messages and scripts.
inline constexpr char kCpuIsaVariable[] = "FLOVER_CPU_ISA";

// Instruction-set features the kernels choose by.
struct CpuFeatures {
  bool avx2 = false;  // with FMA and F16C: the floor of every kernel here
  bool avx_vnni = false;  // 256-bit u8 x s8 dot products (VEX)
  bool avx512 = false;  // F, BW, DQ and VL
  bool avx512_vnni = false;
  bool avx512_bf16 = false;
};

// The features this process uses: the CPU's, capped by FLOVER_CPU_ISA where
// it is set and valid (where it is not, the CPU's; CheckCpuIsa reports it).
const CpuFeatures& CpuIsa();

// OK unless FLOVER_CPU_ISA is set to a name not listed above or to a level
// this CPU does not have (FailedPrecondition naming the missing feature), or
// the CPU lacks AVX2/FMA/F16C.
absl::Status CheckCpuIsa();

// The name of the level in use, e.g. "avx512_bf16" or "avx2" (the highest
// level whose features CpuIsa() holds all of).
std::string CpuIsaName();

// Caps oneDNN at the level in use (and never above AVX-512 BF16: see the
// .cc), once per process, before oneDNN first looks at the CPU. Every user of
// oneDNN calls it before making a primitive.
void ApplyCpuIsaToOneDnn();

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_CPU_CPU_ISA_H_
