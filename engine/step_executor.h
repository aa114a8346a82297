// One token step as every tensor-parallel rank runs it: the plan's slot moves
// (the memory shuffle), then one forward over the fused ragged batch. Rank 0's
// engine and the other ranks' workers (tp_worker) set up and run steps through
// this one class, so they cannot drift apart.
#ifndef FLOVER_ENGINE_STEP_EXECUTOR_H_
#define FLOVER_ENGINE_STEP_EXECUTOR_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/causal_lm.h"
#include "model/forward_batch.h"
#include "model/kv_cache.h"
#include "engine/scheduler.h"

namespace flover {

// What rank 0 sends every rank for one step (SlotMove ids are not sent).
struct StepInput {
  std::vector<SlotMove> moves;  // applied first, in order
  ForwardBatch batch;           // may have no sequences: a step of moves only
};

class StepExecutor {
 public:
  // Creates the KV cache (`slots` x `max_seq_len` positions, in the model's
  // backend) and prepares the model for steps of up to `max_rows` rows, each
  // sequence asking for one row of logits.
  static absl::StatusOr<std::unique_ptr<StepExecutor>> Create(CausalLm& model, int slots,
                                                              int max_seq_len, int max_rows);

  // Applies the moves, then runs the batch. Returns the logits of each
  // sequence's last row, [num_seqs, V] in host memory, valid until the next
  // Run (empty on ranks > 0 and for a step of moves only). InvalidArgument
  // for a step that does not fit the cache or the model; any other error
  // (a device fault, a failed collective) leaves the ranks out of step.
  absl::StatusOr<absl::Span<float>> Run(const StepInput& step);

  CausalLm& model() const { return model_; }
  const KvCache& cache() const { return *cache_; }

 private:
  StepExecutor(CausalLm& model, std::unique_ptr<KvCache> cache)
      : model_(model), cache_(std::move(cache)) {}

  CausalLm& model_;
  std::unique_ptr<KvCache> cache_;
};

}  // namespace flover

#endif  // FLOVER_ENGINE_STEP_EXECUTOR_H_
