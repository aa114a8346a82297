#include "chat/reply_reader.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "chat/harmony_reader.h"

namespace flover {
namespace {

// The tags around a reply's reasoning, by format.
struct Tags {
  absl::string_view open, close;
};
constexpr Tags kThink = {"<think>", "</think>"};
constexpr Tags kChannel = {"<|channel>thought", "<channel|>"};  // Gemma 4
Tags TagsOf(ReasoningFormat format) { return format == ReasoningFormat::kChannel ? kChannel : kThink; }

ReplyReader::Event FromToolEvent(ToolCallStream::Event& e) {
  using E = ReplyReader::Event;
  const E::Kind kind = e.kind == ToolCallStream::Event::kContent     ? E::kContent
                       : e.kind == ToolCallStream::Event::kCallBegin ? E::kCallBegin
                       : e.kind == ToolCallStream::Event::kArguments ? E::kArguments
                                                                     : E::kCall;
  return {kind, std::move(e.content), std::move(e.call), e.index};
}

bool IsSpace(char c) { return absl::ascii_isspace(static_cast<unsigned char>(c)); }

// The length of the longest end of `text` that begins `tag` (a tag that may
// be cut between two pieces of the stream).
size_t TagPrefixAtEnd(absl::string_view text, absl::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (absl::StartsWith(tag, text.substr(text.size() - n))) return n;
  }
  return 0;
}

}  // namespace

absl::StatusOr<ReasoningFormat> ReasoningFormatNamed(absl::string_view name) {
  if (name == "none") return ReasoningFormat::kNone;
  if (name == "think") return ReasoningFormat::kThinkTags;
  if (name == "harmony") return ReasoningFormat::kHarmony;
  if (name == "gemma4") return ReasoningFormat::kChannel;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown reasoning parser '", name, "' (none, think, harmony, gemma4)"));
}

const char* ReasoningFormatName(ReasoningFormat format) {
  switch (format) {
    case ReasoningFormat::kThinkTags: return "think";
    case ReasoningFormat::kHarmony: return "harmony";
    case ReasoningFormat::kChannel: return "gemma4";
    case ReasoningFormat::kNone: break;
  }
  return "none";
}

ReasoningFormat ReasoningFormatOf(absl::string_view template_text) {
  if (absl::StrContains(template_text, "<|channel|>")) return ReasoningFormat::kHarmony;
  if (absl::StrContains(template_text, kChannel.open)) return ReasoningFormat::kChannel;
  return absl::StrContains(template_text, kThink.open) || absl::StrContains(template_text, kThink.close)
             ? ReasoningFormat::kThinkTags
             : ReasoningFormat::kNone;
}

bool StartsInReasoning(ReasoningFormat format, absl::string_view prompt) {
  if (format != ReasoningFormat::kThinkTags && format != ReasoningFormat::kChannel) return false;
  return absl::EndsWith(absl::StripTrailingAsciiWhitespace(prompt), TagsOf(format).open);
}

absl::string_view ReasoningCloseTag(ReasoningFormat format) {
  if (format != ReasoningFormat::kThinkTags && format != ReasoningFormat::kChannel) return "";
  return TagsOf(format).close;
}

ReplyReader::ReplyReader(Options options)
    : options_(std::move(options)),
      state_(options_.reasoning == ReasoningFormat::kNone ? State::kAnswer
             : options_.starts_in_reasoning              ? State::kReasoning
                                                         : State::kStart) {
  if (options_.reasoning == ReasoningFormat::kHarmony) {
    harmony_ = std::make_unique<HarmonyReader>(options_.tools.has_value(), options_.call_id_prefix,
                                               options_.stream_arguments, options_.open_header);
  } else if (options_.tools.has_value()) {
    tools_ = std::make_unique<ToolCallStream>(*options_.tools, options_.call_id_prefix, options_.stream_arguments);
  }
}

ReplyReader::~ReplyReader() = default;

int ReplyReader::calls() const {
  if (harmony_ != nullptr) return harmony_->calls();
  return tools_ != nullptr ? tools_->calls() : 0;
}

void ReplyReader::Answer(absl::string_view text, std::vector<Event>* out) {
  if (text.empty()) return;
  if (tools_ == nullptr) {
    out->push_back({Event::kContent, std::string(text)});
    return;
  }
  for (ToolCallStream::Event& e : tools_->Push(text)) out->push_back(FromToolEvent(e));
}

