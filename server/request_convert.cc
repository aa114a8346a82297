#include "server/request_convert.h"

#include <openssl/sha.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "chat/harmony_reader.h"
#include "engine/token_then_constraint.h"
#include "util/field_error.h"
#include "util/file_util.h"
#include "util/status_macros.h"

namespace flover::server {

namespace {

constexpr size_t kMaxMessages = 4096;

// The prompt's images (ClientRequest::images) processed for the vision
// encoder: each one's pixels into r->images, keyed by a hash of its bytes
// and the processor's settings, and the rendered `text` with each of the
// template's image placeholders (in order) replaced by the image's
// tokens' text.
absl::Status AddImages(const std::vector<ClientImage>& images, const ConvertContext& context, std::string* text,
                       Request* r) {
  if (images.size() > static_cast<size_t>(context.max_images)) {
    return FieldError("messages", absl::StrCat("at most ", context.max_images, " images, got ", images.size()));
  }
  const ImageProcessor& processor = *context.image_processor;
  const std::string& placeholder = processor.placeholder();
  size_t at = 0;
  for (const ClientImage& image : images) {
    std::string fetched;
    if (image.bytes.empty() && !image.url.empty()) {
      ImageFetchOptions off;
      const ImageFetchOptions& fetch = context.image_fetch != nullptr ? *context.image_fetch : off;
      absl::StatusOr<std::string> body = FetchImage(image.url, fetch);
      if (!body.ok()) return FieldError(image.field, body.status().message());
      fetched = *std::move(body);
    }
    auto decoded = DecodeImage(image.bytes.empty() ? fetched : image.bytes, context.image_limits);
    if (!decoded.ok()) return FieldError(image.field, decoded.status().message());
    absl::StatusOr<ProcessedPromptImage> p = processor.Process(*decoded);
    if (!p.ok()) return FieldError(image.field, p.status().message());
    at = text->find(placeholder, at);
    if (at == std::string::npos) {
      return FieldError(image.field, absl::StrCat("the chat template wrote no ", placeholder, " for this image"));
    }
    text->replace(at, placeholder.size(), p->text);
    at += p->text.size();
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256(reinterpret_cast<const unsigned char*>(image.bytes.data()), image.bytes.size(), digest);
    uint64_t key = 0;
    std::memcpy(&key, digest, sizeof(key));
    p->image.key = key ^ processor.settings_key();  // the same bytes processed otherwise are other pixels
    r->images.push_back(std::move(p->image));
  }
  if (text->find(placeholder, at) != std::string::npos) {
    return FieldError("messages", absl::StrCat("the text holds ", placeholder, " itself; it stands for an image part here"));
  }
  return absl::OkStatus();
}

absl::Status Messages(const std::vector<ChatMessage>& messages, const std::vector<ToolFunction>& tools,
                      const std::string& kwargs, const ChatSupport* support, const std::vector<ClientImage>& images,
                      const ConvertContext& context, Request* r) {
  if (support == nullptr || support->format == nullptr) {
    return support != nullptr ? support->unavailable : ChatSupport().unavailable;
  }
  const ChatFormat* chat = support->format.get();
  if (messages.empty()) return FieldError("messages", "is empty");
  if (messages.size() > kMaxMessages) {
    return FieldError("messages", absl::StrCat("at most ", kMaxMessages, ", got ", messages.size()));
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      return FieldError(absl::StrCat("messages[", i, "].role"),
                        absl::StrCat("'", role, "' is not supported (system, user, assistant, tool)"));
    }
    if (!messages[i].tool_calls.empty() && role != "assistant") {
      return FieldError(absl::StrCat("messages[", i, "].tool_calls"), "only an assistant's message makes calls");
    }
  }
  if (!images.empty() && context.image_processor == nullptr) {
    return FieldError(images[0].field, "this model takes no images: it has no vision encoder Flover runs");
  }
  absl::StatusOr<std::vector<int32_t>> ids;
  if (images.empty()) {
    ids = chat->Tokenize(messages, tools, kwargs);
  } else {
    absl::StatusOr<std::string> text = chat->Render(messages, tools, kwargs);
    if (text.ok()) {
      FLOVER_RETURN_IF_ERROR(AddImages(images, context, &*text, r));
      if (context.tokenizer == nullptr) return FieldError("messages", "the model has no tokenizer");
      ids = context.tokenizer->Encode(*text, /*add_special_tokens=*/false);
    } else {
      ids = text.status();
    }
  }
  // A template's own error (roles that must alternate, say), or past a
  // rendering limit: the request's to fix either way.
  if (!ids.ok()) {
    const std::string message(ids.status().message());
    if (absl::StartsWith(message, "chat_template_kwargs")) {
      const size_t colon = message.find(": ");
      return FieldError(message.substr(0, colon), colon == std::string::npos ? message : message.substr(colon + 2));
    }
    return FieldError("messages", message);
  }
  r->prompt = std::move(*ids);
  r->stop.end_of_turn_ids = chat->end_of_turn_ids();
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const CompiledConstraint>> CompileConstraint(
    const ClientRequest::Constraint& c, const ConvertContext& context) {
  using Kind = ClientRequest::Constraint::Kind;
  if (context.token_bytes == nullptr) {
    return FieldError(c.field, "the model has no tokenizer, so its output cannot be constrained");
  }
  if (c.string_limits.any()) {
    if (c.kind != Kind::kJsonSchema && c.kind != Kind::kJsonObject) {
      return FieldError(c.string_limits.max_length > 0    ? "constraint.max_string_length"
                        : c.string_limits.max_repeats > 0 ? "constraint.max_string_repeats"
                                                          : "constraint.max_item_repeats",
                        "applies only to JSON output (json_schema or json_object)");
    }
    if (c.string_limits.max_length > kMaxStringLengthLimit) {
      return FieldError("constraint.max_string_length", absl::StrCat("at most ", kMaxStringLengthLimit));
    }
    for (const auto& [repeats, name] : {std::pair<int, const char*>{c.string_limits.max_repeats,
                                                                     "constraint.max_string_repeats"},
                                        {c.string_limits.max_item_repeats, "constraint.max_item_repeats"}}) {
      if (repeats != 0 && (repeats < kMinStringRepeats || repeats > kMaxStringRepeats)) {
        return FieldError(name, absl::StrCat("must be from ", kMinStringRepeats, " to ", kMaxStringRepeats));
      }
    }
  }
  if (c.kind == Kind::kChoice) return CompileChoices(c.choices, context.token_bytes);
  if (context.grammars == nullptr) {
    return FieldError(c.field, "this server compiles no grammars", absl::StatusCode::kUnimplemented);
  }
  switch (c.kind) {
    case Kind::kJsonSchema: return context.grammars->JsonSchema(c.text, c.field, c.string_limits);
    case Kind::kJsonObject: return context.grammars->AnyJson(c.field, c.string_limits);
    case Kind::kRegex: return context.grammars->Regex(c.text, c.field);
    case Kind::kGrammar: return context.grammars->Grammar(c.text, c.field);
    case Kind::kChoice: break;
  }
  return FieldError(c.field, "unknown constraint");
}

// A function name as OpenAI allows them: 1-64 of a-z, A-Z, 0-9, _ and -.
bool ValidToolName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return absl::ascii_isalnum(c) || c == '_' || c == '-'; });
}

