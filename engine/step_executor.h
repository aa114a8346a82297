// One token step as every tensor-parallel rank runs it: one forward over the
// fused ragged batch, each sequence reading and writing its own KV blocks.
// Rank 0's engine and the other ranks' workers (tp_worker) set up and run
// steps through this one class, so they cannot drift apart.
#ifndef FLOVER_ENGINE_STEP_EXECUTOR_H_
#define FLOVER_ENGINE_STEP_EXECUTOR_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/collectives.h"
#include "model/causal_lm.h"
#include "model/forward_batch.h"
#include "model/kv_cache.h"

namespace flover {

// How big the KV cache is: a budget in bytes, or (0) a default — on a
// device that reports its free memory, that fraction of what is free once
// the model and its work space are there; elsewhere (the CPU)
// kDefaultCpuKvCacheBytes. A default never exceeds what `max_seqs`
// sequences of max_seq_len positions could fill.
struct KvCacheOptions {
  int64_t bytes = 0;
  double device_memory_fraction = 0.9;
  // Where every layer has a sliding window (KvCacheShape::window), a
  // sequence gives back the blocks wholly behind it, so it holds at most
  // those one window spans; false keeps every block to the end (for
  // measuring what that saves).
  bool free_behind_window = true;
};
inline constexpr int64_t kDefaultCpuKvCacheBytes = int64_t{4} << 30;

// Local blocks `seqs` sequences can need at once when each gives back those
// behind its `window` before a step: at most WindowBlocks + 1 each, and a
// step's `max_rows` rows beyond.
int LocalBlocksFor(int seqs, int window, int max_rows);

// What rank 0 sends every rank for one step.
struct StepInput {
  ForwardBatch batch;
};

// What a step gives back: the logits, or where every row decodes greedily
// only each row's best token (so a GPU sends back ids, not a vocabulary of
// floats per row).
enum class StepOutput { kLogits, kBestTokens };
struct StepResult {
  // kLogits: each sequence's last logit_rows rows' logits, [num_logit_rows,
  // V] in host memory.
  absl::Span<float> logits;
  // kBestTokens: each of those rows' best token (CausalLm::ForwardGreedy),
  // [num_logit_rows].
  absl::Span<const int32_t> best;
};

class StepExecutor {
 public:
  // Prepares the model for steps of up to `max_rows` rows and
  // `max_logit_rows` rows of logits (one per sequence, more while drafts are
  // verified), then creates the KV cache
  // (in the model's backend) for sequences of up to max_seq_len positions.
  // With tensor parallelism every rank takes rank 0's block count (a rank
  // with less room fails, naming both); `channel` may be null for one rank.
  // A model with recurrent layers gets `states_per_seq` state slots for
  // each of max_seqs sequences (2 where drafts are verified: the step
  // before them keeps its state) and `extra_states` more (prefix
  // checkpoints), within half the memory.
  static absl::StatusOr<std::unique_ptr<StepExecutor>> Create(CausalLm& model,
                                                              const KvCacheOptions& kv,
                                                              int max_seqs, int max_seq_len,
                                                              int max_rows, int max_logit_rows,
                                                              ControlChannel* channel, int states_per_seq = 1,
                                                              int extra_states = 0);

  // Runs the batch. Returns what `want` names, valid until the next Run
  // (empty on ranks > 0 and for an empty batch; other ranks run the same
  // collectives whatever rank 0 wants). InvalidArgument for a step that
  // does not fit the cache or the model; any other error (a device fault, a
  // failed collective) leaves the ranks out of step.
  absl::StatusOr<StepResult> Run(const StepInput& step, StepOutput want = StepOutput::kLogits);

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
