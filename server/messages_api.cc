#include "server/messages_api.h"

#include <httplib.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "chat/reply_reader.h"
#include "server/json_body.h"
#include "server/reply_stream.h"
#include "server/status_util.h"
#include "util/field_error.h"

namespace flover::server {
namespace {

template <typename... Parts>
absl::Status Bad(absl::string_view field, const Parts&... detail) {
  return FieldError(field, absl::StrCat(detail...));
}

// One turn's blocks into `out`: an assistant's text, thinking and
// tool_use; a user's text and tool_result (each result its own tool turn,
// before the user's text).
absl::Status AddTurn(const Json& item, size_t i, std::set<std::string>* calls_made, ClientRequest* out) {
  const std::string at = absl::StrCat("messages[", i, "]");
  if (!item.is_object()) return Bad(at, "must be an object");
  auto role = JsonStringField(item, "role", at);
  if (!role.ok()) return role.status();
  if (*role != "user" && *role != "assistant") return Bad(at + ".role", "must be \"user\" or \"assistant\"");
  const Json* content = JsonField(item, "content");
  if (content == nullptr) return Bad(at + ".content", "is required");
  ChatMessage m{*role, ""};
  if (content->is_string()) {
    m.content = content->get<std::string>();
    out->messages.push_back(std::move(m));
    return absl::OkStatus();
  }
  if (!content->is_array()) return Bad(at + ".content", "must be a string or a list of blocks");
  std::vector<std::string> texts;
  std::vector<ChatMessage::Part> parts;  // kept where an image is among them
  bool any_image = false;
  for (size_t j = 0; j < content->size(); ++j) {
    const std::string block = absl::StrCat(at, ".content[", j, "]");
    const Json& b = (*content)[j];
    if (!b.is_object()) return Bad(block, "must be an object");
    auto type = JsonStringField(b, "type", block);
    if (!type.ok()) return type.status();
    const bool assistant = *role == "assistant";
    if (*type == "text") {
      auto text = JsonStringField(b, "text", block);
      if (!text.ok()) return text.status();
      parts.push_back({false, *text});
      texts.push_back(*std::move(text));
    } else if (*type == "image" && !assistant) {
      // {"source": {"type": "base64", "media_type": ..., "data": ...}}, or
      // {"type": "url", "url": ...}, fetched where --image_url_hosts names
      // its host (request_convert).
      const Json* source = JsonField(b, "source");
      if (source == nullptr || !source->is_object()) return Bad(block + ".source", "must be an object");
      auto kind = JsonStringField(*source, "type", block + ".source");
      if (!kind.ok()) return kind.status();
      if (*kind == "url") {
        auto url = JsonStringField(*source, "url", block + ".source");
        if (!url.ok()) return url.status();
        out->images.push_back({"", block, *std::move(url)});
        parts.push_back({true, ""});
        any_image = true;
        continue;
      }
      if (*kind != "base64") {
        return Bad(block + ".source.type", "\"", *kind, "\" is not supported (base64, url)");
      }
      auto data = JsonStringField(*source, "data", block + ".source");
      if (!data.ok()) return data.status();
      std::string bytes;
      if (!absl::Base64Unescape(*data, &bytes) || bytes.empty()) {
        return Bad(block + ".source.data", "does not decode as base64");
      }
      out->images.push_back({std::move(bytes), block});
      parts.push_back({true, ""});
      any_image = true;
    } else if (*type == "tool_use" && assistant) {
      ToolCall call;
      for (auto [key, field] : {std::pair{"id", &call.id}, std::pair{"name", &call.name}}) {
        auto v = JsonStringField(b, key, block);
        if (!v.ok()) return v.status();
        *field = *std::move(v);
      }
      const Json* input = JsonField(b, "input");
      if (input == nullptr || !input->is_object()) return Bad(block + ".input", "must be an object");
      call.arguments = input->dump();
      calls_made->insert(call.id);
      m.tool_calls.push_back(std::move(call));
    } else if (*type == "thinking" && assistant) {
      auto thinking = JsonStringField(b, "thinking", block);
      if (!thinking.ok()) return thinking.status();
      m.reasoning_content += *thinking;
    } else if (*type == "redacted_thinking" && assistant) {
      // Another server's encrypted reasoning: nothing a template can show.
    } else if (*type == "tool_result" && !assistant) {
      auto id = JsonStringField(b, "tool_use_id", block);
      if (!id.ok()) return id.status();
      if (calls_made->count(*id) == 0) {
        return Bad(block + ".tool_use_id", "\"", *id, "\" answers no earlier tool_use");
      }
      ChatMessage result{"tool", ""};
      result.tool_call_id = *id;
      if (const Json* c = JsonField(b, "content")) {
        auto text = JsonTextParts(*c, block + ".content", {"text"});
        if (!text.ok()) return text.status();
        result.content = *std::move(text);
      }
      out->messages.push_back(std::move(result));
    } else if (*type == "document" || *type == "search_result") {
      return Bad(block + ".type", "\"", *type, "\" is not supported (text and image)");
    } else {
      return Bad(block + ".type", "\"", *type, "\" is not a block a ", *role, " message holds here (",
                 assistant ? "text, thinking, redacted_thinking, tool_use" : "text, tool_result", ")");
    }
  }
  m.content = absl::StrJoin(texts, "\n");
  if (any_image) m.parts = std::move(parts);
  if (texts.empty() && !m.tool_calls.empty()) m.null_content = true;
  // A user turn of results alone adds no user message after them.
  if (!texts.empty() || any_image || !m.tool_calls.empty() || !m.reasoning_content.empty() || m.role == "assistant" ||
      content->empty()) {
    out->messages.push_back(std::move(m));
  }
  return absl::OkStatus();
}

absl::Status ParseTools(const Json& b, ClientRequest* r) {
  if (const Json* tools = JsonField(b, "tools")) {
    if (!tools->is_array()) return Bad("tools", "must be a list");
    for (size_t i = 0; i < tools->size(); ++i) {
      const std::string at = absl::StrCat("tools[", i, "]");
      const Json& t = (*tools)[i];
      if (!t.is_object()) return Bad(at, "must be an object");
      if (const Json* type = JsonField(t, "type"); type != nullptr && (!type->is_string() || *type != "custom")) {
        return Bad(at + ".type", "server tools are not supported (client tools only: name, input_schema)");
      }
      auto f = JsonFunctionTool(t, at, "input_schema", /*schema_required=*/true);
      if (!f.ok()) return f.status();
      r->tools.push_back(*std::move(f));
    }
  }
  if (const Json* c = JsonField(b, "tool_choice")) {
    if (!c->is_object()) return Bad("tool_choice", "must be an object");
    auto type = JsonStringField(*c, "type", "tool_choice");
    if (!type.ok()) return type.status();
    if (*type == "auto") {
      r->tool_choice = ToolChoice::kAuto;
    } else if (*type == "any") {
      r->tool_choice = ToolChoice::kRequired;
    } else if (*type == "none") {
      r->tool_choice = ToolChoice::kNone;
    } else if (*type == "tool") {
      auto name = JsonStringField(*c, "name", "tool_choice");
      if (!name.ok()) return name.status();
      r->tool_choice = ToolChoice::kNamed;
      r->tool_choice_name = *std::move(name);
    } else {
      return Bad("tool_choice.type", "must be \"auto\", \"any\", \"tool\" or \"none\"");
    }
    auto serial = JsonBool(*c, "disable_parallel_tool_use", false, "tool_choice.disable_parallel_tool_use");
    if (!serial.ok()) return serial.status();
    r->parallel_tool_calls = !*serial;
  }
  return absl::OkStatus();
}

// A block of the answer as the API writes it.
Json ToolUse(const ToolCall& call) {
  Json input = Json::parse(call.arguments, nullptr, /*allow_exceptions=*/false);
  if (!input.is_object()) input = Json::object();
  return {{"type", "tool_use"}, {"id", call.id}, {"name", call.name}, {"input", std::move(input)}};
}

std::string Event(const char* type, const Json& data) {
  return absl::StrCat("event: ", type, "\ndata: ", JsonText(data), "\n\n");
}

const char* ErrorTypeOf(int http) {
  switch (http) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return "api_error";
  }
}

void Fail(httplib::Response& res, const absl::Status& status) {
  res.status = HttpStatusOf(status);
  res.set_content(MessagesErrorBody(status), "application/json");
}

// The reply's end as the API says it.
Json StopReason(const FinishEvent& f, bool called) {
  if (called) return "tool_use";
  if (f.reason == FinishReason::kLength) return "max_tokens";
  if (f.reason == FinishReason::kStop) return "stop_sequence";
  return "end_turn";
}

// One streamed reply's blocks: each event of the reader goes into the open
// block of its kind, or closes it and opens the next.
class BlockWriter {
 public:
  std::string Add(const ReplyReader::Event& e) {
    std::string out;
    switch (e.kind) {
      case ReplyReader::Event::kReasoning:
        out += Open(Kind::kThinking, {{"type", "thinking"}, {"thinking", ""}});
        out += Delta({{"type", "thinking_delta"}, {"thinking", e.text}});
        break;
      case ReplyReader::Event::kContent:
        if (e.text.empty()) break;
        out += Open(Kind::kText, {{"type", "text"}, {"text", ""}});
        out += Delta({{"type", "text_delta"}, {"text", e.text}});
        break;
      case ReplyReader::Event::kCallBegin:
        out += Close();
        out += Open(Kind::kToolUse,
                    {{"type", "tool_use"}, {"id", e.call.id}, {"name", e.call.name}, {"input", Json::object()}});
        break;
      case ReplyReader::Event::kArguments:
        out += Delta({{"type", "input_json_delta"}, {"partial_json", e.text}});
        break;
      case ReplyReader::Event::kCall: break;  // streamed as it came
    }
    return out;
  }
  std::string Close() {
    if (open_ == Kind::kNone) return "";
    open_ = Kind::kNone;
    return Event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
  }

