// The entry points of libflover_cuda.so, found by kernels/module_loader
// with dlsym. Everything else in the module is reached through the Backend
// the factory gets back.
#include "kernels/backend.h"
#include "kernels/backend_module.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/nccl_collectives.h"

extern "C" int flover_backend_abi_version() { return flover::kernels::kBackendAbiVersion; }

extern "C" flover::kernels::Backend* flover_create_backend(
    const flover::kernels::BackendOptions* options, absl::Status* error) {
  auto backend = flover::kernels::cuda::CudaBackend::Create(*options);
  if (!backend.ok()) {
    *error = backend.status();
    return nullptr;
  }
  return backend->release();
}

extern "C" flover::Collectives* flover_create_device_collectives(flover::ControlChannel* control,
                                                                 flover::kernels::Backend* backend,
                                                                 absl::Status* error) {
  auto c = flover::kernels::cuda::NcclCollectives::Create(*control, *backend);
  if (!c.ok()) {
    *error = c.status();
    return nullptr;
  }
  return c->release();
}
