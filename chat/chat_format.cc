#include "chat/chat_format.h"

#include "absl/strings/str_cat.h"
#include "chat/jinja_text.h"

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
  // One exchange, the reply a word no template changes; the first token
  // after it, if special, ends a turn. Some templates want a system message
  // first, some refuse one: try both.
  constexpr char kReply[] = "FloverReplyProbe";
  for (bool with_system : {false, true}) {
    std::vector<ChatMessage> probe;
    if (with_system) probe.push_back({"system", "S"});
    probe.push_back({"user", "U"});
    probe.push_back({"assistant", kReply});
    auto text = f->RenderWith(probe, /*add_generation_prompt=*/false);
    if (!text.ok()) continue;
    const size_t at = text->rfind(kReply);
    if (at == std::string::npos) continue;
    const absl::string_view after = jinja::LStrip(absl::string_view(*text).substr(at + sizeof(kReply) - 1));
    auto ids = f->tokenizer_->Encode(after, /*add_special_tokens=*/false);
    if (ids.ok() && !ids->empty() && f->tokenizer_->IsSpecial(ids->front())) {
      f->end_of_turn_ = {ids->front()};
    }
    break;
  }
  return f;
}

absl::StatusOr<std::string> ChatFormat::RenderWith(absl::Span<const ChatMessage> messages,
                                                   bool add_generation_prompt) const {
  jinja::List list;
  for (const ChatMessage& m : messages) {
    list.push_back(jinja::Value::MakeDict({{"role", jinja::Value(m.role)}, {"content", jinja::Value(m.content)}}));
  }
  const jinja::Dict variables = {
      {"messages", jinja::Value::MakeList(std::move(list))},
      {"add_generation_prompt", jinja::Value(add_generation_prompt)},
      {"bos_token", jinja::Value(bos_token_)},
      {"eos_token", jinja::Value(eos_token_)},
      {"tools", jinja::Value::None()},
      {"documents", jinja::Value::None()},
  };
  return template_.Render(variables);
}

absl::StatusOr<std::string> ChatFormat::Render(absl::Span<const ChatMessage> messages) const {
  return RenderWith(messages, /*add_generation_prompt=*/true);
}

absl::StatusOr<std::vector<int32_t>> ChatFormat::Tokenize(absl::Span<const ChatMessage> messages) const {
  auto text = Render(messages);
  if (!text.ok()) return text.status();
  return tokenizer_->Encode(*text, /*add_special_tokens=*/false);
}

}  // namespace flover
