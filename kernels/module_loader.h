// Backends that live in a module: a shared library loaded on demand
// (dlopen), exporting backend_module.h's C entry points. A binary that can
// serve on such a device never links its libraries, so it starts and serves
// on the CPU on a host that has none of them.
#ifndef FLOVER_KERNELS_MODULE_LOADER_H_
#define FLOVER_KERNELS_MODULE_LOADER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/collectives.h"

namespace flover::kernels {

// Where a module is and what to tell a user who lacks it.
struct ModuleFile {
  std::string device;         // the --device kind it serves, for errors: "cuda"
  std::string file;           // "libflover_cuda.so", looked for beside the executable
  std::string runfile;        // its path in the Bazel runfiles
  std::string env_var;        // overrides both: "FLOVER_CUDA_MODULE"
  std::string missing_hint;   // how to get one: "build on a host with the CUDA toolkit ..."
  std::string runtime_hint;   // what a failed dlopen usually lacks
};

// The module's backend for `options`. The module is loaded once per process,
// its ABI version checked, and never unloaded (its backends run its code);
// every error names the --device and what to do.
absl::StatusOr<std::unique_ptr<Backend>> CreateModuleBackend(const ModuleFile& module,
                                                             const BackendOptions& options);

// The module's device collectives between control's ranks on `backend`.
absl::StatusOr<std::unique_ptr<Collectives>> CreateModuleCollectives(const ModuleFile& module,
                                                                     ControlChannel& control,
                                                                     Backend& backend);

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_MODULE_LOADER_H_
