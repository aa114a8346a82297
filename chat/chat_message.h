// A conversation as chat templates take it: messages (with the calls an
// assistant made and the tools' answers) and the functions a model may call.
#ifndef FLOVER_CHAT_CHAT_MESSAGE_H_
#define FLOVER_CHAT_CHAT_MESSAGE_H_

#include <string>
#include <vector>

namespace flover {

// A function call an assistant made: its id, the function's name, and the
// arguments as JSON text (an object).
struct ToolCall {
  std::string id, name, arguments;
};

// A function a model may call: its name, what it does, and its arguments
// as a JSON Schema (JSON text; "" means an object of anything).
struct ToolFunction {
  std::string name, description, parameters;
};

struct ChatMessage {
  std::string role;  // system, user, assistant or tool
  std::string content;
  bool null_content = false;        // content is null (an assistant turn of calls only)
  std::vector<ToolCall> tool_calls;  // assistant
  std::string tool_call_id;          // tool: the call this answers
  std::string name;                  // optional
  // assistant: the reasoning before its answer (OpenAI-style APIs'
  // reasoning_content), which a template may show again (Qwen3's keeps the
  // last turn's); empty: none.
  std::string reasoning_content;
  // Where the content holds images: its parts in order, each an image or a
  // text (a template that walks a message's content sees {"type":
  // "image"} and {"type": "text", "text": ...}); empty for text alone.
  struct Part {
    bool image = false;
    std::string text;
  };
  std::vector<Part> parts;
};

}  // namespace flover

#endif  // FLOVER_CHAT_CHAT_MESSAGE_H_
