#include "engine/speculation.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace flover {

absl::StatusOr<SpeculativeMode> ParseSpeculativeMode(absl::string_view name) {
  if (name == "off") return SpeculativeMode::kOff;
  if (name == "ngram") return SpeculativeMode::kNgram;
  if (name == "draft") return SpeculativeMode::kDraft;
  if (name == "mtp") return SpeculativeMode::kMtp;
  return absl::InvalidArgumentError(absl::StrCat("unknown speculative mode '", name, "' (off, ngram, draft, mtp)"));
}

absl::string_view SpeculativeModeName(SpeculativeMode mode) {
  switch (mode) {
    case SpeculativeMode::kOff: return "off";
    case SpeculativeMode::kNgram: return "ngram";
    case SpeculativeMode::kDraft: return "draft";
    case SpeculativeMode::kMtp: return "mtp";
  }
  return "?";
}

absl::Status ValidateSpeculativeOptions(const SpeculativeOptions& o) {
  if (o.max_tokens < 1 || o.max_tokens > 64) {
    return absl::InvalidArgumentError(absl::StrCat("num_speculative_tokens must be in [1, 64], got ", o.max_tokens));
  }
  if (o.max_step_rows < 1) {
    return absl::InvalidArgumentError(absl::StrCat("speculative_max_rows must be >= 1, got ", o.max_step_rows));
  }
  if (o.min_ngram < 1 || o.max_ngram < o.min_ngram) {
    return absl::InvalidArgumentError(
        absl::StrCat("the n-gram lengths must satisfy 1 <= min <= max, got ", o.min_ngram, " and ", o.max_ngram));
  }
  return absl::OkStatus();
}

std::vector<int32_t> NgramDraft(absl::Span<const int32_t> tokens, int max_tokens, int min_ngram, int max_ngram) {
  const int L = static_cast<int>(tokens.size());
  if (max_tokens <= 0) return {};
  for (int n = std::min(max_ngram, L - 1); n >= min_ngram && n >= 1; --n) {
    const int32_t* suffix = tokens.data() + L - n;
    // The latest earlier occurrence: it ends before the suffix does.
    for (int end = L - 1; end >= n; --end) {
      if (!std::equal(suffix, suffix + n, tokens.data() + end - n)) continue;
      const int take = std::min(max_tokens, L - end);
      return std::vector<int32_t>(tokens.begin() + end, tokens.begin() + end + take);
    }
  }
  return {};
}

int NextDraftLength(int drafted, int accepted, int max_tokens) {
  if (drafted > 0 && accepted == drafted) return std::min(max_tokens, drafted + 2);
  return std::max(1, std::min(max_tokens, accepted + 1));
}

void DraftPacer::Verified(int drafted, int taken) {
  length_ = NextDraftLength(drafted, taken, max_tokens_);
  if (drafted > 0 && taken == 0) {
    refused_in_a_row_ = std::min(refused_in_a_row_ + 1, 4);
    pause_ = 1 << refused_in_a_row_;
  } else if (taken > 0) {
    refused_in_a_row_ = 0;
  }
}

}  // namespace flover
