#include "server/responses_api.h"

#include <httplib.h>

#include <algorithm>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "chat/reply_reader.h"
#include "server/openai_request.h"
#include "server/reply_stream.h"
#include "server/status_util.h"
#include "util/field_error.h"

namespace flover::server {
namespace {

template <typename... Parts>
absl::Status Bad(absl::string_view field, const Parts&... detail) {
  return FieldError(field, absl::StrCat(detail...));
}

// The input's items as messages; calls answered by an output within the
// input are checked here, the others (`unmatched`: their call ids and
// fields) against the previous response when served.
absl::Status ParseInput(const Json& input, ClientRequest* r,
                        std::vector<std::pair<std::string, std::string>>* unmatched) {
  r->prompt = ClientRequest::Prompt::kMessages;
  if (input.is_string()) {
    r->messages.push_back({"user", input.get<std::string>()});
    return absl::OkStatus();
  }
  if (!input.is_array()) return Bad("input", "must be a string or a list of items");
  if (input.empty()) return Bad("input", "is empty");
  std::set<std::string> calls;
  std::string reasoning;  // a reasoning item's text, for the assistant turn after it
  auto assistant = [&]() -> ChatMessage& {
    if (r->messages.empty() || r->messages.back().role != "assistant") {
      r->messages.push_back({"assistant", ""});
      r->messages.back().null_content = true;
    }
    ChatMessage& m = r->messages.back();
    if (!reasoning.empty()) m.reasoning_content += std::exchange(reasoning, "");
    return m;
  };
  for (size_t i = 0; i < input.size(); ++i) {
    const std::string at = absl::StrCat("input[", i, "]");
    const Json& item = input[i];
    if (!item.is_object()) return Bad(at, "must be an object");
    std::string type = "message";
    if (const Json* t = JsonField(item, "type")) {
      if (!t->is_string()) return Bad(at + ".type", "must be a string");
      type = t->get<std::string>();
    }
    if (type == "message") {
      auto role = JsonStringField(item, "role", at);
      if (!role.ok()) return role.status();
      if (*role != "user" && *role != "system" && *role != "developer" && *role != "assistant") {
        return Bad(at + ".role", "must be \"user\", \"system\", \"developer\" or \"assistant\"");
      }
      const Json* content = JsonField(item, "content");
      if (content == nullptr) return Bad(at + ".content", "is required");
      auto text = JsonTextParts(*content, at + ".content", {"input_text", "output_text", "text"});
      if (!text.ok()) return text.status();
      if (*role == "assistant") {
        ChatMessage& m = assistant();
        m.content += *text;
        m.null_content = false;
      } else {
        r->messages.push_back({*role == "developer" ? "system" : *role, *std::move(text)});
      }
    } else if (type == "function_call") {
      ToolCall call;
      for (auto [key, field] : {std::pair{"call_id", &call.id}, std::pair{"name", &call.name},
                                std::pair{"arguments", &call.arguments}}) {
        auto v = JsonStringField(item, key, at);
        if (!v.ok()) return v.status();
        *field = *std::move(v);
      }
      calls.insert(call.id);
      assistant().tool_calls.push_back(std::move(call));
    } else if (type == "function_call_output") {
      auto id = JsonStringField(item, "call_id", at);
      if (!id.ok()) return id.status();
      const Json* output = JsonField(item, "output");
      if (output == nullptr) return Bad(at + ".output", "is required");
      auto text = JsonTextParts(*output, at + ".output", {"input_text", "output_text", "text"});
      if (!text.ok()) return text.status();
      if (calls.count(*id) == 0) unmatched->push_back({*id, at + ".call_id"});
      ChatMessage result{"tool", *std::move(text)};
      result.tool_call_id = *id;
      r->messages.push_back(std::move(result));
    } else if (type == "reasoning") {
      for (const char* key : {"content", "summary"}) {
        const Json* parts = JsonField(item, key);
        if (parts == nullptr) continue;
        if (!parts->is_array()) return Bad(absl::StrCat(at, ".", key), "must be a list");
        for (const Json& p : *parts) {
          if (const Json* t = p.is_object() ? JsonField(p, "text") : nullptr; t != nullptr && t->is_string()) {
            reasoning += t->get<std::string>();
          }
        }
        if (!reasoning.empty()) break;  // the reasoning itself, else its summary
      }
    } else {
      return Bad(at + ".type", "\"", type, "\" is not supported (message, function_call, function_call_output, "
                 "reasoning)");
    }
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
      auto type = JsonStringField(t, "type", at);
      if (!type.ok()) return type.status();
      if (*type != "function") return Bad(at + ".type", "\"", *type, "\" is not supported (function tools only)");
      auto f = JsonFunctionTool(t, at, "parameters", /*schema_required=*/false);
      if (!f.ok()) return f.status();
      r->tools.push_back(*std::move(f));
    }
  }
  if (const Json* c = JsonField(b, "tool_choice")) {
    if (c->is_string()) {
      const std::string v = c->get<std::string>();
      if (v == "auto") {
        r->tool_choice = ToolChoice::kAuto;
      } else if (v == "none") {
        r->tool_choice = ToolChoice::kNone;
      } else if (v == "required") {
        r->tool_choice = ToolChoice::kRequired;
      } else {
        return Bad("tool_choice", "must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\"}");
      }
    } else if (c->is_object()) {
      auto name = JsonStringField(*c, "name", "tool_choice");
      if (!name.ok()) return name.status();
      r->tool_choice = ToolChoice::kNamed;
      r->tool_choice_name = *std::move(name);
    } else {
      return Bad("tool_choice", "must be a string or an object");
    }
  }
  auto parallel = JsonBool(b, "parallel_tool_calls", true, "parallel_tool_calls");
  if (!parallel.ok()) return parallel.status();
  r->parallel_tool_calls = *parallel;
  return absl::OkStatus();
}

absl::Status ParseTextFormat(const Json& b, ResponsesRequest* out) {
  const Json* text = JsonField(b, "text");
  if (text == nullptr) return absl::OkStatus();
  if (!text->is_object()) return Bad("text", "must be an object");
  const Json* f = JsonField(*text, "format");
  if (f == nullptr) return absl::OkStatus();
  out->text_format = *f;
  auto type = f->is_object() ? JsonStringField(*f, "type", "text.format") : Bad("text.format", "must be an object");
  if (!type.ok()) return type.status();
  using Kind = ClientRequest::Constraint::Kind;
  if (*type == "json_object") {
    out->request.constraint = ClientRequest::Constraint{Kind::kJsonObject, {}, "", "text.format"};
  } else if (*type == "json_schema") {
    const Json* schema = JsonField(*f, "schema");
    if (schema == nullptr || !(schema->is_object() || schema->is_boolean())) {
      return Bad("text.format.schema", "must be a JSON Schema (an object)");
    }
    out->request.constraint = ClientRequest::Constraint{Kind::kJsonSchema, {}, JsonText(*schema), "text.format.schema"};
  } else if (*type != "text") {
    return Bad("text.format.type", "\"", *type, "\" is not supported (text, json_object, json_schema)");
  }
  return absl::OkStatus();
}

void Fail(httplib::Response& res, const absl::Status& status) {
  res.status = HttpStatusOf(status);
  res.set_content(OpenAiErrorBody(status), "application/json");
}

// The response's output items, built as the reply's reader reads it; with
// `emit`, each change as its stream event.
class OutputWriter {
 public:
  using Emit = std::function<void(const char* type, Json event)>;
  explicit OutputWriter(Emit emit) : emit_(std::move(emit)) {}

