// How the tensor-parallel ranks of one model talk, in two parts:
//
// - ControlChannel: host messages that keep ranks in step (rank 0's step
//   broadcast, a stop, bootstrapping ids such as NCCL's), and abort.
// - Collectives: the model's reductions over activations that live in the
//   backend's memory (Tensors with a dtype), enqueued in order with the
//   backend's ops. MPI implements them over host memory (the CPU backend); a
//   device implementation (NCCL) runs them on the backend's stream.
//
// Local is the single-rank case; Mpi runs over MPI between processes and
// nodes.
#ifndef FLOVER_ENGINE_COMM_COMMUNICATOR_H_
#define FLOVER_ENGINE_COMM_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/tensor.h"

namespace flover {

// Where this process sits. Every rank of the world is one tensor-parallel
// rank of the same model (no pipeline or data parallelism yet).
struct WorldConfig {
  int world_size = 1;
  int rank = 0;
  int tp_size = 1;
  int tp_rank = 0;
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

// Both parts over one group of processes.
class Communicator : public ControlChannel, public Collectives {
 public:
  const WorldConfig& world() const override = 0;
};

// tp = 1: every collective is the identity. Its GatherToLeader reads
// `local` from host memory, so it serves host-memory backends only (tp = 1
// never gathers).
class LocalCommunicator final : public Communicator {
 public:
  const WorldConfig& world() const override { return world_; }
  absl::Status Broadcast(void*, size_t, int) override { return absl::OkStatus(); }
  void Abort(int) override {}
  absl::Status AllReduceSum(const kernels::Tensor&) override { return absl::OkStatus(); }
  absl::Status GatherToLeader(const kernels::Tensor& local, std::vector<float>* out) override {
    const float* p = local.as<float>();
    out->assign(p, p + local.elements());
    return absl::OkStatus();
  }

 private:
  WorldConfig world_;
};

// Initializes MPI (thread level SERIALIZED: the engine thread makes the
// calls) and returns a communicator over MPI_COMM_WORLD with tp_size equal
// to the world size. Its collectives read and write host memory: they serve
// the CPU backend (f32 tensors). Fails with a clear error when `tp_size`
// does not match the launch (e.g. --tp=2 without mpirun -np 2).
absl::StatusOr<std::unique_ptr<Communicator>> CreateMpiCommunicator(int tp_size);

void FinalizeMpi();

}  // namespace flover

#endif  // FLOVER_ENGINE_COMM_COMMUNICATOR_H_
