// Arbitrary bytes as the body of an HTTP request (OpenAI's chat,
// completions, tokenize, detokenize, responses, embeddings and rerank; Anthropic's messages), parsed and then converted against GPT-2's
// vocabulary and tokenizer with a chat template, choices, and JSON schemas,
// regexes and grammars compiled by xgrammar (fuzz/gpt2_context.h): every
// body must come back as a request or an error status (nlohmann-json's and
// xgrammar's exceptions stay inside), never a crash, a hang or an
// allocation the body merely claims.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/gpt2_context.h"
#include "server/embeddings_api.h"
#include "server/messages_api.h"
#include "server/rerank_api.h"
#include "server/openai_request.h"
#include "server/responses_api.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const flover::server::ConvertContext& context = flover::fuzz::Gpt2Context();
  const std::string body(reinterpret_cast<const char*>(data), size);
  for (auto parse : {flover::server::ParseChatRequest, flover::server::ParseCompletionRequest}) {
    auto parsed = parse(body, "m");
    if (parsed.ok()) (void)flover::server::ToEngineRequest(parsed->request, context, 7);
  }
  auto tokenize = flover::server::ParseTokenizeRequest(body);
  if (tokenize.ok()) (void)flover::server::ToEngineRequest(*tokenize, context, 7);
  (void)flover::server::ParseDetokenizeRequest(body, context.vocab_size);
  auto messages = flover::server::ParseMessagesRequest(body, "m");
  if (messages.ok()) (void)flover::server::ToEngineRequest(messages->request, context, 7);
  auto responses = flover::server::ParseResponsesRequest(body, "m");
  if (responses.ok()) (void)flover::server::ToEngineRequest(responses->request, context, 7);
  (void)flover::server::ParseEmbeddingsRequest(body, "m");
  (void)flover::server::ParseRerankRequest(body, "m");
  return 0;
}
