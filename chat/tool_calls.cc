#include "chat/tool_calls.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "chat/gemma4_calls.h"
#include "nlohmann/json.hpp"

namespace flover {
namespace {

using Json = nlohmann::ordered_json;

constexpr char kHermesOpen[] = "<tool_call>";
constexpr char kHermesClose[] = "</tool_call>";
constexpr char kLlamaOpen[] = "{\"name\"";
constexpr char kPythonTag[] = "<|python_tag|>";
constexpr char kMistralOpen[] = "[TOOL_CALLS]";

// The markers that start a call. llama3_json's first is the call's own JSON
// (kept); every other marker is taken out.
std::vector<std::string> Markers(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kHermes: return {kHermesOpen};
    case ToolCallFormat::kLlama3Json: return {kLlamaOpen, kPythonTag};
    case ToolCallFormat::kMistral: return {kMistralOpen};
    case ToolCallFormat::kGemma4: return {std::string(kGemma4CallOpen)};
  }
  return {};
}

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// Whitespace here is IsSpace's four, everywhere (absl's also strips \v and
// \f, which made a reply read whole and a reply read in pieces disagree).
absl::string_view StripLeadingSpace(absl::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  return s;
}

// Where the JSON value that starts at s[at] ('{' or '[') ends (one past
// it); npos when s ends first; 0 when s[at] starts no object or list.
size_t JsonValueEnd(absl::string_view s, size_t at) {
  if (at >= s.size() || (s[at] != '{' && s[at] != '[')) return 0;
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = at; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return absl::string_view::npos;
}

// One call object ({"name", "arguments" or "parameters"}), or false.
bool ReadCall(const Json& j, ToolCall* call) {
  if (!j.is_object()) return false;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty()) return false;
  call->name = name->get<std::string>();
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  if (args == j.end()) return false;
  if (args->is_string()) {
    // Arguments written as a string of JSON, as some models do.
    const Json inner = Json::parse(args->get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (!inner.is_object()) return false;
    call->arguments = inner.dump();
  } else if (args->is_object()) {
    call->arguments = args->dump();
  } else {
    return false;
  }
  return true;
}

// The length of the longest end of `text` that begins one of `markers`
// (text that may yet become a marker).
size_t MarkerPrefixAtEnd(absl::string_view text, const std::vector<std::string>& markers) {
  size_t longest = 0;
  for (const std::string& m : markers) {
    for (size_t n = std::min(text.size(), m.size() - 1); n > longest; --n) {
      if (absl::StartsWith(m, text.substr(text.size() - n))) {
        longest = n;
        break;
      }
    }
  }
  return longest;
}

}  // namespace

absl::StatusOr<ToolCallFormat> ToolCallFormatNamed(absl::string_view name) {
  for (ToolCallFormat f :
       {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json, ToolCallFormat::kMistral, ToolCallFormat::kGemma4}) {
    if (name == ToolCallFormatName(f)) return f;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown tool call format '", name, "' (hermes, llama3_json, mistral, gemma4)"));
}

const char* ToolCallFormatName(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes: return "hermes";
    case ToolCallFormat::kLlama3Json: return "llama3_json";
    case ToolCallFormat::kMistral: return "mistral";
    case ToolCallFormat::kGemma4: return "gemma4";
  }
  return "";
}

ToolCallFormat ToolCallFormatOf(absl::string_view template_text) {
  if (absl::StrContains(template_text, absl::StrCat(kGemma4CallOpen, "call:"))) return ToolCallFormat::kGemma4;
  if (absl::StrContains(template_text, kHermesOpen)) return ToolCallFormat::kHermes;
  if (absl::StrContains(template_text, kMistralOpen)) return ToolCallFormat::kMistral;
  if (absl::StrContains(template_text, kPythonTag) || absl::StrContains(template_text, "<|start_header_id|>")) {
    return ToolCallFormat::kLlama3Json;
  }
  return ToolCallFormat::kHermes;
}

std::vector<std::string> ToolCallSpecialTexts(ToolCallFormat format) {
  if (format != ToolCallFormat::kGemma4) return {};
  return {std::string(kGemma4CallOpen), std::string(kGemma4CallClose), std::string(kGemma4Quote)};
}

