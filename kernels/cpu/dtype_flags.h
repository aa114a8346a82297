// The --dtype and --kv_dtype flags, defined once for every binary that
// builds CpuOps (server, flover_generate, benchmarks).
#ifndef FLOVER_KERNELS_CPU_DTYPE_FLAGS_H_
#define FLOVER_KERNELS_CPU_DTYPE_FLAGS_H_

#include "absl/status/statusor.h"
#include "kernels/ops.h"

namespace flover::kernels {

struct CpuDtypes {
  MatmulDtype matmul = MatmulDtype::kF32;
  KvDtype kv = KvDtype::kF32;
};

// Both flags, parsed and checked (ParseMatmulDtype, ParseKvDtype); an error
// names the flag.
absl::StatusOr<CpuDtypes> DtypesFromFlags();

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_CPU_DTYPE_FLAGS_H_
