// Chat templates: the Jinja2 subset Hugging Face chat templates use, parsed
// and rendered as transformers' apply_chat_template does (jinja2's
// ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, its
// tojson as json.dumps(ensure_ascii=False), raise_exception). No registry
// carries a C++ Jinja engine, so this is a small interpreter of its own:
// jinja_parse (the lexer and parser, into jinja_ast.h), jinja_value
// (Python's values), jinja_builtins (filters, tests, methods), jinja_text
// (Python's str methods on UTF-8) and this renderer (jinja.cc). What it
// supports is listed in jinja_parse.h and jinja_builtins.h; anything else
// is refused when the template is parsed, naming the line and the construct.
//
// Rendering is bounded (steps, output bytes, call depth), so a template can
// neither hang nor exhaust the server whatever the messages.
#ifndef FLOVER_CHAT_JINJA_H_
#define FLOVER_CHAT_JINJA_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "chat/jinja_ast.h"
#include "chat/jinja_value.h"

namespace flover::jinja {

struct RenderLimits {
  int64_t max_steps = 1 << 22;          // expressions and statements evaluated
  int64_t max_output_bytes = 16 << 20;  // of the rendered text and any string built
  int max_depth = 64;                   // nested macro calls and expressions
};

class Template {
 public:
  // InvalidArgument naming the line for a syntax error, an unknown filter or
  // test, or a construct outside the subset.
  static absl::StatusOr<Template> Parse(absl::string_view source);

  // The text for `variables` (messages, add_generation_prompt, bos_token,
  // ...), with the globals raise_exception, namespace, range, dict and
  // strftime_now. raise_exception(message) fails with InvalidArgument whose
  // message is `message`; other errors are InvalidArgument (or
  // ResourceExhausted past a limit) naming the line.
  absl::StatusOr<std::string> Render(const Dict& variables, const RenderLimits& limits = {}) const;

 private:
  std::shared_ptr<const Body> body_;
};

}  // namespace flover::jinja

#endif  // FLOVER_CHAT_JINJA_H_
