#include "engine/mtp_drafter.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "util/status_macros.h"

namespace flover {
namespace {

int BlocksFor(int positions) { return (positions + KvBlockPool::kBlockSize - 1) / KvBlockPool::kBlockSize; }

}  // namespace

absl::StatusOr<std::unique_ptr<MtpDrafter>> MtpDrafter::Create(CausalLm& mtp, CausalLm& model, int max_seqs,
                                                               int max_seq_len, int max_rows, int64_t kv_bytes) {
  if (mtp.info().vocab_size != model.info().vocab_size || mtp.info().hidden != model.info().hidden) {
    return absl::InvalidArgumentError("the multi-token-prediction layer is not this model's");
  }
  if (max_rows < 1) return absl::InvalidArgumentError("the multi-token-prediction layer's steps need a row");
  if (absl::Status st = model.KeepFinalHidden(true); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat("--speculative=mtp: ", st.message()));
  }
  if (absl::Status st = mtp.KeepFinalHidden(true); !st.ok()) return st;  // its output row chains the drafts
  KvCacheOptions kv;
  kv.bytes = kv_bytes;
  auto executor = StepExecutor::Create(mtp, kv, max_seqs, max_seq_len, max_rows, std::min(max_rows, max_seqs),
                                       /*channel=*/nullptr);
  if (!executor.ok()) {
    return absl::Status(executor.status().code(),
                        absl::StrCat("the multi-token-prediction layer: ", executor.status().message()));
  }
  return std::unique_ptr<MtpDrafter>(new MtpDrafter(mtp, std::move(*executor), max_rows));
}

void MtpDrafter::Forget(uint64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  pool_.Release(it->second.blocks);
  seqs_.erase(it);
}

bool MtpDrafter::Reserve(Seq& s, int positions) {
  const int need = BlocksFor(positions) - static_cast<int>(s.blocks.size());
  return need <= 0 || pool_.Allocate(need, &s.blocks);
}

void MtpDrafter::Computed(uint64_t id, int32_t pos, int32_t rows, absl::Span<const float> hidden,
                          absl::Span<const int32_t> tokens) {
  if (rows <= 0 || hidden.size() < static_cast<size_t>(rows) * hidden_) return;
  Seq& s = seqs_[id];
  const int32_t read = s.base + s.standing;
  const int32_t end = read + static_cast<int32_t>(s.pending_tokens.size());
  if (pos < s.base || pos > end) {
    // A prefix the model did not compute here (a prefix-cache hit), or rows
    // before the layer's context: the context starts again at `pos`.
    s.base = pos;
    s.standing = 0;
    s.pending_tokens.clear();
    s.pending_hidden.clear();
  } else if (pos < read) {  // rows computed again (a preempted sequence's)
    s.standing = pos - s.base;
    s.pending_tokens.clear();
    s.pending_hidden.clear();
  } else {  // rows again past what is read: they replace the pending ones
    s.pending_tokens.resize(pos - read);
    s.pending_hidden.resize(static_cast<size_t>(pos - read) * hidden_);
  }
  s.next = -1;
  // Each row p pairs with the token after it (the one sampled after the
  // last row).
  for (int32_t r = 0; r < rows && pos + r + 1 < static_cast<int32_t>(tokens.size()); ++r) {
    s.pending_tokens.push_back(tokens[pos + r + 1]);
    s.pending_hidden.insert(s.pending_hidden.end(), hidden.begin() + static_cast<size_t>(r) * hidden_,
                            hidden.begin() + static_cast<size_t>(r + 1) * hidden_);
  }
}

