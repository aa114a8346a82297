#include "engine/scheduler.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"

namespace flover {
namespace {

int BlocksFor(int positions, int block_size) { return (positions + block_size - 1) / block_size; }

// `len` tokens from `start`, cut back so that the chunk does not end
// inside a whole span: to the span's start where that is past `start`,
// else to none.
int FitWhole(int start, int len, absl::Span<const WholeSpan> whole) {
  for (const WholeSpan& w : whole) {
    if (w.begin < start + len && start + len < w.end) return w.begin > start ? w.begin - start : 0;
  }
  return len;
}

// The fewest tokens a chunk from `start` may have: one, or the rest of
// the whole span it starts inside.
int LeastChunk(int start, absl::Span<const WholeSpan> whole) {
  for (const WholeSpan& w : whole) {
    if (w.begin <= start && start + 1 < w.end) return w.end - start;
  }
  return 1;
}

// How many queued requests the policy lets in this step.
int AdmissionLimit(const std::vector<QueuedRequest>& queue, int active, int free_slots,
                   const SchedulerOptions& o, absl::Time now) {
  if (queue.empty() || free_slots <= 0) return 0;
  const int q = static_cast<int>(queue.size());
  switch (o.policy) {
    case SchedulerPolicy::kFusion:
      return std::min(q, free_slots);
    case SchedulerPolicy::kSequential:
      return active == 0 ? 1 : 0;
    case SchedulerPolicy::kDynamic:
      if (active > 0) return 0;
      if (q >= o.max_batch || now - queue.front().arrival >= o.batch_delay) {
        return std::min({q, o.max_batch, free_slots});
      }
      return 0;
    case SchedulerPolicy::kStatic:
      if (active > 0) return 0;
      if (q >= o.max_batch || now - queue.front().arrival >= o.static_flush) {
        return std::min({q, o.max_batch, free_slots});
      }
      return 0;
  }
  return 0;
}

}  // namespace

absl::StatusOr<SchedulerPolicy> ParseSchedulerPolicy(absl::string_view name) {
  for (SchedulerPolicy p : {SchedulerPolicy::kFusion, SchedulerPolicy::kDynamic,
                            SchedulerPolicy::kStatic, SchedulerPolicy::kSequential}) {
    if (name == SchedulerPolicyName(p)) return p;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown scheduler \"", name, "\" (fusion, dynamic, static, sequential)"));
}

absl::string_view SchedulerPolicyName(SchedulerPolicy policy) {
  switch (policy) {
    case SchedulerPolicy::kFusion: return "fusion";
    case SchedulerPolicy::kDynamic: return "dynamic";
    case SchedulerPolicy::kStatic: return "static";
    case SchedulerPolicy::kSequential: return "sequential";
  }
  return "?";
}