  void Add(const ReplyReader::Event& e) {
    switch (e.kind) {
      case ReplyReader::Event::kReasoning:
        if (kind_ != Kind::kReasoning) {
          Close();
          Open(Kind::kReasoning, {{"type", "reasoning"}, {"id", RandomId("rs_")}, {"summary", Json::array()},
                                  {"content", Json::array()}});
        }
        text_ += e.text;
        Send("response.reasoning_text.delta", {{"content_index", 0}, {"delta", e.text}});
        break;
      case ReplyReader::Event::kContent:
        if (e.text.empty()) break;
        if (kind_ != Kind::kMessage) OpenMessage();
        text_ += e.text;
        Send("response.output_text.delta", {{"content_index", 0}, {"delta", e.text}, {"logprobs", Json::array()}});
        break;
      case ReplyReader::Event::kCallBegin:
        Close();
        Open(Kind::kCall, {{"type", "function_call"}, {"id", RandomId("fc_")}, {"call_id", e.call.id},
                           {"name", e.call.name}, {"arguments", ""}, {"status", "in_progress"}});
        break;
      case ReplyReader::Event::kArguments:
        text_ += e.text;
        Send("response.function_call_arguments.delta", {{"delta", e.text}});
        break;
      case ReplyReader::Event::kCall:
        if (kind_ != Kind::kCall) {  // not streamed argument by argument
          Close();
          Open(Kind::kCall, {{"type", "function_call"}, {"id", RandomId("fc_")}, {"call_id", e.call.id},
                             {"name", e.call.name}, {"arguments", ""}, {"status", "in_progress"}});
        }
        text_ = e.call.arguments;
        Close();
        break;
    }
  }
  // The last item closed; a reply with neither text nor calls gets an
  // empty message.
  Json Finish() {
    Close();
    bool answered = false;
    for (const Json& item : output_) answered = answered || item["type"] != "reasoning";
    if (!answered) {
      OpenMessage();
      Close();
    }
    return output_;
  }