absl::Status MtpDrafter::ReadPairs(const std::function<bool(const Seq&)>& which) {
  // The chosen sequences' pending pairs, in fused steps of up to max_rows_
  // rows (a long prompt's over several).
  while (true) {
    struct Run {
      Seq* seq;
      int rows;
    };
    std::vector<Run> runs;
    StepInput step;
    int budget = max_rows_;
    std::vector<uint64_t> dropped;
    for (auto& [id, s] : seqs_) {
      if (budget == 0) break;
      const int rows = std::min<int>(static_cast<int>(s.pending_tokens.size()), budget);
      if (rows == 0 || !which(s)) continue;
      if (!Reserve(s, s.standing + rows)) {  // no room: its context goes, and comes back with its next rows
        dropped.push_back(id);
        continue;
      }
      step.batch.AddSequence(s.blocks, s.standing, absl::MakeConstSpan(s.pending_tokens).subspan(0, rows));
      step.batch.hidden.insert(step.batch.hidden.end(), s.pending_hidden.begin(),
                               s.pending_hidden.begin() + static_cast<size_t>(rows) * hidden_);
      runs.push_back({&s, rows});
      budget -= rows;
    }
    for (uint64_t id : dropped) Forget(id);
    if (runs.empty()) return absl::OkStatus();
    auto ran = executor_->Run(step, StepOutput::kBestTokens);
    if (!ran.ok()) return ran.status();
    const absl::Span<const float> out = mtp_.FinalHidden();
    size_t row = 0;
    for (size_t j = 0; j < runs.size(); ++j) {
      Seq& s = *runs[j].seq;
      const int rows = runs[j].rows;
      row += rows;
      s.standing += rows;
      s.pending_tokens.erase(s.pending_tokens.begin(), s.pending_tokens.begin() + rows);
      s.pending_hidden.erase(s.pending_hidden.begin(), s.pending_hidden.begin() + static_cast<size_t>(rows) * hidden_);
      if (s.pending_tokens.empty()) {
        s.next = ran->best[j];
        s.chain.assign(out.begin() + (row - 1) * hidden_, out.begin() + row * hidden_);
      }
    }
  }
}

absl::Status MtpDrafter::StepDone() {
  // A step's head is as dear as the model's own, so pairs wait for the
  // sequence's next drafts (Propose reads them), unless they pile up (a
  // prompt's chunk): then they are read now, their head once per step.
  return ReadPairs([](const Seq& s) { return s.pending_tokens.size() >= kReadAtOnce; });
}

bool MtpDrafter::Repays(uint64_t id, absl::Span<const int32_t> tokens, int) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return false;
  const Seq& s = it->second;
  return (s.next >= 0 || !s.pending_tokens.empty()) &&
         static_cast<size_t>(s.base + s.standing) + s.pending_tokens.size() + 1 == tokens.size();
}

absl::StatusOr<std::vector<std::vector<int32_t>>> MtpDrafter::Propose(absl::Span<const Ask> asks, int max_rows) {
  std::vector<std::vector<int32_t>> drafts(asks.size());
  // The first draft of each is already there; the others chain, one fused
  // step each, at the layer's positions past its pairs.
  struct Run {
    size_t ask;
    Seq* seq;
    std::vector<float> chain;
  };
  std::vector<Run> next;
  // First the pairs the asks have not read yet (their first drafts with them).
  absl::flat_hash_set<const Seq*> asked;
  for (const Ask& a : asks) {
    auto it = seqs_.find(a.id);
    if (a.max_tokens >= 1 && it != seqs_.end() && Repays(a.id, a.tokens, a.max_tokens)) asked.insert(&it->second);
  }
  FLOVER_RETURN_IF_ERROR(ReadPairs([&](const Seq& s) { return asked.contains(&s); }));
  int rows = std::min(max_rows, max_rows_);
  for (size_t i = 0; i < asks.size(); ++i) {
    const Ask& a = asks[i];
    if (a.max_tokens < 1 || !Repays(a.id, a.tokens, a.max_tokens)) continue;
    Seq& s = seqs_[a.id];
    if (s.next < 0) continue;  // its pairs did not fit this call's rows
    drafts[i].push_back(s.next);
    if (a.max_tokens > 1 && rows > 0 && Reserve(s, s.standing + a.max_tokens - 1)) {
      next.push_back({i, &s, s.chain});
      --rows;
    }
  }
  for (int k = 1; !next.empty(); ++k) {
    StepInput step;
    for (const Run& r : next) {
      step.batch.AddSequence(r.seq->blocks, r.seq->standing + k - 1, absl::MakeConstSpan(&drafts[r.ask].back(), 1));
      step.batch.hidden.insert(step.batch.hidden.end(), r.chain.begin(), r.chain.end());
    }
    auto ran = executor_->Run(step, StepOutput::kBestTokens);
    if (!ran.ok()) return ran.status();
    const absl::Span<const float> out = mtp_.FinalHidden();
    std::vector<Run> more;
    for (size_t j = 0; j < next.size(); ++j) {
      Run& r = next[j];
      drafts[r.ask].push_back(ran->best[j]);
      if (static_cast<int>(drafts[r.ask].size()) < asks[r.ask].max_tokens) {
        r.chain.assign(out.begin() + j * hidden_, out.begin() + (j + 1) * hidden_);
        more.push_back(std::move(r));
      }
    }
    next = std::move(more);
  }
  return drafts;
}

}  // namespace flover
