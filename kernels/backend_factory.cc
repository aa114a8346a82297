#include "kernels/backend_factory.h"

#include <mutex>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/module_loader.h"

namespace flover::kernels {
namespace {

BackendKind CpuKind() {
  BackendKind kind;
  kind.name = "cpu";
  kind.create = [](const BackendOptions& options) -> absl::StatusOr<std::unique_ptr<Backend>> {
    auto cpu = CpuBackend::Create(options.matmul, options.kv);
    if (!cpu.ok()) return cpu.status();
    return std::unique_ptr<Backend>(std::move(*cpu));
  };
  return kind;  // its ranks reduce over MPI
}

// A kind whose backend is a module's.
BackendKind ModuleKind(ModuleFile module) {
  BackendKind kind;
  kind.name = module.device;
  kind.has_ordinals = true;
  kind.create = [module](const BackendOptions& options) { return CreateModuleBackend(module, options); };
  kind.create_collectives = [module](ControlChannel& control, Backend& backend) {
    return CreateModuleCollectives(module, control, backend);
  };
  return kind;
}

// The kinds and their lock, made once and never destroyed (binaries and
// tests may create backends until the process ends).
struct Registry {
  std::mutex mu;
  std::vector<BackendKind> kinds;
};
Registry& TheRegistry() {
  static auto* registry = new Registry{
      {},
      {CpuKind(),
       ModuleKind({"cuda", "libflover_cuda.so", "kernels/cuda/libflover_cuda.so", "FLOVER_CUDA_MODULE",
                   "build on a host with the CUDA toolkit in /usr/local/cuda",
                   "is the CUDA runtime installed, with cuBLAS, on the library path?"})}};
  return *registry;
}

// The kind `device` names ("cuda:1" names "cuda"), or InvalidArgument.
absl::StatusOr<BackendKind> KindOf(absl::string_view device) {
  const size_t colon = device.find(':');
  const absl::string_view name = device.substr(0, colon);
  std::vector<std::string> choices;
  for (const BackendKind& kind : BackendKinds()) {
    int ordinal = 0;
    if (kind.name == name &&
        (colon == absl::string_view::npos ||
         (kind.has_ordinals && absl::SimpleAtoi(device.substr(colon + 1), &ordinal) && ordinal >= 0))) {
      return kind;
    }
    choices.push_back(kind.name);
    if (kind.has_ordinals) choices.push_back(absl::StrCat(kind.name, ":N"));
  }
  const std::string last = choices.back();
  choices.pop_back();
  return absl::InvalidArgumentError(absl::StrCat("--device: must be ", absl::StrJoin(choices, ", "),
                                                 " or ", last, ", got '", device, "'"));
}

}  // namespace

std::vector<BackendKind> BackendKinds() {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.kinds;
}

void RegisterBackendKind(BackendKind kind) {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (BackendKind& known : r.kinds) {
    if (known.name == kind.name) {
      known = std::move(kind);
      return;
    }
  }
  r.kinds.push_back(std::move(kind));
}

absl::StatusOr<MatmulDtype> ParseMatmulDtype(absl::string_view name) {
  if (name == "f32") return MatmulDtype::kF32;
  if (name == "bf16") return MatmulDtype::kBF16;
  if (name == "f16") return MatmulDtype::kF16;
  if (name == "int8") return MatmulDtype::kInt8;
  if (name == "native") return MatmulDtype::kNative;
  return absl::InvalidArgumentError(
      absl::StrCat("--dtype: must be f32, auto, bf16, f16, int8 or native, got '", name, "'"));
}

absl::StatusOr<KvFormat> ParseKvFormat(absl::string_view name) {
  auto dtype_of = [](absl::string_view s) -> std::optional<KvDtype> {
    for (KvDtype d : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kQ8_0, KvDtype::kQ4_0, KvDtype::kFp8}) {
      if (s == KvDtypeName(d)) return d;
    }
    return std::nullopt;
  };
  // One dtype for both, or keys' and values'.
  const std::vector<absl::string_view> parts = absl::StrSplit(name, ',');
  if (parts.size() <= 2) {
    const std::optional<KvDtype> k = dtype_of(parts.front()), v = dtype_of(parts.back());
    if (k.has_value() && v.has_value()) return KvFormat(*k, *v);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--kv_dtype: must be f32, bf16, q8_0, q4_0 or fp8, or keys' and values' apart as K,V (e.g. q8_0,q4_0), got '",
      name, "'"));
}

absl::Status ValidateDevice(absl::string_view device) { return KindOf(device).status(); }

std::string DeviceForRank(const std::string& device, const WorldConfig& world) {
  auto kind = KindOf(device);
  if (!kind.ok() || !kind->has_ordinals || world.tp_size == 1 || device != kind->name) return device;
  return absl::StrCat(device, ":", world.local_rank);
}

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& options) {
  auto kind = KindOf(options.device);
  if (!kind.ok()) return kind.status();
  return kind->create(options);
}

bool HasDeviceCollectives(absl::string_view device) {
  auto kind = KindOf(device);
  return kind.ok() && kind->create_collectives != nullptr;
}

absl::StatusOr<std::unique_ptr<Collectives>> CreateDeviceCollectives(ControlChannel& control,
                                                                    Backend& backend) {
  auto kind = KindOf(std::string(backend.name()));
  if (!kind.ok() || kind->create_collectives == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device collectives need a GPU backend; the ", std::string(backend.name()), " backend uses MPI's"));
  }
  return kind->create_collectives(control, backend);
}

}  // namespace flover::kernels
