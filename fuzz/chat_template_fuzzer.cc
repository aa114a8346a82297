// Arbitrary bytes as a chat template (a model file's tokenizer.chat_template
// or tokenizer_config.json is untrusted input), rendered with a small
// conversation: the parser must refuse what it cannot read with a status,
// and rendering must end — with text or a status — within its limits,
// whatever the template loops over or builds. The input's first line, if
// it starts with "#", is used as a message's content instead.
#include <cstddef>
#include <cstdint>
#include <string>

#include "chat/jinja.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string source(reinterpret_cast<const char*>(data), size);
  std::string content = "Hello there";
  if (!source.empty() && source[0] == '#') {
    const size_t eol = source.find('\n');
    content = source.substr(1, eol == std::string::npos ? std::string::npos : eol - 1);
    source = eol == std::string::npos ? "" : source.substr(eol + 1);
  }
  auto t = flover::jinja::Template::Parse(source);
  if (!t.ok()) return 0;
  using flover::jinja::Value;
  flover::jinja::List messages;
  for (const char* role : {"system", "user", "assistant", "user"}) {
    messages.push_back(Value::MakeDict({{"role", Value(role)}, {"content", Value(content)}}));
  }
  const flover::jinja::Dict variables = {
      {"messages", Value::MakeList(std::move(messages))},
      {"add_generation_prompt", Value(true)},
      {"bos_token", Value("<s>")},
      {"eos_token", Value("</s>")},
      {"tools", Value::None()},
      {"documents", Value::None()},
  };
  flover::jinja::RenderLimits limits;  // small, so each input runs fast
  limits.max_steps = 20000;
  limits.max_output_bytes = 1 << 16;
  limits.max_depth = 16;
  (void)t->Render(variables, limits);
  return 0;
}
