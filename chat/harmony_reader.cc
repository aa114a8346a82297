#include "chat/harmony_reader.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace flover {
namespace {

constexpr absl::string_view kMessage = "<|message|>";
constexpr absl::string_view kChannel = "<|channel|>";
constexpr absl::string_view kFunctions = "functions.";
// What ends a message's body: <|end|> (another message may follow),
// <|return|> and <|call|> (the reply's last), and <|start|> where a model
// opens a message without ending the one before (it stays: a header).
constexpr absl::string_view kEnd = "<|end|>", kReturn = "<|return|>", kCall = "<|call|>", kStart = "<|start|>";
constexpr absl::string_view kTerminators[] = {kEnd, kReturn, kCall, kStart};

bool IsSpace(char c) { return absl::ascii_isspace(static_cast<unsigned char>(c)); }

// The word of `header` after `key` (up to whitespace or a special token), or "".
std::string WordAfter(absl::string_view header, absl::string_view key) {
  size_t at = header.find(key);
  // "to=" only where a word starts.
  while (at != absl::string_view::npos && key == "to=" && at > 0 && !IsSpace(header[at - 1]) &&
         header[at - 1] != '>') {
    at = header.find(key, at + 1);
  }
  if (at == absl::string_view::npos) return "";
  size_t end = at + key.size();
  while (end < header.size() && !IsSpace(header[end]) && header[end] != '<') ++end;
  return std::string(header.substr(at + key.size(), end - at - key.size()));
}

// The first terminator in `text` (<|start|> too unless in a header): its
// position, or npos, and which.
size_t FindTerminator(absl::string_view text, bool with_start, absl::string_view* which) {
  size_t best = absl::string_view::npos;
  for (absl::string_view t : kTerminators) {
    if (t == kStart && !with_start) continue;
    const size_t at = text.find(t);
    if (at < best) {
      best = at;
      *which = t;
    }
  }
  return best;
}

// The length of the longest end of `text` that begins a terminator.
size_t TerminatorPrefixAtEnd(absl::string_view text) {
  size_t keep = 0;
  for (absl::string_view t : kTerminators) {
    for (size_t n = std::min(text.size(), t.size() - 1); n > keep; --n) {
      if (absl::StartsWith(t, text.substr(text.size() - n))) {
        keep = n;
        break;
      }
    }
  }
  return keep;
}

}  // namespace

std::string HarmonyOpenHeader(absl::string_view prompt_tail) {
  if (!absl::EndsWith(prompt_tail, kMessage)) return "";
  absl::string_view header = prompt_tail.substr(0, prompt_tail.size() - kMessage.size());
  const size_t start = header.rfind(kStart);
  if (start != absl::string_view::npos) header = header.substr(start + kStart.size());
  // A header, not the end of another message's body.
  if (header.find(kMessage) != absl::string_view::npos || header.find(kEnd) != absl::string_view::npos) return "";
  return std::string(header);
}

std::string HarmonyCallHeader(absl::string_view function) {
  return absl::StrCat(kChannel, "commentary to=", kFunctions, function, " <|constrain|>json", kMessage);
}

HarmonyReader::HarmonyReader(bool tools, std::string call_id_prefix, bool stream_arguments,
                             absl::string_view open_header)
    : tools_(tools), call_id_prefix_(std::move(call_id_prefix)), stream_arguments_(stream_arguments) {
  if (open_header.empty()) return;
  std::vector<Event> begun;
  Begin(open_header, &begun);
  opened_ = std::move(begun);  // its kCallBegin, with the first Push's events
  state_ = State::kBody;
}

void HarmonyReader::Begin(absl::string_view header, std::vector<Event>* out) {
  first_ = false;
  const std::string channel = WordAfter(header, kChannel), recipient = WordAfter(header, "to=");
  if (tools_ && absl::StartsWith(recipient, kFunctions) && recipient.size() > kFunctions.size()) {
    kind_ = Kind::kCall;
    name_ = recipient.substr(kFunctions.size());
    arguments_.clear();
    if (stream_arguments_) {
      Event e{Event::kCallBegin};
      e.index = calls_;
      e.call.id = absl::StrCat(call_id_prefix_, calls_);
      e.call.name = name_;
      out->push_back(std::move(e));
    }
  } else {
    kind_ = channel == "analysis" && recipient.empty() ? Kind::kReasoning : Kind::kContent;
  }
}

