// The chat template a model ships, as its loader found it.
#ifndef FLOVER_MODEL_LOADER_CHAT_TEMPLATE_INFO_H_
#define FLOVER_MODEL_LOADER_CHAT_TEMPLATE_INFO_H_

#include <string>

namespace flover {

// Jinja source, rendered as transformers' apply_chat_template renders it,
// and the special tokens it may name.
struct ChatTemplateInfo {
  std::string text;    // empty: the model has none
  std::string source;  // where it came from, for errors and logs
  std::string bos_token, eos_token;  // as text ("" when the model has none)
};

}  // namespace flover

#endif  // FLOVER_MODEL_LOADER_CHAT_TEMPLATE_INFO_H_
