// gpt-oss's replies in OpenAI's harmony format, read as ReplyReader's
// events (ReasoningFormat::kHarmony; ReplyReader hands its text here).
//
// A reply is messages, each a header and a body:
//   [<|start|>assistant]<|channel|>CHANNEL[ to=RECIPIENT][ <|constrain|>json]<|message|>BODY<|end|>
// the last ending in <|return|> (an answer) or <|call|> (a tool call), or
// in nothing where the stop token's text is not part of the reply. As
// openai-harmony's parser reads them (its parses, checked in
// harmony_reader_test):
//   - the analysis channel is reasoning;
//   - a message to "functions.NAME" (on any channel; commentary, as the
//     system message asks) is a call of NAME whose arguments are its body,
//     when the request has tools: kCallBegin, its body as kArguments
//     fragments (with stream_arguments), kCall with the arguments re-
//     serialised; a body that is no JSON object comes back as content;
//   - everything else (final, a commentary preamble without a recipient, a
//     built-in tool's message, text without a header) is content;
//   - text is the model's own: nothing is trimmed inside a message.
// A stream split anywhere, inside a special token's text included, gives the
// same events' text as the whole reply.
#ifndef FLOVER_CHAT_HARMONY_READER_H_
#define FLOVER_CHAT_HARMONY_READER_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "chat/reply_reader.h"

namespace flover {

// The header of the message a prompt's text ends inside (it ends with
// <|message|>: the server opened a call for the model), or "" when it ends
// elsewhere.
std::string HarmonyOpenHeader(absl::string_view prompt_tail);
// The header that opens a call of `function` on the commentary channel, as
// gpt-oss writes one after "<|start|>assistant".
std::string HarmonyCallHeader(absl::string_view function);

class HarmonyReader {
 public:
  using Event = ReplyReader::Event;
  // `open_header`: the reply starts in the body of the message whose
  // header the prompt wrote (HarmonyOpenHeader); "" for none.
  HarmonyReader(bool tools, std::string call_id_prefix, bool stream_arguments, absl::string_view open_header = "");
  std::vector<Event> Push(absl::string_view text);
  std::vector<Event> Finish();
  int calls() const { return calls_; }

 private:
  enum class Kind { kReasoning, kContent, kCall };
  // Starts the message whose header is `header` (the text before
  // <|message|>).
  void Begin(absl::string_view header, std::vector<Event>* out);
  void Body(absl::string_view text, std::vector<Event>* out);
  void End(std::vector<Event>* out);

  const bool tools_;
  const std::string call_id_prefix_;
  const bool stream_arguments_;
  enum class State { kHeader, kBody, kDone } state_ = State::kHeader;
  bool first_ = true;       // no message has begun
  std::string pending_;     // text not yet read
  Kind kind_ = Kind::kContent;
  std::string name_;        // kCall: the function's
  std::string arguments_;   // kCall: the body so far
  int calls_ = 0;
  std::vector<Event> opened_;  // the open message's kCallBegin, not yet returned
};

}  // namespace flover

#endif  // FLOVER_CHAT_HARMONY_READER_H_