const char* ToolCallMarker(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes: return kHermesOpen;
    case ToolCallFormat::kMistral: return kMistralOpen;
    case ToolCallFormat::kGemma4: return kGemma4CallOpen.data();
    case ToolCallFormat::kLlama3Json: return "";
  }
  return "";
}

absl::StatusOr<ToolCallGrammarSpec> ToolCallGrammar(ToolCallFormat format, const std::vector<ToolFunction>& tools,
                                                    ToolChoice choice, const std::string& named, bool parallel,
                                                    int32_t marker_token) {
  if (choice == ToolChoice::kNone) return absl::InvalidArgumentError("none has no grammar");
  const bool hermes = format == ToolCallFormat::kHermes;
  const bool mistral = format == ToolCallFormat::kMistral;
  const bool several = parallel && choice != ToolChoice::kNamed;  // a named choice is one call
  // Each function's call: its fixed start, arguments that match its schema
  // (strict, at most one whitespace in a row), its fixed end. A hermes call
  // starts with its marker; mistral's calls sit in one list after theirs.
  struct Call {
    std::string begin, end;
    Json arguments;
  };
  std::vector<Call> calls;
  for (size_t i = 0; i < tools.size(); ++i) {
    const ToolFunction& t = tools[i];
    if (choice == ToolChoice::kNamed && t.name != named) continue;
    if (format == ToolCallFormat::kGemma4) {
      // The template's notation, not JSON: a grammar of its own per schema.
      auto ebnf = Gemma4ArgumentsGrammar(t.parameters, absl::StrCat("tools[", i, "].function.parameters"));
      if (!ebnf.ok()) return ebnf.status();
      calls.push_back({absl::StrCat(kGemma4CallOpen, "call:", t.name), std::string(kGemma4CallClose),
                       Json{{"type", "grammar"}, {"grammar", *ebnf}}});
      continue;
    }
    Json schema = t.parameters.empty() ? Json{{"type", "object"}} : Json::parse(t.parameters, nullptr, false);
    if (schema.is_discarded()) return absl::InvalidArgumentError(absl::StrCat("the parameters of ", t.name, " are not JSON"));
    const std::string name = Json(t.name).dump();
    Call c;
    if (hermes) {
      c = {absl::StrCat(kHermesOpen, "\n{\"name\": ", name, ", \"arguments\": "), absl::StrCat("}\n", kHermesClose)};
    } else {
      c = {absl::StrCat("{\"name\": ", name, mistral ? ", \"arguments\": " : ", \"parameters\": "), "}"};
    }
    c.arguments = {{"type", "json_schema"}, {"json_schema", std::move(schema)}, {"max_whitespace_cnt", 1}};
    calls.push_back(std::move(c));
  }
  if (calls.empty()) return absl::InvalidArgumentError(absl::StrCat("no tool is named '", named, "'"));
  auto text = [](const std::string& s) { return Json{{"type", "const_string"}, {"value", s}}; };
  auto sequence = [](Json elements) { return Json{{"type", "sequence"}, {"elements", std::move(elements)}}; };
  auto tag = [](const std::string& begin, Json content, const std::string& end) {
    return Json{{"type", "tag"}, {"begin", begin}, {"content", std::move(content)}, {"end", end}};
  };
  auto any_of = [](Json elements) {
    return elements.size() == 1 ? elements[0] : Json{{"type", "or"}, {"elements", std::move(elements)}};
  };
  Json tags = Json::array();
  for (Call& c : calls) tags.push_back(tag(c.begin, std::move(c.arguments), c.end));
  // The grammar of a reply (`first`: its calls' start) that ends with the
  // calls: with `auto`, text until `trigger` first.
  auto reply = [&](Json first, const std::string& trigger, Json more) {
    Json root;
    if (choice == ToolChoice::kAuto) {
      root = {{"type", "triggered_tags"}, {"triggers", Json::array({trigger})}, {"tags", std::move(first)},
              {"at_least_one", false}, {"stop_after_first", true}};
    } else {
      root = any_of(std::move(first));
    }
    if (!more.is_null()) root = sequence(Json::array({std::move(root), std::move(more)}));
    return Json{{"type", "structural_tag"}, {"format", std::move(root)}}.dump();
  };
  ToolCallGrammarSpec spec;
  if (mistral) {
    // One list: [TOOL_CALLS] [call, call, ...].
    Json list = any_of(tags);
    if (several) {
      const Json next = {{"type", "star"}, {"content", sequence(Json::array({text(", "), list}))}};
      list = sequence(Json::array({list, next}));
    }
    if (marker_token >= 0) {
      // The marker is a special token, which no text spells: the grammar
      // holds what follows it, and the token comes first (TokenThen).
      spec.structural_tag = Json{{"type", "structural_tag"}, {"format", tag(" [", std::move(list), "]")}}.dump();
      spec.after_token = marker_token;
      spec.text_before = choice == ToolChoice::kAuto;
      return spec;
    }
    spec.structural_tag = reply(Json::array({tag(absl::StrCat(kMistralOpen, " ["), std::move(list), "]")}),
                                kMistralOpen, nullptr);
    return spec;
  }
  // hermes, llama3_json and gemma4: one tag per call, more calls after a
  // separator (gemma4's follow one another).
  const bool gemma4 = format == ToolCallFormat::kGemma4;
  Json more;
  if (several && gemma4) {
    more = {{"type", "star"}, {"content", any_of(tags)}};
  } else if (several) {
    more = {{"type", "star"}, {"content", sequence(Json::array({text(hermes ? "\n" : "; "), any_of(tags)}))}};
  }
  const std::string trigger = gemma4 ? std::string(kGemma4CallOpen) : hermes ? kHermesOpen : "{\"name\": ";
  spec.structural_tag = reply(std::move(tags), trigger, std::move(more));
  return spec;
}

