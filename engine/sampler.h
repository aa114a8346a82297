// Per-request token sampling: greedy, temperature, top-k, top-p and the
// repetition penalty (stages in engine/logits_processors.h), drawn from the
// request's own seeded generator so the same seed gives the same tokens
// whatever else is in the batch.
#ifndef FLOVER_ENGINE_SAMPLER_H_
#define FLOVER_ENGINE_SAMPLER_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/logits_processors.h"

namespace flover {

// The most logit_bias entries a request may set.
inline constexpr int kMaxLogitBias = 1024;

struct SamplingParams {
  float temperature = 1.0f;         // 0 means greedy
  int top_k = 0;                    // 0 means no limit
  float top_p = 1.0f;               // nucleus mass, in (0, 1]
  float repetition_penalty = 1.0f;  // > 0; 1 means none (CTRL-style, as HF)
  // OpenAI's, over the tokens generated so far (not the prompt), each in
  // [-2, 2]: minus presence_penalty once for a token that appeared, minus
  // frequency_penalty for each time it did.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // Added to the logits of these token ids, each in [-100, 100].
  std::vector<std::pair<int32_t, float>> logit_bias;
  // After temperature: only tokens at least min_p times as likely as the
  // likeliest, in [0, 1]; 0 means none.
  float min_p = 0.0f;
  uint64_t seed = 0;
};

// Checks every field and names the first bad one.
absl::Status ValidateSamplingParams(const SamplingParams& params);

// xoshiro256**, seeded through SplitMix64: small and fully specified, so a
// seed means the same stream on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t Next();
  double NextDouble();  // uniform in [0, 1)

 private:
  uint64_t s_[4];
};

// Runs the stages of logits_processors.h in their fixed order: the logits
// processors, then (greedy) the best token, or temperature, the candidate
// filters and a draw from the request's own generator.
class Sampler {
 public:
  // `prompt_length`: how many of the history's first tokens are the prompt
  // (the presence and frequency penalties count only what follows).
  explicit Sampler(const SamplingParams& params, size_t prompt_length = 0);

  // Picks the next token. logits: [V], modified in place. `history` holds the
  // tokens the repetition penalty applies to (prompt and output so far).
  // `logprob`, when not null, receives the log-probability of the chosen token
  // under the distribution it was drawn from (the raw softmax when greedy);
  // `top`, when not null, the `n_top` most likely tokens of that distribution
  // and their log-probabilities, most likely first (ties to the lower id;
  // fewer when top-k / top-p leave fewer). Neither costs anything unasked.
  int32_t Sample(absl::Span<float> logits, absl::Span<const int32_t> history,
                 float* logprob = nullptr, int n_top = 0,
                 std::vector<std::pair<int32_t, float>>* top = nullptr);

  // Adds a logits processor after those the parameters made. `masks`: it
  // sets logits to -infinity, and the draw then picks only among the rest
  // (FiniteOnly first among the filters).
  void AddProcessor(std::unique_ptr<LogitsProcessor> processor, bool masks);

  // Sample would return the first of the largest logits, whatever the
  // history (greedy, no logits processor): the model's ForwardGreedy picks
  // the same token where the logits are.
  bool PlainGreedy() const;

 private:
  int32_t PickGreedy(absl::Span<const float> logits, float* logprob, int n_top,
                     std::vector<std::pair<int32_t, float>>* top) const;
  // Plain temperature over the whole vocabulary: draws without a candidate list.
  int32_t DrawWhole(Candidates& c, float* logprob, int n_top,
                    std::vector<std::pair<int32_t, float>>* top);
  // An index into candidates_, drawn in proportion to probs_.
  size_t Draw(double mass);
  // The chosen token's log-probability and the n_top most likely of `support`.
  void Report(absl::Span<const float> logits, absl::Span<const int32_t> support, int32_t pick,
              double mass, float* logprob, int n_top,
              std::vector<std::pair<int32_t, float>>* top) const;

  SamplingParams params_;
  Rng rng_;
  std::vector<std::unique_ptr<LogitsProcessor>> processors_;
  std::vector<std::unique_ptr<CandidateFilter>> filters_;
  bool masking_ = false;  // a processor masks: FiniteOnly leads the filters
  std::vector<int32_t> candidates_;  // scratch, reused across steps
  std::vector<float> probs_;         // [V] unnormalized probabilities
  std::vector<float> scratch_;       // [V] logits copy for the top-k threshold
};

}  // namespace flover

#endif  // FLOVER_ENGINE_SAMPLER_H_
