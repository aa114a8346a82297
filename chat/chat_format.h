// A model's chat template applied to a conversation, as transformers'
// apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
// does: the template renders the messages (with bos_token, eos_token, the
// tools when a request has some, and documents as None), and the text is tokenized without the
// tokenizer's own special tokens, which the template names itself.
//
// It also finds the token that ends an assistant turn in this template, by
// rendering one exchange and reading what follows the reply (ChatML's
// <|im_end|>, Llama 3's <|eot_id|>, Mistral's </s>, Gemma's <end_of_turn>,
// Phi-3's <|end|>): generation stops there as at EOS, and the reply leaves
// it out.
#ifndef FLOVER_CHAT_CHAT_FORMAT_H_
#define FLOVER_CHAT_CHAT_FORMAT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "chat/chat_message.h"
#include "chat/jinja.h"
#include "tokenizer/tokenizer.h"

namespace flover {

class ChatFormat {
 public:
  // `source` names the template in errors ("model.gguf:
  // tokenizer.chat_template"). InvalidArgument when it does not parse.
  static absl::StatusOr<std::unique_ptr<ChatFormat>> Create(
      const std::string& template_text, const std::string& source, const std::string& bos_token,
      const std::string& eos_token, std::shared_ptr<const Tokenizer> tokenizer);

  // The prompt text, the assistant's turn opened; a template's
  // raise_exception (roles that must alternate, say) is InvalidArgument with
  // its message. `tools` reach the template as transformers passes them
  // ([{"type": "function", "function": {name, description, parameters}}]),
  // and a message's calls as {"id", "type", "function": {"name",
  // "arguments": the object}}. A template that takes no tools (takes_tools)
  // gets them described in the system message instead (tool_calls.h's
  // DescribeTools), its past calls as text and tool results as user turns.
  // `kwargs`: a JSON object whose keys reach the template as variables
  // (chat_template_kwargs: Qwen3's enable_thinking, gpt-oss's
  // reasoning_effort); "" for none. A key the renderer sets itself
  // (messages, tools, add_generation_prompt, bos_token, eos_token,
  // documents) is InvalidArgument, as is anything but an object.
  absl::StatusOr<std::string> Render(absl::Span<const ChatMessage> messages,
                                     absl::Span<const ToolFunction> tools = {},
                                     const std::string& kwargs = "") const;
  // Render, then the text's token ids.
  absl::StatusOr<std::vector<int32_t>> Tokenize(absl::Span<const ChatMessage> messages,
                                                absl::Span<const ToolFunction> tools = {},
                                                const std::string& kwargs = "") const;

  // Whether the template shows the tools it is given (found by rendering
  // one); false: Render describes them itself.
  bool takes_tools() const { return takes_tools_; }
  const std::string& template_text() const { return template_text_; }

  // The tokens that end an assistant turn (none when the template ends a
  // turn with plain text).
  const std::vector<int32_t>& end_of_turn_ids() const { return end_of_turn_; }
  const std::string& source() const { return source_; }

 private:
  ChatFormat() = default;
  absl::StatusOr<std::string> RenderWith(absl::Span<const ChatMessage> messages,
                                         absl::Span<const ToolFunction> tools,
                                         bool add_generation_prompt, const std::string& kwargs = "") const;
  // `turns` rendered for a probe at start, without a system message first
  // and then with one: the first text `usable` accepts, or none.
  std::optional<std::string> RenderProbe(const std::vector<ChatMessage>& turns,
                                         absl::Span<const ToolFunction> tools, bool add_generation_prompt,
                                         const std::function<bool(const std::string&)>& usable) const;

  jinja::Template template_;
  std::string template_text_, source_, bos_token_, eos_token_;
  bool takes_tools_ = false;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::vector<int32_t> end_of_turn_;
};

}  // namespace flover

#endif  // FLOVER_CHAT_CHAT_FORMAT_H_
