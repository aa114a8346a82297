#include "engine/draft_model.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace flover {
namespace {

int32_t Argmax(absl::Span<const float> logits) {
  int32_t best = 0;
  for (int32_t v = 1; v < static_cast<int32_t>(logits.size()); ++v) {
    if (logits[v] > logits[best]) best = v;
  }
  return best;
}

int BlocksFor(int positions) { return (positions + KvBlockPool::kBlockSize - 1) / KvBlockPool::kBlockSize; }

}  // namespace

absl::StatusOr<std::unique_ptr<DraftModel>> DraftModel::Create(CausalLm& model, int max_seqs, int max_seq_len,
                                                               int max_rows, int64_t kv_bytes) {
  if (max_rows < 1) return absl::InvalidArgumentError("the draft model's steps need at least one row");
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

int DraftModel::Behind(uint64_t id, absl::Span<const int32_t> tokens) const {
  auto it = seqs_.find(id);
  size_t keep = 0;
  if (it != seqs_.end()) {
    const std::vector<int32_t>& done = it->second.computed;
    keep = std::mismatch(done.begin(), done.end(), tokens.begin(), tokens.end()).first - done.begin();
  }
  return static_cast<int>(tokens.size() - std::min(keep, tokens.empty() ? 0 : tokens.size() - 1));
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
    // The K/V that still stands: the longest common prefix with its tokens
    // now (a refused draft, or anything else that changed, goes).
    const size_t keep = std::mismatch(s.computed.begin(), s.computed.end(), a.tokens.begin(), a.tokens.end()).first -
                        s.computed.begin();
    s.computed.resize(std::min(keep, a.tokens.size() - 1));
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
  const int V = model_.info().vocab_size;
  auto logits = executor_->Run(step);
  if (!logits.ok()) return logits.status();
  std::vector<Run> next;
  for (size_t j = 0; j < runs.size(); ++j) {
    const Run& r = runs[j];
    const Ask& a = asks[r.ask];
    r.seq->computed.insert(r.seq->computed.end(), a.tokens.begin() + r.pos, a.tokens.begin() + r.pos + r.fed);
    if (!r.drafting) continue;
    drafts[r.ask].push_back(Argmax(logits->subspan(size_t(j) * V, V)));
    if (a.max_tokens > 1) next.push_back(r);
  }
  // Then one token a step for those that want more, fused.
  while (!next.empty()) {
    step.batch.Clear();
    for (const Run& r : next) {
      step.batch.AddSequence(r.seq->blocks, static_cast<int>(r.seq->computed.size()),
                             absl::MakeConstSpan(&drafts[r.ask].back(), 1));
    }
    logits = executor_->Run(step);
    if (!logits.ok()) return logits.status();
    std::vector<Run> more;
    for (size_t j = 0; j < next.size(); ++j) {
      const Run& r = next[j];
      r.seq->computed.push_back(drafts[r.ask].back());
      drafts[r.ask].push_back(Argmax(logits->subspan(size_t(j) * V, V)));
      if (static_cast<int>(drafts[r.ask].size()) < asks[r.ask].max_tokens) more.push_back(r);
    }
    next = std::move(more);
  }
  return drafts;
}

}  // namespace flover
