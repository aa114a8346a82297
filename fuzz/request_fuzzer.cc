// Arbitrary bytes as the GenerateRequest a gRPC client sends, then the
// server's conversion and validation against a model (GPT-2's vocabulary
// and tokenizer with a chat template, and a model without a tokenizer):
// every field at any value, messages and choices included, must come back as a request
// or an error status, never a crash or an allocation of a size the client
// claimed.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "chat/chat_format.h"
#include "proto/flover.pb.h"
#include "engine/grammar_constraint.h"
#include "server/request_convert.h"
#include "tokenizer/hf_tokenizer.h"

// A ChatML-shaped template over the fixture vocabulary: messages go through
// the template interpreter, the trim filter and string concatenation.
constexpr char kTemplate[] =
    "{% for m in messages %}{% if loop.first and m.role != 'system' %}<|endoftext|>system\n"
    "Be brief.\n{% endif %}<|endoftext|>{{ m.role }}\n{{ m.content | trim }}<|endoftext|>\n"
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
  flover::v1::GenerateRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  static flover::GrammarConstraints* grammars =
      new flover::GrammarConstraints(bytes, std::vector<int32_t>{50256});
  (void)flover::server::ToEngineRequest(request, {gpt2.get(), chat, bytes, gpt2->vocab_size(), grammars}, 7);
  (void)flover::server::ToEngineRequest(request, {nullptr, nullptr, nullptr, 50257}, 7);
  return 0;
}