 private:
  enum class Kind { kNone, kThinking, kText, kToolUse };
  std::string Open(Kind kind, Json block) {
    if (open_ == kind && kind != Kind::kToolUse) return "";
    std::string out = Close();
    open_ = kind;
    ++index_;
    out += Event("content_block_start",
                 {{"type", "content_block_start"}, {"index", index_}, {"content_block", std::move(block)}});
    return out;
  }
  std::string Delta(Json delta) const {
    return Event("content_block_delta", {{"type", "content_block_delta"}, {"index", index_}, {"delta", std::move(delta)}});
  }
  Kind open_ = Kind::kNone;
  int index_ = -1;
};

void Serve(httplib::Response& res, const ServingContext& serving, const std::string& model,
           const MessagesRequest& parsed) {
  Engine& engine = serving.engine;
  auto sink = std::make_shared<CollectingSink>();
  auto submitted = SubmitRequest(serving, parsed.request, sink);
  if (!submitted.ok()) return Fail(res, submitted.status());
  const RequestId id = submitted->id;
  const std::vector<int32_t>& prompt = submitted->prompt;
  const int prompt_tokens = static_cast<int>(prompt.size());
  const ReplyReader::Options o = ReplyOptions(serving, parsed.request, prompt, RandomId("toolu_") + "_", parsed.stream);
  const std::string message_id = absl::StrCat(RandomId("msg_"), id);
  const std::vector<std::string> stops = parsed.request.stop_strings;
  auto stop_sequence = [stops](const Json& reason) {
    return reason == "stop_sequence" && stops.size() == 1 ? Json(stops[0]) : Json(nullptr);
  };

  if (!parsed.stream) {
    auto [text, finish] = WholeReply(*sink);
    if (absl::Status st = EndStatus(finish); !st.ok()) return Fail(res, st);
    text += finish.text;
    const Reply reply = ReadReply(o, text);
    Json content = Json::array();
    if (!reply.reasoning.empty()) {
      content.push_back({{"type", "thinking"}, {"thinking", reply.reasoning}, {"signature", ""}});
    }
    if (!reply.content.empty() || reply.calls.empty()) content.push_back({{"type", "text"}, {"text", reply.content}});
    for (const ToolCall& c : reply.calls) content.push_back(ToolUse(c));
    const Json reason = StopReason(finish, !reply.calls.empty());
    res.set_content(JsonText(Json{{"id", message_id},
                                  {"type", "message"},
                                  {"role", "assistant"},
                                  {"model", model},
                                  {"content", std::move(content)},
                                  {"stop_reason", reason},
                                  {"stop_sequence", stop_sequence(reason)},
                                  {"usage",
                                   {{"input_tokens", prompt_tokens},
                                    {"output_tokens", finish.usage.generated_tokens}}}}),
                    "application/json");
    return;
  }

  auto blocks = std::make_shared<BlockWriter>();
  ReplyEvents events;
  events.start = [model, message_id, prompt_tokens] {
    return Event("message_start", {{"type", "message_start"},
                                   {"message",
                                    {{"id", message_id},
                                     {"type", "message"},
                                     {"role", "assistant"},
                                     {"model", model},
                                     {"content", Json::array()},
                                     {"stop_reason", nullptr},
                                     {"stop_sequence", nullptr},
                                     {"usage", {{"input_tokens", prompt_tokens}, {"output_tokens", 0}}}}}}) +
           Event("ping", {{"type", "ping"}});
  };
  events.event = [blocks](const ReplyReader::Event& e) { return blocks->Add(e); };
  events.end = [blocks, stop_sequence](const FinishEvent& finish, int calls) {
    const Json reason = StopReason(finish, calls > 0);
    return blocks->Close() +
           Event("message_delta", {{"type", "message_delta"},
                                   {"delta", {{"stop_reason", reason}, {"stop_sequence", stop_sequence(reason)}}},
                                   {"usage", {{"output_tokens", finish.usage.generated_tokens}}}}) +
           Event("message_stop", {{"type", "message_stop"}});
  };
  events.error = [](const absl::Status& st) { return Event("error", Json::parse(MessagesErrorBody(st))); };
  StreamReply(res, engine, id, sink, o, std::move(events));
}

}  // namespace

