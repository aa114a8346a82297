// Arbitrary bytes as a GGUF file, taken as far as a model file goes before
// any backend: the parser must refuse what is malformed with a status; every
// tensor it accepts must be readable by rows (dequantized or refused by
// type) without reading outside the file; the tokenizer its metadata
// describes must build or be refused, and then encode and decode; a llama
// config must parse or be refused, and then every weight the model needs be
// checked and read through the un-permuting source.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "model/llama/llama_config.h"
#include "model/llama/llama_gguf.h"
#include "model/llama/llama_family.h"
#include "model/loader/gguf.h"
#include "model/loader/gguf_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parsed = flover::GgufFile::Parse(std::string(reinterpret_cast<const char*>(data), size),
                                        "fuzz.gguf");
  if (!parsed.ok()) return 0;
  auto file = std::make_shared<const flover::GgufFile>(std::move(*parsed));
  for (const flover::GgufTensor& t : file->tensors()) {
    // Bound the work: a valid file may describe a large tensor.
    if (t.cols() > (1 << 16)) continue;
    (void)file->ReadRows(t, 0, 1);
    (void)file->ReadRows(t, t.rows() - 1, t.rows());
    (void)file->ReadRows(t, t.rows(), t.rows() + 1);  // past the end: an error
  }
  for (const char* key : {"general.architecture", "general.alignment", "tokenizer.ggml.tokens"}) {
    (void)file->GetString(key);
    (void)file->GetInt(key);
    (void)file->GetStrings(key);
  }
  auto text = flover::ReadGgufText(*file, 1 << 16);
  if (text.ok() && text->tokenizer != nullptr) {
    auto ids = text->tokenizer->Encode("Hello <|im_start|> w\xC3\xB6rld 123 <s>");
    if (ids.ok()) {
      for (int32_t& id : *ids) id %= text->tokenizer->vocab_size();
      (void)text->tokenizer->Decode(*ids);
    }
  }
  auto config = flover::LlamaConfigFromGguf(*file);
  if (!config.ok() || config->hidden > 4096 || config->vocab_size > (1 << 16) ||
      int64_t{config->intermediate} * config->hidden > (1 << 22)) {
    return 0;
  }
  auto source = flover::GgufLlamaSource(file, *config);
  if (flover::CheckDecoderWeights(*source, flover::LlamaDecoderSpec(*config), flover::LlamaRecipes(*config)).ok()) {
    (void)flover::LoadLlamaWeights(*source, *config, flover::ShardSpec{1, 0},
                                   flover::WeightPart{0, std::min(config->n_layer, 2), true});
  }
  return 0;
}
