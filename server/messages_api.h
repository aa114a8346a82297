// Anthropic's Messages API over the same engine: POST /v1/messages (whole,
// or streamed as Anthropic's events) and POST /v1/messages/count_tokens,
// for agent clients that speak it (Claude Code-style). A body is read into
// a ClientRequest, as the OpenAI and gRPC front ends read theirs
// (request_convert), so the three accept and refuse alike; the reply is
// read by ReplyReader (its thinking, text and tool calls become thinking,
// text and tool_use blocks). Errors come back in Anthropic's shape
// ({"type": "error", "error": {"type", "message"}}) with the matching HTTP
// status; an API key may come as x-api-key or as Authorization: Bearer.
#ifndef FLOVER_SERVER_MESSAGES_API_H_
#define FLOVER_SERVER_MESSAGES_API_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/api_keys.h"
#include "server/request_convert.h"
#include "server/request_session.h"

namespace httplib {
class Server;
}

namespace flover::server {

// A parsed /v1/messages body.
struct MessagesRequest {
  ClientRequest request;  // its messages, tools and sampling
  bool stream = false;
};

// model (only `served_model`: NotFound otherwise), max_tokens (required),
// system (a string or text blocks), messages (user and assistant turns,
// their content a string or blocks: text, tool_use, tool_result, thinking;
// a tool_result must answer an earlier tool_use), tools (name, description,
// input_schema) and tool_choice (auto, any, tool, none;
// disable_parallel_tool_use), stop_sequences, temperature, top_p, top_k,
// stream, thinking (enabled or disabled: the template's enable_thinking;
// budget_tokens: max_reasoning_tokens), output_config (format: a JSON
// Schema for the answer; effort: the template's reasoning_effort),
// metadata (ignored). Anything else it cannot do is refused naming the
// field as the API spells it ("messages[1].content[0].tool_use_id").
absl::StatusOr<MessagesRequest> ParseMessagesRequest(absl::string_view body, absl::string_view served_model);

// Anthropic's error body for `status` (not OK): its type from the HTTP
// status (invalid_request_error, authentication_error, not_found_error,
// request_too_large, rate_limit_error, api_error, overloaded_error).
std::string MessagesErrorBody(const absl::Status& status);

// Registers POST /v1/messages and /v1/messages/count_tokens on `http`.
void AddMessagesRoutes(httplib::Server& http, const ServingContext& serving, std::string model_name,
                       const ApiKeys* keys = nullptr);

}  // namespace flover::server

#endif  // FLOVER_SERVER_MESSAGES_API_H_
