#include "chat/chat_format.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "chat/jinja_text.h"
#include "chat/tool_calls.h"

namespace flover {

absl::StatusOr<std::unique_ptr<ChatFormat>> ChatFormat::Create(
    const std::string& template_text, const std::string& source, const std::string& bos_token,
    const std::string& eos_token, std::shared_ptr<const Tokenizer> tokenizer) {
  auto parsed = jinja::Template::Parse(template_text);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", parsed.status().message()));
  }
  std::unique_ptr<ChatFormat> f(new ChatFormat());
  f->template_ = std::move(*parsed);
  f->source_ = source;
  f->bos_token_ = bos_token;
  f->eos_token_ = eos_token;
  f->tokenizer_ = std::move(tokenizer);
  f->template_text_ = template_text;
  // One exchange, the reply a word no template changes; the first token
  // after it, if special, ends a turn.
  constexpr char kReply[] = "FloverReplyProbe";
  const std::optional<std::string> exchange = f->RenderProbe(
      {{"user", "U"}, {"assistant", kReply}}, {}, /*add_generation_prompt=*/false,
      [&](const std::string& text) { return text.rfind(kReply) != std::string::npos; });
  if (exchange.has_value()) {
    const size_t at = exchange->rfind(kReply);
    const absl::string_view after = jinja::LStrip(absl::string_view(*exchange).substr(at + sizeof(kReply) - 1));
    auto ids = f->tokenizer_->Encode(after, /*add_special_tokens=*/false);
    if (ids.ok() && !ids->empty() && f->tokenizer_->IsSpecial(ids->front())) {
      f->end_of_turn_ = {ids->front()};
    }
  }
  // Whether the template shows tools: render one whose name no template
  // writes on its own (a template that refuses tools gets them described
  // in text).
  constexpr char kTool[] = "FloverToolProbe";
  const ToolFunction probe_tool{kTool, "", R"({"type": "object"})"};
  f->takes_tools_ = true;  // RenderWith passes the tools through
  const std::optional<std::string> with_tool =
      f->RenderProbe({{"user", "U"}}, absl::MakeConstSpan(&probe_tool, 1), /*add_generation_prompt=*/true,
                     [](const std::string&) { return true; });
  f->takes_tools_ = with_tool.has_value() && absl::StrContains(*with_tool, kTool);
  return f;
}

std::optional<std::string> ChatFormat::RenderProbe(const std::vector<ChatMessage>& turns,
                                                   absl::Span<const ToolFunction> tools,
                                                   bool add_generation_prompt,
                                                   const std::function<bool(const std::string&)>& usable) const {
  // Some templates want a system message first, some refuse one: try both.
  for (bool with_system : {false, true}) {
    std::vector<ChatMessage> probe;
    if (with_system) probe.push_back({"system", "S"});
    probe.insert(probe.end(), turns.begin(), turns.end());
    auto text = RenderWith(probe, tools, add_generation_prompt);
    if (text.ok() && usable(*text)) return *std::move(text);
  }
  return std::nullopt;
}

