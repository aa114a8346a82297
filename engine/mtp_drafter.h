// Qwen3.5's multi-token-prediction layer as a drafter (--speculative=mtp).
// The checkpoint ships one extra decoder layer trained to predict the token
// after next: from a row of the model's final hidden state h_p and the token
// t_{p+1} it gives logits for t_{p+2} (model/decoder: DecoderSpec::
// mtp_input). A draft is its greedy token; the next draft feeds the layer's
// own output row back in place of the model's, as llama.cpp's draft-mtp
// does. The engine verifies every draft in its fused step, so outputs are
// those without speculation.
//
// The layer attends over the pairs before it, so it keeps a KV cache of
// its own (one attention layer; blocks of its own pool) holding, per
// sequence, the pairs (h_p, t_{p+1}) of every position the model computed
// that stands: after each step the engine hands over the model's hidden
// rows (Drafter::Computed) and the drafter reads them in one fused step of
// its own (when the sequence drafts next, or at the step's end where a
// prompt's chunk piled them up), so a draft costs one layer and the head
// (the head's read, as dear as the model's own, is paid only by steps that
// draft). Drafts past
// those pairs are written beyond them and overwritten by the next step's.
// A prefix the model did not compute (a prefix-cache hit) has no hidden
// rows: the layer's context then starts after it (rotary attention cannot
// tell the shift). Everything runs on rank 0 on the model's backend.
#ifndef FLOVER_ENGINE_MTP_DRAFTER_H_
#define FLOVER_ENGINE_MTP_DRAFTER_H_

#include <cstdint>
#include <functional>
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

class MtpDrafter final : public Drafter {
 public:
  // `mtp` is `model`'s layer (LoadedModel::InstantiateMtp), both outliving
  // the drafter; `model` is asked to keep its final hidden rows (call this
  // before the model's own steps are prepared). For up to `max_seqs`
  // sequences of up to `max_seq_len` positions, steps of up to `max_rows`
  // rows, a KV cache of `kv_bytes` (0: what those sequences could fill,
  // within the default budget).
  static absl::StatusOr<std::unique_ptr<MtpDrafter>> Create(CausalLm& mtp, CausalLm& model, int max_seqs,
                                                            int max_seq_len, int max_rows, int64_t kv_bytes);

  // Drafts for the asks whose pairs are all at hand (the last sampled
  // token's included): their unread pairs read in one fused step, giving
  // the layer's first greedy token, then up to max_tokens - 1 more, one
  // fused step each.
  absl::StatusOr<std::vector<std::vector<int32_t>>> Propose(absl::Span<const Ask> asks, int max_rows) override;
  void Computed(uint64_t id, int32_t pos, int32_t rows, absl::Span<const float> hidden,
                absl::Span<const int32_t> tokens) override;
  absl::Status StepDone() override;
  void Forget(uint64_t id) override;
  // Whether the sequence's pairs are all at hand (through its last sampled
  // token), so that Propose drafts for it.
  bool Repays(uint64_t id, absl::Span<const int32_t> tokens, int tokens_left) const override;
  int max_rows() const override { return max_rows_; }

 private:
  struct Seq {
    std::vector<int32_t> blocks;
    int32_t base = 0;      // the position the layer's cache starts at (its position 0)
    int32_t standing = 0;  // pairs in the cache: positions base .. base + standing - 1
    // Pairs not yet read, from base + standing on: their tokens and the
    // model's hidden rows.
    std::vector<int32_t> pending_tokens;
    std::vector<float> pending_hidden;
    // After the last pair read: the layer's greedy token (the first draft,
    // for a sequence of base + standing + 1 tokens) and its output row,
    // which chains the next draft; -1: none.
    int32_t next = -1;
    std::vector<float> chain;
  };
  MtpDrafter(CausalLm& mtp, std::unique_ptr<StepExecutor> executor, int max_rows)
      : mtp_(mtp), executor_(std::move(executor)), max_rows_(max_rows), hidden_(mtp.info().hidden),
        pool_(executor_->cache().shape().num_blocks, /*prefix_caching=*/false) {}
  // Blocks for the layer's positions [0, positions) of `s`; false when the
  // pool has no room.
  bool Reserve(Seq& s, int positions);
  // Reads the pending pairs of the sequences `which` picks, fused; each one
  // left with none gets its first draft and the row that chains it.
  absl::Status ReadPairs(const std::function<bool(const Seq&)>& which);
  // Pending pairs read at a step's end rather than at the next drafts.
  static constexpr size_t kReadAtOnce = 64;

  CausalLm& mtp_;
  std::unique_ptr<StepExecutor> executor_;
  int max_rows_, hidden_;
  KvBlockPool pool_;
  absl::node_hash_map<uint64_t, Seq> seqs_;  // stable addresses: steps hold them
};

}  // namespace flover

#endif  // FLOVER_ENGINE_MTP_DRAFTER_H_