ToolCallStream::ToolCallStream(ToolCallFormat format, std::string id_prefix, bool stream_arguments)
    : format_(format), markers_(Markers(format)), id_prefix_(std::move(id_prefix)),
      stream_arguments_(stream_arguments) {}

void ToolCallStream::ScanCall(std::vector<Event>* out) {
  using At = CallScan::At;
  CallScan& c = scan_;
  std::string fragment;
  // The depth-1 value that ended at `end`: the call's name, or its arguments.
  auto value_ends = [&](size_t end) {
    const absl::string_view value = absl::string_view(buffer_).substr(c.token_start, end - c.token_start);
    if (c.key == "name" && value.front() == '"') {
      const Json j = Json::parse(EscapeControlsInStrings(value), nullptr, /*allow_exceptions=*/false);
      if (j.is_string()) c.name = j.get<std::string>();
    }
    if (c.args_start == c.token_start) c.args_end = end;
    c.at = At::kAfterValue;
  };
  while (!c.done && c.scanned < buffer_.size()) {
    const size_t i = c.scanned++;
    const char ch = buffer_[i];
    if (c.depth == 0) {
      if (IsSpace(ch)) continue;
      if (ch != '{') {
        c.done = true;  // not an object (mistral's list): nothing to stream
        break;
      }
      c.depth = 1;
      continue;
    }
    const bool in_args = c.args_start != std::string::npos && i >= c.args_start && c.args_end == std::string::npos;
    if (c.in_string) {
      if (c.escaped) {
        c.escaped = false;
      } else if (ch == '\\') {
        c.escaped = true;
      } else if (ch == '"') {
        c.in_string = false;
        if (c.depth == 1) {
          if (c.at == At::kKey) {
            c.key = buffer_.substr(c.token_start + 1, i - c.token_start - 1);
            if (!c.keys.insert(c.key).second) c.duplicate = true;
            c.at = At::kColon;
          } else {
            value_ends(i + 1);
          }
        }
      }
      if (in_args) {
        if (static_cast<unsigned char>(ch) < 0x20) {
          absl::StrAppendFormat(&fragment, "\\u%04x", static_cast<unsigned char>(ch));
        } else {
          fragment += ch;
        }
      }
      continue;
    }
    if (in_args) fragment += ch;
    if (c.depth == 1 && c.at == At::kValue && !IsSpace(ch) && ch != ',' && ch != '}') {
      c.at = At::kInValue;
      c.token_start = i;
      if ((c.key == "arguments" || c.key == "parameters") && ch == '{' && c.args_start == std::string::npos) {
        c.args_start = i;
        fragment += ch;
      }
    }
    if (c.depth == 1 && c.at == At::kInValue && (IsSpace(ch) || ch == ',' || ch == '}')) {
      value_ends(i);  // a number, true, false or null
    }
    if (ch == '"') {
      c.in_string = true;
      if (c.depth == 1 && c.at == At::kKey) c.token_start = i;
    } else if (ch == '{' || ch == '[') {
      ++c.depth;
    } else if (ch == '}' || ch == ']') {
      if (--c.depth == 1 && c.at == At::kInValue) value_ends(i + 1);
      if (c.depth == 0) c.done = true;
    } else if (c.depth == 1 && ch == ':' && c.at == At::kColon) {
      c.at = At::kValue;
    } else if (c.depth == 1 && ch == ',' && c.at == At::kAfterValue) {
      c.at = At::kKey;
    }
  }
  if (c.keys.count("arguments") > 0 && c.keys.count("parameters") > 0) c.duplicate = true;
  if (!stream_arguments_ || c.duplicate) return;
  if (!c.begun && !c.name.empty() && c.args_start != std::string::npos) {
    c.begun = true;
    EmitBegin(c.name, out);
  }
  c.pending += fragment;
  if (c.begun && !c.pending.empty()) {
    EmitArguments(std::move(c.pending), out);
    c.pending.clear();
  }
}