// The tool a harmony reply is made to call: the named one, or the only one
// when any call is required; -1 for none of those.
int HarmonyForcedCall(const ClientRequest& in) {
  const ToolChoice choice = ToolChoiceOf(in);
  if (choice == ToolChoice::kRequired && in.tools.size() == 1) return 0;
  if (choice != ToolChoice::kNamed) return -1;
  for (size_t i = 0; i < in.tools.size(); ++i) {
    if (in.tools[i].name == in.tool_choice_name) return static_cast<int>(i);
  }
  return -1;
}

// The tools' own checks, and the grammar that enforces the request's
// tool_choice (null for none).
absl::StatusOr<std::shared_ptr<const CompiledConstraint>> ToolConstraint(const ClientRequest& in,
                                                                         const ConvertContext& context) {
  const ToolChoice choice = ToolChoiceOf(in);
  if (in.tools.empty()) {
    if (choice == ToolChoice::kNone) return nullptr;
    return FieldError("tool_choice", "needs tools to choose from");
  }
  if (in.prompt != ClientRequest::Prompt::kMessages) return FieldError("tools", "are only for chats (messages)");
  if (in.tools.size() > kMaxTools) {
    return FieldError("tools", absl::StrCat("at most ", kMaxTools, ", got ", in.tools.size()));
  }
  std::vector<ToolFunction> enforced = in.tools;  // the parameters as the grammar holds them
  for (size_t i = 0; i < in.tools.size(); ++i) {
    const ToolFunction& t = in.tools[i];
    const std::string at = absl::StrCat("tools[", i, "].function");
    if (!ValidToolName(t.name)) {
      return FieldError(at + ".name", absl::StrCat("'", t.name, "' is not a function name (1-64 of a-z, A-Z, 0-9, _, -)"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (in.tools[j].name == t.name) return FieldError(at + ".name", absl::StrCat("'", t.name, "' is offered twice"));
    }
    if (!t.parameters.empty()) {
      auto parameters = EnforcedJsonSchema(t.parameters, at + ".parameters");
      if (!parameters.ok()) return parameters.status();
      enforced[i].parameters = std::move(*parameters);
    }
  }
  if (choice == ToolChoice::kNone) return nullptr;
  // gpt-oss calls on its commentary channel, read from the reply
  // (chat/harmony_reader.h): auto needs no grammar.
  const bool harmony = context.chat != nullptr && context.chat->reasoning == ReasoningFormat::kHarmony;
  if (harmony && choice == ToolChoice::kAuto) return nullptr;
  if (in.constraint.has_value()) {
    return FieldError("tool_choice",
                      absl::StrCat("calls are enforced by a grammar, and ", in.constraint->field,
                                   " asks for another; send tool_choice \"none\" with it"));
  }
  if (context.token_bytes == nullptr || context.grammars == nullptr || context.chat == nullptr) {
    return FieldError("tool_choice", "this server cannot enforce tool calls (no tokenizer or grammars)",
                      absl::StatusCode::kFailedPrecondition);
  }
  if (harmony) {
    // A named function (or required with one tool): the prompt opens the
    // call's message (ToEngineRequest) and the function's schema holds its body.
    const int forced = HarmonyForcedCall(in);
    if (forced < 0) {
      return FieldError("tool_choice", "gpt-oss's harmony calls are enforced for a named function (or required "
                                       "with one tool): name the function, or send \"auto\"");
    }
    const std::string& schema = enforced[forced].parameters;
    return context.grammars->JsonSchema(schema.empty() ? std::string(R"({"type": "object"})") : schema,
                                        "tool_choice");
  }
  auto tag = ToolCallGrammar(context.chat->tool_format, enforced, choice, in.tool_choice_name,
                             in.parallel_tool_calls, context.chat->tool_marker_token);
  if (!tag.ok()) return FieldError("tool_choice", tag.status().message(), tag.status().code());
  auto compiled = context.grammars->StructuralTag(tag->structural_tag, "tool_choice");
  if (!compiled.ok() || tag->after_token < 0) return compiled;
  return TokenThen(tag->after_token, tag->text_before, std::move(*compiled));
}

}  // namespace

bool PromptOpensReasoning(const ChatSupport* chat, const Tokenizer* tokenizer, absl::Span<const int32_t> prompt) {
  // Only think tags (and Gemma 4's channel) open in a prompt (StartsInReasoning): nothing to decode otherwise.
  if (chat == nullptr || tokenizer == nullptr || ReasoningCloseTag(chat->reasoning).empty()) return false;
  const size_t tail = std::min<size_t>(prompt.size(), 16);  // the generation prompt's end
  return StartsInReasoning(chat->reasoning,
                           tokenizer->Decode(std::vector<int32_t>(prompt.end() - tail, prompt.end())));
}

ToolChoice ToolChoiceOf(const ClientRequest& request) {
  if (request.tool_choice.has_value()) return *request.tool_choice;
  return request.tools.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
}

ClientRequest FromProto(const v1::GenerateRequest& in) {
  ClientRequest r;
  r.request_id = in.request_id();
  switch (in.prompt_case()) {
    case v1::GenerateRequest::kText:
      r.prompt = ClientRequest::Prompt::kText;
      r.text = in.text();
      break;
    case v1::GenerateRequest::kTokenIds:
      r.prompt = ClientRequest::Prompt::kTokenIds;
      r.token_ids.assign(in.token_ids().ids().begin(), in.token_ids().ids().end());
      break;
    case v1::GenerateRequest::kMessages:
      r.prompt = ClientRequest::Prompt::kMessages;
      r.template_kwargs = in.chat_template_kwargs();
      for (int i = 0; i < in.messages().messages_size(); ++i) {
        const v1::ChatMessage& m = in.messages().messages(i);
        ChatMessage message{m.role(), m.content()};
        // Parts in place of the content: texts joined, images in order.
        if (m.parts_size() > 0) {
          std::vector<std::string> texts;
          for (int j = 0; j < m.parts_size(); ++j) {
            const v1::ContentPart& p = m.parts(j);
            if (p.kind_case() == v1::ContentPart::kImage) {
              r.images.push_back({p.image(), absl::StrCat("messages[", i, "].parts[", j, "]")});
              message.parts.push_back({true, ""});
            } else {
              texts.push_back(p.text());
              message.parts.push_back({false, p.text()});
            }
          }
          message.content = absl::StrJoin(texts, "\n");
          if (std::none_of(message.parts.begin(), message.parts.end(),
                           [](const ChatMessage::Part& p) { return p.image; })) {
            message.parts.clear();
          }
        }
        for (const v1::ToolCall& c : m.tool_calls()) message.tool_calls.push_back({c.id(), c.name(), c.arguments()});
        // An assistant's turn of calls alone: content null, as OpenAI's.
        message.null_content = m.content().empty() && !message.tool_calls.empty();
        message.tool_call_id = m.tool_call_id();
        message.name = m.name();
        message.reasoning_content = m.reasoning_content();
        r.messages.push_back(std::move(message));
      }
      break;
    case v1::GenerateRequest::PROMPT_NOT_SET:
      break;
  }
  const v1::Sampling& s = in.sampling();
  if (s.has_temperature()) r.temperature = s.temperature();
  r.top_k = s.top_k();
  if (s.has_top_p()) r.top_p = s.top_p();
  if (s.has_repetition_penalty()) r.repetition_penalty = s.repetition_penalty();
  if (s.has_seed()) r.seed = s.seed();
  r.presence_penalty = s.presence_penalty();
  r.frequency_penalty = s.frequency_penalty();
  r.min_p = s.min_p();
  r.logit_bias.assign(s.logit_bias().begin(), s.logit_bias().end());
  std::sort(r.logit_bias.begin(), r.logit_bias.end());  // a map's order is not the wire's
  const v1::Stopping& stop = in.stopping();
  if (stop.has_max_new_tokens()) r.max_new_tokens = stop.max_new_tokens();
  r.stop_token_ids.assign(stop.stop_token_ids().begin(), stop.stop_token_ids().end());
  r.stop_strings.assign(stop.stop_strings().begin(), stop.stop_strings().end());
  r.ignore_eos = stop.ignore_eos();
  r.speculative = !in.has_speculative() || in.speculative();
  r.return_logprobs = in.return_logprobs();
  r.top_logprobs = in.top_logprobs();
  using Kind = ClientRequest::Constraint::Kind;
  const v1::Constraint& c = in.constraint();
  ClientRequest::Constraint spec;
  switch (c.kind_case()) {
    case v1::Constraint::kChoice:
      spec = {Kind::kChoice, {c.choice().choices().begin(), c.choice().choices().end()}, "", "choice"};
      break;
    case v1::Constraint::kJsonSchema:
      spec = {Kind::kJsonSchema, {}, c.json_schema(), "constraint.json_schema"};
      break;
    case v1::Constraint::kJsonObject:
      if (!c.json_object()) break;
      spec = {Kind::kJsonObject, {}, "", "constraint.json_object"};
      break;
    case v1::Constraint::kRegex:
      spec = {Kind::kRegex, {}, c.regex(), "constraint.regex"};
      break;
    case v1::Constraint::kGrammar:
      spec = {Kind::kGrammar, {}, c.grammar(), "constraint.grammar"};
      break;
    case v1::Constraint::KIND_NOT_SET:
      break;
  }
  spec.string_limits.max_length = static_cast<int>(std::min<uint32_t>(c.max_string_length(), INT32_MAX));
  spec.string_limits.max_repeats = static_cast<int>(std::min<uint32_t>(c.max_string_repeats(), INT32_MAX));
  spec.string_limits.max_item_repeats = static_cast<int>(std::min<uint32_t>(c.max_item_repeats(), INT32_MAX));
  if (!spec.field.empty() || spec.string_limits.any()) r.constraint = std::move(spec);
  for (const v1::Tool& t : in.tools()) r.tools.push_back({t.name(), t.description(), t.parameters()});
  switch (in.tool_choice().mode()) {
    case v1::ToolChoice::NONE: r.tool_choice = ToolChoice::kNone; break;
    case v1::ToolChoice::AUTO: r.tool_choice = ToolChoice::kAuto; break;
    case v1::ToolChoice::REQUIRED: r.tool_choice = ToolChoice::kRequired; break;
    case v1::ToolChoice::FUNCTION:
      r.tool_choice = ToolChoice::kNamed;
      r.tool_choice_name = in.tool_choice().function();
      break;
    default: break;
  }
  if (in.has_parallel_tool_calls()) r.parallel_tool_calls = in.parallel_tool_calls();
  return r;
}

absl::StatusOr<Request> ToEngineRequest(const v1::GenerateRequest& in,
                                        const ConvertContext& context, uint64_t random_seed) {
  return ToEngineRequest(FromProto(in), context, random_seed);
}

absl::StatusOr<Request> ToEngineRequest(const ClientRequest& in, const ConvertContext& context,
                                        uint64_t random_seed) {
  const Tokenizer* tokenizer = context.tokenizer;
  const ChatSupport* chat = context.chat;
  const int vocab_size = context.vocab_size;
  Request r;
  // Echoed in every response message: a long one would be sent back once
  // per streamed message.
  if (in.request_id.size() > kMaxRequestIdBytes) {
    return FieldError("request_id", absl::StrCat("at most ", kMaxRequestIdBytes, " bytes, got ",
                                                 in.request_id.size()));
  }
  switch (in.prompt) {
    case ClientRequest::Prompt::kText: {
      if (tokenizer == nullptr) {
        return FieldError("text", "the model has no tokenizer; send the prompt as token_ids");
      }
      auto ids = tokenizer->Encode(in.text);
      if (!ids.ok()) return FieldError("text", ids.status().message());
      r.prompt = std::move(*ids);
      break;
    }
    case ClientRequest::Prompt::kTokenIds:
      for (size_t i = 0; i < in.token_ids.size(); ++i) {
        const uint32_t id = in.token_ids[i];
        if (id >= static_cast<uint32_t>(vocab_size)) {
          return FieldError("token_ids", absl::StrCat("id ", id, " at index ", i,
                                                      " is outside the vocabulary (", vocab_size, ")"));
        }
        r.prompt.push_back(static_cast<int32_t>(id));
      }
      break;
    case ClientRequest::Prompt::kMessages:
      if (absl::Status st = Messages(in.messages, in.tools, in.template_kwargs, chat, in.images, context, &r);
          !st.ok()) {
        return st;
      }
      break;
    case ClientRequest::Prompt::kNone:
      break;
  }
  if (r.prompt.empty()) return FieldError("prompt", "is empty");

  r.sampling.temperature = in.temperature.value_or(1.0f);
  r.sampling.top_k = in.top_k;
  r.sampling.top_p = in.top_p.value_or(1.0f);
  r.sampling.repetition_penalty = in.repetition_penalty.value_or(1.0f);
  r.sampling.seed = in.seed.value_or(random_seed);
  r.sampling.presence_penalty = in.presence_penalty;
  r.sampling.frequency_penalty = in.frequency_penalty;
  r.sampling.min_p = in.min_p;
  if (in.logit_bias.size() > static_cast<size_t>(kMaxLogitBias)) {
    return FieldError("logit_bias", absl::StrCat("at most ", kMaxLogitBias, " entries, got ",
                                                 in.logit_bias.size()));
  }
  for (const auto& [id, bias] : in.logit_bias) {
    if (id >= static_cast<uint32_t>(vocab_size)) {
      return FieldError("logit_bias", absl::StrCat("token id ", id, " is outside the vocabulary (",
                                                   vocab_size, ")"));
    }
    r.sampling.logit_bias.emplace_back(static_cast<int32_t>(id), bias);
  }

  r.stop.max_new_tokens = static_cast<int>(in.max_new_tokens.value_or(kDefaultMaxNewTokens));
  for (uint32_t id : in.stop_token_ids) {
    if (id >= static_cast<uint32_t>(vocab_size)) {
      return FieldError("stop_token_ids",
                        absl::StrCat(id, " is outside the vocabulary (", vocab_size, ")"));
    }
    r.stop.stop_token_ids.push_back(static_cast<int32_t>(id));
  }
  r.stop.stop_strings = in.stop_strings;
  r.stop.ignore_eos = in.ignore_eos;
  r.speculative = in.speculative;
  r.return_logprobs = in.return_logprobs;
  if (in.top_logprobs > 0 && !in.return_logprobs) {
    return FieldError("top_logprobs", "needs return_logprobs");
  }
  if (in.top_logprobs > static_cast<uint32_t>(kMaxTopLogprobs)) {
    return FieldError("top_logprobs", absl::StrCat("at most ", kMaxTopLogprobs, ", got ", in.top_logprobs));
  }
  r.top_logprobs = static_cast<int>(in.top_logprobs);
  auto tool_constraint = ToolConstraint(in, context);
  if (!tool_constraint.ok()) return tool_constraint.status();
  if (chat != nullptr && chat->reasoning == ReasoningFormat::kHarmony && in.prompt == ClientRequest::Prompt::kMessages &&
      *tool_constraint != nullptr) {
    // The call's message opened: the reply is its body.
    auto header = tokenizer->Encode(HarmonyCallHeader(in.tools[HarmonyForcedCall(in)].name),
                                    /*add_special_tokens=*/false);
    if (!header.ok()) return FieldError("tool_choice", header.status().message());
    r.prompt.insert(r.prompt.end(), header->begin(), header->end());
  }
  if (*tool_constraint != nullptr) {
    r.constraint = std::move(*tool_constraint);
  } else if (in.constraint.has_value()) {
    // gpt-oss (harmony): the grammar holds the reply from its first token,
    // which then writes no channel headers (special tokens are outside every
    // grammar): the answer alone, read as content.
    auto compiled = CompileConstraint(*in.constraint, context);
    if (!compiled.ok()) return compiled.status();
    r.constraint = std::move(*compiled);
  }
  // A reply that starts inside its reasoning (the prompt opened <think>):
  // the constraint holds the answer, from the token that closes the
  // reasoning on, where the vocabulary has one ("</think>": Qwen3 / 3.5,
  // DeepSeek-R1); the reasoning before it is free.
  // max_reasoning_tokens: once that many reasoning tokens came, the
  // closing token is the only one allowed.
  const bool reasons = in.prompt == ClientRequest::Prompt::kMessages && PromptOpensReasoning(chat, tokenizer, r.prompt);
  if (chat != nullptr && chat->reasoning == ReasoningFormat::kHarmony && in.max_reasoning_tokens.has_value()) {
    return FieldError("max_reasoning_tokens", "gpt-oss's harmony replies take reasoning_effort, not a budget");
  }
  int32_t close = -1;
  if (reasons) {
    auto ids = tokenizer->Encode(ReasoningCloseTag(chat->reasoning), /*add_special_tokens=*/false);
    if (ids.ok() && ids->size() == 1 && (*ids)[0] < vocab_size) close = (*ids)[0];
  }
  if (reasons && close >= 0 && in.max_reasoning_tokens.has_value()) {
    r.constraint = ReasoningBudget(close, static_cast<int>(*in.max_reasoning_tokens), vocab_size, std::move(r.constraint));
  } else if (reasons && close >= 0 && r.constraint != nullptr) {
    r.constraint = TokenThen(close, /*text_before=*/true, std::move(r.constraint));
  } else if (reasons && in.max_reasoning_tokens.has_value()) {
    return FieldError("max_reasoning_tokens",
                      absl::StrCat("needs a vocabulary that spells ", ReasoningCloseTag(chat->reasoning),
                                   " as one token (the budget ends the reasoning with it)"));
  }
  return r;
}

namespace {

// The id of mistral's [TOOL_CALLS] where `tokenizer` reads it as one
// special token, else -1 (ToolCallGrammar's marker_token).
int32_t SpecialMarkerToken(const Tokenizer* tokenizer, ToolCallFormat format) {
  const std::string marker = ToolCallMarker(format);
  if (tokenizer == nullptr || format != ToolCallFormat::kMistral) return -1;
  auto ids = tokenizer->Encode(marker, /*add_special_tokens=*/false);
  if (!ids.ok() || ids->size() != 1 || !tokenizer->IsSpecial((*ids)[0])) return -1;
  return (*ids)[0];
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChatSupport>> MakeChatSupport(const std::string& flag,
                                                             ChatTemplateInfo info,
                                                             std::shared_ptr<const Tokenizer> tokenizer,
                                                             const std::string& tool_call_parser,
                                                             const std::string& reasoning_parser) {
  auto chat = std::make_unique<ChatSupport>();
  std::optional<ReasoningFormat> reasoning;
  if (!reasoning_parser.empty() && reasoning_parser != "auto") {
    auto named = ReasoningFormatNamed(reasoning_parser);
    if (!named.ok()) return absl::InvalidArgumentError(absl::StrCat("--reasoning_parser: ", named.status().message()));
    reasoning = *named;
  }
  if (!tool_call_parser.empty()) {
    auto named = ToolCallFormatNamed(tool_call_parser);
    if (!named.ok()) return absl::InvalidArgumentError(absl::StrCat("--tool_call_parser: ", named.status().message()));
    chat->tool_format = *named;
    chat->tool_marker_token = SpecialMarkerToken(tokenizer.get(), chat->tool_format);
  }
  if (!flag.empty()) {
    auto text = ReadFlagFile("--chat_template", flag);
    if (!text.ok()) return text.status();
    info.text = std::move(*text);
    info.source = flag;
  }
  if (info.text.empty()) return chat;  // refused: no template
  if (tokenizer == nullptr) {
    chat->unavailable = FieldError("messages", "the model has no tokenizer, so its chat template cannot be used",
                                   absl::StatusCode::kFailedPrecondition);
    return chat;
  }
  auto format = ChatFormat::Create(info.text, info.source, info.bos_token, info.eos_token, tokenizer);
  if (!format.ok()) {
    if (!flag.empty()) return absl::InvalidArgumentError(absl::StrCat("--chat_template: ", format.status().message()));
    chat->unavailable = FieldError("messages",
                                   absl::StrCat("the model's chat template is not usable here (",
                                                format.status().message(),
                                                "); start the server with --chat_template=FILE"),
                                   absl::StatusCode::kFailedPrecondition);
    return chat;
  }
  if (tool_call_parser.empty() && (*format)->takes_tools()) {
    chat->tool_format = ToolCallFormatOf((*format)->template_text());
    chat->tool_marker_token = SpecialMarkerToken(tokenizer.get(), chat->tool_format);
  }
  chat->reasoning = reasoning.value_or(ReasoningFormatOf((*format)->template_text()));
  chat->format = std::move(*format);
  return chat;
}


}  // namespace flover::server
