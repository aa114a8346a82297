#include "engine/logits_processors.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include "kernels/cpu/vec_math.h"

namespace flover {

void RepetitionPenalty::Process(absl::Span<float> logits, absl::Span<const int32_t> history) {
  const int V = static_cast<int>(logits.size());
  // Each distinct token is penalized once; applying to an already penalized
  // logit is skipped by marking it.
  seen_.assign(V, false);
  for (int32_t t : history) {
    if (t < 0 || t >= V || seen_[t]) continue;
    seen_[t] = true;
    float& l = logits[t];
    l = l < 0 ? l * penalty_ : l / penalty_;
  }
}

void PresenceFrequencyPenalty::Process(absl::Span<float> logits,
                                       absl::Span<const int32_t> history) {
  const int V = static_cast<int>(logits.size());
  if (history.size() <= prompt_length_) return;
  const absl::Span<const int32_t> output = history.subspan(prompt_length_);
  counts_.assign(V, 0);
  for (int32_t t : output) {
    if (t >= 0 && t < V) ++counts_[t];
  }
  // Each distinct token once, in the order it first appeared.
  for (int32_t t : output) {
    if (t < 0 || t >= V || counts_[t] == 0) continue;
    logits[t] -= presence_ + frequency_ * static_cast<float>(counts_[t]);
    counts_[t] = 0;
  }
}

void LogitBias::Process(absl::Span<float> logits, absl::Span<const int32_t>) {
  const int V = static_cast<int>(logits.size());
  for (const auto& [id, bias] : bias_) {
    if (id >= 0 && id < V) logits[id] += bias;
  }
}

void ConstraintMask::Process(absl::Span<float> logits, absl::Span<const int32_t>) {
  const int V = static_cast<int>(logits.size());
  saved_.clear();
  for (int32_t e : end_ids_) saved_.push_back(e >= 0 && e < V ? logits[e] : 0.0f);
  const std::vector<uint32_t>& allowed = state_->AllowedNext();
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  bool any = false;
  for (int t = 0; t < V; ++t) {
    if (HasToken(allowed, t)) {
      any = true;
    } else {
      logits[t] = kMasked;
    }
  }
  const bool end_allowed = state_->Complete() || !any;
  for (size_t i = 0; i < end_ids_.size(); ++i) {
    const int32_t e = end_ids_[i];
    if (e >= 0 && e < V) logits[e] = end_allowed ? saved_[i] : kMasked;
  }
}

void FiniteOnly::Narrow(Candidates& c) const {
  const absl::Span<const float> logits = c.logits();
  std::vector<int32_t>& ids = c.ids();
  ids.clear();
  for (int32_t i = 0; i < static_cast<int32_t>(logits.size()); ++i) {
    if (std::isfinite(logits[i])) ids.push_back(i);
  }
  if (ids.empty()) {
    c.ListWhole();
    return;
  }
  c.WeighListed();
}

void MinP::Narrow(Candidates& c) const {
  if (c.whole()) c.ListWhole();
  // The likeliest candidate weighs exp(0) = 1 when it is the maximum logit;
  // after other filters it is still the largest weight among them.
  const std::vector<float>& probs = c.probs();
  std::vector<int32_t>& ids = c.ids();
  float top = 0.0f;
  for (int32_t id : ids) top = std::max(top, probs[id]);
  const float threshold = p_ * top;
  ids.erase(std::remove_if(ids.begin(), ids.end(), [&](int32_t id) { return probs[id] < threshold; }),
            ids.end());
  c.SetListed();
}

float Candidates::Weights::Of(float logit) const {
  return kernels::ExpF((logit - max_logit) * inv_t);
}

float Candidates::WeighAll() {
  const int V = static_cast<int>(logits_.size());
  std::vector<float>& p = *probs_;
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int i = 0; i < V; ++i) {
    p[i] = weights_.Of(logits_[i]);
    sum += p[i];
  }
  return sum;
}

double Candidates::ListWhole() {
  ids_->resize(logits_.size());
  std::iota(ids_->begin(), ids_->end(), 0);
  WeighAll();
  return SetListed();
}

double Candidates::WeighListed() {
  for (int32_t id : *ids_) (*probs_)[id] = weights_.Of(logits_[id]);
  return SetListed();
}

double Candidates::SetListed() {
  whole_ = false;
  double mass = 0;
  for (int32_t c : *ids_) mass += (*probs_)[c];
  mass_ = mass;
  return mass;
}

void TopK::Narrow(Candidates& c) const {
  const absl::Span<const float> logits = c.logits();
  const int V = static_cast<int>(logits.size());
  if (!c.whole()) {
    // After another filter: the k best of its list, kept in list order.
    std::vector<int32_t>& ids = c.ids();
    if (k_ <= 0 || k_ >= static_cast<int>(ids.size())) return;
    const MoreLikely more_likely{logits};
    std::vector<int32_t> best = ids;
    std::nth_element(best.begin(), best.begin() + (k_ - 1), best.end(), more_likely);
    const int32_t kth = best[k_ - 1];
    ids.erase(std::remove_if(ids.begin(), ids.end(), [&](int32_t i) { return more_likely(kth, i); }),
              ids.end());
    c.SetListed();
    return;
  }
  if (k_ <= 0 || k_ >= V) {
    c.ListWhole();
    return;
  }
  // The k largest, ties broken by lower id: the k-th largest value is found
  // on a plain copy, then ids are taken in order.
  std::vector<float>& scratch = c.scratch();
  scratch.assign(logits.begin(), logits.end());
  std::nth_element(scratch.begin(), scratch.begin() + (k_ - 1), scratch.end(), std::greater<float>());
  const float kth = scratch[k_ - 1];
  int above = 0;
  for (float l : logits) above += l > kth;
  int equal_needed = k_ - above;
  std::vector<int32_t>& ids = c.ids();
  ids.clear();
  for (int i = 0; i < V; ++i) {
    if (logits[i] > kth || (logits[i] == kth && equal_needed-- > 0)) ids.push_back(i);
  }
  c.WeighListed();
}

void TopP::Narrow(Candidates& c) const {
  if (c.whole()) c.ListWhole();
  if (p_ >= 1.0f) return;
  const absl::Span<const float> logits = c.logits();
  std::vector<int32_t>& ids = c.ids();
  const std::vector<float>& probs = c.probs();
  const MoreLikely by_logit{logits};
  // The smallest prefix, in descending order, whose mass reaches top_p. Only
  // as many candidates as that needs are sorted: the top m by nth_element,
  // with m growing until they hold the mass. The prefix is the one a full
  // sort would give (same total order).
  const double target = p_ * c.mass();
  size_t m = std::min<size_t>(256, ids.size());
  while (true) {
    if (m < ids.size()) std::nth_element(ids.begin(), ids.begin() + m, ids.end(), by_logit);
    double mass = 0;
    for (size_t i = 0; i < m; ++i) mass += probs[ids[i]];
    if (mass >= target || m == ids.size()) break;
    m = std::min(ids.size(), m * 8);
  }
  std::sort(ids.begin(), ids.begin() + m, by_logit);
  double mass = 0;
  size_t n = 0;
  while (n < m) {
    mass += probs[ids[n++]];
    if (mass >= target) break;
  }
  ids.resize(n);
  c.set_mass(mass);
}

}  // namespace flover