void ToolCallStream::EmitBegin(const std::string& name, std::vector<Event>* out) const {
  Event e;
  e.kind = Event::kCallBegin;
  e.index = calls_;
  e.call.id = absl::StrCat(id_prefix_, calls_);
  e.call.name = name;
  out->push_back(std::move(e));
}

void ToolCallStream::EmitArguments(std::string fragment, std::vector<Event>* out) const {
  Event e;
  e.kind = Event::kArguments;
  e.index = calls_;
  e.content = std::move(fragment);
  out->push_back(std::move(e));
}

void ToolCallStream::EmitCall(ToolCall call, std::vector<Event>* out) {
  call.id = absl::StrCat(id_prefix_, calls_);
  if (stream_arguments_ && !scan_.begun) {
    EmitBegin(call.name, out);
    EmitArguments(call.arguments, out);
  }
  scan_.begun = false;  // a list's next call has not begun
  Event e;
  e.kind = Event::kCall;
  e.index = calls_++;
  e.call = std::move(call);
  out->push_back(std::move(e));
}

void ToolCallStream::EmitText(absl::string_view text, std::vector<Event>* out) {
  if (after_call_ && format_ == ToolCallFormat::kLlama3Json) {
    // llama3_json separates calls with ';'.
    while (!text.empty() && (IsSpace(text.front()) || text.front() == ';')) text.remove_prefix(1);
  }
  const size_t body_end = text.find_last_not_of(" \n\t\r");
  if (body_end == absl::string_view::npos) {
    held_space_.append(text.data(), text.size());
    return;
  }
  absl::string_view body = text.substr(0, body_end + 1);
  std::string content = after_call_ ? "" : std::move(held_space_);
  if (after_call_) body = StripLeadingSpace(body);
  content.append(body.data(), body.size());
  after_call_ = false;
  held_space_ = std::string(text.substr(body_end + 1));
  out->push_back(Event{Event::kContent, std::move(content), {}, -1});
}

