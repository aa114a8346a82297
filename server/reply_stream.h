// What the HTTP chat APIs that stream one reply as server-sent events share
// (Anthropic's Messages and OpenAI's Responses; chat completions streams n
// samples its own way): the stream's loop, and the API key check.
#ifndef FLOVER_SERVER_REPLY_STREAM_H_
#define FLOVER_SERVER_REPLY_STREAM_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "chat/reply_reader.h"
#include "engine/engine.h"
#include "server/api_keys.h"
#include "server/request_session.h"

namespace httplib {
class Response;
}

namespace flover::server {

// An API's events around a reply, as the text of its stream.
struct ReplyEvents {
  std::function<std::string()> start;                                      // before the reply
  std::function<std::string(const ReplyReader::Event&)> event;             // each of the reader's
  std::function<std::string(const FinishEvent&, int calls)> end;           // after the reader's last
  std::function<std::string(const absl::Status&)> error;                   // a request that failed
};

// Streams request `id`'s reply (`sink` collects it) as `events` write it:
// each call of the provider writes what arrived (waiting up to 100 ms),
// read by a ReplyReader of `options`. A client that leaves cancels the
// request.
void StreamReply(httplib::Response& res, Engine& engine, RequestId id, std::shared_ptr<CollectingSink> sink,
                 const ReplyReader::Options& options, ReplyEvents events);

// A request's API key from its `authorization` header ("Bearer KEY"): OK
// without keys; else the keys' verdict, a refusal counted in the engine's
// metrics.
absl::Status CheckApiKey(const ApiKeys* keys, Engine& engine, const std::string& authorization);

}  // namespace flover::server

#endif  // FLOVER_SERVER_REPLY_STREAM_H_