namespace {

// A JSON text as the template's value (a string when it is not JSON).
jinja::Value JsonOrString(const std::string& json) {
  auto v = jinja::ParseJsonValue(json, "arguments");
  return v.ok() ? *v : jinja::Value(json);
}

jinja::Value MessageValue(const ChatMessage& m) {
  jinja::Value content = m.null_content ? jinja::Value::None() : jinja::Value(m.content);
  if (!m.parts.empty()) {
    jinja::List parts;
    for (const ChatMessage::Part& p : m.parts) {
      parts.push_back(p.image ? jinja::Value::MakeDict({{"type", jinja::Value("image")}})
                              : jinja::Value::MakeDict({{"type", jinja::Value("text")}, {"text", jinja::Value(p.text)}}));
    }
    content = jinja::Value::MakeList(std::move(parts));
  }
  jinja::Dict d = {{"role", jinja::Value(m.role)}, {"content", std::move(content)}};
  if (!m.tool_calls.empty()) {
    jinja::List calls;
    for (const ToolCall& c : m.tool_calls) {
      calls.push_back(jinja::Value::MakeDict(
          {{"id", jinja::Value(c.id)},
           {"type", jinja::Value("function")},
           {"function", jinja::Value::MakeDict({{"name", jinja::Value(c.name)},
                                                {"arguments", JsonOrString(c.arguments)}})}}));
    }
    d.push_back({"tool_calls", jinja::Value::MakeList(std::move(calls))});
  }
  if (!m.tool_call_id.empty()) d.push_back({"tool_call_id", jinja::Value(m.tool_call_id)});
  if (!m.name.empty()) d.push_back({"name", jinja::Value(m.name)});
  if (!m.reasoning_content.empty()) d.push_back({"reasoning_content", jinja::Value(m.reasoning_content)});
  return jinja::Value::MakeDict(std::move(d));
}

jinja::Value ToolsValue(absl::Span<const ToolFunction> tools) {
  jinja::List list;
  for (const ToolFunction& t : tools) {
    jinja::Dict f = {{"name", jinja::Value(t.name)}};
    if (!t.description.empty()) f.push_back({"description", jinja::Value(t.description)});
    f.push_back({"parameters", JsonOrString(t.parameters.empty() ? R"({"type": "object"})" : t.parameters)});
    list.push_back(jinja::Value::MakeDict({{"type", jinja::Value("function")},
                                           {"function", jinja::Value::MakeDict(std::move(f))}}));
  }
  return jinja::Value::MakeList(std::move(list));
}

// For a template without tools: the tools described in the system message,
// past calls as text in the assistant's turn, tool results as user turns.
std::vector<ChatMessage> WithToolsAsText(absl::Span<const ChatMessage> messages,
                                         absl::Span<const ToolFunction> tools) {
  std::vector<ChatMessage> out;
  const std::string description = DescribeTools(tools);
  if (messages.empty() || messages[0].role != "system") {
    out.push_back({"system", description});
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    ChatMessage plain{m.role, m.null_content ? "" : m.content};
    if (i == 0 && m.role == "system") plain.content = absl::StrCat(m.content, "\n\n", description);
    for (const ToolCall& c : m.tool_calls) {
      if (!plain.content.empty()) plain.content += "\n";
      plain.content += HermesCallText(c);
    }
    if (m.role == "tool") plain = {"user", ToolResultText(m)};
    out.push_back(std::move(plain));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> ChatFormat::RenderWith(absl::Span<const ChatMessage> messages,
                                                   absl::Span<const ToolFunction> tools,
                                                   bool add_generation_prompt, const std::string& kwargs) const {
  std::vector<ChatMessage> rewritten;
  const bool tools_as_text = !takes_tools_ && !tools.empty();
  if (tools_as_text) rewritten = WithToolsAsText(messages, tools);
  jinja::List list;
  for (const ChatMessage& m : tools_as_text ? absl::MakeConstSpan(rewritten) : messages) {
    list.push_back(MessageValue(m));
  }
  jinja::Dict variables = {
      {"messages", jinja::Value::MakeList(std::move(list))},
      {"add_generation_prompt", jinja::Value(add_generation_prompt)},
      {"bos_token", jinja::Value(bos_token_)},
      {"eos_token", jinja::Value(eos_token_)},
      {"tools", tools.empty() || tools_as_text ? jinja::Value::None() : ToolsValue(tools)},
      {"documents", jinja::Value::None()},
  };
  if (!kwargs.empty()) {
    auto extra = jinja::ParseJsonValue(kwargs, "chat_template_kwargs");
    if (!extra.ok()) return extra.status();
    if (!extra->is_dict()) return absl::InvalidArgumentError("chat_template_kwargs: must be an object");
    const size_t own = variables.size();
    for (const auto& [key, value] : extra->dict()) {
      for (size_t i = 0; i < own; ++i) {
        if (variables[i].first == key) {
          return absl::InvalidArgumentError(
              absl::StrCat("chat_template_kwargs.", key, ": is set by the server, not the request"));
        }
      }
      variables.push_back({key, value});
    }
  }
  return template_.Render(variables);
}

absl::StatusOr<std::string> ChatFormat::Render(absl::Span<const ChatMessage> messages,
                                               absl::Span<const ToolFunction> tools,
                                               const std::string& kwargs) const {
  return RenderWith(messages, tools, /*add_generation_prompt=*/true, kwargs);
}

absl::StatusOr<std::vector<int32_t>> ChatFormat::Tokenize(absl::Span<const ChatMessage> messages,
                                                          absl::Span<const ToolFunction> tools,
                                                          const std::string& kwargs) const {
  auto text = Render(messages, tools, kwargs);
  if (!text.ok()) return text.status();
  return tokenizer_->Encode(*text, /*add_special_tokens=*/false);
}

}  // namespace flover