bool ToolCallStream::Step(std::vector<Event>* out, bool final) {
  const std::vector<std::string>& markers = markers_;
  if (!in_call_) {
    size_t at = absl::string_view::npos;
    const std::string* found = nullptr;
    for (const std::string& m : markers) {
      const size_t p = buffer_.find(m);
      if (p < at) {
        at = p;
        found = &m;
      }
    }
    if (found == nullptr) {
      // Text, but for an end that may be a marker's start.
      const size_t keep = final ? 0 : MarkerPrefixAtEnd(buffer_, markers);
      EmitText(absl::string_view(buffer_).substr(0, buffer_.size() - keep), out);
      buffer_.erase(0, buffer_.size() - keep);
      if (final && !held_space_.empty() && calls_ == 0) {
        out->push_back(Event{Event::kContent, std::move(held_space_), {}, -1});
        held_space_.clear();
      }
      return false;
    }
    EmitText(absl::string_view(buffer_).substr(0, at), out);
    // llama3_json's call starts with its marker; the others' follow theirs.
    // Whitespace before a call is dropped (kept with the marker in case the
    // call fails).
    const bool keep_marker = *found == kLlamaOpen;
    marker_ = held_space_ + (keep_marker ? "" : *found);
    held_space_.clear();
    buffer_.erase(0, at + (keep_marker ? 0 : found->size()));
    in_call_ = true;
    scan_ = CallScan();
    return true;
  }
  if (format_ == ToolCallFormat::kGemma4) return StepGemma4(out, final);
  // A call's JSON: an object (a list for mistral) after optional whitespace.
  ScanCall(out);
  size_t start = 0;
  while (start < buffer_.size() && IsSpace(buffer_[start])) ++start;
  const size_t end = JsonValueEnd(buffer_, start);
  size_t consumed = 0;
  // What is content if this is no call: the JSON value read (the marker
  // and whitespace before it too), all that is left when it was cut off,
  // or nothing when no JSON value starts there. What follows is read again.
  size_t not_a_call = start;
  std::vector<ToolCall> calls;
  bool ok = false;
  if (end == absl::string_view::npos || start == buffer_.size()) {
    if (!final) return false;  // more text may complete it
    not_a_call = buffer_.size();
  } else if (end != 0) {
    not_a_call = end;
    const Json j = Json::parse(EscapeControlsInStrings(absl::string_view(buffer_).substr(start, end - start)),
                               nullptr, /*allow_exceptions=*/false);
    consumed = end;
    if (format_ == ToolCallFormat::kMistral && j.is_array() && !j.empty()) {
      ok = true;
      for (const Json& item : j) {
        ToolCall c;
        ok = ok && ReadCall(item, &c);
        calls.push_back(std::move(c));
      }
    } else if (j.is_object()) {
      ToolCall c;
      // A key twice, or both spellings of the arguments: which one is
      // meant is not clear (and the streamed one might not be it).
      ok = ReadCall(j, &c) && !scan_.duplicate;
      calls.push_back(std::move(c));
    }
    if (ok && format_ == ToolCallFormat::kHermes) {
      // Its closing tag after optional whitespace (cut off: still a call).
      size_t close = consumed;
      while (close < buffer_.size() && IsSpace(buffer_[close])) ++close;
      const absl::string_view rest = absl::string_view(buffer_).substr(close);
      if (absl::StartsWith(rest, kHermesClose)) {
        consumed = close + sizeof(kHermesClose) - 1;
      } else if (absl::StartsWith(kHermesClose, rest)) {
        if (!final) return false;  // the tag may be arriving
        consumed = buffer_.size();   // cut off inside it
      } else {
        ok = false;
      }
    }
  }
  in_call_ = false;
  if (!ok) {
    // Not a call: the marker and the value are content.
    const std::string text = marker_ + buffer_.substr(0, not_a_call);
    buffer_.erase(0, not_a_call);
    marker_.clear();
    scan_ = CallScan();
    EmitText(text, out);
    return true;  // read on
  }
  buffer_.erase(0, consumed);
  marker_.clear();
  for (ToolCall& c : calls) EmitCall(std::move(c), out);
  scan_ = CallScan();
  after_call_ = true;
  return true;
}

