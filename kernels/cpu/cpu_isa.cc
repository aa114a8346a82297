#include "kernels/cpu/cpu_isa.h"

#include <cstdlib>
#include <iterator>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "oneapi/dnnl/dnnl.h"

namespace flover::kernels {
namespace {

// A named level: the features it needs (and, as a cap, allows).
struct Level {
  const char* name;
  CpuFeatures features;
};

// Highest first: CpuIsaName reports the first one the features hold.
constexpr Level kLevels[] = {
    {"avx512_bf16", {true, false, true, true, true}},
    {"avx512_vnni", {true, false, true, true, false}},
    {"avx512", {true, false, true, false, false}},
    {"avx2_vnni", {true, true, false, false, false}},
    {"avx2", {true, false, false, false, false}},
};

CpuFeatures Detect() {
  __builtin_cpu_init();
  CpuFeatures f;
  f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
  f.avx_vnni = f.avx2 && __builtin_cpu_supports("avxvnni");
  f.avx512 = f.avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  f.avx512_vnni = f.avx512 && __builtin_cpu_supports("avx512vnni");
  f.avx512_bf16 = f.avx512 && __builtin_cpu_supports("avx512bf16");
  return f;
}

// The first feature `want` has and `have` lacks, or nullptr.
const char* Missing(const CpuFeatures& want, const CpuFeatures& have) {
  if (want.avx2 && !have.avx2) return "AVX2 with FMA and F16C";
  if (want.avx_vnni && !have.avx_vnni) return "AVX-VNNI";
  if (want.avx512 && !have.avx512) return "AVX-512 F/BW/DQ/VL";
  if (want.avx512_vnni && !have.avx512_vnni) return "AVX-512 VNNI";
  if (want.avx512_bf16 && !have.avx512_bf16) return "AVX-512 BF16";
  return nullptr;
}

bool Holds(const CpuFeatures& have, const CpuFeatures& want) { return Missing(want, have) == nullptr; }

struct State {
  CpuFeatures cpu;     // what the CPU has
  CpuFeatures in_use;  // after the cap
  absl::Status status;
};

State Resolve() {
  State s;
  s.cpu = Detect();
  s.in_use = s.cpu;
  if (!s.cpu.avx2) {
    s.status = absl::FailedPreconditionError(
        "Flover's CPU kernels need AVX2 with FMA and F16C (x86-64 since Haswell), which this CPU lacks");
  }
  const char* cap = std::getenv(kCpuIsaVariable);
  if (cap == nullptr || *cap == '\0') return s;
  const Level* level = nullptr;
  for (const Level& l : kLevels) {
    if (std::string_view(cap) == l.name) level = &l;
  }
  if (level == nullptr) {
    std::string names;
    for (auto l = std::rbegin(kLevels); l != std::rend(kLevels); ++l) {
      absl::StrAppend(&names, names.empty() ? "" : ", ", l->name);
    }
    s.status = absl::InvalidArgumentError(
        absl::StrCat(kCpuIsaVariable, "=", cap, ": unknown; one of ", names));
    return s;
  }
  if (const char* missing = Missing(level->features, s.cpu)) {
    s.status = absl::FailedPreconditionError(absl::StrCat(
        kCpuIsaVariable, "=", cap, " is above this CPU: it lacks ", missing));
    return s;
  }
  s.in_use = level->features;
  return s;
}

const State& Get() {
  static const State state = Resolve();
  return state;
}

}  // namespace

const CpuFeatures& CpuIsa() {
  const State& s = Get();
  return s.status.ok() ? s.in_use : s.cpu;
}

absl::Status CheckCpuIsa() { return Get().status; }

std::string CpuIsaName() {
  for (const Level& l : kLevels) {
    if (Holds(CpuIsa(), l.features)) return l.name;
  }
  return "below avx2";
}

// Never above AVX-512 BF16: on CPUs with AMX (Sapphire Rapids and later
// Xeons), oneDNN runs bf16 matmuls of some row counts on AMX tiles and others
// on AVX-512 BF16, and the two sum in different orders: a row's result then
// depends on M (seen on the Xeon of our GPU host: one golden test ran 70
// matmuls on AMX and 272 on AVX-512, and chunked prefill stopped matching one
// prefill bitwise). It must happen before oneDNN first looks at the CPU;
// where that is too late (ONEDNN_MAX_CPU_ISA set, say) oneDNN keeps what it
// has.
void ApplyCpuIsaToOneDnn() {
  static std::once_flag once;
  std::call_once(once, [] {
    const CpuFeatures& f = CpuIsa();
    const dnnl_cpu_isa_t isa = f.avx512_bf16  ? dnnl_cpu_isa_avx512_core_bf16
                               : f.avx512_vnni ? dnnl_cpu_isa_avx512_core_vnni
                               : f.avx512      ? dnnl_cpu_isa_avx512_core
                               : f.avx_vnni    ? dnnl_cpu_isa_avx2_vnni
                                               : dnnl_cpu_isa_avx2;
    dnnl_set_max_cpu_isa(isa);
  });
}

}  // namespace flover::kernels
