// Arbitrary bytes as the GenerateRequest a gRPC client sends, then the
// server's conversion and validation against a model (GPT-2's vocabulary
// and tokenizer with a chat template, choices, schemas, regexes and
// grammars: fuzz/gpt2_context.h; and a model without a tokenizer): every
// field at any value must come back as a request or an error status, never
// a crash or an allocation of a size the client claimed.
#include <cstddef>
#include <cstdint>

#include "fuzz/gpt2_context.h"
#include "proto/flover.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const flover::server::ConvertContext& gpt2 = flover::fuzz::Gpt2Context();
  flover::v1::GenerateRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  (void)flover::server::ToEngineRequest(request, gpt2, 7);
  (void)flover::server::ToEngineRequest(request, {nullptr, nullptr, nullptr, 50257}, 7);
  return 0;
}
