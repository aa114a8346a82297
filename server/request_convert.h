// Converts a ClientRequest (what the gRPC and OpenAI front ends both make
// of a request) into an engine Request: prompt text is tokenized, messages
// are rendered with the chat template (whose end of turn then ends the
// reply), a constraint or the tool-call grammar is compiled, unset optional
// fields get their documented defaults, and values the engine cannot take
// are errors naming the field. The engine validates the rest (ranges,
// lengths, vocabulary).
#ifndef FLOVER_SERVER_REQUEST_CONVERT_H_
#define FLOVER_SERVER_REQUEST_CONVERT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/vision/image.h"
#include "model/vision/image_processor.h"
#include "absl/status/statusor.h"
#include "chat/chat_format.h"
#include "chat/reply_reader.h"
#include "chat/tool_calls.h"
#include "model/loader/chat_template_info.h"
#include "tokenizer/tokenizer.h"
#include "engine/choice_constraint.h"
#include "engine/grammar_constraint.h"
#include "engine/json_schema.h"
#include "engine/request.h"
#include "proto/flover.pb.h"
#include "server/image_fetch.h"
#include "util/field_error.h"

namespace flover::server {

constexpr int kDefaultMaxNewTokens = 16;

// How a server turns `messages` into a prompt: the model's chat format, or
// why it has none (the model ships no template, or one that did not parse).
struct ChatSupport {
  std::unique_ptr<const ChatFormat> format;
  // How replies write tool calls: --tool_call_parser, else the template's
  // markers (ToolCallFormatOf), else hermes (what DescribeTools teaches a
  // template without tools).
  ToolCallFormat tool_format = ToolCallFormat::kHermes;
  // The id of mistral's [TOOL_CALLS] where the vocabulary holds it as one
  // special token, else -1: ToolCallGrammar's marker_token.
  int32_t tool_marker_token = -1;
  // How replies reason (chat/reply_reader.h): --reasoning_parser, else the
  // template's tags (ReasoningFormatOf), else none.
  ReasoningFormat reasoning = ReasoningFormat::kNone;
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
// `tool_call_parser`: --tool_call_parser ("" = from the template; an
// unknown name is an error).
// `reasoning_parser`: --reasoning_parser ("auto" or "" = from the
// template; "none"; "think").
absl::StatusOr<std::unique_ptr<ChatSupport>> MakeChatSupport(const std::string& flag,
                                                             ChatTemplateInfo info,
                                                             std::shared_ptr<const Tokenizer> tokenizer,
                                                             const std::string& tool_call_parser = "",
                                                             const std::string& reasoning_parser = "");

constexpr size_t kMaxRequestIdBytes = 256;

// A request as a front end read it, before the model's tokenizer and chat
// template see it: the prompt as the client gave it, and the fields it set
// (an unset optional gets the shared default). gRPC's GenerateRequest
// (FromProto) and an OpenAI body (openai_request) both become one, so both
// front ends tokenize, render chats, default and refuse alike.
// An image a request sends: its bytes (PNG, JPEG or WebP) and the field it
// came in (what a refusal names: "messages[0].content[1]"), or, where the
// bytes are empty, the http(s) URL to fetch them from (server/image_fetch.h).
struct ClientImage {
  std::string bytes;
  std::string field;
  std::string url;
};

struct ClientRequest {
  std::string request_id;
  enum class Prompt { kNone, kText, kTokenIds, kMessages } prompt = Prompt::kNone;
  std::string text;
  std::vector<uint32_t> token_ids;
  std::vector<ChatMessage> messages;  // roles checked in the conversion
  // The images the messages hold, in order of their image parts
  // (ChatMessage::parts).
  std::vector<ClientImage> images;
  // messages: variables for the chat template, a JSON object's text
  // (chat_template_kwargs, with reasoning_effort in it); "" for none.
  std::string template_kwargs;
  // The most tokens a reply that starts inside its reasoning may reason
  // for before the server closes it (</think>), as llama.cpp's
  // --reasoning-budget; unset: no limit.
  std::optional<uint32_t> max_reasoning_tokens;
  std::optional<float> temperature, top_p, repetition_penalty;
  float presence_penalty = 0, frequency_penalty = 0, min_p = 0;
  std::vector<std::pair<uint32_t, float>> logit_bias;
  int32_t top_k = 0;  // 0: no limit
  std::optional<uint64_t> seed;
  std::optional<uint32_t> max_new_tokens;
  std::vector<uint32_t> stop_token_ids;
  std::vector<std::string> stop_strings;
  bool ignore_eos = false;
  bool speculative = true;  // may draft (engine/request.h)
  bool return_logprobs = false;
  uint32_t top_logprobs = 0;
  // A constraint on the output, when set: one kind, and the field that
  // named it (what a refusal names: "guided_regex", "constraint.regex").
  struct Constraint {
    enum class Kind { kChoice, kJsonSchema, kJsonObject, kRegex, kGrammar } kind = Kind::kChoice;
    std::vector<std::string> choices;  // kChoice
    std::string text;                  // the schema, regex or grammar
    std::string field;
    JsonStringLimits string_limits;    // kJsonSchema and kJsonObject
  };
  std::optional<Constraint> constraint;
  // Functions the model may call (messages only), and what it may do with
  // them: kNone shows them but reads no calls; the others are enforced by
  // a grammar (chat/tool_calls.h). Unset with tools: kAuto; without: kNone.
  std::vector<ToolFunction> tools;
  std::optional<ToolChoice> tool_choice;
  std::string tool_choice_name;  // kNamed
  bool parallel_tool_calls = true;
};

// What a request lets the model do with its tools, its default applied.
ToolChoice ToolChoiceOf(const ClientRequest& request);

// The most tools a request may offer.
inline constexpr size_t kMaxTools = 128;

ClientRequest FromProto(const v1::GenerateRequest& request);

// What a server converts requests with; every pointer may be null (no
// tokenizer: token ids only, no constraints; no chat support: messages
// refused).
struct ConvertContext {
  const Tokenizer* tokenizer = nullptr;
  const ChatSupport* chat = nullptr;
  // The tokenizer's vocabulary as bytes, for choices; the grammar compiler
  // for the other constraints (null: refused).
  std::shared_ptr<const TokenBytes> token_bytes;
  int vocab_size = 0;
  GrammarConstraints* grammars = nullptr;
  // A vision model's image processor (null: images refused), and the
  // bounds on what a request sends.
  const ImageProcessor* image_processor = nullptr;
  ImageLimits image_limits;
  int max_images = 16;  // per request
  // Where remote images may come from (--image_url_hosts); null: none.
  const ImageFetchOptions* image_fetch = nullptr;
};

// Whether a chat reply to `prompt` (a rendered chat's tokens) starts
// inside its reasoning: the server reads reasoning (chat->reasoning) and
// the prompt's end opened it (StartsInReasoning).
bool PromptOpensReasoning(const ChatSupport* chat, const Tokenizer* tokenizer, absl::Span<const int32_t> prompt);

// `random_seed` is used when the request sets no seed.
absl::StatusOr<Request> ToEngineRequest(const ClientRequest& request, const ConvertContext& context,
                                        uint64_t random_seed);
absl::StatusOr<Request> ToEngineRequest(const v1::GenerateRequest& request,
                                        const ConvertContext& context, uint64_t random_seed);

}  // namespace flover::server

#endif  // FLOVER_SERVER_REQUEST_CONVERT_H_
