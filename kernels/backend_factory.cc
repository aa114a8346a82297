#include "kernels/backend_factory.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_backend.h"
#include "util/runfiles.h"

namespace flover::kernels {
namespace {

constexpr char kCudaModule[] = "libflover_cuda.so";

using AbiVersionFn = decltype(&flover_backend_abi_version);
using CreateFn = decltype(&flover_create_backend);
using CreateCollectivesFn = decltype(&flover_create_device_collectives);

// The loaded module, loaded once per process and never unloaded (the
// backends it creates run its code).
absl::StatusOr<void*> LoadCudaModule() {
  static std::mutex mu;
  static void* module = nullptr;
  static absl::Status error;
  std::lock_guard<std::mutex> lock(mu);
  if (module != nullptr || !error.ok()) {
    if (module != nullptr) return module;
    return error;
  }
  const std::string path = FindRunfile("FLOVER_CUDA_MODULE", kCudaModule,
                                      "kernels/cuda/libflover_cuda.so");
  if (path.empty()) {
    error = absl::NotFoundError(absl::StrCat(
        "--device=cuda: this build has no CUDA backend (", kCudaModule,
        " was not found beside the executable or in its runfiles; build on a host with the "
        "CUDA toolkit in /usr/local/cuda, or set FLOVER_CUDA_MODULE)"));
    return error;
  }
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    error = absl::FailedPreconditionError(absl::StrCat(
        "--device=cuda: cannot load the CUDA backend ", path, ": ", why ? why : "unknown error",
        " (is the CUDA runtime installed, with cuBLAS, on the library path?)"));
    return error;
  }
  auto version = reinterpret_cast<AbiVersionFn>(dlsym(handle, "flover_backend_abi_version"));
  if (version == nullptr || dlsym(handle, "flover_create_backend") == nullptr) {
    error = absl::FailedPreconditionError(
        absl::StrCat("--device=cuda: ", path, " is not a Flover backend module"));
    return error;
  }
  if (version() != kBackendAbiVersion) {
    error = absl::FailedPreconditionError(absl::StrCat(
        "--device=cuda: ", path, " was built for backend ABI ", version(), ", this binary needs ",
        kBackendAbiVersion, " (rebuild both from the same tree)"));
    return error;
  }
  module = handle;
  return module;
}

// The module's entry point `name` (the module loaded first).
template <typename Fn>
absl::StatusOr<Fn> ModuleEntry(const char* name) {
  auto module = LoadCudaModule();
  if (!module.ok()) return module.status();
  void* fn = dlsym(*module, name);
  if (fn == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("the CUDA backend module has no ", name));
  }
  return reinterpret_cast<Fn>(fn);
}

}  // namespace

absl::StatusOr<MatmulDtype> ParseMatmulDtype(absl::string_view name) {
  if (name == "f32") return MatmulDtype::kF32;
  if (name == "bf16") return MatmulDtype::kBF16;
  if (name == "f16") return MatmulDtype::kF16;
  if (name == "int8") return MatmulDtype::kInt8;
  return absl::InvalidArgumentError(
      absl::StrCat("--dtype: must be f32, bf16, f16 or int8, got '", name, "'"));
}

absl::StatusOr<KvDtype> ParseKvDtype(absl::string_view name) {
  if (name == "f32") return KvDtype::kF32;
  if (name == "bf16") return KvDtype::kBF16;
  return absl::InvalidArgumentError(
      absl::StrCat("--kv_dtype: must be f32 or bf16, got '", name, "'"));
}

absl::Status ValidateDevice(absl::string_view device) {
  if (device == "cpu" || device == "cuda") return absl::OkStatus();
  int ordinal = 0;
  if (absl::StartsWith(device, "cuda:") && absl::SimpleAtoi(device.substr(5), &ordinal) &&
      ordinal >= 0) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--device: must be cpu, cuda or cuda:N, got '", device, "'"));
}

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& options) {
  if (absl::Status st = ValidateDevice(options.device); !st.ok()) return st;
  if (options.device == "cpu") {
    auto cpu = CpuBackend::Create(options.matmul, options.kv);
    if (!cpu.ok()) return cpu.status();
    return std::unique_ptr<Backend>(std::move(*cpu));
  }
  auto create = ModuleEntry<CreateFn>("flover_create_backend");
  if (!create.ok()) return create.status();
  absl::Status error = absl::UnknownError("the CUDA backend module gave no reason");
  Backend* backend = (*create)(&options, &error);
  if (backend == nullptr) return error;
  return std::unique_ptr<Backend>(backend);
}

absl::StatusOr<std::unique_ptr<Collectives>> CreateDeviceCollectives(ControlChannel& control,
                                                                    Backend& backend) {
  if (backend.name() != "cuda") {
    return absl::InvalidArgumentError(absl::StrCat(
        "device collectives need a GPU backend; the ", std::string(backend.name()), " backend uses MPI's"));
  }
  auto create = ModuleEntry<CreateCollectivesFn>("flover_create_device_collectives");
  if (!create.ok()) return create.status();
  absl::Status error = absl::UnknownError("the CUDA backend module gave no reason");
  Collectives* c = (*create)(&control, &backend, &error);
  if (c == nullptr) return error;
  return std::unique_ptr<Collectives>(c);
}

}  // namespace flover::kernels
