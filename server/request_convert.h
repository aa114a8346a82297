// Converts the API's GenerateRequest into an engine Request: prompt text is
// tokenized, messages are rendered with the chat template (whose end of turn
// then ends the reply), unset optional fields get their documented
// defaults, and values the proto types allow but the engine cannot take are
// errors naming the field. The engine validates the rest (ranges, lengths,
// vocabulary).
#ifndef FLOVER_SERVER_REQUEST_CONVERT_H_
#define FLOVER_SERVER_REQUEST_CONVERT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "chat/chat_format.h"
#include "model/loader/chat_template_info.h"
#include "tokenizer/tokenizer.h"
#include "engine/request.h"
#include "proto/flover.pb.h"
#include "util/field_error.h"

namespace flover::server {

constexpr int kDefaultMaxNewTokens = 16;

// How a server turns `messages` into a prompt: the model's chat format, or
// why it has none (the model ships no template, or one that did not parse).
struct ChatSupport {
  std::unique_ptr<const ChatFormat> format;
  absl::Status unavailable = FieldError(
      "messages",
      "this model has no chat template; send text or token_ids, or start the server with "
      "--chat_template=FILE",
      absl::StatusCode::kFailedPrecondition);
};

// How `messages` are served: the model's chat template (`info`), or the file
// --chat_template names (`flag`, when not empty), or why not. A
// --chat_template that does not parse is an error (the server stops); a
// model's own that does not is kept as the reason chat is refused.
absl::StatusOr<std::unique_ptr<ChatSupport>> MakeChatSupport(const std::string& flag,
                                                             ChatTemplateInfo info,
                                                             std::shared_ptr<const Tokenizer> tokenizer);

constexpr size_t kMaxRequestIdBytes = 256;

// `random_seed` is used when the request sets no seed. `chat` (may be null:
// no chat support) formats `messages`.
absl::StatusOr<Request> ToEngineRequest(const v1::GenerateRequest& request,
                                        const Tokenizer* tokenizer, const ChatSupport* chat,
                                        int vocab_size, uint64_t random_seed);

}  // namespace flover::server

#endif  // FLOVER_SERVER_REQUEST_CONVERT_H_
