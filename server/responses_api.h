// OpenAI's Responses API over the same engine: POST /v1/responses (whole,
// or streamed as its semantic events), GET and DELETE /v1/responses/{id},
// for clients that speak it (Codex-style agents, the newer OpenAI SDK
// features). A body is read into a ClientRequest, as the other front ends
// read theirs (request_convert), so all accept and refuse alike; the reply
// is read by ReplyReader (reasoning, message and function_call items).
//
// Stored responses (`store`, true by default) are kept in memory, at most
// `capacity` of them, the least recently used going first: each holds its
// conversation (the input items, with those of the response it continued,
// and its output), so `previous_response_id` continues it and GET returns
// it. A response evicted or deleted is 404.
#ifndef FLOVER_SERVER_RESPONSES_API_H_
#define FLOVER_SERVER_RESPONSES_API_H_

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/api_keys.h"
#include "server/json_body.h"
#include "server/request_convert.h"
#include "server/request_session.h"

namespace httplib {
class Server;
}

namespace flover::server {

// A parsed /v1/responses body. `request.messages` holds this body's input
// only; a previous response's conversation goes before it when served.
struct ResponsesRequest {
  ClientRequest request;
  bool stream = false;
  bool store = true;
  std::string previous_response_id;
  std::string instructions;  // the system message ("" for none)
  Json text_format;          // as sent (null: text)
};

// model (only `served_model`: NotFound otherwise), input (a string, or
// items: messages with input_text / output_text parts, function_call,
// function_call_output, reasoning), instructions, tools (function tools)
// and tool_choice, parallel_tool_calls, text.format (text, json_object,
// json_schema), max_output_tokens, temperature, top_p, stream, store,
// previous_response_id, reasoning.effort, metadata and user (ignored).
// Refusals name the field as the API spells it ("input[2].call_id").
absl::StatusOr<ResponsesRequest> ParseResponsesRequest(absl::string_view body, absl::string_view served_model);

// The stored responses: bounded, least recently used out first.
class ResponseStore {
 public:
  explicit ResponseStore(size_t capacity) : capacity_(capacity) {}
  struct Entry {
    Json response;                      // the response object as returned
    std::vector<ChatMessage> messages;  // its whole conversation, instructions aside
  };
  void Put(const std::string& id, Entry entry);
  std::optional<Entry> Get(const std::string& id);
  bool Erase(const std::string& id);
  size_t capacity() const { return capacity_; }

 private:
  std::mutex mu_;
  const size_t capacity_;
  std::list<std::pair<std::string, Entry>> order_;  // most recently used first
  absl::flat_hash_map<std::string, std::list<std::pair<std::string, Entry>>::iterator> by_id_;
};

// Registers POST /v1/responses and GET / DELETE /v1/responses/{id};
// `store` must outlive the server.
void AddResponsesRoutes(httplib::Server& http, const ServingContext& serving, std::string model_name,
                        ResponseStore& store, const ApiKeys* keys = nullptr);

}  // namespace flover::server

#endif  // FLOVER_SERVER_RESPONSES_API_H_