void ReplyReader::Reasoning(absl::string_view text, std::vector<Event>* out) {
  // Whitespace after <think> goes; whitespace is held until text follows
  // it (before </think> it goes too).
  if (!reasoned_) {
    text = absl::StripLeadingAsciiWhitespace(text);
    if (text.empty()) return;
  }
  size_t end = text.size();
  while (end > 0 && IsSpace(text[end - 1])) --end;
  if (end == 0) {
    held_space_.append(text.data(), text.size());
    return;
  }
  out->push_back({Event::kReasoning, absl::StrCat(held_space_, text.substr(0, end))});
  held_space_.assign(text.data() + end, text.size() - end);
  reasoned_ = true;
}

std::vector<ReplyReader::Event> ReplyReader::Push(absl::string_view text) {
  if (harmony_ != nullptr) return harmony_->Push(text);
  std::vector<Event> out;
  if (state_ == State::kAnswer) {
    Answer(text, &out);
    return out;
  }
  pending_.append(text.data(), text.size());
  const Tags tags = TagsOf(options_.reasoning);
  while (!pending_.empty()) {
    if (state_ == State::kStart) {
      // The reply opens its reasoning itself, or it has none.
      const absl::string_view rest = absl::StripLeadingAsciiWhitespace(pending_);
      if (absl::StartsWith(rest, tags.open)) {
        pending_ = std::string(rest.substr(tags.open.size()));
        state_ = State::kReasoning;
        continue;
      }
      if (absl::StartsWith(tags.open, rest)) break;  // "<th": wait for more
      state_ = State::kAnswer;
      std::string answer = std::move(pending_);
      pending_.clear();
      Answer(answer, &out);
      break;
    }
    if (state_ == State::kReasoning) {
      const size_t close = absl::string_view(pending_).find(tags.close);
      if (close != absl::string_view::npos) {
        Reasoning(absl::string_view(pending_).substr(0, close), &out);
        held_space_.clear();
        pending_.erase(0, close + tags.close.size());
        state_ = State::kAnswerStart;
        continue;
      }
      const size_t keep = TagPrefixAtEnd(pending_, tags.close);
      Reasoning(absl::string_view(pending_).substr(0, pending_.size() - keep), &out);
      pending_.erase(0, pending_.size() - keep);
      break;
    }
    // kAnswerStart: whitespace after </think> goes.
    const absl::string_view rest = absl::StripLeadingAsciiWhitespace(pending_);
    if (rest.empty()) {
      pending_.clear();
      break;
    }
    state_ = State::kAnswer;
    const std::string answer(rest);
    pending_.clear();
    Answer(answer, &out);
  }
  return out;
}

std::vector<ReplyReader::Event> ReplyReader::Finish() {
  if (harmony_ != nullptr) return harmony_->Finish();
  std::vector<Event> out;
  if (state_ == State::kStart) {
    Answer(pending_, &out);  // "<th" and nothing more: an answer
  } else if (state_ == State::kReasoning) {
    Reasoning(pending_, &out);  // never closed: reasoning all the same
  }
  pending_.clear();
  held_space_.clear();
  state_ = State::kAnswer;
  if (tools_ != nullptr) {
    for (ToolCallStream::Event& e : tools_->Finish()) out.push_back(FromToolEvent(e));
  }
  return out;
}

Reply ReadReply(const ReplyReader::Options& options, absl::string_view text) {
  ReplyReader reader(options);
  std::vector<ReplyReader::Event> events = reader.Push(text);
  for (ReplyReader::Event& e : reader.Finish()) events.push_back(std::move(e));
  Reply reply;
  for (ReplyReader::Event& e : events) {
    if (e.kind == ReplyReader::Event::kReasoning) reply.reasoning += e.text;
    if (e.kind == ReplyReader::Event::kContent) reply.content += e.text;
    if (e.kind == ReplyReader::Event::kCall) reply.calls.push_back(std::move(e.call));
  }
  // As ParseToolCalls: with calls, the text left around them trimmed.
  if (!reply.calls.empty()) reply.content = std::string(absl::StripAsciiWhitespace(reply.content));
  return reply;
}

}  // namespace flover
