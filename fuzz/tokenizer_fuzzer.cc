// Two things a client or a model directory controls:
// - arbitrary bytes as tokenizer.json: a status or a tokenizer, and a
//   tokenizer that loads must encode and decode without failing;
// - arbitrary bytes as text to encode, and as ids to decode, with each
//   committed fixture tokenizer (byte-level BPE of GPT-2, Llama 3 and Qwen;
//   SentencePiece-style with byte fallback): encoding must give a status
//   or ids, and decoding any ids inside the vocabulary, at once or
//   streamed, must not fail.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "tokenizer/hf_tokenizer.h"

namespace {

const std::vector<std::unique_ptr<flover::HfTokenizer>>& Fixtures() {
  static const auto* fixtures = [] {
    auto* v = new std::vector<std::unique_ptr<flover::HfTokenizer>>;
    for (const char* name : {"gpt2", "llama3", "qwen", "spm_metaspace", "spm_legacy", "edge"}) {
      auto t = flover::HfTokenizer::LoadFile(std::string("tests/golden/hf_tokenizers/") + name +
                                             "/tokenizer.json");
      if (t.ok()) v->push_back(std::move(*t));
    }
    if (v->empty()) __builtin_trap();  // run from the repository root (or runfiles)
    return v;
  }();
  return *fixtures;
}

void Exercise(const flover::HfTokenizer& t, absl::string_view bytes) {
  auto ids = t.Encode(bytes);
  if (ids.ok()) {
    (void)t.Decode(*ids);
    (void)t.DecodeBytes(*ids);
  }
  // The bytes as ids, folded into the vocabulary.
  std::vector<int32_t> raw;
  for (size_t i = 0; i + 1 < bytes.size() && raw.size() < 256; i += 2) {
    const int v = (static_cast<uint8_t>(bytes[i]) << 8) | static_cast<uint8_t>(bytes[i + 1]);
    raw.push_back(v % t.vocab_size());
  }
  (void)t.Decode(raw);
  auto stream = t.NewTextStream();
  for (int32_t id : raw) (void)stream->Push(id);
  (void)stream->Finish();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  // The first byte picks the mode, so one corpus serves both.
  if (size > 0 && data[0] == '{') {
    auto t = flover::HfTokenizer::FromJson(bytes, "fuzz tokenizer.json");
    if (t.ok() && (*t)->vocab_size() > 0) Exercise(**t, "Hello, world! 12 \xc3\xa9\xe2\x82\xac");
    return 0;
  }
  for (const auto& t : Fixtures()) Exercise(*t, bytes);
  return 0;
}
