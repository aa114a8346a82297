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
};

absl::StatusOr<SpeculativeMode> ParseSpeculativeMode(absl::string_view name);  // off, ngram
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

}  // namespace flover

#endif  // FLOVER_ENGINE_SPECULATION_H_
