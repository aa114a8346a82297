#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace flover {
namespace {

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

absl::Status ValidateSamplingParams(const SamplingParams& p) {
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature must be a finite number >= 0, got ", p.temperature));
  }
  if (p.top_k < 0) {
    return absl::InvalidArgumentError(absl::StrCat("top_k must be >= 0, got ", p.top_k));
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("top_p must be in (0, 1], got ", p.top_p));
  }
  if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "repetition_penalty must be a finite number > 0, got ", p.repetition_penalty));
  }
  return absl::OkStatus();
}

Rng::Rng(uint64_t seed) {
  for (uint64_t& s : s_) {
    uint64_t z = (seed += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    s = z ^ (z >> 31);
  }
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

int32_t Sampler::Sample(absl::Span<float> logits, absl::Span<const int32_t> history,
                        float* logprob) {
  const int V = static_cast<int>(logits.size());
  if (params_.repetition_penalty != 1.0f) {
    // Each distinct token is penalized once; applying to an already
    // penalized logit is skipped by marking it.
    std::vector<bool> done(V, false);
    for (int32_t t : history) {
      if (t < 0 || t >= V || done[t]) continue;
      done[t] = true;
      float& l = logits[t];
      l = l < 0 ? l * params_.repetition_penalty : l / params_.repetition_penalty;
    }
  }

  if (params_.temperature == 0.0f) {
    const int32_t best = static_cast<int32_t>(
        std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (logprob != nullptr) {
      double sum = 0;
      for (float l : logits) sum += std::exp(double{l} - logits[best]);
      *logprob = static_cast<float>(-std::log(sum));
    }
    return best;
  }

  // Candidates: all tokens, or the top_k largest (ties broken by lower id).
  candidates_.resize(V);
  std::iota(candidates_.begin(), candidates_.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  size_t keep = V;
  if (params_.top_k > 0 && params_.top_k < V) {
    keep = params_.top_k;
    std::nth_element(candidates_.begin(), candidates_.begin() + keep, candidates_.end(),
                     by_logit);
    candidates_.resize(keep);
  }
  if (params_.top_p < 1.0f) {
    std::sort(candidates_.begin(), candidates_.end(), by_logit);
  }

  // Softmax of logits / temperature over the candidates.
  const float max_logit = logits[*std::max_element(candidates_.begin(), candidates_.end(),
                                                   [&](int32_t a, int32_t b) {
                                                     return logits[a] < logits[b];
                                                   })];
  probs_.resize(candidates_.size());
  double sum = 0;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    probs_[i] = std::exp((logits[candidates_[i]] - max_logit) / params_.temperature);
    sum += probs_[i];
  }
  if (params_.top_p < 1.0f) {
    // Smallest prefix (by descending probability) whose mass reaches top_p.
    double mass = 0;
    size_t n = 0;
    while (n < candidates_.size()) {
      mass += probs_[n++] / sum;
      if (mass >= params_.top_p) break;
    }
    candidates_.resize(n);
    probs_.resize(n);
    sum = 0;
    for (float p : probs_) sum += p;
  }

  const double u = rng_.NextDouble() * sum;
  double acc = 0;
  size_t pick = candidates_.size() - 1;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    acc += probs_[i];
    if (u < acc) {
      pick = i;
      break;
    }
  }
  if (logprob != nullptr) *logprob = static_cast<float>(std::log(probs_[pick] / sum));
  return candidates_[pick];
}

}  // namespace flover
