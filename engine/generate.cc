#include "engine/generate.h"

#include "absl/strings/str_cat.h"

namespace flover {

absl::StatusOr<std::vector<int32_t>> GenerateAlone(CausalLm& model,
                                                   absl::Span<const int32_t> prompt,
                                                   const GenerateOptions& options,
                                                   ControlChannel* channel) {
  const bool leader = channel == nullptr || channel->world().is_leader();
  const ModelInfo& info = model.info();
  if (prompt.empty()) return absl::InvalidArgumentError("prompt is empty");
  if (options.max_new_tokens < 1) {
    return absl::InvalidArgumentError("max_new_tokens must be >= 1");
  }
  const int64_t total = int64_t{static_cast<int64_t>(prompt.size())} + options.max_new_tokens;
  if (total > info.max_positions) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt (", prompt.size(), " tokens) + max_new_tokens (", options.max_new_tokens,
        ") exceeds the model's ", info.max_positions, " positions"));
  }
  if (absl::Status st = ValidateSamplingParams(options.sampling); !st.ok()) return st;
  const int num_blocks = KvCacheShape::BlocksFor(total);
  auto cache = KvCache::Create(model.backend(), model.CacheShape(num_blocks, static_cast<int>(total)));
  if (!cache.ok()) return cache.status();
  const std::vector<int32_t> blocks = BlockRange(0, num_blocks);

  Sampler sampler(options.sampling, prompt.size());
  std::vector<int32_t> history(prompt.begin(), prompt.end());
  std::vector<int32_t> output;
  ForwardBatch batch;
  // Its recurrent state (a hybrid model's) in slot 0.
  const bool state = (*cache)->shape().state_slots > 0;
  batch.AddSequence(blocks, 0, prompt);
  if (state) batch.states.push_back(StateOf(0, 0));
  while (true) {
    auto logits = model.Forward(batch, **cache, LogitsFor::kLastRowsOfEachSequence);
    if (!logits.ok()) return logits.status();
    int32_t token = leader ? sampler.Sample(*logits, history) : 0;
    if (channel != nullptr && channel->world().tp_size > 1) {
      if (absl::Status st = channel->Broadcast(&token, sizeof(token), 0); !st.ok()) return st;
    }
    output.push_back(token);
    history.push_back(token);
    if (static_cast<int>(output.size()) >= options.max_new_tokens) break;
    if (!options.ignore_eos && info.IsEos(token)) break;
    batch.Clear();
    const int32_t pos = static_cast<int32_t>(history.size()) - 1;
    batch.AddSequence(blocks, pos, {token});
    if (state) batch.states.push_back(StateOf(0, pos));
  }
  return output;
}

}  // namespace flover