 private:
  enum class Kind { kNone, kReasoning, kMessage, kCall };
  void OpenMessage() {
    Close();
    Open(Kind::kMessage,
         {{"type", "message"}, {"id", RandomId("msg_")}, {"status", "in_progress"}, {"role", "assistant"},
          {"content", Json::array()}});
    Send("response.content_part.added",
         {{"content_index", 0}, {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", Json::array()}}}});
  }
  void Open(Kind kind, Json item) {
    kind_ = kind;
    text_.clear();
    item_ = std::move(item);
    if (emit_) emit_("response.output_item.added", {{"output_index", output_.size()}, {"item", item_}});
  }
  void Send(const char* type, Json event) {
    if (!emit_) return;
    event["item_id"] = item_["id"];
    event["output_index"] = output_.size();
    emit_(type, std::move(event));
  }
  void Close() {
    if (kind_ == Kind::kNone) return;
    if (kind_ == Kind::kReasoning) {
      item_["content"] = Json::array({{{"type", "reasoning_text"}, {"text", text_}}});
      Send("response.reasoning_text.done", {{"content_index", 0}, {"text", text_}});
    } else if (kind_ == Kind::kMessage) {
      const Json part = {{"type", "output_text"}, {"text", text_}, {"annotations", Json::array()}};
      item_["content"] = Json::array({part});
      item_["status"] = "completed";
      Send("response.output_text.done", {{"content_index", 0}, {"text", text_}});
      Send("response.content_part.done", {{"content_index", 0}, {"part", part}});
    } else {
      item_["arguments"] = text_;
      item_["status"] = "completed";
      Send("response.function_call_arguments.done", {{"arguments", text_}});
    }
    if (emit_) emit_("response.output_item.done", {{"output_index", output_.size()}, {"item", item_}});
    output_.push_back(std::move(item_));
    item_ = Json();
    kind_ = Kind::kNone;
  }

  Emit emit_;
  Kind kind_ = Kind::kNone;
  Json item_;
  std::string text_;
  Json output_ = Json::array();
};

// The response object around `output` (null: in progress).
Json ResponseObject(const std::string& id, int64_t created, const std::string& model, const ResponsesRequest& p,
                    const Json& output, const FinishEvent* finish, int prompt_tokens) {
  const ClientRequest& r = p.request;
  Json tools = Json::array();
  for (const ToolFunction& t : r.tools) {
    tools.push_back({{"type", "function"}, {"name", t.name}, {"description", t.description},
                     {"parameters", t.parameters.empty() ? Json::object() : Json::parse(t.parameters, nullptr, false)},
                     {"strict", true}});
  }
  const ToolChoice choice = ToolChoiceOf(r);
  Json tool_choice = choice == ToolChoice::kNone     ? Json("none")
                     : choice == ToolChoice::kAuto     ? Json("auto")
                     : choice == ToolChoice::kRequired ? Json("required")
                                                       : Json{{"type", "function"}, {"name", r.tool_choice_name}};
  const bool incomplete = finish != nullptr && finish->reason == FinishReason::kLength;
  Json out = {{"id", id},
              {"object", "response"},
              {"created_at", created},
              {"status", finish == nullptr ? "in_progress" : incomplete ? "incomplete" : "completed"},
              {"error", nullptr},
              {"incomplete_details", incomplete ? Json{{"reason", "max_output_tokens"}} : Json(nullptr)},
              {"instructions", p.instructions.empty() ? Json(nullptr) : Json(p.instructions)},
              {"max_output_tokens", r.max_new_tokens.has_value() ? Json(*r.max_new_tokens) : Json(nullptr)},
              {"model", model},
              {"output", finish == nullptr ? Json::array() : output},
              {"parallel_tool_calls", r.parallel_tool_calls},
              {"previous_response_id", p.previous_response_id.empty() ? Json(nullptr) : Json(p.previous_response_id)},
              {"store", p.store},
              {"temperature", r.temperature.has_value() ? Json(*r.temperature) : Json(1.0)},
              {"text", {{"format", p.text_format.is_null() ? Json{{"type", "text"}} : p.text_format}}},
              {"tool_choice", std::move(tool_choice)},
              {"tools", std::move(tools)},
              {"top_p", r.top_p.has_value() ? Json(*r.top_p) : Json(1.0)},
              {"metadata", Json::object()}};
  if (finish != nullptr) {
    const int generated = finish->usage.generated_tokens;
    out["usage"] = {{"input_tokens", prompt_tokens},
                    {"input_tokens_details", {{"cached_tokens", 0}}},
                    {"output_tokens", generated},
                    {"output_tokens_details", {{"reasoning_tokens", 0}}},
                    {"total_tokens", prompt_tokens + generated}};
  }
  return out;
}

// The assistant's turn a response adds to its conversation.
ChatMessage AssistantTurn(const Json& output) {
  ChatMessage m{"assistant", ""};
  m.null_content = true;
  for (const Json& item : output) {
    if (item["type"] == "reasoning") {
      for (const Json& c : item["content"]) m.reasoning_content += c.value("text", "");
    } else if (item["type"] == "message") {
      for (const Json& c : item["content"]) m.content += c.value("text", "");
      m.null_content = false;
    } else if (item["type"] == "function_call") {
      m.tool_calls.push_back({item.value("call_id", ""), item.value("name", ""), item.value("arguments", "")});
    }
  }
  return m;
}

struct Unmatched {
  std::vector<std::pair<std::string, std::string>> calls;
};

void Serve(httplib::Response& res, const ServingContext& serving, const std::string& model, ResponseStore& store,
           ResponsesRequest parsed, const Unmatched& unmatched) {
  Engine& engine = serving.engine;
  // The conversation: the previous response's, then this input.
  std::vector<ChatMessage> conversation;
  if (!parsed.previous_response_id.empty()) {
    std::optional<ResponseStore::Entry> previous = store.Get(parsed.previous_response_id);
    if (!previous.has_value()) {
      return Fail(res, CountRefusal(engine, FieldError("previous_response_id",
                                                       absl::StrCat("no stored response \"", parsed.previous_response_id,
                                                                    "\" (never stored, deleted, or evicted: the store "
                                                                    "keeps the last ", store.capacity(), ")"),
                                                       absl::StatusCode::kNotFound)));
    }
    conversation = std::move(previous->messages);
  }
  std::set<std::string> earlier;
  for (const ChatMessage& m : conversation) {
    for (const ToolCall& c : m.tool_calls) earlier.insert(c.id);
  }
  for (const auto& [id, field] : unmatched.calls) {
    if (earlier.count(id) == 0) {
      return Fail(res, CountRefusal(engine, Bad(field, "\"", id, "\" answers no earlier function_call")));
    }
  }
  conversation.insert(conversation.end(), parsed.request.messages.begin(), parsed.request.messages.end());
  ClientRequest request = parsed.request;
  request.messages.clear();
  if (!parsed.instructions.empty()) request.messages.push_back({"system", parsed.instructions});
  request.messages.insert(request.messages.end(), conversation.begin(), conversation.end());

  auto sink = std::make_shared<CollectingSink>();
  auto submitted = SubmitRequest(serving, request, sink, [&](Request& r) {
    if (!request.max_new_tokens.has_value()) {  // as chat's: the reply may fill the context
      const int prompt_tokens = static_cast<int>(r.prompt.size());
      r.stop.max_new_tokens =
          std::max(1, std::min(engine.options().max_new_tokens_limit, engine.max_context() - prompt_tokens));
    }
  });
  if (!submitted.ok()) return Fail(res, submitted.status());
  const RequestId rid = submitted->id;
  const std::vector<int32_t>& prompt = submitted->prompt;
  const int prompt_tokens = static_cast<int>(prompt.size());
  const ReplyReader::Options o = ReplyOptions(serving, request, prompt, RandomId("call_") + "_", parsed.stream);
  const std::string id = RandomId("resp_");
  const int64_t created = absl::ToUnixSeconds(absl::Now());
  // Stores the finished response with its conversation.
  auto keep = [&store, id, conversation, stored = parsed.store](const Json& response) mutable {
    if (!stored) return;
    conversation.push_back(AssistantTurn(response["output"]));
    store.Put(id, {response, std::move(conversation)});
  };

  if (!parsed.stream) {
    auto [text, finish] = WholeReply(*sink);
    if (absl::Status st = EndStatus(finish); !st.ok()) return Fail(res, st);
    text += finish.text;
    ReplyReader reader(o);
    OutputWriter writer(nullptr);
    for (const ReplyReader::Event& e : reader.Push(text)) writer.Add(e);
    for (const ReplyReader::Event& e : reader.Finish()) writer.Add(e);
    const Json response = ResponseObject(id, created, model, parsed, writer.Finish(), &finish, prompt_tokens);
    keep(response);
    res.set_content(JsonText(response), "application/json");
    return;
  }

  // The writer emits into `pending`, which each of the stream's callbacks
  // hands over; events are numbered in order.
  struct Events {
    int sequence = 0;
    std::string pending;
  };
  auto out = std::make_shared<Events>();
  auto emit = [raw = out.get()](const char* type, Json event) {
    Json e = {{"type", type}, {"sequence_number", raw->sequence++}};
    for (auto& [k, v] : event.items()) e[k] = v;
    raw->pending += absl::StrCat("event: ", type, "\ndata: ", JsonText(e), "\n\n");
  };
  auto writer = std::make_shared<OutputWriter>(emit);
  auto take = [out] { return std::exchange(out->pending, ""); };
  ReplyEvents events;
  events.start = [emit, take, id, created, model, parsed, prompt_tokens] {
    const Json in_progress = ResponseObject(id, created, model, parsed, Json::array(), nullptr, prompt_tokens);
    emit("response.created", {{"response", in_progress}});
    emit("response.in_progress", {{"response", in_progress}});
    return take();
  };
  events.event = [writer, take](const ReplyReader::Event& e) {
    writer->Add(e);
    return take();
  };
  events.end = [writer, emit, take, id, created, model, parsed, prompt_tokens, keep](const FinishEvent& finish,
                                                                                   int) mutable {
    const Json response = ResponseObject(id, created, model, parsed, writer->Finish(), &finish, prompt_tokens);
    keep(response);
    emit(response["status"] == "completed" ? "response.completed" : "response.incomplete", {{"response", response}});
    return take();
  };
  events.error = [emit, take](const absl::Status& st) {
    emit("error", Json{{"code", absl::AsciiStrToLower(absl::StatusCodeToString(st.code()))},
                       {"message", std::string(st.message())},
                       {"param", nullptr}});
    return take();
  };
  StreamReply(res, engine, rid, sink, o, std::move(events));
}

absl::StatusOr<ResponsesRequest> Parse(absl::string_view body, absl::string_view served_model, Unmatched* unmatched) {
  auto parsed = ParseJsonObjectBody(body, "request body");
  if (!parsed.ok()) return parsed.status();
  const Json& b = *parsed;
  ResponsesRequest out;
  ClientRequest& r = out.request;
  if (absl::Status st = CheckServedModel(b, served_model, /*required=*/true); !st.ok()) return st;
  for (const char* key : {"conversation", "prompt", "background", "include"}) {
    if (const Json* v = JsonField(b, key); v != nullptr && !(v->is_array() && v->empty())) {
      return Bad(key, "is not supported");
    }
  }
  const Json* input = JsonField(b, "input");
  if (input == nullptr) return Bad("input", "is required");
  if (absl::Status st = ParseInput(*input, &r, &unmatched->calls); !st.ok()) return st;
  if (const Json* i = JsonField(b, "instructions")) {
    if (!i->is_string()) return Bad("instructions", "must be a string");
    out.instructions = i->get<std::string>();
  }
  if (absl::Status st = ParseTools(b, &r); !st.ok()) return st;
  if (absl::Status st = ParseTextFormat(b, &out); !st.ok()) return st;
  if (const Json* m = JsonField(b, "max_output_tokens")) {
    auto n = JsonInteger(*m, "max_output_tokens", 1, 1 << 30, "must be an integer >= 1");
    if (!n.ok()) return n.status();
    r.max_new_tokens = static_cast<uint32_t>(*n);
  }
  for (auto [key, field] : {std::pair{"temperature", &r.temperature}, std::pair{"top_p", &r.top_p}}) {
    if (const Json* v = JsonField(b, key)) {
      auto x = JsonNumber(*v, key, "must be a number");
      if (!x.ok()) return x.status();
      *field = static_cast<float>(*x);
    }
  }
  for (auto [key, field] : {std::pair{"stream", &out.stream}, std::pair{"store", &out.store}}) {
    auto v = JsonBool(b, key, key == std::string("store"), key);
    if (!v.ok()) return v.status();
    *field = *v;
  }
  if (const Json* p = JsonField(b, "previous_response_id")) {
    if (!p->is_string()) return Bad("previous_response_id", "must be a string");
    out.previous_response_id = p->get<std::string>();
  }
  if (const Json* reasoning = JsonField(b, "reasoning")) {
    if (!reasoning->is_object()) return Bad("reasoning", "must be an object");
    if (const Json* e = JsonField(*reasoning, "effort")) {
      const std::string effort = e->is_string() ? e->get<std::string>() : "";
      if (effort != "low" && effort != "medium" && effort != "high" && effort != "minimal") {
        return Bad("reasoning.effort", "must be \"minimal\", \"low\", \"medium\" or \"high\"");
      }
      r.template_kwargs = JsonText(Json{{"reasoning_effort", effort}});
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<ResponsesRequest> ParseResponsesRequest(absl::string_view body, absl::string_view served_model) {
  Unmatched unmatched;
  auto parsed = Parse(body, served_model, &unmatched);
  if (parsed.ok() && !unmatched.calls.empty()) {
    // Without the store, an output must answer a call in the same input.
    if (parsed->previous_response_id.empty()) {
      return Bad(unmatched.calls[0].second, "\"", unmatched.calls[0].first, "\" answers no earlier function_call");
    }
  }
  return parsed;
}

void ResponseStore::Put(const std::string& id, Entry entry) {
  std::lock_guard<std::mutex> lock(mu_);
  if (capacity_ == 0) return;
  if (auto it = by_id_.find(id); it != by_id_.end()) {
    order_.erase(it->second);
    by_id_.erase(it);
  }
  order_.emplace_front(id, std::move(entry));
  by_id_[id] = order_.begin();
  while (order_.size() > capacity_) {
    by_id_.erase(order_.back().first);
    order_.pop_back();
  }
}

std::optional<ResponseStore::Entry> ResponseStore::Get(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return std::nullopt;
  order_.splice(order_.begin(), order_, it->second);  // most recently used
  return it->second->second;
}

bool ResponseStore::Erase(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return false;
  order_.erase(it->second);
  by_id_.erase(it);
  return true;
}

void AddResponsesRoutes(httplib::Server& http, const ServingContext& serving, std::string model_name,
                        ResponseStore& store, const ApiKeys* keys) {
  Engine& engine = serving.engine;
  auto authorized = [&engine, keys](const httplib::Request& req, httplib::Response& res) {
    absl::Status st = CheckApiKey(keys, engine, req.get_header_value("Authorization"));
    if (!st.ok()) Fail(res, st);
    return st.ok();
  };
  http.Post("/v1/responses", [serving, model_name, authorized, &store](const httplib::Request& req,
                                                                        httplib::Response& res) {
    if (!authorized(req, res)) return;
    Unmatched unmatched;
    auto parsed = Parse(req.body, model_name, &unmatched);
    if (!parsed.ok()) return Fail(res, CountRefusal(serving.engine, parsed.status()));
    Serve(res, serving, model_name, store, *std::move(parsed), unmatched);
  });
  auto missing = [&store](const std::string& id) {
    return FieldError("response_id",
                      absl::StrCat("no stored response \"", id, "\" (never stored, deleted, or evicted: the store "
                                   "keeps the last ", store.capacity(), ")"),
                      absl::StatusCode::kNotFound);
  };
  http.Get(R"(/v1/responses/([A-Za-z0-9_\-]+))", [authorized, &store, missing](const httplib::Request& req,
                                                                              httplib::Response& res) {
    if (!authorized(req, res)) return;
    const std::string id = req.matches[1];
    std::optional<ResponseStore::Entry> entry = store.Get(id);
    if (!entry.has_value()) return Fail(res, missing(id));
    res.set_content(JsonText(entry->response), "application/json");
  });
  http.Delete(R"(/v1/responses/([A-Za-z0-9_\-]+))", [authorized, &store, missing](const httplib::Request& req,
                                                                                 httplib::Response& res) {
    if (!authorized(req, res)) return;
    const std::string id = req.matches[1];
    if (!store.Erase(id)) return Fail(res, missing(id));
    res.set_content(JsonText(Json{{"id", id}, {"object", "response"}, {"deleted", true}}), "application/json");
  });
}

}  // namespace flover::server
