// The stages a sampler runs, in order, to turn one row of logits into the
// set of tokens a draw picks from:
//
//   LogitsProcessor (edits the logits: the repetition, presence and
//   frequency penalties, a logit bias, a constraint's mask)
//   -> temperature (exp((logit - max) / t): unnormalized probabilities)
//   -> CandidateFilter (narrows the candidates: the unmasked tokens, top-k,
//   top-p, then min-p)
//   -> the draw.
//
// Greedy requests run the processors and take the best token. Each stage
// is a small object the Sampler owns, built from SamplingParams; the order
// is part of the result (a seed gives the same tokens only in the same
// order), so it is fixed here and in Sampler's constructor.
#ifndef FLOVER_ENGINE_LOGITS_PROCESSORS_H_
#define FLOVER_ENGINE_LOGITS_PROCESSORS_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "engine/constraint.h"

namespace flover {

// The order every stage ranks tokens in: the higher logit first, ties to
// the lower id (a total order, so the same logits always rank alike).
struct MoreLikely {
  absl::Span<const float> logits;
  bool operator()(int32_t a, int32_t b) const {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  }
};

// Edits one row of logits in place. `history` is the prompt and the output
// so far.
class LogitsProcessor {
 public:
  virtual ~LogitsProcessor() = default;
  virtual void Process(absl::Span<float> logits, absl::Span<const int32_t> history) = 0;
};

// CTRL's repetition penalty as transformers applies it: each distinct token
// of the history once, a positive logit divided by `penalty`, a negative one
// multiplied.
class RepetitionPenalty final : public LogitsProcessor {
 public:
  explicit RepetitionPenalty(float penalty) : penalty_(penalty) {}
  void Process(absl::Span<float> logits, absl::Span<const int32_t> history) override;

 private:
  float penalty_;
  std::vector<bool> seen_;  // scratch, reused across steps
};

// A constraint's mask (engine/constraint.h): tokens the sequence's state
// does not allow next become -infinity, and so do its end-of-sequence
// tokens unless the output is complete. If nothing at all would remain
// (not expected: constraints avoid dead ends) the end-of-sequence tokens
// keep their logits, so the sequence can end.
class ConstraintMask final : public LogitsProcessor {
 public:
  ConstraintMask(ConstraintState* state, std::vector<int32_t> end_ids)
      : state_(state), end_ids_(std::move(end_ids)) {}
  void Process(absl::Span<float> logits, absl::Span<const int32_t> history) override;

 private:
  ConstraintState* state_;  // the sequence's, which outlives this
  std::vector<int32_t> end_ids_;
  std::vector<float> saved_;     // scratch: the end ids' logits
};

// OpenAI's presence and frequency penalties, over the tokens after the
// prompt: logit -= presence (once, if the token appeared) + frequency *
// (times it appeared).
class PresenceFrequencyPenalty final : public LogitsProcessor {
 public:
  PresenceFrequencyPenalty(float presence, float frequency, size_t prompt_length)
      : presence_(presence), frequency_(frequency), prompt_length_(prompt_length) {}
  void Process(absl::Span<float> logits, absl::Span<const int32_t> history) override;

 private:
  float presence_, frequency_;
  size_t prompt_length_;
  std::vector<int32_t> counts_;  // scratch, reused across steps
};

// Adds a bias to some tokens' logits (ids outside the vocabulary are
// refused before a request runs).
class LogitBias final : public LogitsProcessor {
 public:
  explicit LogitBias(std::vector<std::pair<int32_t, float>> bias) : bias_(std::move(bias)) {}
  void Process(absl::Span<float> logits, absl::Span<const int32_t> history) override;

 private:
  std::vector<std::pair<int32_t, float>> bias_;
};

// The tokens a draw may still pick, with their unnormalized probabilities.
// Until a filter narrows it the set is the whole vocabulary, not yet listed
// or weighed (a plain temperature draw never lists it).
class Candidates {
 public:
  // exp((logit - max_logit) * inv_t): a token's unnormalized probability.
  struct Weights {
    float inv_t;
    float max_logit;
    float Of(float logit) const;
  };

  Candidates(absl::Span<const float> logits, const Weights& weights, std::vector<int32_t>* ids,
             std::vector<float>* probs, std::vector<float>* scratch)
      : logits_(logits), weights_(weights), ids_(ids), probs_(probs), scratch_(scratch) {}

  absl::Span<const float> logits() const { return logits_; }
  const Weights& weights() const { return weights_; }
  bool whole() const { return whole_; }
  // The listed candidates (after ListWhole or a filter) and probs()[id].
  std::vector<int32_t>& ids() { return *ids_; }
  std::vector<float>& probs() { return *probs_; }
  std::vector<float>& scratch() { return *scratch_; }
  double mass() const { return mass_; }

  // Lists the whole vocabulary, in id order, weighed; returns its mass.
  double ListWhole();
  // Weighs every token into probs() (no list); returns the float sum.
  float WeighAll();
  // After a filter has listed ids() and their probs(): their mass, summed in
  // list order.
  double SetListed();
  // The same after a filter has listed ids() only: weighs them first.
  double WeighListed();
  // A filter that reorders or shortens ids() sets the mass it computed.
  void set_mass(double mass) { mass_ = mass; }

 private:
  absl::Span<const float> logits_;
  Weights weights_;
  std::vector<int32_t>* ids_;
  std::vector<float>* probs_;
  std::vector<float>* scratch_;
  bool whole_ = true;
  double mass_ = 0;
};

// Narrows the candidates (and sets their mass).
class CandidateFilter {
 public:
  virtual ~CandidateFilter() = default;
  virtual void Narrow(Candidates& c) const = 0;
};

// The tokens with finite logits (those a mask left), in id order: first
// when a processor masks, so a masked token is never drawn however small
// its weight would round to. Keeps the whole vocabulary if none is finite.
class FiniteOnly final : public CandidateFilter {
 public:
  void Narrow(Candidates& c) const override;
};

// The k most likely, ties to the lower id, listed in id order. k at least
// the vocabulary keeps all of it.
class TopK final : public CandidateFilter {
 public:
  explicit TopK(int k) : k_(k) {}
  void Narrow(Candidates& c) const override;

 private:
  int k_;
};

// The nucleus: the smallest prefix, most likely first (ties to the lower
// id), whose mass reaches p of the candidates' mass, listed in that order.
class TopP final : public CandidateFilter {
 public:
  explicit TopP(float p) : p_(p) {}
  void Narrow(Candidates& c) const override;

 private:
  float p_;
};

// Min-p: the candidates at least p times as likely as the likeliest (after
// temperature), kept in their order.
class MinP final : public CandidateFilter {
 public:
  explicit MinP(float p) : p_(p) {}
  void Narrow(Candidates& c) const override;

 private:
  float p_;
};

}  // namespace flover

#endif  // FLOVER_ENGINE_LOGITS_PROCESSORS_H_
