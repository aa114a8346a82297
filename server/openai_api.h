// The OpenAI-compatible HTTP API over the same engine as the gRPC one:
// POST /v1/completions and /v1/chat/completions (streamed as server-sent
// events or not), GET /v1/models, GET /health; any other path is a 404 in
// OpenAI's error shape. Bodies are read with nlohmann-json into a
// ClientRequest (openai_request), as gRPC's GenerateRequest is, and
// converted by request_convert, so both front ends accept and refuse the
// same things; answers are written as JSON values, and errors come back in
// OpenAI's JSON error shape with the matching HTTP status.
#ifndef FLOVER_SERVER_OPENAI_API_H_
#define FLOVER_SERVER_OPENAI_API_H_

#include <string>

#include "engine/engine.h"
#include "server/api_keys.h"
#include "server/openai_request.h"
#include "server/request_convert.h"
#include "server/request_session.h"
#include "tokenizer/tokenizer.h"

namespace httplib {
class Server;
}

namespace flover::server {

// Registers the routes on `http`. What `serving` points to must outlive the
// server; `model_name` is the model's id
// (what clients send as `model`). /health answers 503 once the engine
// refuses requests (draining, or failed for good); it stays open, while
// with `keys` (may be null) /v1/* need `Authorization: Bearer KEY` (401
// otherwise).
void AddOpenAiRoutes(httplib::Server& http, const ServingContext& serving,
                     std::string model_name, const ApiKeys* keys = nullptr);

}  // namespace flover::server

#endif  // FLOVER_SERVER_OPENAI_API_H_