absl::StatusOr<MessagesRequest> ParseMessagesRequest(absl::string_view body, absl::string_view served_model) {
  auto parsed = ParseJsonObjectBody(body, "request body");
  if (!parsed.ok()) return parsed.status();
  const Json& b = *parsed;
  MessagesRequest out;
  ClientRequest& r = out.request;
  if (absl::Status st = CheckServedModel(b, served_model, /*required=*/true); !st.ok()) return st;
  for (const char* key : {"mcp_servers", "container"}) {
    if (JsonField(b, key) != nullptr) return Bad(key, "is not supported");
  }
  const Json* max_tokens = JsonField(b, "max_tokens");
  if (max_tokens == nullptr) return Bad("max_tokens", "is required");
  auto n = JsonInteger(*max_tokens, "max_tokens", 1, 1 << 30, "must be an integer >= 1");
  if (!n.ok()) return n.status();
  r.max_new_tokens = static_cast<uint32_t>(*n);
  r.prompt = ClientRequest::Prompt::kMessages;
  if (const Json* system = JsonField(b, "system")) {
    auto text = JsonTextParts(*system, "system", {"text"});
    if (!text.ok()) return text.status();
    r.messages.push_back({"system", *std::move(text)});
  }
  const Json* messages = JsonField(b, "messages");
  if (messages == nullptr || !messages->is_array()) return Bad("messages", "must be a list");
  if (messages->empty()) return Bad("messages", "is empty");
  std::set<std::string> calls_made;
  for (size_t i = 0; i < messages->size(); ++i) {
    if (absl::Status st = AddTurn((*messages)[i], i, &calls_made, &r); !st.ok()) return st;
  }
  if (absl::Status st = ParseTools(b, &r); !st.ok()) return st;
  if (const Json* stops = JsonField(b, "stop_sequences")) {
    if (!stops->is_array()) return Bad("stop_sequences", "must be a list of strings");
    for (const Json& s : *stops) {
      if (!s.is_string()) return Bad("stop_sequences", "must be a list of strings");
      r.stop_strings.push_back(s.get<std::string>());
    }
  }
  for (auto [key, field] : {std::pair{"temperature", &r.temperature}, std::pair{"top_p", &r.top_p}}) {
    if (const Json* v = JsonField(b, key)) {
      auto x = JsonNumber(*v, key, "must be a number");
      if (!x.ok()) return x.status();
      *field = static_cast<float>(*x);
    }
  }
  if (const Json* v = JsonField(b, "top_k")) {
    auto k = JsonInteger(*v, "top_k", 0, 1 << 30, "must be an integer >= 0");
    if (!k.ok()) return k.status();
    r.top_k = static_cast<int32_t>(*k);
  }
  auto stream = JsonBool(b, "stream", false, "stream");
  if (!stream.ok()) return stream.status();
  out.stream = *stream;
  // output_config: a JSON Schema the answer must match (format), and the
  // template's reasoning_effort (effort; xhigh and max as high).
  Json kwargs = Json::object();
  if (const Json* oc = JsonField(b, "output_config")) {
    if (!oc->is_object()) return Bad("output_config", "must be an object");
    if (const Json* f = JsonField(*oc, "format")) {
      auto type = f->is_object() ? JsonStringField(*f, "type", "output_config.format")
                                 : absl::StatusOr<std::string>(Bad("output_config.format", "must be an object"));
      if (!type.ok()) return type.status();
      if (*type != "json_schema") return Bad("output_config.format.type", "must be \"json_schema\"");
      const Json* schema = JsonField(*f, "schema");
      if (schema == nullptr || !schema->is_object()) {
        return Bad("output_config.format.schema", "must be a JSON Schema (an object)");
      }
      r.constraint = ClientRequest::Constraint{ClientRequest::Constraint::Kind::kJsonSchema, {}, JsonText(*schema),
                                               "output_config.format.schema"};
    }
    if (const Json* e = JsonField(*oc, "effort")) {
      const std::string effort = e->is_string() ? e->get<std::string>() : "";
      if (effort != "low" && effort != "medium" && effort != "high" && effort != "xhigh" && effort != "max") {
        return Bad("output_config.effort", "must be \"low\", \"medium\", \"high\", \"xhigh\" or \"max\"");
      }
      kwargs["reasoning_effort"] = effort == "xhigh" || effort == "max" ? "high" : effort;
    }
  }
  if (const Json* t = JsonField(b, "thinking")) {
    if (!t->is_object()) return Bad("thinking", "must be an object");
    auto type = JsonStringField(*t, "type", "thinking");
    if (!type.ok()) return type.status();
    if (*type != "enabled" && *type != "disabled") return Bad("thinking.type", "must be \"enabled\" or \"disabled\"");
    // The template's switch (Qwen3's enable_thinking), and budget_tokens as
    // the reasoning budget.
    kwargs["enable_thinking"] = *type == "enabled";
    if (const Json* budget = JsonField(*t, "budget_tokens"); budget != nullptr && *type == "enabled") {
      auto n = JsonInteger(*budget, "thinking.budget_tokens", 0, 1 << 30, "must be an integer >= 0");
      if (!n.ok()) return n.status();
      r.max_reasoning_tokens = static_cast<uint32_t>(*n);
    }
  }
  if (!kwargs.empty()) r.template_kwargs = JsonText(kwargs);
  return out;
}

