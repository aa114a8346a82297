// Keeps tensor-parallel ranks in step: rank 0's engine broadcasts each step
// (slot moves and the ragged batch) before running it, and every other rank
// runs the same step on its shard, so all ranks agree on the batch by
// message, not by running in lockstep by chance.
#ifndef FLOVER_ENGINE_TP_WORKER_H_
#define FLOVER_ENGINE_TP_WORKER_H_

#include <vector>

#include "absl/status/status.h"
#include "engine/comm/communicator.h"
#include "engine/gpt_model.h"
#include "engine/kv_cache.h"
#include "engine/scheduler.h"

namespace flover {

// Rank 0: sends one step to the other ranks.
absl::Status BroadcastStep(Communicator& comm, const std::vector<SlotMove>& moves,
                           const ForwardBatch& batch);
// Rank 0: tells the other ranks to return from RunTensorParallelWorker.
absl::Status BroadcastStop(Communicator& comm);

// Ranks > 0: receives and runs steps (moves, then the forward, discarding
// logits) on `cache` until rank 0 broadcasts a stop. An error (a failed
// collective, an invalid step) is returned; the caller should end the job.
absl::Status RunTensorParallelWorker(GptModel& model, KvCache& cache, Communicator& comm);

}  // namespace flover

#endif  // FLOVER_ENGINE_TP_WORKER_H_
