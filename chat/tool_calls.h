// Tool calls in a model's own syntax: reading them out of its reply (whole
// or as it streams), the grammar that makes a reply call a tool, and the
// words that describe tools to a model whose chat template knows none.
//
// Formats (--tool_call_parser names them):
//   hermes       <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>,
//                once per call (Hermes, Qwen2.5, SmolLM3, and the
//                description below);
//   llama3_json  {"name": "f", "parameters": {...}}, calls separated by
//                ';' (Llama 3.1+ with JSON tools);
//   mistral      [TOOL_CALLS] [{"name": "f", "arguments": {...}}, ...]
//                (Mistral 7B v0.3 and others of its tokenizer v3);
//   gemma4       <|tool_call>call:f{key:<|"|>text<|"|>,...}<tool_call|>,
//                once per call, in its template's own notation
//                (chat/gemma4_calls.h), read into JSON.
// A call's "arguments" may also be spelled "parameters", in every format.
#ifndef FLOVER_CHAT_TOOL_CALLS_H_
#define FLOVER_CHAT_TOOL_CALLS_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "chat/chat_message.h"

namespace flover {

enum class ToolCallFormat { kHermes, kLlama3Json, kMistral, kGemma4 };

// "hermes", "llama3_json", "mistral", "gemma4"; InvalidArgument naming the choices.
absl::StatusOr<ToolCallFormat> ToolCallFormatNamed(absl::string_view name);
const char* ToolCallFormatName(ToolCallFormat format);
// The format a chat template writes calls in, read from its markers
// ([TOOL_CALLS]: mistral; <|python_tag|> or Llama 3's headers: llama3_json;
// <|tool_call>call: gemma4); hermes otherwise.
ToolCallFormat ToolCallFormatOf(absl::string_view template_text);

// What a request lets the model do with its tools (OpenAI's tool_choice).
enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

// The grammar that holds a reply to `choice`: kNamed, exactly one call of
// `named`; kRequired, calls from the start; kAuto, free text until the
// format's call marker, then calls. Several calls (separated by a newline,
// "; " for llama3_json, ", " inside mistral's list) only when `parallel`
// and not kNamed; never text after the calls, which end the turn. Every
// call's arguments match its function's `parameters` (strict: no
// properties beyond the schema's). kNone has no grammar (InvalidArgument).
//
// `marker_token`: the id of mistral's [TOOL_CALLS] where the vocabulary
// holds it as one special token, else -1 (other formats' markers are text).
// No text spells a special token, so the grammar then holds what follows
// the token, and the token comes first: `after_token` says so.
struct ToolCallGrammarSpec {
  std::string structural_tag;  // xgrammar's structural tag, as JSON text
  // >= 0: the reply writes this token first (text_before: free text may
  // come before it, and without it the reply is plain text), and the
  // structural tag holds what follows it.
  int32_t after_token = -1;
  bool text_before = false;
};
absl::StatusOr<ToolCallGrammarSpec> ToolCallGrammar(ToolCallFormat format, const std::vector<ToolFunction>& tools,
                                                    ToolChoice choice, const std::string& named, bool parallel,
                                                    int32_t marker_token = -1);
// The special tokens' texts a format's calls are written with, which its
// grammar must let those tokens spell (TokenBytes): Gemma 4's <|tool_call>,
// <tool_call|> and <|"|>; none for the others (their markers are text, or
// mistral's one token that starts its grammar).
std::vector<std::string> ToolCallSpecialTexts(ToolCallFormat format);

// The text that starts a format's calls: "<tool_call>", "[TOOL_CALLS]",
// "<|tool_call>", and "" for llama3_json (whose calls start with their own
// JSON).
const char* ToolCallMarker(ToolCallFormat format);

// A reply read as it arrives: text comes out as content, except calls
// (with ids `id_prefix` + their index). Text that may be the start of a
// call marker is held until it is known not to be; whitespace around calls
// is dropped. A call that does not parse (or is cut off) comes back as
// content, marker and all.
//
// Each call comes out whole (kCall), and, with `stream_arguments`, first as
// it is written: kCallBegin (its index, id and name) once its name is read,
// then kArguments fragments of its arguments' text as they arrive, whose
// concatenation parses to the same JSON as the kCall's arguments (the
// kCall's are re-serialised; the fragments are the model's own text). Only
// hermes and llama3_json calls with "name" before an object of arguments
// stream so; others (and mistral's lists) give kCallBegin and one fragment
// just before their kCall. A call whose text turns out not to be a call
// after its kCallBegin (cut off by the token limit, or not a call at all)
// still comes back as content, so the server streams fragments only where
// the grammar holds the calls.
class ToolCallStream {
 public:
  struct Event {
    enum Kind { kContent, kCallBegin, kArguments, kCall };
    Kind kind = kContent;
    std::string content;  // kContent's text, or kArguments' fragment
    ToolCall call;        // kCall: the call; kCallBegin: its id and name
    int index = -1;       // the call's index (-1: content)
  };

