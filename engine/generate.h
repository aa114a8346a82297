// Generates one sequence on its own (no batching): the reference the batched
// engine is checked against, and what flover_generate runs.
#ifndef FLOVER_ENGINE_GENERATE_H_
#define FLOVER_ENGINE_GENERATE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/collectives.h"
#include "model/causal_lm.h"
#include "engine/sampler.h"

namespace flover {

struct GenerateOptions {
  int max_new_tokens = 16;
  SamplingParams sampling;
  bool ignore_eos = false;
};

// Exactly `n` greedy tokens, EOS or not: how the golden tests continue a
// prompt to compare with transformers' greedy output.
inline GenerateOptions GreedyTokens(int n) {
  GenerateOptions g;
  g.max_new_tokens = n;
  g.sampling.temperature = 0;
  g.ignore_eos = true;
  return g;
}

// Prefills `prompt` in one forward, then decodes one token per step until
// max_new_tokens or (unless ignore_eos) the model's EOS, which is included.
// With a tensor-parallel model every rank calls it with its `channel`: rank
// 0 samples each token and broadcasts it, so every rank runs the same next
// step (only rank 0 sees logits).
absl::StatusOr<std::vector<int32_t>> GenerateAlone(CausalLm& model,
                                                   absl::Span<const int32_t> prompt,
                                                   const GenerateOptions& options,
                                                   ControlChannel* channel = nullptr);

}  // namespace flover

#endif  // FLOVER_ENGINE_GENERATE_H_
