// Speculative decoding's drafts and their length: what a sequence proposes
// to verify in the next fused step, and how far it reaches. The engine
// verifies drafts row by row against what it would have sampled anyway
// (engine.cc), so a draft changes how many tokens a step yields, never
// which.
#ifndef FLOVER_ENGINE_SPECULATION_H_
#define FLOVER_ENGINE_SPECULATION_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace flover {

enum class SpeculativeMode {
  kOff,
  kNgram,  // prompt lookup: continue the latest earlier match of the last tokens
  kDraft,  // a draft model's greedy tokens (engine/draft_model.h)
  kMtp,    // the model's multi-token-prediction layer's (engine/mtp_drafter.h)
};

absl::StatusOr<SpeculativeMode> ParseSpeculativeMode(absl::string_view name);  // off, ngram, draft, mtp
absl::string_view SpeculativeModeName(SpeculativeMode mode);

struct SpeculativeOptions {
  SpeculativeMode mode = SpeculativeMode::kOff;
  int max_tokens = 6;  // drafts per sequence and step, at most
  // A step's rows, decodes and drafts together, past which no sequence
  // drafts: beyond it a step stops being bound by reading the weights, and
  // a rejected draft row costs as much as a useful one.
  int max_step_rows = 12;
  // The n-gram matched: the last `max_ngram` tokens, down to `min_ngram`.
  int min_ngram = 3, max_ngram = 5;
};

// InvalidArgument naming the first bad field.
absl::Status ValidateSpeculativeOptions(const SpeculativeOptions& o);

// Up to `max_tokens` tokens that followed the most recent earlier
// occurrence of the longest suffix of `tokens` (between min_ngram and
// max_ngram tokens long); empty where the suffix never occurred before.
std::vector<int32_t> NgramDraft(absl::Span<const int32_t> tokens, int max_tokens, int min_ngram, int max_ngram);

// The next draft length of a sequence that drafted `drafted` tokens and
// had `accepted` of them accepted: longer after a draft taken whole (up to
// `max_tokens`), otherwise one past what was accepted.
int NextDraftLength(int drafted, int accepted, int max_tokens);

// How one sequence drafts: its draft length (NextDraftLength), and a pause
// after drafts refused outright — 2, 4, 8, then 16 steps without drafting
// after 1, 2, 3, 4+ such drafts in a row — so text that does not repeat
// itself (open chat) pays for few refused draft rows.
class DraftPacer {
 public:
  explicit DraftPacer(int max_tokens) : max_tokens_(max_tokens), length_(max_tokens) {}
  // Whether the sequence drafts at this step (a paused one counts down).
  bool Drafts() {
    if (pause_ == 0) return true;
    --pause_;
    return false;
  }
  int length() const { return length_; }
  // After a draft of `drafted` tokens of which `taken` stood.
  void Verified(int drafted, int taken);

 private:
  int max_tokens_, length_;
  int refused_in_a_row_ = 0, pause_ = 0;
};

}  // namespace flover

#endif  // FLOVER_ENGINE_SPECULATION_H_
