// Arbitrary model output read as tool calls (a reply is whatever the model
// wrote): every format reads it without crashing, the same calls and
// content whether it arrives whole or in pieces of any size, and every call
// it finds has a name and arguments that are a JSON object. Streaming the
// arguments changes none of that, and every call that comes out whole was
// begun with its id and name, and its fragments since parse to its
// arguments. The input's first byte picks the format (Gemma 4's notation
// too), the piece size and
// whether arguments stream; the rest is the reply.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "chat/tool_calls.h"
#include "nlohmann/json.hpp"

namespace {

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using flover::ToolCallFormat;
  const ToolCallFormat formats[] = {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json, ToolCallFormat::kMistral};
  // 0-191 pick hermes, llama3_json or mistral as they always did; 192-255
  // pick gemma4 (its template's notation).
  const bool gemma4 = data[0] >= 192;
  const ToolCallFormat format = gemma4 ? ToolCallFormat::kGemma4 : formats[data[0] % 3];
  const size_t piece = 1 + (gemma4 ? data[0] % 16 : data[0] / 3 % 16);
  const bool stream_arguments = (gemma4 ? data[0] / 16 : data[0] / 48) % 2 == 1;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);

  const flover::ParsedReply whole = flover::ParseToolCalls(format, text, "c");
  for (const flover::ToolCall& c : whole.calls) {
    Check(!c.name.empty());
    Check(nlohmann::json::parse(c.arguments, nullptr, false).is_object());
  }
  flover::ToolCallStream stream(format, "c", stream_arguments);
  std::vector<flover::ToolCallStream::Event> events;
  for (size_t at = 0; at < text.size(); at += piece) {
    for (auto& e : stream.Push(text.substr(at, piece))) events.push_back(std::move(e));
  }
  for (auto& e : stream.Finish()) events.push_back(std::move(e));
  using Event = flover::ToolCallStream::Event;
  std::string content;
  size_t calls = 0;
  int begun = -1;  // the index of the call begun, and its fragments and name
  std::string begun_id, begun_name, fragments;
  for (const auto& e : events) {
    switch (e.kind) {
      case Event::kContent:
        content += e.content;
        break;
      case Event::kCallBegin:
        Check(stream_arguments && e.index == static_cast<int>(calls) && !e.call.name.empty());
        begun = e.index;
        begun_id = e.call.id;
        begun_name = e.call.name;
        fragments.clear();
        break;
      case Event::kArguments:
        Check(e.index == begun && !e.content.empty());
        fragments += e.content;
        break;
      case Event::kCall:
        Check(calls < whole.calls.size());
        Check(e.index == static_cast<int>(calls));
        Check(e.call.name == whole.calls[calls].name && e.call.arguments == whole.calls[calls].arguments &&
              e.call.id == whole.calls[calls].id);
        if (stream_arguments) {
          Check(begun == e.index && begun_id == e.call.id && begun_name == e.call.name);
          Check(nlohmann::json::parse(fragments, nullptr, false) == nlohmann::json::parse(e.call.arguments));
          begun = -1;
        }
        ++calls;
        break;
    }
  }
  Check(calls == whole.calls.size());
  if (!whole.calls.empty()) content = std::string(absl::StripAsciiWhitespace(content));
  Check(content == whole.content);
  return 0;
}
