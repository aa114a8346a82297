// OpenAI request bodies (/v1/completions, /v1/chat/completions), read with
// nlohmann-json (server/json_body) into a ClientRequest, so both front ends
// accept and refuse the same things through one conversion
// (request_convert). Fields the server
// cannot do as asked are refused naming the field (as the API spells it);
// an OpenAI-shaped error body comes from OpenAiErrorBody.
#ifndef FLOVER_SERVER_OPENAI_REQUEST_H_
#define FLOVER_SERVER_OPENAI_REQUEST_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/request_convert.h"

namespace flover::server {

// A parsed body.
struct OpenAiRequest {
  ClientRequest request;  // text / token_ids (completions) or messages (chat)
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool echo = false;           // completions only
  int n = 1;                   // samples of the same prompt, 1 to kMaxSamples
};

// The most samples one request may ask for (`n`).
inline constexpr int kMaxSamples = 16;

// The most alternatives each endpoint returns per token (OpenAI's limits).
inline constexpr int kMaxCompletionLogprobs = 5;
inline constexpr int kMaxChatTopLogprobs = 20;

// /v1/completions: prompt (a string, token ids, or a list of one of
// either), max_tokens, logprobs (0-5: the sampled token's and that many
// alternatives), echo, suffix "" only, and the shared fields below.
// `served_model` is the only model accepted (NotFound otherwise).
absl::StatusOr<OpenAiRequest> ParseCompletionRequest(absl::string_view body,
                                                     absl::string_view served_model);

// /v1/chat/completions: messages (role and content: a string, or a list of
// text parts joined with newlines; any other part refused by name; an
// assistant's tool_calls, a tool's tool_call_id), tools, tool_choice and
// parallel_tool_calls, response_format, max_tokens or
// max_completion_tokens (unset: the server lets the reply fill the
// context), logprobs (true / false) with top_logprobs (0-20),
// and the shared fields: model, temperature, top_p, top_k, min_p, seed,
// stop, n (up to kMaxSamples; best_of 1 only), presence_penalty,
// frequency_penalty, logit_bias, stream, stream_options.include_usage, the
// guided_* constraints, and the extensions ignore_eos, repetition_penalty
// and speculative (false: no speculative drafts for this request).
absl::StatusOr<OpenAiRequest> ParseChatRequest(absl::string_view body,
                                               absl::string_view served_model);

// /tokenize: "prompt" or "content" (a string, or token ids), or "messages"
// (as chat's, with add_generation_prompt); nothing else is read.
absl::StatusOr<ClientRequest> ParseTokenizeRequest(absl::string_view body);
// /detokenize: "tokens", a list of ids in [0, vocab_size).
absl::StatusOr<std::vector<int32_t>> ParseDetokenizeRequest(absl::string_view body, int vocab_size);

// OpenAI's error body for `status` (not OK), its HTTP status from
// status_util; the engine's field names become the API's (max_new_tokens ->
// max_tokens, stop_strings -> stop, text/token_ids -> prompt), and "param"
// is the field the message starts with.
std::string OpenAiErrorBody(const absl::Status& status);

}  // namespace flover::server

#endif  // FLOVER_SERVER_OPENAI_REQUEST_H_