void HarmonyReader::Body(absl::string_view text, std::vector<Event>* out) {
  if (text.empty()) return;
  if (kind_ == Kind::kCall) {
    arguments_.append(text.data(), text.size());
    if (stream_arguments_) {
      Event e{Event::kArguments, std::string(text)};
      e.index = calls_;
      out->push_back(std::move(e));
    }
    return;
  }
  out->push_back({kind_ == Kind::kReasoning ? Event::kReasoning : Event::kContent, std::string(text)});
}

void HarmonyReader::End(std::vector<Event>* out) {
  if (kind_ != Kind::kCall) return;
  const nlohmann::json args = nlohmann::json::parse(arguments_, nullptr, /*allow_exceptions=*/false);
  if (args.is_object()) {
    Event e{Event::kCall};
    e.index = calls_;
    e.call.id = absl::StrCat(call_id_prefix_, calls_);
    e.call.name = name_;
    e.call.arguments = args.dump();
    out->push_back(std::move(e));
    ++calls_;
  } else if (!arguments_.empty()) {
    out->push_back({Event::kContent, arguments_});  // not a call after all
  }
  kind_ = Kind::kContent;
  arguments_.clear();
}

std::vector<HarmonyReader::Event> HarmonyReader::Push(absl::string_view text) {
  std::vector<Event> out = std::move(opened_);
  opened_.clear();
  pending_.append(text.data(), text.size());
  while (!pending_.empty()) {
    if (state_ == State::kDone) {  // nothing follows <|return|> or <|call|>
      pending_.clear();
      break;
    }
    absl::string_view which;
    if (state_ == State::kHeader) {
      // A reply that does not open with a header is an answer as it is.
      if (first_ && !absl::StartsWith(pending_, "<|") && pending_ != "<") {
        Begin("", &out);
        kind_ = Kind::kContent;
        state_ = State::kBody;
        continue;
      }
      const size_t message = absl::string_view(pending_).find(kMessage);
      const size_t end = FindTerminator(pending_, /*with_start=*/false, &which);
      if (message != std::string::npos && message < end) {
        Begin(absl::string_view(pending_).substr(0, message), &out);
        pending_.erase(0, message + kMessage.size());
        state_ = State::kBody;
        continue;
      }
      if (end != std::string::npos) {
        // A header with no body: an empty message.
        pending_.erase(0, end + which.size());
        first_ = false;
        state_ = which == kEnd ? State::kHeader : State::kDone;
        continue;
      }
      break;  // the header goes on
    }
    const size_t end = FindTerminator(pending_, /*with_start=*/true, &which);
    if (end != std::string::npos) {
      Body(absl::string_view(pending_).substr(0, end), &out);
      End(&out);
      pending_.erase(0, end + (which == kStart ? 0 : which.size()));
      state_ = which == kEnd || which == kStart ? State::kHeader : State::kDone;
      continue;
    }
    const size_t keep = TerminatorPrefixAtEnd(pending_);
    Body(absl::string_view(pending_).substr(0, pending_.size() - keep), &out);
    pending_.erase(0, pending_.size() - keep);
    break;
  }
  return out;
}

std::vector<HarmonyReader::Event> HarmonyReader::Finish() {
  std::vector<Event> out = std::move(opened_);
  opened_.clear();
  if (state_ == State::kBody) {
    Body(pending_, &out);  // cut off by its length: the message so far
    End(&out);
  } else if (state_ == State::kHeader && first_ && !pending_.empty() && !absl::StartsWith(pending_, "<|")) {
    out.push_back({Event::kContent, pending_});  // "<" alone
  }
  // A header cut off before its body has nothing to say.
  pending_.clear();
  state_ = State::kDone;
  return out;
}

}  // namespace flover
