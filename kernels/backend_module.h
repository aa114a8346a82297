// The C entry points a backend module (a shared library loaded on demand,
// such as libflover_cuda.so) exports. C linkage, so dlsym finds them by
// name; the types they pass are this tree's, so a module and the binary that
// loads it must be built from the same sources (flover_backend_abi_version
// is checked against kBackendAbiVersion before anything else is called).
#ifndef FLOVER_KERNELS_BACKEND_MODULE_H_
#define FLOVER_KERNELS_BACKEND_MODULE_H_

#include "absl/status/status.h"
#include "kernels/backend.h"

namespace flover {
class ControlChannel;
class Collectives;
}  // namespace flover

extern "C" {
// kBackendAbiVersion of the headers the module was built with.
int flover_backend_abi_version();
// The module's backend for `options` (the caller owns it), or null with
// *error set to a one-line reason.
flover::kernels::Backend* flover_create_backend(const flover::kernels::BackendOptions* options,
                                                absl::Status* error);
// Device collectives (NCCL) between the ranks of `control`'s world on
// `backend` (one of this module's), or null with *error set. Collective:
// every rank calls it. The caller owns the result.
flover::Collectives* flover_create_device_collectives(flover::ControlChannel* control,
                                                      flover::kernels::Backend* backend,
                                                      absl::Status* error);
}

#endif  // FLOVER_KERNELS_BACKEND_MODULE_H_
