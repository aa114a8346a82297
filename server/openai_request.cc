#include "server/openai_request.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "server/status_util.h"
#include "util/field_error.h"
#include "util/status_macros.h"
#include "server/json_body.h"

namespace flover::server {
namespace {

// A refusal naming the field it is about (see util/field_error.h).
template <typename... Parts>
absl::Status Bad(absl::string_view field, const Parts&... detail) {
  return FieldError(field, absl::StrCat(detail...));
}

// A prompt of token ids: every element a non-negative integer.
absl::Status AddTokenIds(const Json& list, ClientRequest* out) {
  out->prompt = ClientRequest::Prompt::kTokenIds;
  for (const Json& v : list) {
    auto id = JsonInteger(v, "prompt", 0, std::numeric_limits<uint32_t>::max(),
                          "token ids must be integers >= 0");
    if (!id.ok()) return id.status();
    out->token_ids.push_back(static_cast<uint32_t>(*id));
  }
  return absl::OkStatus();
}

bool AllNumbers(const Json& list) {
  for (const Json& v : list) {
    if (!v.is_number()) return false;
  }
  return true;
}

void SetText(const std::string& text, ClientRequest* out) {
  out->prompt = ClientRequest::Prompt::kText;
  out->text = text;
}

absl::Status ParsePrompt(const Json& body, ClientRequest* out) {
  const Json* p = JsonField(body, "prompt");
  if (p == nullptr) return Bad("prompt", "is required");
  if (p->is_string()) {
    SetText(p->get<std::string>(), out);
    return absl::OkStatus();
  }
  if (!p->is_array()) return Bad("prompt", "must be a string or a list of token ids");
  if (p->empty()) return Bad("prompt", "is empty");
  if (AllNumbers(*p)) return AddTokenIds(*p, out);
  if (p->size() > 1) {
    return Bad("prompt", "a list of several prompts is not supported; send one request per prompt");
  }
  const Json& only = (*p)[0];
  if (only.is_string()) {
    SetText(only.get<std::string>(), out);
    return absl::OkStatus();
  }
  if (only.is_array() && AllNumbers(only)) {
    if (only.empty()) return Bad("prompt", "is empty");
    return AddTokenIds(only, out);
  }
  return Bad("prompt", "must be a string or a list of token ids");
}

// An image_url part's image: the bytes of its data: URL
// ("data:image/png;base64,..."), or its http(s) URL, fetched later where
// --image_url_hosts names the host (request_convert).
absl::StatusOr<ClientImage> ImageUrl(const Json& part, const std::string& at) {
  const Json* image = JsonField(part, "image_url");
  const Json* url = image != nullptr && image->is_object() ? JsonField(*image, "url") : image;
  if (url == nullptr || !url->is_string()) return Bad(at + ".image_url.url", "must be a string");
  const std::string& u = url->get_ref<const std::string&>();
  if (absl::StartsWith(u, "http://") || absl::StartsWith(u, "https://")) return ClientImage{"", at, u};
  if (!absl::StartsWith(u, "data:")) {
    return Bad(at + ".image_url.url", "only data:, http:// and https:// URLs are taken");
  }
  const size_t comma = u.find(',');
  if (comma == std::string::npos || !absl::EndsWith(absl::string_view(u).substr(0, comma), ";base64")) {
    return Bad(at + ".image_url.url", "a data: URL must be base64 (data:image/png;base64,...)");
  }
  std::string bytes;
  if (!absl::Base64Unescape(absl::string_view(u).substr(comma + 1), &bytes) || bytes.empty()) {
    return Bad(at + ".image_url.url", "the data: URL's base64 does not decode");
  }
  return ClientImage{std::move(bytes), at, ""};
}

// A chat message's content into *message: a string, or a list of text
// parts (joined with newlines, as vLLM joins them for templates that take
// strings) and images (image_url parts: their bytes appended to *images,
// and the message's parts kept in order for the template).
absl::Status MessageContent(const Json& v, const std::string& where, ChatMessage* message,
                            std::vector<ClientImage>* images) {
  if (v.is_string()) {
    message->content = v.get<std::string>();
    return absl::OkStatus();
  }
  if (!v.is_array()) return Bad(where, "must be a string or a list of text and image_url parts");
  std::vector<std::string> texts;
  std::vector<ChatMessage::Part> parts;
  bool any_image = false;
  for (size_t j = 0; j < v.size(); ++j) {
    const Json& part = v[j];
    const std::string at = absl::StrCat(where, "[", j, "]");
    if (!part.is_object()) return Bad(at, "must be an object");
    const Json* type = JsonField(part, "type");
    if (type == nullptr || !type->is_string()) return Bad(at + ".type", "is required");
    if (*type == "image_url") {
      auto image = ImageUrl(part, at);
      if (!image.ok()) return image.status();
      images->push_back(*std::move(image));
      parts.push_back({true, ""});
      any_image = true;
      continue;
    }
    if (*type != "text") {
      return Bad(at + ".type", "'", type->get<std::string>(), "' is not supported (text and image_url)");
    }
    const Json* text = JsonField(part, "text");
    if (text == nullptr || !text->is_string()) return Bad(at + ".text", "must be a string");
    texts.push_back(text->get<std::string>());
    parts.push_back({false, text->get<std::string>()});
  }
  message->content = absl::StrJoin(texts, "\n");
  if (any_image) message->parts = std::move(parts);
  return absl::OkStatus();
}

// A call's or a tool's {"type": "function", "function": {"name", ...}} at
// `at` (a call may leave out the type): its function object and name.
absl::StatusOr<const Json*> FunctionOf(const Json& v, const std::string& at, bool type_required,
                                       std::string* name) {
  if (!v.is_object()) return Bad(at, "must be an object");
  const Json* type = JsonField(v, "type");
  if ((type == nullptr && type_required) || (type != nullptr && *type != "function")) {
    return Bad(at + ".type", "must be \"function\"");
  }
  const Json* function = JsonField(v, "function");
  if (function == nullptr || !function->is_object()) return Bad(at + ".function", "must be an object");
  const Json* n = JsonField(*function, "name");
  if (n == nullptr || !n->is_string()) return Bad(at + ".function.name", "must be a string");
  *name = n->get<std::string>();
  return function;
}

// An assistant message's tool_calls: [{"id", "type": "function",
// "function": {"name", "arguments": a JSON string (or object)}}].
absl::Status ParseToolCalls(const Json& v, const std::string& where, ChatMessage* m) {
  if (!v.is_array()) return Bad(where, "must be a list");
  for (size_t j = 0; j < v.size(); ++j) {
    const std::string at = absl::StrCat(where, "[", j, "]");
    const Json& call = v[j];
    ToolCall c;
    auto function = FunctionOf(call, at, /*type_required=*/false, &c.name);
    if (!function.ok()) return function.status();
    if (const Json* id = JsonField(call, "id"); id != nullptr && id->is_string()) c.id = id->get<std::string>();
    const Json* args = JsonField(**function, "arguments");
    if (args == nullptr) {
      c.arguments = "{}";
    } else if (args->is_string()) {
      c.arguments = args->get<std::string>();
    } else if (args->is_object()) {
      c.arguments = JsonText(*args);
    } else {
      return Bad(at + ".function.arguments", "must be a string of JSON");
    }
    m->tool_calls.push_back(std::move(c));
  }
  return absl::OkStatus();
}

absl::Status ParseMessages(const Json& body, ClientRequest* out) {
  const Json* m = JsonField(body, "messages");
  if (m == nullptr) return Bad("messages", "is required");
  if (!m->is_array()) return Bad("messages", "must be a list");
  if (m->empty()) return Bad("messages", "is empty");
  out->prompt = ClientRequest::Prompt::kMessages;
  for (size_t i = 0; i < m->size(); ++i) {
    const Json& item = (*m)[i];
    const std::string at = absl::StrCat("messages[", i, "]");
    if (!item.is_object()) return Bad(at, "must be an object");
    const Json* role = JsonField(item, "role");
    if (role == nullptr || !role->is_string()) return Bad(at + ".role", "must be a string");
    if (JsonField(item, "function_call") != nullptr) {
      return Bad(at + ".function_call", "is not supported (the older API; send tool_calls)");
    }
    ChatMessage message{role->get<std::string>(), ""};
    if (const Json* calls = JsonField(item, "tool_calls")) {
      if (absl::Status st = ParseToolCalls(*calls, at + ".tool_calls", &message); !st.ok()) return st;
    }
    const Json* content = JsonField(item, "content");
    if (content == nullptr) {
      // An assistant's turn of calls alone has no content.
      if (message.tool_calls.empty()) return Bad(at + ".content", "is required");
      message.null_content = true;
    } else {
      if (absl::Status st = MessageContent(*content, at + ".content", &message, &out->images); !st.ok()) return st;
    }
    // An assistant's reasoning, as replies give it (reasoning_content; some
    // clients send vLLM's newer "reasoning").
    for (const char* key : {"reasoning_content", "reasoning"}) {
      const Json* v = JsonField(item, key);
      if (v == nullptr || v->is_null()) continue;
      if (!v->is_string()) return Bad(absl::StrCat(at, ".", key), "must be a string");
      if (message.role != "assistant") return Bad(absl::StrCat(at, ".", key), "only an assistant's message reasons");
      message.reasoning_content = v->get<std::string>();
    }
    for (auto [key, field] : {std::pair{"tool_call_id", &message.tool_call_id}, std::pair{"name", &message.name}}) {
      if (const Json* v = JsonField(item, key)) {
        if (!v->is_string()) return Bad(absl::StrCat(at, ".", key), "must be a string");
        *field = v->get<std::string>();
      }
    }
    // request_convert checks the role, for gRPC too.
    out->messages.push_back(std::move(message));
  }
  return absl::OkStatus();
}

// tools: [{"type": "function", "function": {"name", "description",
// "parameters", "strict"}}]; tool_choice: "none", "auto", "required", or
// {"type": "function", "function": {"name"}}; parallel_tool_calls.
absl::Status ParseTools(const Json& body, ClientRequest* out) {
  for (const char* key : {"functions", "function_call"}) {
    if (JsonField(body, key) != nullptr) return Bad(key, "is not supported (the older API; send tools and tool_choice)");
  }
  if (const Json* tools = JsonField(body, "tools")) {
    if (!tools->is_array()) return Bad("tools", "must be a list");
    for (size_t i = 0; i < tools->size(); ++i) {
      const std::string at = absl::StrCat("tools[", i, "]");
      std::string name;
      auto found = FunctionOf((*tools)[i], at, /*type_required=*/true, &name);
      if (!found.ok()) return found.status();
      const Json* function = *found;
      auto f = JsonFunctionTool(*function, at + ".function", "parameters", /*schema_required=*/false);
      if (!f.ok()) return f.status();
      auto strict = JsonBool(*function, "strict", false, at + ".function.strict");
      if (!strict.ok()) return strict.status();  // enforced either way
      out->tools.push_back(*std::move(f));
    }
  }
  if (const Json* choice = JsonField(body, "tool_choice")) {
    if (choice->is_string()) {
      const std::string c = choice->get<std::string>();
      if (c == "none") {
        out->tool_choice = ToolChoice::kNone;
      } else if (c == "auto") {
        out->tool_choice = ToolChoice::kAuto;
      } else if (c == "required") {
        out->tool_choice = ToolChoice::kRequired;
      } else {
        return Bad("tool_choice", "'", c, "' is not a choice (none, auto, required, or a function)");
      }
    } else {
      const Json* function = choice->is_object() ? JsonField(*choice, "function") : nullptr;
      const Json* name = function != nullptr && function->is_object() ? JsonField(*function, "name") : nullptr;
      if (name == nullptr || !name->is_string()) {
        return Bad("tool_choice", "must be none, auto, required, or {\"type\": \"function\", \"function\": {\"name\": ...}}");
      }
      out->tool_choice = ToolChoice::kNamed;
      out->tool_choice_name = name->get<std::string>();
    }
  }
  auto parallel = JsonBool(body, "parallel_tool_calls", true, "parallel_tool_calls");
  if (!parallel.ok()) return parallel.status();
  out->parallel_tool_calls = *parallel;
  return absl::OkStatus();
}

// A field this server takes only at its neutral value.
absl::Status RequireNeutral(const Json& body) {
  if (const Json* v = JsonField(body, "best_of")) {
    auto n = JsonInteger(*v, "best_of", 1, 1 << 30, "must be a positive integer");
    if (!n.ok()) return n.status();
    if (*n != 1) return Bad("best_of", "only 1 is supported, got ", *n, " (n samples is)");
  }
  return absl::OkStatus();
}

absl::Status ParseMaxTokens(const Json& b, const char* key, ClientRequest* r) {
  const Json* v = JsonField(b, key);
  if (v == nullptr) return absl::OkStatus();
  auto n = JsonInteger(*v, key, 0, 1 << 30, "must be an integer >= 1");
  if (!n.ok()) return n.status();
  r->max_new_tokens = static_cast<uint32_t>(*n);
  return absl::OkStatus();
}

// OpenAI's response_format (text, json_object, json_schema) and vLLM's
// guided_choice / guided_json / guided_regex / guided_grammar: at most one
// constraint.
absl::Status ParseConstraint(const Json& b, ClientRequest* r) {
  using Kind = ClientRequest::Constraint::Kind;
  std::vector<ClientRequest::Constraint> found;
  if (const Json* f = JsonField(b, "response_format")) {
    const Json* type = f->is_object() ? JsonField(*f, "type") : nullptr;
    if (type == nullptr || !type->is_string()) {
      return Bad("response_format", "must be an object with a \"type\"");
    }
    const std::string t = type->get<std::string>();
    if (t == "json_object") {
      found.push_back({Kind::kJsonObject, {}, "", "response_format"});
    } else if (t == "json_schema") {
      const Json* js = JsonField(*f, "json_schema");
      if (js == nullptr || !js->is_object()) {
        return Bad("response_format.json_schema", "must be an object with a \"schema\"");
      }
      const Json* schema = JsonField(*js, "schema");
      if (schema == nullptr || !(schema->is_object() || schema->is_boolean())) {
        return Bad("response_format.json_schema.schema", "must be a JSON Schema (an object)");
      }
      // `strict` is accepted either way: the schema is enforced whether or
      // not it is set (docs/api.md).
      if (const Json* strict = JsonField(*js, "strict"); strict != nullptr && !strict->is_boolean()) {
        return Bad("response_format.json_schema.strict", "must be true or false");
      }
      found.push_back({Kind::kJsonSchema, {}, JsonText(*schema), "response_format.json_schema.schema"});
    } else if (t != "text") {
      return Bad("response_format.type", "'", t, "' is not supported (text, json_object, json_schema)");
    }
  }
  if (const Json* c = JsonField(b, "guided_choice")) {
    if (!c->is_array()) return Bad("guided_choice", "must be a list of strings");
    ClientRequest::Constraint spec{Kind::kChoice, {}, "", "choice"};
    for (const Json& v : *c) {
      if (!v.is_string()) return Bad("guided_choice", "must be a list of strings");
      spec.choices.push_back(v.get<std::string>());
    }
    found.push_back(std::move(spec));
  }
  if (const Json* j = JsonField(b, "guided_json")) {
    if (j->is_string()) {
      found.push_back({Kind::kJsonSchema, {}, j->get<std::string>(), "guided_json"});
    } else if (j->is_object()) {
      found.push_back({Kind::kJsonSchema, {}, JsonText(*j), "guided_json"});
    } else {
      return Bad("guided_json", "must be a JSON Schema (an object, or its text)");
    }
  }
  for (const auto& [key, kind] : {std::pair<const char*, Kind>{"guided_regex", Kind::kRegex},
                                  std::pair<const char*, Kind>{"guided_grammar", Kind::kGrammar}}) {
    if (const Json* v = JsonField(b, key)) {
      if (!v->is_string()) return Bad(key, "must be a string");
      found.push_back({kind, {}, v->get<std::string>(), key});
    }
  }
  if (found.size() > 1) {
    return Bad(found[1].field == "choice" ? "guided_choice" : found[1].field,
               "only one constraint per request (response_format, guided_choice, guided_json, "
               "guided_regex or guided_grammar)");
  }
  // Limits on a JSON output's string values (engine/json_string_limits.h).
  JsonStringLimits limits;
  for (const auto& [key, lo, hi, out] :
       {std::tuple<const char*, int, int, int*>{"max_string_length", 1, kMaxStringLengthLimit, &limits.max_length},
        std::tuple<const char*, int, int, int*>{"max_string_repeats", kMinStringRepeats, kMaxStringRepeats,
                                                &limits.max_repeats},
        std::tuple<const char*, int, int, int*>{"max_item_repeats", kMinStringRepeats, kMaxStringRepeats,
                                                &limits.max_item_repeats}}) {
    const Json* v = JsonField(b, key);
    if (v == nullptr || v->is_null()) continue;
    if (!v->is_number_integer() || v->get<int64_t>() < lo || v->get<int64_t>() > hi) {
      return Bad(key, "must be an integer from ", lo, " to ", hi);
    }
    *out = static_cast<int>(v->get<int64_t>());
  }
  if (limits.any()) {
    const bool json = !found.empty() && (found[0].kind == Kind::kJsonSchema || found[0].kind == Kind::kJsonObject);
    if (!json) {
      return Bad(limits.max_length > 0    ? "max_string_length"
                 : limits.max_repeats > 0 ? "max_string_repeats"
                                          : "max_item_repeats",
                 "applies only to JSON output (response_format json_schema or json_object, or guided_json)");
    }
    found[0].string_limits = limits;
  }
  if (!found.empty()) r->constraint = std::move(found[0]);
  return absl::OkStatus();
}

// obj[key], when present, as a float into *field (a float, or an optional one).
template <typename Field>
absl::Status ReadFloat(const Json& obj, const char* key, Field* field) {
  const Json* v = JsonField(obj, key);
  if (v == nullptr) return absl::OkStatus();
  auto x = JsonNumber(*v, key, "must be a number");
  if (!x.ok()) return x.status();
  *field = static_cast<float>(*x);
  return absl::OkStatus();
}

// What both endpoints take: model, sampling, stopping, streaming.
absl::Status ParseShared(const Json& b, absl::string_view served_model, OpenAiRequest* out) {
  if (absl::Status st = CheckServedModel(b, served_model, /*required=*/false); !st.ok()) return st;
  if (absl::Status st = RequireNeutral(b); !st.ok()) return st;
  if (const Json* v = JsonField(b, "n")) {
    auto n = JsonInteger(*v, "n", 1, 1 << 30, "must be a positive integer");
    if (!n.ok()) return n.status();
    if (*n > kMaxSamples) return Bad("n", "at most ", kMaxSamples, ", got ", *n);
    out->n = static_cast<int>(*n);
  }
  ClientRequest& r = out->request;
  // The engine checks the ranges; min_p is vLLM's extension.
  FLOVER_RETURN_IF_ERROR(ReadFloat(b, "temperature", &r.temperature));
  FLOVER_RETURN_IF_ERROR(ReadFloat(b, "top_p", &r.top_p));
  FLOVER_RETURN_IF_ERROR(ReadFloat(b, "repetition_penalty", &r.repetition_penalty));
  FLOVER_RETURN_IF_ERROR(ReadFloat(b, "presence_penalty", &r.presence_penalty));
  FLOVER_RETURN_IF_ERROR(ReadFloat(b, "frequency_penalty", &r.frequency_penalty));
  FLOVER_RETURN_IF_ERROR(ReadFloat(b, "min_p", &r.min_p));
  // {"token id": bias}: keys are decimal token ids.
  if (const Json* v = JsonField(b, "logit_bias")) {
    if (!v->is_object()) return Bad("logit_bias", "must be an object of token ids to numbers");
    for (const auto& [key, value] : v->items()) {
      uint32_t id = 0;
      if (key.empty() || key.size() > 10 || !std::all_of(key.begin(), key.end(), absl::ascii_isdigit) ||
          !absl::SimpleAtoi(key, &id)) {
        return Bad("logit_bias", "keys must be token ids (decimal integers), got \"", key, "\"");
      }
      auto bias = JsonNumber(value, "logit_bias", "values must be numbers");
      if (!bias.ok()) return bias.status();
      r.logit_bias.emplace_back(id, static_cast<float>(*bias));
    }
  }
  if (const Json* v = JsonField(b, "top_k")) {
    auto k = JsonInteger(*v, "top_k", -1, 1 << 30, "must be an integer >= -1 (-1 or 0 = no limit)");
    if (!k.ok()) return k.status();
    r.top_k = *k < 0 ? 0 : static_cast<int32_t>(*k);
  }
  if (const Json* v = JsonField(b, "seed")) {
    auto seed = JsonInteger(*v, "seed", std::numeric_limits<int64_t>::min(),
                            std::numeric_limits<int64_t>::max(), "must be an integer");
    if (!seed.ok()) return seed.status();
    r.seed = static_cast<uint64_t>(*seed);
  }
  if (const Json* s = JsonField(b, "stop")) {
    if (s->is_string()) {
      r.stop_strings.push_back(s->get<std::string>());
    } else if (s->is_array()) {
      for (const Json& v : *s) {
        if (!v.is_string()) return Bad("stop", "must be a string or a list of strings");
        r.stop_strings.push_back(v.get<std::string>());
      }
    } else {
      return Bad("stop", "must be a string or a list of strings");
    }
  }
  if (absl::Status st = ParseConstraint(b, &r); !st.ok()) return st;
  auto ignore_eos = JsonBool(b, "ignore_eos", false, "ignore_eos");
  if (!ignore_eos.ok()) return ignore_eos.status();
  r.ignore_eos = *ignore_eos;
  auto speculative = JsonBool(b, "speculative", true, "speculative");
  if (!speculative.ok()) return speculative.status();
  r.speculative = *speculative;
  auto stream = JsonBool(b, "stream", false, "stream");
  if (!stream.ok()) return stream.status();
  out->stream = *stream;
  if (const Json* o = JsonField(b, "stream_options")) {
    if (!o->is_object()) return Bad("stream_options", "must be an object");
    auto usage = JsonBool(*o, "include_usage", false, "stream_options.include_usage");
    if (!usage.ok()) return usage.status();
    out->include_usage = *usage;
  }
  return absl::OkStatus();
}

absl::StatusOr<Json> ParseBody(absl::string_view body) {
  return ParseJsonObjectBody(body, "request body");
}

// The engine's field names, as this API spells them.
std::string ApiField(absl::string_view field) {
  if (absl::StartsWith(field, "choice")) return absl::StrCat("guided_", field);
  if (field == "max_new_tokens") return "max_tokens";
  if (field == "stop_strings") return "stop";
  if (field == "text" || field == "token_ids") return "prompt";
  return std::string(field);
}

// The message with the engine's names in this API's spelling.
std::string ApiMessage(absl::string_view message) {
  std::string m = absl::StrReplaceAll(
      message, {{"max_new_tokens", "max_tokens"}, {"stop_strings", "stop"}});
  if (absl::StartsWith(m, "choice")) m = absl::StrCat("guided_", m);
  for (const char* prefix : {"text: ", "token_ids: "}) {
    if (absl::StartsWith(m, prefix)) m = absl::StrCat("prompt: ", m.substr(strlen(prefix)));
  }
  return m;
}

const char* ErrorType(int http_status) {
  switch (http_status) {
    case 400:
    case 404: return "invalid_request_error";
    case 401: return "authentication_error";
    case 429: return "rate_limit_error";
    default: return "server_error";
  }
}

}  // namespace

absl::StatusOr<OpenAiRequest> ParseCompletionRequest(absl::string_view body,
                                                     absl::string_view served_model) {
  auto parsed = ParseBody(body);
  if (!parsed.ok()) return parsed.status();
  const Json& b = *parsed;
  OpenAiRequest out;
  ClientRequest& r = out.request;
  if (absl::Status st = ParseShared(b, served_model, &out); !st.ok()) return st;
  if (absl::Status st = ParsePrompt(b, &r); !st.ok()) return st;
  if (const Json* v = JsonField(b, "suffix");
      v != nullptr && (!v->is_string() || !v->get<std::string>().empty())) {
    return Bad("suffix", "is not supported");
  }
  if (absl::Status st = ParseMaxTokens(b, "max_tokens", &r); !st.ok()) return st;
  if (const Json* v = JsonField(b, "logprobs")) {
    auto n = JsonInteger(*v, "logprobs", 0, 1 << 30, "must be an integer >= 0");
    if (!n.ok()) return n.status();
    if (*n > kMaxCompletionLogprobs) {
      return Bad("logprobs", "at most ", kMaxCompletionLogprobs, " is supported, got ", *n);
    }
    // The sampled token's log-probability, and that many alternatives.
    r.return_logprobs = true;
    r.top_logprobs = static_cast<uint32_t>(*n);
  }
  auto echo = JsonBool(b, "echo", false, "echo");
  if (!echo.ok()) return echo.status();
  out.echo = *echo;
  return out;
}

// chat_template_kwargs (an object: the chat template's variables, Qwen3's
// enable_thinking) and reasoning_effort (low, medium or high: the template's
// reasoning_effort unless chat_template_kwargs sets it).
absl::Status ParseTemplateKwargs(const Json& body, ClientRequest* out) {
  Json kwargs = Json::object();
  if (const Json* k = JsonField(body, "chat_template_kwargs"); k != nullptr && !k->is_null()) {
    if (!k->is_object()) return Bad("chat_template_kwargs", "must be an object");
    kwargs = *k;
  }
  if (const Json* e = JsonField(body, "reasoning_effort"); e != nullptr && !e->is_null()) {
    const std::string effort = e->is_string() ? e->get<std::string>() : "";
    if (effort != "low" && effort != "medium" && effort != "high") {
      return Bad("reasoning_effort", "must be \"low\", \"medium\" or \"high\"");
    }
    if (!kwargs.contains("reasoning_effort")) kwargs["reasoning_effort"] = effort;
  }
  if (const Json* m = JsonField(body, "max_reasoning_tokens"); m != nullptr && !m->is_null()) {
    auto n = JsonInteger(*m, "max_reasoning_tokens", 0, 1 << 30, "must be an integer >= 0");
    if (!n.ok()) return n.status();
    out->max_reasoning_tokens = static_cast<uint32_t>(*n);
  }
  if (!kwargs.empty()) out->template_kwargs = kwargs.dump();
  return absl::OkStatus();
}

absl::StatusOr<OpenAiRequest> ParseChatRequest(absl::string_view body, absl::string_view served_model) {
  auto parsed = ParseBody(body);
  if (!parsed.ok()) return parsed.status();
  const Json& b = *parsed;
  OpenAiRequest out;
  ClientRequest& r = out.request;
  if (absl::Status st = ParseShared(b, served_model, &out); !st.ok()) return st;
  if (absl::Status st = ParseMessages(b, &r); !st.ok()) return st;
  if (absl::Status st = ParseTools(b, &r); !st.ok()) return st;
  if (JsonField(b, "audio") != nullptr) return Bad("audio", "is not supported (text chat only)");
  if (absl::Status st = ParseTemplateKwargs(b, &r); !st.ok()) return st;
  // max_completion_tokens is the current name; max_tokens the older one.
  if (absl::Status st = ParseMaxTokens(b, "max_tokens", &r); !st.ok()) return st;
  if (absl::Status st = ParseMaxTokens(b, "max_completion_tokens", &r); !st.ok()) return st;
  auto logprobs = JsonBool(b, "logprobs", false, "logprobs");
  if (!logprobs.ok()) return logprobs.status();
  r.return_logprobs = *logprobs;
  if (const Json* v = JsonField(b, "top_logprobs")) {
    auto n = JsonInteger(*v, "top_logprobs", 0, 1 << 30, "must be an integer >= 0");
    if (!n.ok()) return n.status();
    if (*n > kMaxChatTopLogprobs) return Bad("top_logprobs", "at most ", kMaxChatTopLogprobs, ", got ", *n);
    if (*n > 0 && !*logprobs) return Bad("top_logprobs", "needs logprobs: true");
    r.top_logprobs = static_cast<uint32_t>(*n);
  }
  return out;
}

absl::StatusOr<ClientRequest> ParseTokenizeRequest(absl::string_view body) {
  auto parsed = ParseBody(body);
  if (!parsed.ok()) return parsed.status();
  ClientRequest r;
  if (JsonField(*parsed, "messages") != nullptr) {
    if (absl::Status st = ParseMessages(*parsed, &r); !st.ok()) return st;
    if (absl::Status st = ParseTemplateKwargs(*parsed, &r); !st.ok()) return st;
    return r;
  }
  Json& body_json = *parsed;
  if (JsonField(body_json, "prompt") == nullptr && JsonField(body_json, "content") != nullptr) {
    body_json["prompt"] = body_json["content"];  // llama-server's spelling
  }
  if (absl::Status st = ParsePrompt(body_json, &r); !st.ok()) return st;
  return r;
}

absl::StatusOr<std::vector<int32_t>> ParseDetokenizeRequest(absl::string_view body, int vocab_size) {
  auto parsed = ParseBody(body);
  if (!parsed.ok()) return parsed.status();
  const Json* tokens = JsonField(*parsed, "tokens");
  if (tokens == nullptr) return Bad("tokens", "is required");
  if (!tokens->is_array()) return Bad("tokens", "must be a list of token ids");
  std::vector<int32_t> ids;
  for (const Json& t : *tokens) {
    auto id = JsonInteger(t, "tokens", 0, vocab_size - 1,
                          absl::StrCat("must be token ids in [0, ", vocab_size, ")"));
    if (!id.ok()) return id.status();
    ids.push_back(static_cast<int32_t>(*id));
  }
  return ids;
}

std::string OpenAiErrorBody(const absl::Status& status) {
  const std::string param = ApiField(ErrorField(status));
  const int http = HttpStatusOf(status);
  return JsonText(Json{
      {"error",
       {{"message", ApiMessage(status.message())},
        {"type", ErrorType(http)},
        {"param", param.empty() ? Json(nullptr) : Json(param)},
        {"code", absl::AsciiStrToLower(absl::StatusCodeToString(status.code()))}}}});
}

}  // namespace flover::server