  ToolCallStream(ToolCallFormat format, std::string id_prefix, bool stream_arguments = false);
  std::vector<Event> Push(absl::string_view text);
  std::vector<Event> Finish();
  int calls() const { return calls_; }

 private:
  // A call's JSON as it arrives (stream_arguments): where its name and
  // arguments are, read up to `scanned`.
  struct CallScan {
    size_t scanned = 0;  // bytes of buffer_ read
    int depth = 0;
    bool in_string = false, escaped = false;
    bool done = false;       // its top level was read (or is no object)
    bool duplicate = false;  // a key twice, or "arguments" and "parameters"
    enum class At { kKey, kColon, kValue, kInValue, kAfterValue } at = At::kKey;
    size_t token_start = 0;  // the depth-1 key or value being read
    std::string key;         // the depth-1 key whose value is being read
    std::set<std::string> keys;  // the depth-1 keys read
    std::string name;        // the call's name, once read
    size_t args_start = std::string::npos, args_end = std::string::npos;
    std::string pending;     // arguments' text read before the name
    bool begun = false;      // its kCallBegin was sent
  };

  // Reads what it can of buffer_ into `out`; false when it needs more text.
  bool Step(std::vector<Event>* out, bool final);
  // Step inside a gemma4 call (after its marker): up to its closing marker.
  bool StepGemma4(std::vector<Event>* out, bool final);
  // Text as content: whitespace at its end is held until text follows
  // (whitespace before and after calls is dropped).
  void EmitText(absl::string_view text, std::vector<Event>* out);
  // Reads the call in buffer_ further (stream_arguments), sending its
  // kCallBegin and the arguments' text read so far.
  void ScanCall(std::vector<Event>* out);
  // The current call's kCallBegin (its index, id and name), and a fragment
  // of its arguments.
  void EmitBegin(const std::string& name, std::vector<Event>* out) const;
  void EmitArguments(std::string fragment, std::vector<Event>* out) const;
  // A complete call out: (kCallBegin and its fragments if not yet sent) and kCall.
  void EmitCall(ToolCall call, std::vector<Event>* out);

  const ToolCallFormat format_;
  const std::vector<std::string> markers_;  // what starts a call in format_
  const std::string id_prefix_;
  const bool stream_arguments_;
  std::string buffer_;         // not yet read
  std::string held_space_;     // whitespace held until text follows it
  bool in_call_ = false;       // a marker was read; a call's JSON follows
  bool after_call_ = false;    // the last thing read was a call
  std::string marker_;         // the marker read (content again if the call fails)
  CallScan scan_;              // the call being read (stream_arguments)
  int calls_ = 0;
};

// A whole reply: its content (with calls: taken out, trimmed) and its calls.
struct ParsedReply {
  std::string content;
  std::vector<ToolCall> calls;
};
ParsedReply ParseToolCalls(ToolCallFormat format, absl::string_view text, const std::string& id_prefix);

// For a template that takes no tools: a system message's words that
// describe `tools` and how to call one (the hermes format), and a past call
// or tool result as the text such a template then shows.
std::string DescribeTools(absl::Span<const ToolFunction> tools);
std::string HermesCallText(const ToolCall& call);
std::string ToolResultText(const ChatMessage& tool_message);

// JSON text with the control characters (U+0000-U+001F) inside its strings
// escaped, as JSON requires; the grammar's JSON lets a model write them raw.
std::string EscapeControlsInStrings(absl::string_view json);

}  // namespace flover

#endif  // FLOVER_CHAT_TOOL_CALLS_H_
