// What proposes speculative drafts from a model of its own: a draft model
// (engine/draft_model.h, --speculative=draft) or Qwen3.5's multi-token-
// prediction layer (engine/mtp_drafter.h, --speculative=mtp). The engine
// asks for each sequence's next tokens before a step and verifies them in
// its fused step like any draft, so what a drafter says changes how many
// tokens a step yields, never which. N-gram and grammar-forced drafts need
// no drafter (engine/speculation.h).
#ifndef FLOVER_ENGINE_DRAFTER_H_
#define FLOVER_ENGINE_DRAFTER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace flover {

class Drafter {
 public:
  virtual ~Drafter() = default;

  struct Ask {
    uint64_t id = 0;                   // the sequence (the engine's request id)
    absl::Span<const int32_t> tokens;  // all of its tokens; the last one sampled, not yet computed
    int max_tokens = 0;                // drafts wanted, >= 1
  };
  // The drafts for each ask, in order (up to max_tokens greedy tokens after
  // its tokens; none where the drafter cannot draft for it this step), in
  // steps of up to `max_rows` rows.
  virtual absl::StatusOr<std::vector<std::vector<int32_t>>> Propose(absl::Span<const Ask> asks, int max_rows) = 0;

  // After each step of the model: the rows sequence `id` computed from
  // position `pos` that stand (drafts refused are not among them), with the
  // model's final hidden rows of that step, [rows, hidden] (empty unless
  // the drafter asked the model to keep them), and its tokens now (the
  // token sampled after them included). A draft model needs none of it.
  virtual void Computed(uint64_t /*id*/, int32_t /*pos*/, int32_t /*rows*/, absl::Span<const float> /*hidden*/,
                        absl::Span<const int32_t> /*tokens*/) {}
  // After a step's Computed calls: the drafter's own work on them (the MTP
  // layer reads them in one fused step). A failure turns speculation off.
  virtual absl::Status StepDone() { return absl::OkStatus(); }

  // A sequence that finished: what the drafter holds for it goes.
  virtual void Forget(uint64_t id) = 0;

  // Whether drafting for a sequence with `tokens` that may still generate
  // `tokens_left` repays what the drafter has still to compute first.
  virtual bool Repays(uint64_t id, absl::Span<const int32_t> tokens, int tokens_left) const = 0;

  // The most rows one of its steps takes.
  virtual int max_rows() const = 0;
};

}  // namespace flover

#endif  // FLOVER_ENGINE_DRAFTER_H_