bool ToolCallStream::StepGemma4(std::vector<Event>* out, bool final) {
  const size_t close = absl::string_view(buffer_).find(kGemma4CallClose);
  if (close == std::string::npos) {
    // Its name is known before its arguments end: the call's start streams.
    if (stream_arguments_ && !scan_.begun) {
      const std::string name = Gemma4CallName(buffer_);
      if (!name.empty()) {
        scan_.begun = true;
        EmitBegin(name, out);
      }
    }
    if (!final) return false;
  }
  const size_t end = close == std::string::npos ? buffer_.size() : close + kGemma4CallClose.size();
  std::optional<Gemma4Call> call;
  if (close != std::string::npos) call = ReadGemma4Call(absl::string_view(buffer_).substr(0, close));
  in_call_ = false;
  if (!call.has_value()) {
    // Not a call (or cut off): the marker and its text are content.
    const std::string text = marker_ + buffer_.substr(0, end);
    buffer_.erase(0, end);
    marker_.clear();
    scan_ = CallScan();
    EmitText(text, out);
    return true;
  }
  buffer_.erase(0, end);
  marker_.clear();
  ToolCall c;
  c.name = std::move(call->name);
  c.arguments = std::move(call->arguments);
  // Begun: its arguments as one fragment, at the end (the notation is no
  // JSON); otherwise EmitCall sends its start and arguments.
  if (scan_.begun) EmitArguments(c.arguments, out);
  EmitCall(std::move(c), out);
  scan_ = CallScan();
  after_call_ = true;
  return true;
}

std::vector<ToolCallStream::Event> ToolCallStream::Push(absl::string_view text) {
  buffer_.append(text.data(), text.size());
  std::vector<Event> out;
  while (Step(&out, /*final=*/false)) {
  }
  return out;
}

std::vector<ToolCallStream::Event> ToolCallStream::Finish() {
  std::vector<Event> out;
  while (Step(&out, /*final=*/true)) {
  }
  return out;
}

ParsedReply ParseToolCalls(ToolCallFormat format, absl::string_view text, const std::string& id_prefix) {
  ToolCallStream stream(format, id_prefix);
  std::vector<ToolCallStream::Event> events = stream.Push(text);
  for (ToolCallStream::Event& e : stream.Finish()) events.push_back(std::move(e));
  ParsedReply reply;
  for (ToolCallStream::Event& e : events) {
    if (e.kind == ToolCallStream::Event::kContent) {
      reply.content += e.content;
    } else if (e.kind == ToolCallStream::Event::kCall) {
      reply.calls.push_back(std::move(e.call));
    }
  }
  if (!reply.calls.empty()) reply.content = std::string(absl::StripAsciiWhitespace(reply.content));
  return reply;
}

std::string DescribeTools(absl::Span<const ToolFunction> tools) {
  std::string out =
      "You can call functions to help answer. Each function is described below as JSON (its name, what it "
      "does, and its arguments as a JSON Schema):\n<tools>\n";
  for (const ToolFunction& t : tools) {
    Json f = {{"name", t.name}, {"description", t.description}};
    f["parameters"] = t.parameters.empty() ? Json{{"type", "object"}} : Json::parse(t.parameters, nullptr, false);
    out += Json{{"type", "function"}, {"function", std::move(f)}}.dump() + "\n";
  }
  out +=
      "</tools>\nTo call a function, answer with its name and arguments as a JSON object inside tags, one call "
      "per tag:\n<tool_call>\n{\"name\": <function name>, \"arguments\": <arguments as a JSON object>}\n"
      "</tool_call>\nA function's result comes back inside <tool_response></tool_response> tags.";
  return out;
}

std::string HermesCallText(const ToolCall& call) {
  const Json args = Json::parse(call.arguments, nullptr, false);
  return absl::StrCat(kHermesOpen, "\n{\"name\": ", Json(call.name).dump(),
                      ", \"arguments\": ", args.is_discarded() ? Json(call.arguments).dump() : args.dump(), "}\n",
                      kHermesClose);
}

std::string ToolResultText(const ChatMessage& tool_message) {
  return absl::StrCat("<tool_response>\n", tool_message.content, "\n</tool_response>");
}

std::string EscapeControlsInStrings(absl::string_view json) {
  std::string out;
  out.reserve(json.size());
  bool in_string = false, escaped = false;
  for (char c : json) {
    if (in_string && !escaped && static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", static_cast<unsigned char>(c));
      continue;
    }
    out += c;
    if (!in_string) {
      in_string = c == '"';
    } else if (escaped) {
      escaped = false;
    } else if (c == '\\') {
      escaped = true;
    } else if (c == '"') {
      in_string = false;
    }
  }
  return out;
}

}  // namespace flover
