#include <mpi.h>

#include <algorithm>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "dist/communicator.h"

namespace flover {
namespace {

absl::Status Check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return absl::OkStatus();
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return absl::UnavailableError(absl::StrCat(what, " failed: ", std::string(msg, len)));
}

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(WorldConfig world) : world_(world) {}
  const WorldConfig& world() const override { return world_; }

  absl::Status AllReduceSum(const kernels::Tensor& data) override {
    if (data.dtype != kernels::DType::kF32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "MPI all-reduce takes f32 tensors, got ", kernels::DTypeName(data.dtype)));
    }
    return Check(MPI_Allreduce(MPI_IN_PLACE, data.data, static_cast<int>(data.elements()),
                               MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
                 "MPI_Allreduce");
  }

  absl::Status Broadcast(void* data, size_t bytes, int root) override {
    return Check(MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD),
                 "MPI_Bcast");
  }

  void Abort(int code) override { MPI_Abort(MPI_COMM_WORLD, code); }

  absl::Status GatherToLeader(const kernels::Tensor& local, std::vector<float>* out) override {
    if (local.dtype != kernels::DType::kF32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "MPI gather takes f32 tensors, got ", kernels::DTypeName(local.dtype)));
    }
    const int n = static_cast<int>(local.elements());
    std::vector<int> counts(world_.world_size), displs(world_.world_size);
    if (auto st = Check(MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD),
                        "MPI_Gather");
        !st.ok()) {
      return st;
    }
    int total = 0;
    if (world_.is_leader()) {
      for (int r = 0; r < world_.world_size; ++r) {
        displs[r] = total;
        total += counts[r];
      }
      out->resize(total);
    }
    return Check(MPI_Gatherv(local.data, n, MPI_FLOAT, world_.is_leader() ? out->data() : nullptr,
                             counts.data(), displs.data(), MPI_FLOAT, 0, MPI_COMM_WORLD),
                 "MPI_Gatherv");
  }

 private:
  WorldConfig world_;
};

// An integer from the environment, or `fallback` where it is unset or not one.
int EnvInt(const char* name, int fallback) {
  const char* value = std::getenv(name);
  int parsed = 0;
  return value != nullptr && absl::SimpleAtoi(value, &parsed) ? parsed : fallback;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateMpiCommunicator(int tp_size) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
      return absl::UnavailableError("MPI_Init_thread failed (launch with mpirun)");
    }
    if (provided < MPI_THREAD_SERIALIZED) {
      return absl::UnavailableError("this MPI does not support MPI_THREAD_SERIALIZED");
    }
  }
  // Errors come back as codes (turned into statuses) instead of aborting.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  WorldConfig w;
  MPI_Comm_size(MPI_COMM_WORLD, &w.world_size);
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
  if (w.world_size != tp_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tp=", tp_size, " needs exactly ", tp_size, " MPI ranks, but the job has ",
        w.world_size, w.world_size == 1 ? " (launch with mpirun -np " : " (use mpirun -np ",
        tp_size, ")"));
  }
  w.tp_size = tp_size;
  w.tp_rank = w.rank;
  // Open MPI's launcher says where it put this process on its node.
  w.local_rank = EnvInt("OMPI_COMM_WORLD_LOCAL_RANK", 0);
  w.local_size = std::max(1, EnvInt("OMPI_COMM_WORLD_LOCAL_SIZE", 1));
  return std::unique_ptr<Communicator>(new MpiCommunicator(w));
}

void FinalizeMpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace flover
