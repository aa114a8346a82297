// Arbitrary model output read as a chat reply (chat/reply_reader.h): its
// reasoning, content and calls are the same whether it arrives whole or in
// pieces of any size, whatever the reasoning format (think tags, none,
// gpt-oss's harmony channels, Gemma 4's thought channel), the tool-call format and whether the prompt
// opened the reasoning (harmony: a call's message). The input's first byte picks
// those and the piece size; the rest is the reply.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "chat/reply_reader.h"

namespace {

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  flover::ReplyReader::Options o;
  // 0-191 pick think, none or harmony as they always did; 192-255 Gemma 4's
  // thought channel and call notation.
  const bool gemma4 = data[0] >= 192;
  const int format = data[0] % 3;
  o.reasoning = gemma4        ? flover::ReasoningFormat::kChannel
                : format == 0 ? flover::ReasoningFormat::kThinkTags
                : format == 1 ? flover::ReasoningFormat::kNone
                              : flover::ReasoningFormat::kHarmony;
  o.starts_in_reasoning = (gemma4 ? data[0] : data[0] / 3) % 2 == 1;
  // harmony: a call the prompt opened, its body the reply.
  if (!gemma4 && format == 2 && o.starts_in_reasoning) {
    o.open_header = "assistant<|channel|>commentary to=functions.f <|constrain|>json";
  }
  if ((gemma4 ? data[0] / 2 : data[0] / 6) % 2 == 1) {
    o.tools = gemma4 ? flover::ToolCallFormat::kGemma4 : flover::ToolCallFormat::kHermes;
  }
  o.call_id_prefix = "c";
  const size_t piece = 1 + (gemma4 ? data[0] / 4 : data[0] / 12) % 16;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  const flover::Reply whole = flover::ReadReply(o, text);
  flover::ReplyReader reader(o);
  std::vector<flover::ReplyReader::Event> events;
  for (size_t at = 0; at < text.size(); at += piece) {
    for (auto& e : reader.Push(text.substr(at, piece))) events.push_back(std::move(e));
  }
  for (auto& e : reader.Finish()) events.push_back(std::move(e));
  flover::Reply streamed;
  for (auto& e : events) {
    if (e.kind == flover::ReplyReader::Event::kReasoning) streamed.reasoning += e.text;
    if (e.kind == flover::ReplyReader::Event::kContent) streamed.content += e.text;
    if (e.kind == flover::ReplyReader::Event::kCall) streamed.calls.push_back(e.call);
  }
  Check(streamed.reasoning == whole.reasoning);
  Check(streamed.calls.size() == whole.calls.size());
  for (size_t i = 0; i < whole.calls.size(); ++i) Check(streamed.calls[i].arguments == whole.calls[i].arguments);
  // Whole, the content around calls is trimmed; streamed it is not.
  if (whole.calls.empty()) Check(streamed.content == whole.content);
  if (o.reasoning == flover::ReasoningFormat::kNone) Check(whole.reasoning.empty());
  return 0;
}
