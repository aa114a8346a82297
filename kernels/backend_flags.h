// The --device, --dtype, --kv_dtype and --cuda_graphs flags, defined once for every binary
// that creates a backend (server, flover_generate, benchmarks).
#ifndef FLOVER_KERNELS_BACKEND_FLAGS_H_
#define FLOVER_KERNELS_BACKEND_FLAGS_H_

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace flover::kernels {

// The flags, parsed and checked by name (ValidateDevice,
// ParseMatmulDtype, ParseKvDtype); an error names the flag. Whether the
// device runs the dtypes is CreateBackend's to say.
absl::StatusOr<BackendOptions> BackendOptionsFromFlags();

// Whether --dtype is "auto": the caller picks by the model (model_loader's
// AutoMatmulDtype); BackendOptionsFromFlags leaves f32.
bool MatmulDtypeIsAuto();

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_BACKEND_FLAGS_H_
