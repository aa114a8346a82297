#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "util/field_error.h"
#include "util/split_mix64.h"

namespace flover {
namespace {

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// The `n` tokens of `support` (all of [0, V) when empty) with the highest
// logits, ties to the lower id, most likely first, with `log_prob`'s value.
template <typename LogProb>
void TopOf(absl::Span<const float> logits, absl::Span<const int32_t> support, int n,
           const LogProb& log_prob, std::vector<std::pair<int32_t, float>>* out) {
  out->clear();
  if (n <= 0) return;
  const MoreLikely better{logits};
  // A heap of the best n so far, its worst on top.
  std::vector<int32_t> heap;
  auto consider = [&](int32_t i) {
    if (static_cast<int>(heap.size()) < n) {
      heap.push_back(i);
      std::push_heap(heap.begin(), heap.end(), better);
    } else if (better(i, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), better);
      heap.back() = i;
      std::push_heap(heap.begin(), heap.end(), better);
    }
  };
  if (support.empty()) {
    for (int32_t i = 0; i < static_cast<int32_t>(logits.size()); ++i) consider(i);
  } else {
    for (int32_t i : support) consider(i);
  }
  std::sort(heap.begin(), heap.end(), better);
  for (int32_t i : heap) out->emplace_back(i, log_prob(i));
}

}  // namespace

absl::Status ValidateSamplingParams(const SamplingParams& p) {
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) {
    return FieldError("temperature", absl::StrCat("must be a finite number >= 0, got ", p.temperature));
  }
  if (p.top_k < 0) {
    return FieldError("top_k", absl::StrCat("must be >= 0, got ", p.top_k));
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    return FieldError("top_p", absl::StrCat("must be in (0, 1], got ", p.top_p));
  }
  if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty)) {
    return FieldError("repetition_penalty",
                      absl::StrCat("must be a finite number > 0, got ", p.repetition_penalty));
  }
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f)) {
    return FieldError("presence_penalty", absl::StrCat("must be in [-2, 2], got ", p.presence_penalty));
  }
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f)) {
    return FieldError("frequency_penalty", absl::StrCat("must be in [-2, 2], got ", p.frequency_penalty));
  }
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) {
    return FieldError("min_p", absl::StrCat("must be in [0, 1], got ", p.min_p));
  }
  if (p.logit_bias.size() > static_cast<size_t>(kMaxLogitBias)) {
    return FieldError("logit_bias", absl::StrCat("at most ", kMaxLogitBias, " entries, got ",
                                                 p.logit_bias.size()));
  }
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0) return FieldError("logit_bias", absl::StrCat("token id ", id, " is negative"));
    if (!(bias >= -100.0f && bias <= 100.0f)) {
      return FieldError("logit_bias", absl::StrCat("token ", id, ": the bias must be in [-100, 100], got ", bias));
    }
  }
  return absl::OkStatus();
}

Rng::Rng(uint64_t seed) {
  SplitMix64 mix(seed);
  for (uint64_t& s : s_) s = mix.Next();
}

uint64_t Rng::Next() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

double Rng::NextDouble() { return (Next() >> 11) * 0x1.0p-53; }

Sampler::Sampler(const SamplingParams& params, size_t prompt_length)
    : params_(params), rng_(params.seed) {
  // The order is part of the result: penalties, bias (then a constraint's
  // mask, added by the engine); after temperature top-k, top-p, min-p.
  if (params.repetition_penalty != 1.0f) {
    processors_.push_back(std::make_unique<RepetitionPenalty>(params.repetition_penalty));
  }
  if (params.presence_penalty != 0.0f || params.frequency_penalty != 0.0f) {
    processors_.push_back(std::make_unique<PresenceFrequencyPenalty>(
        params.presence_penalty, params.frequency_penalty, prompt_length));
  }
  if (!params.logit_bias.empty()) processors_.push_back(std::make_unique<LogitBias>(params.logit_bias));
  if (params.top_k > 0) filters_.push_back(std::make_unique<TopK>(params.top_k));
  if (params.top_p < 1.0f) filters_.push_back(std::make_unique<TopP>(params.top_p));
  if (params.min_p > 0.0f) filters_.push_back(std::make_unique<MinP>(params.min_p));
}

