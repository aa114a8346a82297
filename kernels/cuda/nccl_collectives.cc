#include "kernels/cuda/nccl_collectives.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <numeric>
#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_backend.h"
#include "util/status_macros.h"

namespace flover::kernels::cuda {
namespace {

// NCCL is opened when the first communicator is made, not when the module
// loads: one GPU needs only the CUDA runtime and cuBLAS, and a host without
// NCCL (or with one built for a newer C library) still serves on it.
struct Nccl {
  decltype(&ncclGetErrorString) GetErrorString;
  decltype(&ncclGetLastError) GetLastError;
  decltype(&ncclGetUniqueId) GetUniqueId;
  decltype(&ncclCommInitRank) CommInitRank;
  decltype(&ncclCommDestroy) CommDestroy;
  decltype(&ncclAllReduce) AllReduce;
  decltype(&ncclAllGather) AllGather;
  decltype(&ncclSend) Send;
  decltype(&ncclRecv) Recv;
  decltype(&ncclGroupStart) GroupStart;
  decltype(&ncclGroupEnd) GroupEnd;
};

absl::StatusOr<const Nccl*> OpenNccl() {
  static Nccl nccl;
  static absl::Status status = [] {
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* why = dlerror();
      return absl::FailedPreconditionError(absl::StrCat(
          "tensor parallelism on GPUs needs NCCL, which did not load (libnccl.so.2: ",
          why ? why : "not found", ")"));
    }
    bool all = true;
    auto get = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      all = all && fn != nullptr;
    };
    get(nccl.GetErrorString, "ncclGetErrorString");
    get(nccl.GetLastError, "ncclGetLastError");
    get(nccl.GetUniqueId, "ncclGetUniqueId");
    get(nccl.CommInitRank, "ncclCommInitRank");
    get(nccl.CommDestroy, "ncclCommDestroy");
    get(nccl.AllReduce, "ncclAllReduce");
    get(nccl.AllGather, "ncclAllGather");
    get(nccl.Send, "ncclSend");
    get(nccl.Recv, "ncclRecv");
    get(nccl.GroupStart, "ncclGroupStart");
    get(nccl.GroupEnd, "ncclGroupEnd");
    return all ? absl::OkStatus()
               : absl::FailedPreconditionError(
                     "libnccl.so.2 lacks functions Flover needs (NCCL 2.19 or newer is)");
  }();
  if (!status.ok()) return status;
  return &nccl;
}

const Nccl& Api() { return **OpenNccl(); }  // after Create succeeded

absl::Status NcclStatus(ncclResult_t result, const char* what, ncclComm_t comm = nullptr) {
  if (result == ncclSuccess) return absl::OkStatus();
  std::string msg = absl::StrCat("NCCL ", what, ": ", Api().GetErrorString(result));
  if (const char* last = Api().GetLastError(comm); last != nullptr && *last != '\0') {
    absl::StrAppend(&msg, " (", last, ")");
  }
  return absl::InternalError(msg);
}

absl::StatusOr<ncclDataType_t> NcclType(DType dtype) {
  switch (dtype) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    case DType::kI32: return ncclInt32;
  }
  return absl::InvalidArgumentError("NCCL: unknown dtype");
}

cudaStream_t StreamOf(Backend& backend) { return static_cast<cudaStream_t>(backend.stream()); }

}  // namespace

absl::StatusOr<std::unique_ptr<NcclCollectives>> NcclCollectives::Create(ControlChannel& control,
                                                                         Backend& backend) {
  if (backend.name() != "cuda") {
    return absl::InvalidArgumentError("NCCL collectives need the CUDA backend");
  }
  if (auto nccl = OpenNccl(); !nccl.ok()) return nccl.status();
  const WorldConfig& world = control.world();
  FLOVER_RETURN_IF_ERROR(
      CudaStatus(cudaSetDevice(backend.Device().ordinal), "cudaSetDevice for NCCL"));
  ncclUniqueId id{};
  if (world.is_leader()) FLOVER_RETURN_IF_ERROR(NcclStatus(Api().GetUniqueId(&id), "unique id"));
  FLOVER_RETURN_IF_ERROR(control.Broadcast(&id, sizeof(id), 0));
  ncclComm_t comm = nullptr;
  FLOVER_RETURN_IF_ERROR(NcclStatus(Api().CommInitRank(&comm, world.world_size, id, world.rank),
                                    "communicator set-up"));
  std::unique_ptr<NcclCollectives> c(new NcclCollectives(world, backend, comm));
  auto counts = backend.Allocate(DType::kI32, 1, world.world_size);
  if (!counts.ok()) return counts.status();
  c->counts_ = std::move(*counts);
  return c;
}

