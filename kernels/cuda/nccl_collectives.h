// Tensor-parallel collectives between GPUs through NCCL, on the CUDA
// backend's stream, in the activations' own dtype. The NCCL unique id goes
// from rank 0 to the others over the host control channel (MPI), which also
// keeps carrying the step plan. Lives in the CUDA module: the binaries never
// link NCCL, and reach this through kernels/backend_factory (CreateDeviceCollectives).
#ifndef FLOVER_KERNELS_CUDA_NCCL_COLLECTIVES_H_
#define FLOVER_KERNELS_CUDA_NCCL_COLLECTIVES_H_

#include <nccl.h>

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/collectives.h"
#include "kernels/backend.h"

namespace flover::kernels::cuda {

class NcclCollectives final : public Collectives {
 public:
  // Joins every rank of control.world() into one NCCL communicator on
  // `backend`'s GPU (a CUDA backend). Collective: every rank calls it.
  static absl::StatusOr<std::unique_ptr<NcclCollectives>> Create(ControlChannel& control,
                                                                  Backend& backend);
  ~NcclCollectives() override;

  const WorldConfig& world() const override { return world_; }
  // In place, on the backend's stream; f32, bf16 or f16.
  absl::Status AllReduceSum(const Tensor& data) override;
  // f32 [rows, cols_r] from every rank (cols may differ) to rank 0's host
  // memory, in rank order; waits for the copy on rank 0.
  absl::Status GatherToLeader(const Tensor& local, std::vector<float>* out) override;

 private:
  NcclCollectives(const WorldConfig& world, Backend& backend, ncclComm_t comm)
      : world_(world), backend_(backend), comm_(comm) {}
  absl::Status Grow(size_t floats);

  WorldConfig world_;
  Backend& backend_;
  ncclComm_t comm_;
  Buffer counts_;    // i64 [1, world]: each rank's element count, gathered
  Buffer gathered_;  // f32: rank 0's landing space for GatherToLeader
};

}  // namespace flover::kernels::cuda

#endif  // FLOVER_KERNELS_CUDA_NCCL_COLLECTIVES_H_
