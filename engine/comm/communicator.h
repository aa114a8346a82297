// Collectives between the tensor-parallel ranks of one model. Local is the
// single-rank case; Mpi runs over MPI between processes and nodes (and is
// what bootstraps a future NCCL communicator's unique id). The interface is
// host-memory and blocking; a device communicator adds a stream to the same
// calls.
#ifndef FLOVER_ENGINE_COMM_COMMUNICATOR_H_
#define FLOVER_ENGINE_COMM_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"

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

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual const WorldConfig& world() const = 0;
  // data: [count], summed element-wise over all ranks, in place.
  virtual absl::Status AllReduceSum(float* data, size_t count) = 0;
  // bytes from rank `root` to every rank, in place.
  virtual absl::Status Broadcast(void* data, size_t bytes, int root) = 0;
  // Each rank sends `local` ([count_r] on rank r); rank 0 receives all of
  // them concatenated in rank order into `out` (resized). Others: out unused.
  virtual absl::Status GatherToLeader(const float* local, size_t count,
                                      std::vector<float>* out) = 0;
};

// tp = 1: every collective is the identity.
class LocalCommunicator final : public Communicator {
 public:
  const WorldConfig& world() const override { return world_; }
  absl::Status AllReduceSum(float*, size_t) override { return absl::OkStatus(); }
  absl::Status Broadcast(void*, size_t, int) override { return absl::OkStatus(); }
  absl::Status GatherToLeader(const float* local, size_t count, std::vector<float>* out) override {
    out->assign(local, local + count);
    return absl::OkStatus();
  }

 private:
  WorldConfig world_;
};

// Initializes MPI (thread level SERIALIZED: the engine thread makes the
// calls) and returns a communicator over MPI_COMM_WORLD with tp_size equal
// to the world size. Fails with a clear error when `tp_size` does not match
// the launch (e.g. --tp=2 without mpirun -np 2).
absl::StatusOr<std::unique_ptr<Communicator>> CreateMpiCommunicator(int tp_size);

// Ends the MPI job on every rank with `code` (used when a rank fails, so no
// peer is left waiting in a collective).
void AbortMpiJob(int code);
void FinalizeMpi();

}  // namespace flover

#endif  // FLOVER_ENGINE_COMM_COMMUNICATOR_H_
