// Arbitrary bytes as the GenerateRequest a gRPC client sends, then the
// server's conversion and validation against a model (GPT-2's vocabulary
// and tokenizer, and a model without a tokenizer): every field at any value
// must come back as a request or an InvalidArgument, never a crash or an
// allocation of a size the client claimed.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "proto/flover.pb.h"
#include "server/request_convert.h"
#include "tokenizer/hf_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const flover::HfTokenizer* gpt2 = [] {
    auto t = flover::HfTokenizer::LoadFile("tests/golden/hf_tokenizers/gpt2/tokenizer.json");
    if (!t.ok()) __builtin_trap();  // run from the repository root (or runfiles)
    return t->release();
  }();
  flover::v1::GenerateRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  (void)flover::server::ToEngineRequest(request, gpt2, gpt2->vocab_size(), 7);
  (void)flover::server::ToEngineRequest(request, nullptr, 50257, 7);
  return 0;
}
