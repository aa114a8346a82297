#include "engine/draft_model.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace flover {
namespace {

int BlocksFor(int positions) { return (positions + KvBlockPool::kBlockSize - 1) / KvBlockPool::kBlockSize; }

}  // namespace

absl::StatusOr<std::unique_ptr<DraftModel>> DraftModel::Create(CausalLm& model, const ModelInfo& target,
                                                               int max_seqs, int max_seq_len, int max_rows,
                                                               int64_t kv_bytes) {
  if (model.info().vocab_size != target.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("the draft model's vocabulary has ", model.info().vocab_size,
                                                   " tokens, the model's ", target.vocab_size));
  }
  if (model.info().max_positions < max_seq_len) {
    return absl::InvalidArgumentError(absl::StrCat("the draft model reaches ", model.info().max_positions,
                                                   " positions, fewer than max_seq_len ", max_seq_len));
  }
  if (max_rows < 1) return absl::InvalidArgumentError("the draft model's steps need at least one row");
  // Its steps roll back by position alone (the target's drafts it did not
  // take are written over), which recurrent state cannot.
  if (model.CacheShape(1, 1).state_layers > 0) {
    return absl::InvalidArgumentError("a draft model with recurrent layers (a hybrid model) is not supported; "
                                      "use an attention-only draft model or --speculative=ngram");
  }
  KvCacheOptions kv;
  kv.bytes = kv_bytes;
  auto executor = StepExecutor::Create(model, kv, max_seqs, max_seq_len, max_rows,
                                       std::min(max_rows, max_seqs), /*channel=*/nullptr);
  if (!executor.ok()) {
    return absl::Status(executor.status().code(),
                        absl::StrCat("the draft model: ", executor.status().message()));
  }
  return std::unique_ptr<DraftModel>(new DraftModel(model, std::move(*executor), max_rows));
}

void DraftModel::Forget(uint64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  pool_.Release(it->second.blocks);
  seqs_.erase(it);
}

size_t DraftModel::Standing(const std::vector<int32_t>& computed, absl::Span<const int32_t> tokens) {
  const size_t common =
      std::mismatch(computed.begin(), computed.end(), tokens.begin(), tokens.end()).first - computed.begin();
  return std::min(common, tokens.size() - 1);
}

bool DraftModel::Repays(uint64_t id, absl::Span<const int32_t> tokens, int tokens_left) const {
  if (tokens.empty()) return false;
  auto it = seqs_.find(id);
  const size_t standing = it == seqs_.end() ? 0 : Standing(it->second.computed, tokens);
  return static_cast<int64_t>(tokens.size() - standing) <= int64_t{kPromptPerToken} * tokens_left;
}

absl::StatusOr<std::vector<std::vector<int32_t>>> DraftModel::Propose(absl::Span<const Ask> asks, int max_rows) {
  std::vector<std::vector<int32_t>> drafts(asks.size());
  // What each ask feeds its first step: its tokens from the first one not
  // computed (or still the same) through the last, or a part of them.
  struct Run {
    size_t ask;
    Seq* seq;
    int pos;          // position of the first token fed
    int fed;          // tokens fed in the first step
    bool drafting;    // all its tokens fit: its first step's logits are draft 0
  };
  std::vector<Run> runs;
  int rows = std::min(max_rows, max_rows_);
  for (size_t i = 0; i < asks.size() && rows > 0; ++i) {
    const Ask& a = asks[i];
    if (a.tokens.empty() || a.max_tokens < 1) continue;
    Seq& s = seqs_[a.id];
    s.computed.resize(Standing(s.computed, a.tokens));
    const int pos = static_cast<int>(s.computed.size());
    const int rest = static_cast<int>(a.tokens.size()) - pos;
    const bool drafting = rest <= rows;
    const int fed = drafting ? rest : rows;
    // Blocks for what it computes: the tokens fed, then the drafts but the
    // last (whose K/V is not needed to draft it).
    const int reach = drafting ? pos + fed + a.max_tokens - 1 : pos + fed;
    const int need = BlocksFor(reach) - static_cast<int>(s.blocks.size());
    if (need > 0 && !pool_.Allocate(need, &s.blocks)) continue;  // no room: no drafts this time
    runs.push_back({i, &s, pos, fed, drafting});
    rows -= fed;
  }
  if (runs.empty()) return drafts;
  // First step: each sequence's tokens not yet computed (or a part).
  StepInput step;
  for (const Run& r : runs) {
    const Ask& a = asks[r.ask];
    step.batch.AddSequence(r.seq->blocks, r.pos, a.tokens.subspan(r.pos, r.fed));
  }
  // Drafts are greedy: each row's best token, picked where the logits are.
  auto ran = executor_->Run(step, StepOutput::kBestTokens);
  if (!ran.ok()) return ran.status();
  std::vector<Run> next;
  for (size_t j = 0; j < runs.size(); ++j) {
    const Run& r = runs[j];
    const Ask& a = asks[r.ask];
    r.seq->computed.insert(r.seq->computed.end(), a.tokens.begin() + r.pos, a.tokens.begin() + r.pos + r.fed);
    if (!r.drafting) continue;
    drafts[r.ask].push_back(ran->best[j]);
    if (a.max_tokens > 1) next.push_back(r);
  }
  // Then one token a step for those that want more, fused.
  while (!next.empty()) {
    step.batch.Clear();
    for (const Run& r : next) {
      step.batch.AddSequence(r.seq->blocks, static_cast<int>(r.seq->computed.size()),
                             absl::MakeConstSpan(&drafts[r.ask].back(), 1));
    }
    ran = executor_->Run(step, StepOutput::kBestTokens);
    if (!ran.ok()) return ran.status();
    std::vector<Run> more;
    for (size_t j = 0; j < next.size(); ++j) {
      const Run& r = next[j];
      r.seq->computed.push_back(drafts[r.ask].back());
      drafts[r.ask].push_back(ran->best[j]);
      if (static_cast<int>(drafts[r.ask].size()) < asks[r.ask].max_tokens) more.push_back(r);
    }
    next = std::move(more);
  }
  return drafts;
}

}  // namespace flover
