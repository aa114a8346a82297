// What a backend and a model need from the group of tensor-parallel ranks
// they run in, in two parts:
//
// - ControlChannel: host messages that keep ranks in step (rank 0's step
//   broadcast, a stop, bootstrapping ids such as NCCL's), and abort.
// - Collectives: the model's reductions over activations that live in the
//   backend's memory (Tensors with a dtype), enqueued in order with the
//   backend's ops. MPI implements them over host memory (the CPU backend,
//   dist/); a device implementation (NCCL, in the CUDA module) runs them on
//   the backend's stream.
//
// The interfaces live here, with the tensors they carry, so the dependency
// points one way: dist/ implements them over MPI; kernels/ never includes
// dist/.
#ifndef FLOVER_KERNELS_COLLECTIVES_H_
#define FLOVER_KERNELS_COLLECTIVES_H_

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "kernels/tensor.h"

namespace flover {

// Where this process sits. Every rank of the world is one tensor-parallel
// rank of the same model (no pipeline or data parallelism yet).
struct WorldConfig {
  int world_size = 1;
  int rank = 0;
  int tp_size = 1;
  int tp_rank = 0;
  // This process among the ranks the launcher placed on its node (mpirun's
  // node-local rank and count): rank r of a node takes GPU r, and the node's
  // cores are shared by local_size ranks.
  int local_rank = 0;
  int local_size = 1;
  bool is_leader() const { return rank == 0; }
};

class ControlChannel {
 public:
  virtual ~ControlChannel() = default;
  virtual const WorldConfig& world() const = 0;
  // `bytes` of host memory from rank `root` to every rank, in place.
  virtual absl::Status Broadcast(void* data, size_t bytes, int root) = 0;
  // Ends every rank of the job with `code`, so no peer is left waiting in a
  // collective after this one failed. Does not return for more than one
  // rank; the single-rank channel has no peers and returns.
  virtual void Abort(int code) = 0;
};

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual const WorldConfig& world() const = 0;
  // data: summed element-wise over all ranks, in place.
  virtual absl::Status AllReduceSum(const kernels::Tensor& data) = 0;
  // Each rank sends `local` (f32, [rows, cols_r] on rank r); rank 0 receives
  // all of them concatenated in rank order into host memory `out` (resized).
  // Others: out unused.
  virtual absl::Status GatherToLeader(const kernels::Tensor& local, std::vector<float>* out) = 0;
};

}  // namespace flover

#endif  // FLOVER_KERNELS_COLLECTIVES_H_
