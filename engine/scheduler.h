// The step scheduler: a pure function from (queue, active sequences, options,
// now) to the StepPlan of one token step. No model, no threads, no clock: the
// engine supplies the state and applies the plan, and tests drive it with
// tables of expected plans.
#ifndef FLOVER_ENGINE_SCHEDULER_H_
#define FLOVER_ENGINE_SCHEDULER_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace flover {

using RequestId = uint64_t;

enum class SchedulerPolicy {
  kFusion,      // temporal fusion: anyone may join at any step
  kDynamic,     // Triton-style: gather up to max_batch or wait batch_delay,
                // run that batch until all of it finishes; nobody joins
  kStatic,      // fixed batches of max_batch; a partial batch starts only
                // after static_flush, then runs to completion
  kSequential,  // one request at a time
};

absl::StatusOr<SchedulerPolicy> ParseSchedulerPolicy(absl::string_view name);
absl::string_view SchedulerPolicyName(SchedulerPolicy policy);

struct SchedulerOptions {
  SchedulerPolicy policy = SchedulerPolicy::kFusion;
  int max_batch = 32;                // KV slots = sequences in flight
  int max_tokens_per_step = 256;     // token budget of one forward
  bool kv_shuffle = true;            // keep live sequences in slots [0, n)
  absl::Duration batch_delay = absl::Milliseconds(10);  // kDynamic
  absl::Duration static_flush = absl::Seconds(1);       // kStatic
};

struct QueuedRequest {
  RequestId id = 0;
  int prompt_len = 0;
  absl::Time arrival;
};

// A sequence holding a KV slot. Tokens [0, computed) have their K/V in the
// slot; tokens [computed, known) are known (prompt, or the last sampled token)
// but not yet run through the model.
struct ActiveSequence {
  RequestId id = 0;
  int slot = 0;
  int computed = 0;
  int known = 0;
};

struct SlotMove {
  RequestId id = 0;
  int from = 0;
  int to = 0;
  int len = 0;  // filled positions to copy
};

// One sequence's part of the forward: `len` tokens starting at `pos`, i.e.
// its known tokens [pos, pos + len).
struct ScheduledSequence {
  RequestId id = 0;
  int slot = 0;
  int pos = 0;
  int len = 0;
};

struct StepPlan {
  std::vector<SlotMove> moves;            // apply before the forward, in order
  std::vector<RequestId> admitted;        // queue -> active, in queue order
  std::vector<int> admitted_slots;        // slot of each admitted request
  std::vector<ScheduledSequence> seqs;    // the ragged batch
  // With kv_shuffle off: free slots below the highest live slot. The dense
  // batch of a slot-indexed engine computes them too (masked), so the engine
  // runs one dummy row in each to model that cost.
  std::vector<int> padding_slots;
  bool empty() const { return seqs.empty(); }
};

// `queue` is in arrival order; `active` in any order, with distinct slots.
// Sequences that finished were removed from `active` by the caller.
StepPlan Schedule(const std::vector<QueuedRequest>& queue,
                  const std::vector<ActiveSequence>& active,
                  const SchedulerOptions& options, absl::Time now);

// Most rows a plan's forward can have: the token budget (no more than every
// slot's whole sequence) plus, with kv_shuffle off, one padding row per other
// slot. Every sequence and padding slot asks for one row of logits, so those
// are at most max_batch.
inline int MaxRowsPerStep(const SchedulerOptions& o, int max_seq_len) {
  const int64_t tokens = std::min<int64_t>(o.max_tokens_per_step, int64_t{o.max_batch} * max_seq_len);
  return static_cast<int>(tokens) + (o.kv_shuffle ? 0 : o.max_batch - 1);
}

// The moves that pack live slots into [0, n): each hole below n takes the
// highest live slot at or above n, so the fewest sequences move.
std::vector<SlotMove> CompactionMoves(const std::vector<ActiveSequence>& active);

}  // namespace flover

#endif  // FLOVER_ENGINE_SCHEDULER_H_
