// What a client asks the engine for, and what the engine tells it back.
#ifndef FLOVER_ENGINE_REQUEST_H_
#define FLOVER_ENGINE_REQUEST_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "engine/constraint.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "model/pooling.h"
#include "model/vision/image_encoder.h"

namespace flover {

// Bounds on what one request may ask the engine to check at every step
// (each generated token is compared with every stop id and string).
inline constexpr int kMaxStopTokenIds = 1024;
inline constexpr int kMaxStopStrings = 64;
inline constexpr int kMaxStopStringBytes = 1024;

struct StopConditions {
  int max_new_tokens = 16;
  std::vector<int32_t> stop_token_ids;   // stop after emitting one of these
  std::vector<std::string> stop_strings; // stop when the text contains one
  bool ignore_eos = false;
  // More ids that end the sequence as the model's EOS does (finish reason
  // EOS, no text, and not with ignore_eos): a chat template's end of turn.
  std::vector<int32_t> end_of_turn_ids;
};

// The most alternatives a request may ask for per token.
inline constexpr int kMaxTopLogprobs = 20;

// Prompt rows whose input embedding is given instead of looked up in the
// token table (an image's features in place of its placeholder tokens):
// `count` rows from prompt index `position`, count x hidden values. `key`
// names what the values were computed from (a hash of the image): the
// prefix cache reuses K/V across requests only where their spans have the
// same keys at the same places, so spans with one key must hold the same
// values.
struct GivenPromptRows {
  int32_t position = 0;
  int32_t count = 0;
  // The rows' values; where layers > 0, followed by their additions after
  // each of the model's first `layers` layers (Qwen3-VL's deepstack;
  // ForwardBatch::given_layers), count x hidden each.
  std::shared_ptr<const std::vector<float>> values;
  uint64_t key = 0;
  int32_t layers = 0;
  // The whole of an image on a merged grid of grid_h x grid_w rows
  // (row-major), for a multimodal rotary's positions (MropePosition); 0:
  // rows at their index.
  int32_t grid_h = 0, grid_w = 0;
  // The rows attend to each other both ways (Gemma 3's images): each sees
  // every row of the span, and one step computes the span whole (its
  // chunk may start inside it, after a cached prefix, but not end there).
  bool whole = false;
};

struct Request {
  std::vector<int32_t> prompt;
  // A vision model's images, encoded by the engine (EngineOptions::vision)
  // before the prompt runs; given_rows are then made from them.
  std::vector<PromptImage> images;
  // Spans of the prompt whose rows are given, in order and apart.
  std::vector<GivenPromptRows> given_rows;
  SamplingParams sampling;
  StopConditions stop;
  absl::Time deadline = absl::InfiniteFuture();
  bool return_logprobs = false;
  // With return_logprobs: this many most likely tokens of each step's
  // distribution too (0 to kMaxTopLogprobs).
  int top_logprobs = 0;
  // What the output must be (engine/constraint.h), or null. Logprobs are
  // then those of the masked distribution.
  std::shared_ptr<const CompiledConstraint> constraint;
  // May draft tokens to verify when the engine speculates (it never changes
  // the output; a client may still opt out, e.g. to measure without it).
  bool speculative = true;
  // An embedding request: the prompt is computed in the fused steps as any
  // prompt is, nothing is generated, and the finish event carries the
  // prompt's final hidden rows pooled so (model/pooling.h), cut to
  // embed_dims values (0: all). Needs an engine made with embeddings on.
  std::optional<Pooling> embed;
  int embed_dims = 0;
  // A scoring request (rerank): prompt-only too, and the finish event
  // carries the model's logits of these tokens at the prompt's last
  // position (Qwen3-Reranker's "yes" and "no"). At most kMaxScoreTokens.
  std::vector<int32_t> score_tokens;
};

inline constexpr int kMaxScoreTokens = 16;

// An embedding or scoring request: its prompt is computed, nothing generated.
inline bool PromptOnly(const Request& r) { return r.embed.has_value() || !r.score_tokens.empty(); }

enum class FinishReason { kLength, kStop, kEos, kCancelled, kDeadline, kError };
constexpr int kNumFinishReasons = 6;
absl::string_view FinishReasonName(FinishReason reason);

struct TokenEvent {
  int32_t token = 0;
  // Text released with this token (empty without a tokenizer, while a UTF-8
  // character or a possible stop string is incomplete, and for EOS).
  std::string text;
  float logprob = 0.0f;  // set when the request asked for logprobs
  // The request's top_logprobs most likely tokens of the distribution the
  // token was drawn from, most likely first, with their log-probabilities.
  std::vector<std::pair<int32_t, float>> top_logprobs;
};

struct Usage {
  int prompt_tokens = 0;
  int generated_tokens = 0;
};

struct FinishEvent {
  FinishReason reason = FinishReason::kLength;
  Usage usage;
  std::string text;     // text held back until the end, if any
  absl::Status error;   // set when reason is kError
  std::vector<float> embedding;  // an embedding request's vector (reason kStop)
  std::vector<float> logits;     // a scoring request's logits of its score_tokens (reason kStop)
};

// Receives a request's tokens, then exactly one finish event. Called on the
// engine thread: implementations must return quickly and must not call back
// into the engine's blocking methods (Shutdown).
class TokenSink {
 public:
  virtual ~TokenSink() = default;
  virtual void OnToken(RequestId id, const TokenEvent& event) = 0;
  virtual void OnFinish(RequestId id, const FinishEvent& event) = 0;
};

}  // namespace flover

#endif  // FLOVER_ENGINE_REQUEST_H_
