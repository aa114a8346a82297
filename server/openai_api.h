// An OpenAI-compatible HTTP API over the same engine as the gRPC one:
// POST /v1/completions (streamed as server-sent events or not), GET
// /v1/models, GET /health. Requests are translated into the gRPC API's
// GenerateRequest and converted by the same code (request_convert), so both
// front ends accept and refuse the same things; errors come back in OpenAI's
// JSON error shape with the matching HTTP status.
#ifndef FLOVER_SERVER_OPENAI_API_H_
#define FLOVER_SERVER_OPENAI_API_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/engine.h"
#include "server/api_keys.h"
#include "proto/flover.pb.h"
#include "tokenizer/tokenizer.h"

namespace httplib {
class Server;
}

namespace flover::server {

// A /v1/completions body, parsed.
struct CompletionRequest {
  v1::GenerateRequest request;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool echo = false;
};

// Parses and checks a /v1/completions body. `served_model` is the only
// model name accepted (NotFound otherwise); InvalidArgument names the field
// for anything else this server cannot do as asked (n > 1, several prompts,
// penalties, logprobs > 1, suffix, logit_bias).
absl::StatusOr<CompletionRequest> ParseCompletionRequest(absl::string_view body,
                                                         absl::string_view served_model);

// OpenAI's error body for `status` (not OK), its HTTP status from
// status_util; the engine's field names become the API's (max_new_tokens ->
// max_tokens, stop_strings -> stop, text/token_ids -> prompt).
std::string OpenAiErrorBody(const absl::Status& status);

// Registers the routes on `http`. `engine` and `tokenizer` (may be null)
// must outlive the server. /health answers 503 once the engine refuses
// requests (draining, or failed for good); it stays open, while with `keys`
// (may be null) /v1/* need `Authorization: Bearer KEY` (401 otherwise).
void AddOpenAiRoutes(httplib::Server& http, Engine& engine, const Tokenizer* tokenizer,
                     std::string model_name, const ApiKeys* keys = nullptr);

}  // namespace flover::server

#endif  // FLOVER_SERVER_OPENAI_API_H_
