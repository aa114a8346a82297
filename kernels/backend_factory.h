// Creates the backend a --device asks for. The CPU backend is linked in; the
// CUDA backend is a module (libflover_cuda.so) loaded on demand, so a binary
// built with CUDA support starts and serves on the CPU on a host with no CUDA
// driver or libraries at all.
#ifndef FLOVER_KERNELS_BACKEND_FACTORY_H_
#define FLOVER_KERNELS_BACKEND_FACTORY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dist/communicator.h"
#include "kernels/backend.h"
#include "kernels/backend_module.h"

namespace flover::kernels {

// "f32", "bf16", "f16" or "int8" (a --dtype flag's value); InvalidArgument otherwise.
// Whether a device runs it is its backend's to say.
absl::StatusOr<MatmulDtype> ParseMatmulDtype(absl::string_view name);

// "f32" or "bf16" (a --kv_dtype flag's value); InvalidArgument otherwise.
absl::StatusOr<KvDtype> ParseKvDtype(absl::string_view name);

// "cpu", "cuda" or "cuda:N" (a --device flag's value); InvalidArgument otherwise.
absl::Status ValidateDevice(absl::string_view device);

// The backend for options.device. Errors are one line a user can act on:
// an unsupported dtype, a missing CUDA module, runtime or driver, no GPU.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& options);

// Collectives between the ranks of control's world that run on `backend`'s
// device (NCCL on the CUDA module's stream); the control channel carries
// their bootstrap (NCCL's unique id). Collective: every rank calls it.
// InvalidArgument for a backend without device collectives (the CPU's are
// MPI's own).
absl::StatusOr<std::unique_ptr<Collectives>> CreateDeviceCollectives(ControlChannel& control,
                                                                    Backend& backend);

// CreateBackend looks for libflover_cuda.so at $FLOVER_CUDA_MODULE, beside
// the executable, then in the executable's (or the test's) Bazel runfiles.

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_BACKEND_FACTORY_H_
