// Converts the API's GenerateRequest into an engine Request: prompt text is
// tokenized, unset optional fields get their documented defaults, and values
// the proto types allow but the engine cannot take are errors naming the
// field. The engine validates the rest (ranges, lengths, vocabulary).
#ifndef FLOVER_SERVER_REQUEST_CONVERT_H_
#define FLOVER_SERVER_REQUEST_CONVERT_H_

#include "absl/status/statusor.h"
#include "tokenizer/tokenizer.h"
#include "engine/request.h"
#include "proto/flover.pb.h"

namespace flover::server {

constexpr int kDefaultMaxNewTokens = 16;
constexpr size_t kMaxRequestIdBytes = 256;

// `random_seed` is used when the request sets no seed.
absl::StatusOr<Request> ToEngineRequest(const v1::GenerateRequest& request,
                                        const Tokenizer* tokenizer, int vocab_size,
                                        uint64_t random_seed);

}  // namespace flover::server

#endif  // FLOVER_SERVER_REQUEST_CONVERT_H_