StepPlan Schedule(const std::vector<QueuedRequest>& queue,
                  const std::vector<ActiveSequence>& active, int free_blocks,
                  const SchedulerOptions& o, absl::Time now, int free_local_blocks, int free_state_slots) {
  StepPlan plan;
  const int B = o.block_size;
  const int n = static_cast<int>(active.size());
  int budget = o.max_tokens_per_step;
  int free = free_blocks;
  // Without local blocks, no bound from them.
  const bool local = o.local_window > 0 && free_local_blocks != kNoLocalPool;
  int free_local = local ? free_local_blocks : std::numeric_limits<int>::max() / 2;

  // Running sequences first: decodes take one token each (and their
  // drafts), then unfinished prompts continue in chunks, each group oldest
  // first.
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  auto decoding = [&](int i) { return active[i].known - active[i].drafts - active[i].computed == 1; };
  const auto prompts = std::stable_partition(order.begin(), order.end(), decoding);
  // A prompt whose next chunk must take the rest of a whole span that the
  // budget left after the decodes cannot hold goes first (the oldest such):
  // decodes, late by a step, never starve it.
  // It takes just that span then, leaving the rest to the decodes.
  int decode_rows = 0, first_span = -1;
  for (auto it = order.begin(); it != prompts; ++it) decode_rows += active[*it].known - active[*it].computed;
  for (auto it = prompts; it != order.end(); ++it) {
    const int least = LeastChunk(active[*it].computed, active[*it].whole);
    if (least > 1 && least > budget - decode_rows) {
      first_span = *it;
      std::rotate(order.begin(), it, it + 1);
      break;
    }
  }
  std::vector<bool> scheduled(n, false), preempted(n, false);
  for (int i : order) {
    if (preempted[i]) continue;
    const ActiveSequence& a = active[i];
    int want = std::min(a.known - a.computed, budget);
    if (a.chunk_end > a.computed) want = std::min(want, a.chunk_end - a.computed);
    want = FitWhole(a.computed, want, a.whole);
    if (i == first_span) want = std::min(want, LeastChunk(a.computed, a.whole));
    if (want <= 0) continue;
    // Positions its blocks and the free ones leave it; while fewer than
    // its least chunk, the newest sequence not yet scheduled gives its
    // blocks back.
    const int least = LeastChunk(a.computed, a.whole);
    int room = (a.blocks + std::min(free, free_local)) * B - a.computed;
    while (room < least) {
      int victim = n - 1;
      while (scheduled[victim] || preempted[victim]) --victim;  // i itself qualifies
      preempted[victim] = true;
      plan.preempted.push_back(active[victim].id);
      free += active[victim].exclusive;
      free_local += active[victim].local_exclusive;
      if (victim == i) break;
      room = (a.blocks + std::min(free, free_local)) * B - a.computed;
    }
    if (preempted[i]) continue;
    const int len = FitWhole(a.computed, std::min(want, room), a.whole);
    const int taken = std::max(0, BlocksFor(a.computed + len, B) - a.blocks);
    free -= taken;
    free_local -= taken;
    plan.seqs.push_back({a.id, a.computed, len});
    scheduled[i] = true;
    budget -= len;
  }
  if (!plan.preempted.empty()) return plan;  // memory is short: nobody new

  // Then new requests, as many as the policy, max_batch and free blocks
  // allow, in order: one whose known tokens do not all fit in the free
  // blocks waits, and so do those behind it. Fusion admits only while there
  // is budget to start their prompts; a batching policy admits its whole
  // batch at once (nobody joins it later), and prompts the budget cannot
  // cover yet continue in the next steps.
  // A sequence of a model with recurrent state runs in a state slot of its own.
  const int slots = free_state_slots == kNoStatePool ? o.max_batch - n : std::min(o.max_batch - n, free_state_slots);
  const int limit = AdmissionLimit(queue, n, slots, o, now);
  const bool whole_batch = o.policy != SchedulerPolicy::kFusion;
  for (int i = 0; i < limit && (budget > 0 || whole_batch); ++i) {
    const QueuedRequest& q = queue[i];
    const int held = q.cached / B;  // blocks it takes from the prefix cache
    const int avail = free - q.cached_idle;
    const int avail_local = free_local - (local ? q.local_cached_idle : 0);
    const int need = BlocksFor(q.known, B) - held;
    if ((o.window > 0 ? std::min(need, WindowBlocks(o.window, B)) : need) > avail) break;
    if (local && std::min(need, WindowBlocks(o.local_window, B)) > avail_local) break;
    // Its first chunk within the blocks it holds and the free ones (all its
    // tokens, unless a window let it in with fewer).
    int len = std::min({q.known - q.cached, budget, (held + std::min(avail, avail_local)) * B - q.cached});
    if (q.chunk_end > q.cached) len = std::min(len, q.chunk_end - q.cached);
    len = FitWhole(q.cached, len, q.whole);
    const int taken = len > 0 ? BlocksFor(q.cached + len, B) - held : 0;
    free = avail - taken;
    free_local = avail_local - taken;
    plan.admitted.push_back(q.id);
    if (len > 0) {
      plan.seqs.push_back({q.id, q.cached, len});
      budget -= len;
    }
  }
  return plan;
}

}  // namespace flover