void Sampler::AddProcessor(std::unique_ptr<LogitsProcessor> processor, bool masks) {
  processors_.push_back(std::move(processor));
  if (masks && !masking_) {
    masking_ = true;
    filters_.insert(filters_.begin(), std::make_unique<FiniteOnly>());
  }
}

bool Sampler::PlainGreedy() const {
  return (params_.temperature == 0.0f || !std::isfinite(1.0f / params_.temperature)) &&
         processors_.empty();
}

int32_t Sampler::Sample(absl::Span<float> logits, absl::Span<const int32_t> history,
                        float* logprob, int n_top, std::vector<std::pair<int32_t, float>>* top) {
  if (top == nullptr) n_top = 0;
  for (const auto& p : processors_) p->Process(logits, history);
  // A temperature so small that its inverse overflows (below ~3e-39) is
  // greedy: scaling by an infinite 1/t would make 0 * inf = NaN of the top
  // logit and sample garbage.
  if (params_.temperature == 0.0f || !std::isfinite(1.0f / params_.temperature)) {
    return PickGreedy(logits, logprob, n_top, top);
  }
  const Candidates::Weights w{1.0f / params_.temperature,
                              *std::max_element(logits.begin(), logits.end())};
  probs_.resize(logits.size());
  Candidates c(logits, w, &candidates_, &probs_, &scratch_);
  if (filters_.empty()) return DrawWhole(c, logprob, n_top, top);
  for (const auto& f : filters_) f->Narrow(c);
  const size_t pick = Draw(c.mass());
  Report(logits, candidates_, candidates_[pick], c.mass(), logprob, n_top, top);
  return candidates_[pick];
}

int32_t Sampler::PickGreedy(absl::Span<const float> logits, float* logprob, int n_top,
                            std::vector<std::pair<int32_t, float>>* top) const {
  const int32_t best =
      static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  if (logprob == nullptr && n_top == 0) return best;
  // Reported under the raw softmax.
  double sum = 0;
  for (float l : logits) sum += std::exp(double{l} - logits[best]);
  const double log_sum = std::log(sum);
  if (logprob != nullptr) *logprob = static_cast<float>(-log_sum);
  if (n_top > 0) {
    TopOf(logits, {}, n_top, [&](int32_t i) {
      return static_cast<float>(double{logits[i]} - logits[best] - log_sum);
    }, top);
    // Masked tokens are not alternatives.
    top->erase(std::remove_if(top->begin(), top->end(),
                              [](const auto& t) { return std::isinf(t.second); }),
               top->end());
  }
  return best;
}

int32_t Sampler::DrawWhole(Candidates& c, float* logprob, int n_top,
                           std::vector<std::pair<int32_t, float>>* top) {
  const absl::Span<const float> logits = c.logits();
  const int V = static_cast<int>(logits.size());
  const float sum = c.WeighAll();
  // Find the draw's block by block sums, then the token inside the block.
  constexpr int kBlock = 256;
  const double u = rng_.NextDouble() * sum;
  double acc = 0;
  int i = 0;
  for (; i + kBlock < V; i += kBlock) {
    float block = 0.0f;
#pragma omp simd reduction(+ : block)
    for (int j = i; j < i + kBlock; ++j) block += probs_[j];
    if (u < acc + block) break;
    acc += block;
  }
  int32_t pick = V - 1;
  for (; i < V; ++i) {
    acc += probs_[i];
    if (u < acc) {
      pick = i;
      break;
    }
  }
  if (logprob != nullptr) *logprob = std::log(probs_[pick] / sum);
  if (n_top > 0) TopOf(logits, {}, n_top, [&](int32_t i) { return std::log(probs_[i] / sum); }, top);
  return pick;
}

size_t Sampler::Draw(double mass) {
  const double u = rng_.NextDouble() * mass;
  double acc = 0;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    acc += probs_[candidates_[i]];
    if (u < acc) return i;
  }
  return candidates_.size() - 1;
}

void Sampler::Report(absl::Span<const float> logits, absl::Span<const int32_t> support, int32_t pick,
                     double mass, float* logprob, int n_top,
                     std::vector<std::pair<int32_t, float>>* top) const {
  if (logprob != nullptr) *logprob = static_cast<float>(std::log(probs_[pick] / mass));
  if (n_top > 0) {
    TopOf(logits, support, n_top,
          [&](int32_t i) { return static_cast<float>(std::log(probs_[i] / mass)); }, top);
  }
}

}  // namespace flover
