// Keeps tensor-parallel ranks in step: rank 0's engine broadcasts each step
// (the ragged batch: tokens, positions, block tables, logit rows) over the control channel before running
// it, and every other rank runs the same step on its shard through the same
// StepExecutor, so all ranks agree on the batch by message, not by running
// in lockstep by chance.
#ifndef FLOVER_ENGINE_TP_WORKER_H_
#define FLOVER_ENGINE_TP_WORKER_H_

#include "absl/status/status.h"
#include "kernels/collectives.h"
#include "engine/step_executor.h"

namespace flover {

// Rank 0: sends one step to the other ranks.
absl::Status BroadcastStep(ControlChannel& channel, const StepInput& step);
// Rank 0: tells the other ranks to return from RunTensorParallelWorker.
absl::Status BroadcastStop(ControlChannel& channel);

// Ranks > 0: receives and runs steps (discarding logits) until rank 0
// broadcasts a stop. An error (a failed collective, a device fault, a
// malformed message) is returned; the caller should end the job. A step the
// executor refuses as invalid is skipped, as rank 0 skips it.
absl::Status RunTensorParallelWorker(StepExecutor& executor, ControlChannel& channel);

}  // namespace flover

#endif  // FLOVER_ENGINE_TP_WORKER_H_
