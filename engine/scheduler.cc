#include "engine/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace flover {
namespace {

// How many queued requests the policy lets in this step.
int AdmissionLimit(const std::vector<QueuedRequest>& queue, int active, int free_slots,
                   const SchedulerOptions& o, absl::Time now) {
  if (queue.empty() || free_slots == 0) return 0;
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

std::vector<SlotMove> CompactionMoves(const std::vector<ActiveSequence>& active) {
  const int n = static_cast<int>(active.size());
  std::vector<bool> occupied(n, false);
  std::vector<const ActiveSequence*> above;  // live slots >= n
  for (const ActiveSequence& a : active) {
    if (a.slot < n) {
      occupied[a.slot] = true;
    } else {
      above.push_back(&a);
    }
  }
  std::sort(above.begin(), above.end(),
            [](const ActiveSequence* a, const ActiveSequence* b) { return a->slot > b->slot; });
  std::vector<SlotMove> moves;
  size_t next = 0;
  for (int hole = 0; hole < n; ++hole) {
    if (occupied[hole]) continue;
    const ActiveSequence* a = above[next++];
    moves.push_back({a->id, a->slot, hole, a->computed});
  }
  return moves;
}

StepPlan Schedule(const std::vector<QueuedRequest>& queue,
                  const std::vector<ActiveSequence>& active, const SchedulerOptions& o,
                  absl::Time now) {
  StepPlan plan;
  if (o.kv_shuffle) plan.moves = CompactionMoves(active);

  // Slots after this step's moves.
  std::vector<bool> used(o.max_batch, false);
  std::vector<ActiveSequence> live = active;
  for (ActiveSequence& a : live) {
    for (const SlotMove& m : plan.moves) {
      if (m.id == a.id) a.slot = m.to;
    }
    used[a.slot] = true;
  }

  // Running sequences first: decodes take one token each, then unfinished
  // prompts continue in chunks, oldest slot first.
  int budget = o.max_tokens_per_step;
  std::sort(live.begin(), live.end(), [](const ActiveSequence& a, const ActiveSequence& b) {
    const bool da = a.known - a.computed == 1, db = b.known - b.computed == 1;
    return da != db ? da : a.slot < b.slot;
  });
  for (const ActiveSequence& a : live) {
    const int want = a.known - a.computed;
    const int len = std::min(want, budget);
    if (len <= 0) continue;
    plan.seqs.push_back({a.id, a.slot, a.computed, len});
    budget -= len;
  }

  // Then new requests, as many as the policy and free slots allow. Fusion
  // admits only while there is budget to start their prompts; a batching
  // policy admits its whole batch at once (nobody joins it later), and
  // prompts the budget cannot cover yet continue in the next steps.
  const int free_slots = o.max_batch - static_cast<int>(active.size());
  const int limit = AdmissionLimit(queue, static_cast<int>(active.size()), free_slots, o, now);
  const bool whole_batch = o.policy != SchedulerPolicy::kFusion;
  for (int i = 0; i < limit && (budget > 0 || whole_batch); ++i) {
    const QueuedRequest& q = queue[i];
    const int slot = static_cast<int>(std::find(used.begin(), used.end(), false) - used.begin());
    used[slot] = true;
    plan.admitted.push_back(q.id);
    plan.admitted_slots.push_back(slot);
    const int len = std::min(q.prompt_len, budget);
    if (len > 0) {
      plan.seqs.push_back({q.id, slot, 0, len});
      budget -= len;
    }
  }

  if (!o.kv_shuffle) {
    int highest = -1;
    for (int s = 0; s < o.max_batch; ++s) {
      if (used[s]) highest = s;
    }
    for (int s = 0; s < highest; ++s) {
      if (!used[s]) plan.padding_slots.push_back(s);
    }
  }
  return plan;
}

}  // namespace flover
