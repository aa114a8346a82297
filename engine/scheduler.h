// The step scheduler: a pure function from (queue, running sequences, free
// KV blocks, options, now) to the StepPlan of one token step. No model, no
// threads, no clock: the engine supplies the state (counts from its block
// pool) and applies the plan, and tests drive it with tables of expected
// plans.
#ifndef FLOVER_ENGINE_SCHEDULER_H_
#define FLOVER_ENGINE_SCHEDULER_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

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
  int max_batch = 128;               // most sequences running at once
  int max_tokens_per_step = 256;     // token budget of one forward
  int block_size = 32;               // positions per KV block
  // > 0: every layer attends only the last `window` positions, and a
  // sequence gives back the blocks wholly behind its next row's window
  // before each step (the engine sets it from the cache): a prompt longer
  // than the free blocks then starts with what they hold.
  int window = 0;
  // > 0: the local layers keep blocks of their own (a second pool, its
  // free blocks passed to Schedule) and give back those behind this window:
  // a sequence takes as many of each as its block list grows by, and a
  // prompt is admitted with the local blocks one window spans.
  int local_window = 0;
  absl::Duration batch_delay = absl::Milliseconds(10);  // kDynamic
  absl::Duration static_flush = absl::Seconds(1);       // kStatic
};

// Positions [begin, end) of a prompt that one chunk computes whole: its
// rows attend to each other both ways (a Gemma 3 image), so a chunk may
// start inside it (after a prefix-cache hit) but not end inside it.
struct WholeSpan {
  int begin = 0, end = 0;
};

// A request waiting to run: new, or preempted (its tokens then include what
// it generated, and it resumes by computing them again).
struct QueuedRequest {
  RequestId id = 0;
  int known = 0;  // tokens to compute before it samples
  absl::Time arrival;
  int cached = 0;       // leading tokens whose K/V the prefix cache holds (whole blocks, < known)
  int cached_idle = 0;  // blocks of those that nobody holds now (taking them uses free blocks)
  int local_cached_idle = 0;  // with local blocks: the same of the local blocks it takes
  // > 0: its first chunk ends there, at the latest (a position where its
  // recurrent state is kept as a prefix checkpoint).
  int chunk_end = 0;
  absl::Span<const WholeSpan> whole;  // in order and apart; the caller keeps them
};

// A running sequence. Tokens [0, computed) have their K/V in its `blocks`
// KV blocks; tokens [computed, known) are known (prompt, or the last
// sampled token) but not yet run through the model. `active` is in
// admission order, oldest first.
struct ActiveSequence {
  RequestId id = 0;
  int computed = 0;
  int known = 0;
  int blocks = 0;     // KV blocks it holds
  int exclusive = 0;  // of those, the ones no other sequence holds
  int drafts = 0;     // of the known tokens, the last ones are drafts to verify (in decode)
  int local_exclusive = 0;  // with local blocks: its local blocks no other sequence holds
  int chunk_end = 0;        // > 0 (past computed): its chunk ends there at the latest (a checkpoint)
  absl::Span<const WholeSpan> whole;  // as QueuedRequest's
};

// One sequence's part of the forward: `len` tokens starting at `pos`, i.e.
// its known tokens [pos, pos + len). The engine gives it blocks up to
// ceil((pos + len) / block_size) first.
struct ScheduledSequence {
  RequestId id = 0;
  int pos = 0;
  int len = 0;
};

struct StepPlan {
  // Running sequences whose blocks go back to the pool (newest first) so
  // older ones can grow; they return to the front of the queue and compute
  // their tokens again when readmitted. Applied first.
  std::vector<RequestId> preempted;
  std::vector<RequestId> admitted;      // queue -> running, in queue order
  std::vector<ScheduledSequence> seqs;  // the ragged batch
  bool empty() const { return seqs.empty(); }
};

// `queue` is in arrival order (preempted requests first); `active` in
// admission order. `free_blocks`: blocks the pool can hand out now (idle
// cached ones included). Sequences that finished were removed from
// `active` by the caller. A running sequence's `blocks` count its whole
// block list, given-back entries included (they cover positions too).
//
// Running sequences go first (decodes, with their drafts, then prompt
// chunks, each oldest first), each as far as the token budget and free blocks allow, a chunk
// cut back to the start of a whole span it would end inside (or, starting inside one, taking
// the rest of it, before the decodes where the budget holds it only without them); one that
// cannot compute a single token (the rest of such a span) preempts the newest running sequence not
// yet scheduled (itself, if it is the newest). Then, in a step that
// preempted nothing, queued requests are admitted in order while the
// policy, max_batch, the budget, free blocks (and free state slots) allow, from their cached
// prefix on: each needs blocks for all its known tokens, or with a window
// only for the most one window spans (WindowBlocks), its first chunk then
// no longer than the free blocks hold.
//
// With local blocks (options.local_window > 0), `free_local_blocks` is the
// local pool's: every block a sequence's list grows by is taken from both.
inline constexpr int kNoLocalPool = -1;
// With recurrent state (hybrid models), `free_state_slots` is how many
// more sequences may run: each admitted one takes a slot (running ones
// hold theirs; a preempted one gives its back). kNoStatePool: no limit.
inline constexpr int kNoStatePool = -1;
StepPlan Schedule(const std::vector<QueuedRequest>& queue,
                  const std::vector<ActiveSequence>& active, int free_blocks,
                  const SchedulerOptions& options, absl::Time now, int free_local_blocks = kNoLocalPool,
                  int free_state_slots = kNoStatePool);

// The most blocks `window` consecutive positions span: what a sequence
// holds at most between steps where blocks behind its window are given
// back, with the block its next position opens.
inline int WindowBlocks(int window, int block_size) {
  return (window + 2 * block_size - 2) / block_size;
}

// Most rows a plan's forward can have: the token budget, no more than every
// running sequence's whole context. Every sequence asks for one row of
// logits, so those are at most max_batch.
inline int MaxRowsPerStep(const SchedulerOptions& o, int max_seq_len) {
  return static_cast<int>(std::min<int64_t>(o.max_tokens_per_step, int64_t{o.max_batch} * max_seq_len));
}

}  // namespace flover

#endif  // FLOVER_ENGINE_SCHEDULER_H_
