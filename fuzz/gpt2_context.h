// What the request fuzzers convert against, built once per process: GPT-2's
// tokenizer (the fixture), a ChatML-shaped template over it (messages go
// through the template interpreter, the trim filter and string
// concatenation), the vocabulary's bytes for choices, and a grammar compiler
// for schemas, regexes and grammars. Run from the repository root (or the
// test's runfiles).
#ifndef FLOVER_FUZZ_GPT2_CONTEXT_H_
#define FLOVER_FUZZ_GPT2_CONTEXT_H_

#include <memory>
#include <vector>

#include "chat/chat_format.h"
#include "engine/choice_constraint.h"
#include "engine/grammar_constraint.h"
#include "server/request_convert.h"
#include "tokenizer/hf_tokenizer.h"

namespace flover::fuzz {

inline const server::ConvertContext& Gpt2Context() {
  static const server::ConvertContext* context = [] {
    auto t = HfTokenizer::LoadFile("tests/golden/hf_tokenizers/gpt2/tokenizer.json");
    if (!t.ok()) __builtin_trap();
    std::shared_ptr<const HfTokenizer> gpt2(std::move(*t));
    constexpr char kTemplate[] =
        "{% for m in messages %}{% if loop.first and m.role != 'system' %}<|endoftext|>system\n"
        "Be brief.\n{% endif %}<|endoftext|>{{ m.role }}\n{{ m.content | trim }}<|endoftext|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|endoftext|>assistant\n{% endif %}";
    auto* chat = new server::ChatSupport();
    auto format = ChatFormat::Create(kTemplate, "fuzz", "", "<|endoftext|>", gpt2);
    if (!format.ok()) __builtin_trap();
    chat->format = std::move(*format);
    auto bytes = std::make_shared<const TokenBytes>(*gpt2);
    auto* grammars = new GrammarConstraints(bytes, std::vector<int32_t>{50256});
    static std::shared_ptr<const HfTokenizer> keep = gpt2;  // the process's life, as a server's
    return new server::ConvertContext{gpt2.get(), chat, bytes, gpt2->vocab_size(), grammars};
  }();
  return *context;
}

}  // namespace flover::fuzz

#endif  // FLOVER_FUZZ_GPT2_CONTEXT_H_
