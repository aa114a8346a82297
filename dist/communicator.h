// How the tensor-parallel ranks of one model talk: a Communicator is both
// parts of kernels/collectives.h (ControlChannel and Collectives) over one
// group of processes. Local is the single-rank case; Mpi runs over MPI
// between processes and nodes, and reads where mpirun placed this process.
#ifndef FLOVER_ENGINE_COMM_COMMUNICATOR_H_
#define FLOVER_ENGINE_COMM_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/collectives.h"

namespace flover {

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