std::string MessagesErrorBody(const absl::Status& status) {
  const int http = HttpStatusOf(status);
  return JsonText(
      Json{{"type", "error"}, {"error", {{"type", ErrorTypeOf(http)}, {"message", std::string(status.message())}}}});
}

void AddMessagesRoutes(httplib::Server& http, const ServingContext& serving, std::string model_name,
                       const ApiKeys* keys) {
  Engine& engine = serving.engine;
  // With keys: x-api-key (Anthropic's header) or Authorization: Bearer.
  auto authorized = [&engine, keys](const httplib::Request& req, httplib::Response& res) {
    const std::string key = req.get_header_value("x-api-key");
    absl::Status st = CheckApiKey(keys, engine, key.empty() ? req.get_header_value("Authorization") : "Bearer " + key);
    if (!st.ok()) Fail(res, st);
    return st.ok();
  };
  http.Post("/v1/messages", [serving, model_name, authorized](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res)) return;
    auto parsed = ParseMessagesRequest(req.body, model_name);
    if (!parsed.ok()) return Fail(res, CountRefusal(serving.engine, parsed.status()));
    Serve(res, serving, model_name, *parsed);
  });
  http.Post("/v1/messages/count_tokens",
            [serving, model_name, authorized](const httplib::Request& req, httplib::Response& res) {
              if (!authorized(req, res)) return;
              // As /v1/messages reads it, max_tokens aside.
              Json body = Json::parse(req.body, nullptr, /*allow_exceptions=*/false);
              if (body.is_object() && !body.contains("max_tokens")) body["max_tokens"] = 1;
              auto parsed = ParseMessagesRequest(body.is_discarded() ? req.body : body.dump(), model_name);
              if (!parsed.ok()) return Fail(res, parsed.status());
              auto converted = ToEngineRequest(parsed->request, serving.convert(), 0);
              if (!converted.ok()) return Fail(res, converted.status());
              res.set_content(JsonText(Json{{"input_tokens", converted->prompt.size()}}), "application/json");
            });
}

}  // namespace flover::server
