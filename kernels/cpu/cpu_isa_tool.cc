// Prints the instruction set the CPU kernels use here ("isa avx2", say),
// after FLOVER_CPU_ISA; exits 1 with the reason where that cap is refused.
// For scripts and the per-cap test matrix (testing/isa_matrix.bzl).
#include <cstdio>
#include <string>

#include "kernels/cpu/cpu_isa.h"

int main() {
  if (const absl::Status st = flover::kernels::CheckCpuIsa(); !st.ok()) {
    std::fprintf(stderr, "%s\n", std::string(st.message()).c_str());
    return 1;
  }
  std::printf("isa %s\n", flover::kernels::CpuIsaName().c_str());
  return 0;
}
