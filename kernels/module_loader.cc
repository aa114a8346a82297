#include "kernels/module_loader.h"

#include <dlfcn.h>

#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "kernels/backend_module.h"
#include "util/runfiles.h"

namespace flover::kernels {
namespace {

using AbiVersionFn = decltype(&flover_backend_abi_version);
using CreateFn = decltype(&flover_create_backend);
using CreateCollectivesFn = decltype(&flover_create_device_collectives);

// dlopen's handle, or why the module cannot be used; found and checked once.
absl::StatusOr<void*> OpenModule(const ModuleFile& m) {
  const std::string flag = absl::StrCat("--device=", m.device);
  const std::string path = FindRunfile(m.env_var, m.file, m.runfile);
  if (path.empty()) {
    return absl::NotFoundError(absl::StrCat(
        flag, ": this build has no ", m.device, " backend (", m.file,
        " was not found beside the executable or in its runfiles; ", m.missing_hint, ", or set ",
        m.env_var, ")"));
  }
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return absl::FailedPreconditionError(absl::StrCat(flag, ": cannot load the ", m.device,
                                                      " backend ", path, ": ",
                                                      why ? why : "unknown error", " (", m.runtime_hint, ")"));
  }
  auto version = reinterpret_cast<AbiVersionFn>(dlsym(handle, "flover_backend_abi_version"));
  if (version == nullptr || dlsym(handle, "flover_create_backend") == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(flag, ": ", path, " is not a Flover backend module"));
  }
  if (version() != kBackendAbiVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        flag, ": ", path, " was built for backend ABI ", version(), ", this binary needs ",
        kBackendAbiVersion, " (rebuild both from the same tree)"));
  }
  return handle;
}

// The module's entry point `name`, the module opened first (once per
// process and module file; an error is remembered too).
template <typename Fn>
absl::StatusOr<Fn> ModuleEntry(const ModuleFile& m, const char* name) {
  static std::mutex mu;
  static auto* opened = new std::map<std::string, absl::StatusOr<void*>>();
  absl::StatusOr<void*> module;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = opened->find(m.file);
    if (it == opened->end()) it = opened->emplace(m.file, OpenModule(m)).first;
    module = it->second;
  }
  if (!module.ok()) return module.status();
  void* fn = dlsym(*module, name);
  if (fn == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("the ", m.device, " backend module has no ", name));
  }
  return reinterpret_cast<Fn>(fn);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateModuleBackend(const ModuleFile& module,
                                                             const BackendOptions& options) {
  auto create = ModuleEntry<CreateFn>(module, "flover_create_backend");
  if (!create.ok()) return create.status();
  absl::Status error = absl::UnknownError(absl::StrCat("the ", module.device, " backend module gave no reason"));
  Backend* backend = (*create)(&options, &error);
  if (backend == nullptr) return error;
  return std::unique_ptr<Backend>(backend);
}

absl::StatusOr<std::unique_ptr<Collectives>> CreateModuleCollectives(const ModuleFile& module,
                                                                     ControlChannel& control,
                                                                     Backend& backend) {
  auto create = ModuleEntry<CreateCollectivesFn>(module, "flover_create_device_collectives");
  if (!create.ok()) return create.status();
  absl::Status error = absl::UnknownError(absl::StrCat("the ", module.device, " backend module gave no reason"));
  Collectives* c = (*create)(&control, &backend, &error);
  if (c == nullptr) return error;
  return std::unique_ptr<Collectives>(c);
}

}  // namespace flover::kernels
