// A chat reply's text read into what the chat APIs return apart: the
// model's reasoning (what it thought before answering), the answer's
// content, and its tool calls. The one reader every chat front end encodes
// (OpenAI's chat completions; its stream and its whole reply alike), so a
// reply splits the same way however it arrives.
//
// Reasoning formats (--reasoning_parser names them):
//   none   the text as it is: no reasoning;
//   think  <think>...</think> (Qwen3 / 3.5, SmolLM3, DeepSeek-R1 and its
//          distills): the reply's reasoning is what comes before
//          </think>, either after a <think> the reply opens with, or from
//          the start where the prompt opened the tag itself (the
//          template's generation prompt ends with "<think>": Qwen3.5,
//          DeepSeek-R1). Whitespace next to the tags is dropped; a
//          reasoning the reply never closes (cut off by its length) is
//          reasoning all the same.
//   gemma4 Gemma 4's thought channel, <|channel>thought ... <channel|>,
//          read as think's tags are (the template's generation prompt
//          opens it after a tool's response when thinking is on).
//   harmony gpt-oss's channels (chat/harmony_reader.h): analysis is the
//          reasoning, final the content, commentary calls to functions.*
//          the tool calls (whatever `tools` says: the format is harmony's).
#ifndef FLOVER_CHAT_REPLY_READER_H_
#define FLOVER_CHAT_REPLY_READER_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "chat/tool_calls.h"

namespace flover {

class HarmonyReader;

enum class ReasoningFormat { kNone, kThinkTags, kHarmony, kChannel };

// "none", "think", "harmony", "gemma4"; InvalidArgument naming the choices.
absl::StatusOr<ReasoningFormat> ReasoningFormatNamed(absl::string_view name);
const char* ReasoningFormatName(ReasoningFormat format);
// The format a chat template's replies reason in: harmony where it writes
// <|channel|>, gemma4 where it writes <|channel>thought, think where it
// writes <think> or </think>; none otherwise.
ReasoningFormat ReasoningFormatOf(absl::string_view template_text);
// Whether a reply to `prompt` (the rendered prompt's text, or its end)
// starts inside its reasoning: the prompt ends with an opened <think> (or
// Gemma 4's <|channel>thought).
bool StartsInReasoning(ReasoningFormat format, absl::string_view prompt);
// The text that closes a reasoning a prompt can open ("</think>",
// "<channel|>"); "" for formats whose prompts open none.
absl::string_view ReasoningCloseTag(ReasoningFormat format);

class ReplyReader {
 public:
  struct Options {
    ReasoningFormat reasoning = ReasoningFormat::kNone;
    bool starts_in_reasoning = false;  // StartsInReasoning of the prompt
    // harmony: the header of the message the prompt opened (HarmonyOpenHeader),
    // whose body the reply starts in; "" for none.
    std::string open_header;
    // Read calls out of the answer in this format (ToolCallStream), with
    // ids call_id_prefix + their index; streamed argument by argument
    // where stream_arguments.
    std::optional<ToolCallFormat> tools;
    std::string call_id_prefix;
    bool stream_arguments = false;
  };
  struct Event {
    enum Kind { kReasoning, kContent, kCallBegin, kArguments, kCall };
    Kind kind = kContent;
    std::string text;  // kReasoning's and kContent's text, kArguments' fragment
    ToolCall call;     // kCall: the call; kCallBegin: its id and name
    int index = -1;    // a call's index
  };

  explicit ReplyReader(Options options);
  ~ReplyReader();
  std::vector<Event> Push(absl::string_view text);
  std::vector<Event> Finish();
  int calls() const;

 private:
  // The answer's text on to the tool-call reader (or out as content).
  void Answer(absl::string_view text, std::vector<Event>* out);
  void Reasoning(absl::string_view text, std::vector<Event>* out);

  const Options options_;
  std::unique_ptr<ToolCallStream> tools_;
  std::unique_ptr<HarmonyReader> harmony_;  // ReasoningFormat::kHarmony: reads it all
  enum class State { kStart, kReasoning, kAnswerStart, kAnswer } state_;
  std::string pending_;       // text that may be the start of a tag
  std::string held_space_;    // reasoning's whitespace, held until text follows it
  bool reasoned_ = false;     // some reasoning text went out
};

// A whole reply, read as ReplyReader reads it: its reasoning, its content
// (with calls: what is left around them, trimmed) and its calls.
struct Reply {
  std::string reasoning, content;
  std::vector<ToolCall> calls;
};
Reply ReadReply(const ReplyReader::Options& options, absl::string_view text);

}  // namespace flover

#endif  // FLOVER_CHAT_REPLY_READER_H_