NcclCollectives::~NcclCollectives() {
  if (comm_ != nullptr) {
    backend_.Synchronize().IgnoreError();
    Api().CommDestroy(comm_);
  }
}

absl::Status NcclCollectives::AllReduceSum(const Tensor& data) {
  auto type = NcclType(data.dtype);
  if (!type.ok()) return type.status();
  if (data.elements() == 0) return absl::OkStatus();
  return NcclStatus(Api().AllReduce(data.data, data.data, static_cast<size_t>(data.elements()), *type,
                                  ncclSum, comm_, StreamOf(backend_)),
                    "all-reduce", comm_);
}

absl::Status NcclCollectives::Grow(size_t floats) {
  if (gathered_.tensor().data != nullptr &&
      static_cast<size_t>(gathered_.tensor().elements()) >= floats) {
    return absl::OkStatus();
  }
  gathered_.Reset();
  auto b = backend_.Allocate(DType::kF32, 1, static_cast<int64_t>(floats));
  if (!b.ok()) return b.status();
  gathered_ = std::move(*b);
  return absl::OkStatus();
}

absl::Status NcclCollectives::GatherToLeader(const Tensor& local, std::vector<float>* out) {
  if (local.dtype != DType::kF32) {
    return absl::InvalidArgumentError("GatherToLeader: NCCL gathers f32 logits only");
  }
  const int32_t n = static_cast<int32_t>(local.elements());
  const int W = world_.world_size, rank = world_.rank;
  cudaStream_t stream = StreamOf(backend_);
  // Every rank's count first (vocabulary ranges may differ by one row).
  const Tensor counts = counts_.tensor();
  FLOVER_RETURN_IF_ERROR(backend_.Upload(&n, counts.View(rank, 1, 1)));
  FLOVER_RETURN_IF_ERROR(NcclStatus(Api().AllGather(counts.as<int32_t>() + rank, counts.data, 1,
                                                  ncclInt32, comm_, stream),
                                    "count gather", comm_));
  std::vector<int32_t> sizes(W);
  FLOVER_RETURN_IF_ERROR(backend_.Download(counts, sizes.data()));
  if (!world_.is_leader()) {
    return NcclStatus(Api().Send(local.data, static_cast<size_t>(n), ncclFloat32, 0, comm_, stream),
                      "send to rank 0", comm_);
  }
  const size_t total = std::accumulate(sizes.begin(), sizes.end(), size_t{0});
  FLOVER_RETURN_IF_ERROR(Grow(total));
  float* dst = gathered_.tensor().as<float>();
  FLOVER_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(dst, local.data, size_t(n) * sizeof(float), cudaMemcpyDeviceToDevice, stream),
      "gather (own part)"));
  FLOVER_RETURN_IF_ERROR(NcclStatus(Api().GroupStart(), "group start", comm_));
  size_t offset = sizes[0];
  absl::Status recv = absl::OkStatus();
  for (int r = 1; r < W && recv.ok(); ++r) {
    recv = NcclStatus(Api().Recv(dst + offset, static_cast<size_t>(sizes[r]), ncclFloat32, r, comm_,
                               stream),
                      "receive", comm_);
    offset += sizes[r];
  }
  FLOVER_RETURN_IF_ERROR(NcclStatus(Api().GroupEnd(), "group end", comm_));
  FLOVER_RETURN_IF_ERROR(recv);
  out->resize(total);
  return backend_.Download(gathered_.tensor().View(0, 1, static_cast<int64_t>(total)), out->data());
}

}  // namespace flover::kernels::cuda
