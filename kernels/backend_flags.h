// The --device, --dtype, --kv_dtype and --cuda_graphs flags, defined once for every binary
// that creates a backend (server, flover_generate, benchmarks).
#ifndef FLOVER_KERNELS_BACKEND_FLAGS_H_
#define FLOVER_KERNELS_BACKEND_FLAGS_H_

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/backend.h"

namespace flover::kernels {

// The flags, parsed and checked by name (ValidateDevice,
// ParseMatmulDtype, ParseKvDtype); an error names the flag. --dtype=auto
// (the default) is resolved by `pick_auto` for the device, which knows the
// model (model_loader's AutoMatmulDtype). Whether the device runs the dtypes
// is CreateBackend's to say.
absl::StatusOr<BackendOptions> BackendOptionsFromFlags(
    absl::FunctionRef<MatmulDtype(absl::string_view device)> pick_auto);

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_BACKEND_FLAGS_H_
