// Speculative decoding's draft model (--speculative=draft): a second model
// with the same vocabulary — the same GGUF file in native blocks drafting
// for an f32 or bf16 target, or a smaller member of the family — proposes
// each sequence's next tokens greedily, and the target verifies them in its
// fused step like any draft (engine.cc), so what the draft model says
// changes how many tokens a step yields, never which.
//
// It keeps its own paged KV cache (blocks of its own pool, no prefix
// sharing) and runs its steps fused across the sequences that draft, on
// the engine's thread, on rank 0 only. Each sequence's computed tokens are
// remembered, so a draft the target refused is rolled back by comparing
// tokens (no copies), and a sequence preempted by the target keeps its K/V
// here.
#ifndef FLOVER_ENGINE_DRAFT_MODEL_H_
#define FLOVER_ENGINE_DRAFT_MODEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/node_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/drafter.h"
#include "engine/kv_blocks.h"
#include "engine/step_executor.h"
#include "model/causal_lm.h"

namespace flover {

class DraftModel final : public Drafter {
 public:
  // For up to `max_seqs` sequences of up to `max_seq_len` positions, steps
  // of up to `max_rows` rows; a KV cache of `kv_bytes` (0: what those
  // sequences could fill, within the default budget). InvalidArgument for a
  // model with another vocabulary than `target`'s, or fewer positions than
  // max_seq_len.
  static absl::StatusOr<std::unique_ptr<DraftModel>> Create(CausalLm& model, const ModelInfo& target,
                                                            int max_seqs, int max_seq_len, int max_rows,
                                                            int64_t kv_bytes);

  // The drafts for each ask, in order: up to max_tokens greedy tokens after
  // its tokens; none for a sequence whose earlier tokens do not fit this
  // call's `max_rows` (it computes a part of them now and drafts a later
  // step) or this cache (it drafts nothing until blocks free up).
  absl::StatusOr<std::vector<std::vector<int32_t>>> Propose(absl::Span<const Ask> asks, int max_rows) override;

  // A sequence that finished: its blocks go back.
  void Forget(uint64_t id) override;

  // Whether drafting for a sequence repays the tokens (its, the last one
  // sampled) this cache has still to compute first: at most
  // kPromptPerToken of them per token the sequence may still generate
  // (reading a token costs about an eighth of drafting one; measured: the
  // last chat of a burst reading its 656-token prompt for its last few
  // dozen tokens cost 7%).
  static constexpr int kPromptPerToken = 8;
  bool Repays(uint64_t id, absl::Span<const int32_t> tokens, int tokens_left) const override;

  int max_rows() const override { return max_rows_; }
  const CausalLm& model() const { return model_; }

 private:
  struct Seq {
    std::vector<int32_t> computed;  // the tokens whose K/V are in `blocks`, in order
    std::vector<int32_t> blocks;
  };
  // How many of `computed` still stand for `tokens` (a non-empty sequence
  // whose last token is to be fed): the longest common prefix (a refused
  // draft, or anything else that changed, goes), short of that last token.
  static size_t Standing(const std::vector<int32_t>& computed, absl::Span<const int32_t> tokens);
  DraftModel(CausalLm& model, std::unique_ptr<StepExecutor> executor, int max_rows)
      : model_(model), executor_(std::move(executor)), max_rows_(max_rows),
        pool_(executor_->cache().shape().num_blocks, /*prefix_caching=*/false) {}

  CausalLm& model_;
  std::unique_ptr<StepExecutor> executor_;
  int max_rows_;
  KvBlockPool pool_;
  absl::node_hash_map<uint64_t, Seq> seqs_;  // stable addresses: Propose holds them
};

}  // namespace flover

#endif  // FLOVER_ENGINE_DRAFT_MODEL_H_
