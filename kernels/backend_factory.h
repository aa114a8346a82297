// Creates the backend a --device asks for, through a registry of device
// kinds. The CPU backend is linked in; other kinds are modules loaded on
// demand (kernels/module_loader.h), so a binary built with CUDA support
// starts and serves on the CPU on a host with no CUDA driver or libraries.
// Adding a device is one BackendKind (docs/adding-a-backend.md).
#ifndef FLOVER_KERNELS_BACKEND_FACTORY_H_
#define FLOVER_KERNELS_BACKEND_FACTORY_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/backend.h"
#include "kernels/collectives.h"

namespace flover::kernels {

// One kind of device a --device flag names: "NAME", or "NAME:N" for device
// N where the kind has ordinals.
struct BackendKind {
  std::string name;           // "cpu", "cuda"
  bool has_ordinals = false;  // devices are numbered; tensor-parallel ranks take one each
  // The backend for options (whose device names this kind, validated).
  std::function<absl::StatusOr<std::unique_ptr<Backend>>(const BackendOptions&)> create;
  // Collectives between the ranks of control's world on devices of this
  // kind, run on the backend's stream (NCCL); empty where the ranks reduce
  // over MPI in host memory (the CPU).
  std::function<absl::StatusOr<std::unique_ptr<Collectives>>(ControlChannel&, Backend&)>
      create_collectives;
};

// The kinds every binary knows (cpu, cuda), then any registered since.
std::vector<BackendKind> BackendKinds();
// Adds a kind (a test's fake device, an out-of-tree backend); replaces one
// of the same name.
void RegisterBackendKind(BackendKind kind);

// "f32", "bf16", "f16", "int8" or "native" (a --dtype flag's value);
// InvalidArgument otherwise.
// Whether a device runs it is its backend's to say.
absl::StatusOr<MatmulDtype> ParseMatmulDtype(absl::string_view name);

// A --kv_dtype flag's value: "f32", "bf16", "q8_0", "q4_0" or "fp8" for keys and
// values both, or "K,V" for each its own (keys first); InvalidArgument
// otherwise. Whether a device runs it is its backend's to say.
absl::StatusOr<KvFormat> ParseKvFormat(absl::string_view name);

// A registered kind's name, or NAME:N for one with ordinals (a --device
// flag's value); InvalidArgument naming the choices otherwise.
absl::Status ValidateDevice(absl::string_view device);

// The device one tensor-parallel rank takes: with several ranks on a kind
// with ordinals and no ordinal given, the node-local rank's device
// ("cuda" -> "cuda:1" on a node's second rank); otherwise `device`.
std::string DeviceForRank(const std::string& device, const WorldConfig& world);

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
// Whether backends of `device`'s kind reduce through CreateDeviceCollectives.
bool HasDeviceCollectives(absl::string_view device);

// The CUDA kind looks for libflover_cuda.so at $FLOVER_CUDA_MODULE, beside
// the executable, then in the executable's (or the test's) Bazel runfiles.

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_BACKEND_FACTORY_H_
