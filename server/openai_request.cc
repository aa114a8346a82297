#include "server/openai_request.h"

#include <cstring>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "server/status_util.h"
#include "util/field_error.h"
#include "util/json.h"

namespace flover::server {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

// A refusal naming the field it is about (see util/field_error.h).
template <typename... Parts>
absl::Status Bad(absl::string_view field, const Parts&... detail) {
  return FieldError(field, absl::StrCat(detail...));
}

absl::StatusOr<bool> BoolField(const Struct& s, absl::string_view key, bool dflt) {
  if (!JsonHas(s, key)) return dflt;
  const Value& v = s.fields().at(std::string(key));
  if (v.kind_case() == Value::kNullValue) return dflt;
  if (!v.has_bool_value()) return Bad(key, "must be true or false");
  return v.bool_value();
}

// A present, non-null field.
const Value* Field(const Struct& s, absl::string_view key) {
  auto it = s.fields().find(std::string(key));
  if (it == s.fields().end() || it->second.kind_case() == Value::kNullValue) return nullptr;
  return &it->second;
}

// A prompt of token ids: every element a non-negative integer.
absl::Status AddTokenIds(const google::protobuf::ListValue& list, v1::GenerateRequest* out) {
  for (const Value& v : list.values()) {
    auto id = JsonToInt(v, "prompt", 0, std::numeric_limits<uint32_t>::max());
    if (!id.ok()) return Bad("prompt", "token ids must be integers >= 0");
    out->mutable_token_ids()->add_ids(static_cast<uint32_t>(*id));
  }
  return absl::OkStatus();
}

bool AllNumbers(const google::protobuf::ListValue& list) {
  for (const Value& v : list.values()) {
    if (!v.has_number_value()) return false;
  }
  return true;
}

absl::Status ParsePrompt(const Struct& body, v1::GenerateRequest* out) {
  if (!JsonHas(body, "prompt")) return Bad("prompt", "is required");
  const Value& p = body.fields().at("prompt");
  if (p.has_string_value()) {
    out->set_text(p.string_value());
    return absl::OkStatus();
  }
  if (!p.has_list_value()) return Bad("prompt", "must be a string or a list of token ids");
  const auto& list = p.list_value();
  if (list.values_size() == 0) return Bad("prompt", "is empty");
  if (AllNumbers(list)) return AddTokenIds(list, out);
  if (list.values_size() > 1) {
    return Bad("prompt", "a list of several prompts is not supported; send one request per prompt");
  }
  const Value& only = list.values(0);
  if (only.has_string_value()) {
    out->set_text(only.string_value());
    return absl::OkStatus();
  }
  if (only.has_list_value() && AllNumbers(only.list_value())) {
    if (only.list_value().values_size() == 0) return Bad("prompt", "is empty");
    return AddTokenIds(only.list_value(), out);
  }
  return Bad("prompt", "must be a string or a list of token ids");
}

// A chat message's content: a string, or a list of text parts (joined with
// newlines, as vLLM joins them for templates that take strings).
absl::StatusOr<std::string> MessageContent(const Value& v, const std::string& where) {
  if (v.has_string_value()) return v.string_value();
  if (!v.has_list_value()) return Bad(where, "must be a string or a list of text parts");
  std::vector<std::string> texts;
  for (int j = 0; j < v.list_value().values_size(); ++j) {
    const Value& part = v.list_value().values(j);
    const std::string at = absl::StrCat(where, "[", j, "]");
    if (!part.has_struct_value()) return Bad(at, "must be an object");
    const Struct& p = part.struct_value();
    const Value* type = Field(p, "type");
    if (type == nullptr || !type->has_string_value()) return Bad(at + ".type", "is required");
    if (type->string_value() != "text") {
      return Bad(at + ".type", "'", type->string_value(), "' is not supported (text only)");
    }
    const Value* text = Field(p, "text");
    if (text == nullptr || !text->has_string_value()) return Bad(at + ".text", "must be a string");
    texts.push_back(text->string_value());
  }
  return absl::StrJoin(texts, "\n");
}

absl::Status ParseMessages(const Struct& body, v1::GenerateRequest* out) {
  const Value* m = Field(body, "messages");
  if (m == nullptr) return Bad("messages", "is required");
  if (!m->has_list_value()) return Bad("messages", "must be a list");
  if (m->list_value().values_size() == 0) return Bad("messages", "is empty");
  v1::Messages* messages = out->mutable_messages();
  for (int i = 0; i < m->list_value().values_size(); ++i) {
    const Value& item = m->list_value().values(i);
    const std::string at = absl::StrCat("messages[", i, "]");
    if (!item.has_struct_value()) return Bad(at, "must be an object");
    const Struct& s = item.struct_value();
    const Value* role = Field(s, "role");
    if (role == nullptr || !role->has_string_value()) return Bad(at + ".role", "must be a string");
    for (const char* key : {"tool_calls", "function_call"}) {
      if (Field(s, key) != nullptr) return Bad(absl::StrCat(at, ".", key), "tool calls are not supported");
    }
    const Value* content = Field(s, "content");
    if (content == nullptr) return Bad(at + ".content", "is required");
    auto text = MessageContent(*content, at + ".content");
    if (!text.ok()) return text.status();
    v1::ChatMessage* msg = messages->add_messages();
    msg->set_role(role->string_value());  // request_convert checks it, for gRPC too
    msg->set_content(std::move(*text));
  }
  return absl::OkStatus();
}

// A field this server takes only at its neutral value.
absl::Status RequireNeutral(const Struct& body) {
  for (const char* key : {"n", "best_of"}) {
    if (!JsonHas(body, key)) continue;
    auto v = JsonToInt(body.fields().at(key), key, 1, 1 << 30);
    if (!v.ok()) return Bad(key, "must be a positive integer");
    if (*v != 1) return Bad(key, "only 1 is supported, got ", *v);
  }
  for (const char* key : {"frequency_penalty", "presence_penalty"}) {
    auto v = JsonNumberField(body, key, 0, key);
    if (!v.ok()) return Bad(key, "must be a number");
    if (*v != 0) return Bad(key, "is not supported (only 0); repetition_penalty is");
  }
  if (JsonHas(body, "logit_bias")) {
    const Value& v = body.fields().at("logit_bias");
    if (!v.has_struct_value() || v.struct_value().fields_size() > 0) {
      return Bad("logit_bias", "is not supported");
    }
  }
  return absl::OkStatus();
}

absl::Status ParseMaxTokens(const Struct& b, const char* key, v1::GenerateRequest* r) {
  if (Field(b, key) == nullptr) return absl::OkStatus();
  auto v = JsonToInt(b.fields().at(key), key, 0, 1 << 30);
  if (!v.ok()) return Bad(key, "must be an integer >= 1");
  r->mutable_stopping()->set_max_new_tokens(static_cast<uint32_t>(*v));
  return absl::OkStatus();
}

// What both endpoints take: model, sampling, stopping, streaming.
absl::Status ParseShared(const Struct& b, absl::string_view served_model, OpenAiRequest* out) {
  if (JsonHas(b, "model")) {
    const Value& m = b.fields().at("model");
    if (!m.has_string_value()) return Bad("model", "must be a string");
    if (m.string_value() != served_model) {
      return FieldError("model",
                        absl::StrCat("\"", m.string_value(), "\" is not served here (this server serves \"",
                                     served_model, "\")"),
                        absl::StatusCode::kNotFound);
    }
  }
  if (absl::Status st = RequireNeutral(b); !st.ok()) return st;
  v1::GenerateRequest& r = out->request;
  struct NumberField {
    const char* key;
    void (v1::Sampling::*set)(float);
  };
  for (const NumberField& f : {NumberField{"temperature", &v1::Sampling::set_temperature},
                               NumberField{"top_p", &v1::Sampling::set_top_p},
                               NumberField{"repetition_penalty",
                                           &v1::Sampling::set_repetition_penalty}}) {
    if (Field(b, f.key) == nullptr) continue;
    auto v = JsonNumberField(b, f.key, 0, f.key);
    if (!v.ok()) return Bad(f.key, "must be a number");
    (r.mutable_sampling()->*f.set)(static_cast<float>(*v));
  }
  if (Field(b, "top_k") != nullptr) {
    auto v = JsonToInt(b.fields().at("top_k"), "top_k", -1, 1 << 30);
    if (!v.ok()) return Bad("top_k", "must be an integer >= -1 (-1 or 0 = no limit)");
    r.mutable_sampling()->set_top_k(*v < 0 ? 0 : static_cast<int32_t>(*v));
  }
  if (Field(b, "seed") != nullptr) {
    auto v = JsonToInt(b.fields().at("seed"), "seed", std::numeric_limits<int64_t>::min(),
                       std::numeric_limits<int64_t>::max());
    if (!v.ok()) return Bad("seed", "must be an integer");
    r.mutable_sampling()->set_seed(static_cast<uint64_t>(*v));
  }
  if (const Value* s = Field(b, "stop")) {
    if (s->has_string_value()) {
      r.mutable_stopping()->add_stop_strings(s->string_value());
    } else if (s->has_list_value()) {
      for (const Value& v : s->list_value().values()) {
        if (!v.has_string_value()) return Bad("stop", "must be a string or a list of strings");
        r.mutable_stopping()->add_stop_strings(v.string_value());
      }
    } else {
      return Bad("stop", "must be a string or a list of strings");
    }
  }
  auto ignore_eos = BoolField(b, "ignore_eos", false);
  if (!ignore_eos.ok()) return ignore_eos.status();
  r.mutable_stopping()->set_ignore_eos(*ignore_eos);
  auto stream = BoolField(b, "stream", false);
  if (!stream.ok()) return stream.status();
  out->stream = *stream;
  if (const Value* o = Field(b, "stream_options")) {
    if (!o->has_struct_value()) return Bad("stream_options", "must be an object");
    auto usage = BoolField(o->struct_value(), "include_usage", false);
    if (!usage.ok()) return Bad("stream_options.include_usage", "must be true or false");
    out->include_usage = *usage;
  }
  return absl::OkStatus();
}

absl::StatusOr<Struct> ParseBody(absl::string_view body) {
  auto parsed = ParseJsonObject(body, "request body");
  if (!parsed.ok()) return absl::InvalidArgumentError(parsed.status().message());
  return parsed;
}

// The engine's field names, as this API spells them.
std::string ApiField(absl::string_view field) {
  if (field == "max_new_tokens") return "max_tokens";
  if (field == "stop_strings") return "stop";
  if (field == "text" || field == "token_ids") return "prompt";
  return std::string(field);
}

// The message with the engine's names in this API's spelling.
std::string ApiMessage(absl::string_view message) {
  std::string m = absl::StrReplaceAll(
      message, {{"max_new_tokens", "max_tokens"}, {"stop_strings", "stop"}});
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
  const Struct& b = *parsed;
  OpenAiRequest out;
  v1::GenerateRequest& r = out.request;
  if (absl::Status st = ParseShared(b, served_model, &out); !st.ok()) return st;
  if (absl::Status st = ParsePrompt(b, &r); !st.ok()) return st;
  if (const Value* v = Field(b, "suffix"); v != nullptr && (!v->has_string_value() || !v->string_value().empty())) {
    return Bad("suffix", "is not supported");
  }
  if (absl::Status st = ParseMaxTokens(b, "max_tokens", &r); !st.ok()) return st;
  if (Field(b, "logprobs") != nullptr) {
    auto v = JsonToInt(b.fields().at("logprobs"), "logprobs", 0, 1 << 30);
    if (!v.ok()) return Bad("logprobs", "must be an integer >= 0");
    if (*v > kMaxCompletionLogprobs) {
      return Bad("logprobs", "at most ", kMaxCompletionLogprobs, " is supported, got ", *v);
    }
    // The sampled token's log-probability, and that many alternatives.
    r.set_return_logprobs(true);
    r.set_top_logprobs(static_cast<uint32_t>(*v));
  }
  auto echo = BoolField(b, "echo", false);
  if (!echo.ok()) return echo.status();
  out.echo = *echo;
  return out;
}

absl::StatusOr<OpenAiRequest> ParseChatRequest(absl::string_view body, absl::string_view served_model) {
  auto parsed = ParseBody(body);
  if (!parsed.ok()) return parsed.status();
  const Struct& b = *parsed;
  OpenAiRequest out;
  v1::GenerateRequest& r = out.request;
  if (absl::Status st = ParseShared(b, served_model, &out); !st.ok()) return st;
  if (absl::Status st = ParseMessages(b, &r); !st.ok()) return st;
  for (const char* key : {"tools", "tool_choice", "functions", "function_call", "audio"}) {
    const Value* v = Field(b, key);
    if (v != nullptr && !(v->has_list_value() && v->list_value().values_size() == 0) &&
        !(v->has_string_value() && v->string_value() == "none")) {
      return Bad(key, "is not supported (text chat only)");
    }
  }
  if (const Value* f = Field(b, "response_format")) {
    const Value* type = f->has_struct_value() ? Field(f->struct_value(), "type") : nullptr;
    if (type == nullptr || type->string_value() != "text") {
      return Bad("response_format", "only {\"type\": \"text\"} is supported");
    }
  }
  // max_completion_tokens is the current name; max_tokens the older one.
  if (absl::Status st = ParseMaxTokens(b, "max_tokens", &r); !st.ok()) return st;
  if (absl::Status st = ParseMaxTokens(b, "max_completion_tokens", &r); !st.ok()) return st;
  auto logprobs = BoolField(b, "logprobs", false);
  if (!logprobs.ok()) return logprobs.status();
  r.set_return_logprobs(*logprobs);
  if (Field(b, "top_logprobs") != nullptr) {
    auto v = JsonToInt(b.fields().at("top_logprobs"), "top_logprobs", 0, 1 << 30);
    if (!v.ok()) return Bad("top_logprobs", "must be an integer >= 0");
    if (*v > kMaxChatTopLogprobs) return Bad("top_logprobs", "at most ", kMaxChatTopLogprobs, ", got ", *v);
    if (*v > 0 && !*logprobs) return Bad("top_logprobs", "needs logprobs: true");
    r.set_top_logprobs(static_cast<uint32_t>(*v));
  }
  return out;
}

std::string OpenAiErrorBody(const absl::Status& status) {
  const std::string message = ApiMessage(status.message());
  const std::string param = ApiField(ErrorField(status));
  const int http = HttpStatusOf(status);
  return absl::StrCat("{\"error\": {\"message\": ", JsonQuote(message), ", \"type\": \"",
                      ErrorType(http), "\", \"param\": ",
                      param.empty() ? "null" : JsonQuote(param), ", \"code\": ",
                      JsonQuote(absl::AsciiStrToLower(absl::StatusCodeToString(status.code()))),
                      "}}");
}

}  // namespace flover::server
