// Arbitrary bytes as the body of an OpenAI request (chat, completions,
// tokenize, detokenize), parsed and then converted against GPT-2's
// vocabulary and tokenizer with a chat template, JSON schemas, regexes and
// grammars compiled by xgrammar: every body must come back
// as a request or an error status (nlohmann-json's exceptions stay inside
// server/json_body), never a crash, a hang or an allocation the body
// merely claims.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "chat/chat_format.h"
#include "engine/choice_constraint.h"
#include "engine/grammar_constraint.h"
#include "server/openai_request.h"
#include "server/request_convert.h"
#include "tokenizer/hf_tokenizer.h"

constexpr char kTemplate[] =
    "{% for m in messages %}<|endoftext|>{{ m.role }}\n{{ m.content }}<|endoftext|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|endoftext|>assistant\n{% endif %}";

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::shared_ptr<const flover::HfTokenizer> gpt2 = [] {
    auto t = flover::HfTokenizer::LoadFile("tests/golden/hf_tokenizers/gpt2/tokenizer.json");
    if (!t.ok()) __builtin_trap();  // run from the repository root (or runfiles)
    return std::shared_ptr<const flover::HfTokenizer>(std::move(*t));
  }();
  static const flover::server::ChatSupport* chat = [] {
    auto* support = new flover::server::ChatSupport();
    auto format = flover::ChatFormat::Create(kTemplate, "fuzz", "", "<|endoftext|>", gpt2);
    if (!format.ok()) __builtin_trap();
    support->format = std::move(*format);
    return support;
  }();
  static const std::shared_ptr<const flover::TokenBytes> bytes =
      std::make_shared<const flover::TokenBytes>(*gpt2);
  static flover::GrammarConstraints* grammars =
      new flover::GrammarConstraints(bytes, std::vector<int32_t>{50256});
  const flover::server::ConvertContext context{gpt2.get(), chat, bytes, gpt2->vocab_size(), grammars};
  const std::string body(reinterpret_cast<const char*>(data), size);
  for (auto parse : {flover::server::ParseChatRequest, flover::server::ParseCompletionRequest}) {
    auto parsed = parse(body, "m");
    if (parsed.ok()) (void)flover::server::ToEngineRequest(parsed->request, context, 7);
  }
  auto tokenize = flover::server::ParseTokenizeRequest(body);
  if (tokenize.ok()) (void)flover::server::ToEngineRequest(*tokenize, context, 7);
  (void)flover::server::ParseDetokenizeRequest(body, gpt2->vocab_size());
  return 0;
}
