// Text <-> token ids, as the engine (stop strings, streamed text), the server
// (text prompts) and the clients' tools need it. HfTokenizer (tokenizer.json,
// GPT-2's vocab.json + merges.txt, or a GGUF file's vocabulary through
// gguf_vocab.h) implements it; nothing outside tokenizer/ and model/ names
// an implementation.
#ifndef FLOVER_TOKENIZER_TOKENIZER_H_
#define FLOVER_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace flover {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Text must be valid UTF-8 (InvalidArgument otherwise). With
  // add_special_tokens the tokens the model's tokenizer puts around any
  // text (a BOS, say) are added, as the reference library's encode does by
  // default; without, only the text's own tokens (as transformers tokenizes
  // a rendered chat template, which names its special tokens itself).
  virtual absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text,
                                                      bool add_special_tokens) const = 0;
  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text) const {
    return Encode(text, /*add_special_tokens=*/true);
  }
  // Whether `id` is a special token (a control token such as <|im_end|>):
  // matched whole in text, not part of what a model writes as text.
  virtual bool IsSpecial(int32_t id) const = 0;
  // The raw bytes the tokens add to a text that came before them, as a
  // server streams them (may end inside a UTF-8 character). Ids must be <
  // vocab_size().
  virtual std::string DecodeBytes(absl::Span<const int32_t> ids) const = 0;
  // The text of the ids on their own, as the model's reference library
  // decodes them (ill-formed UTF-8 replaced by U+FFFD).
  virtual std::string Decode(absl::Span<const int32_t> ids) const = 0;
  virtual int vocab_size() const = 0;

  // The text a stream of generated ids adds after a prompt, produced as the
  // ids arrive: Push returns the text that is final once `id` is known
  // (whole characters only), Finish what is left at the end. Together they
  // are what the reference library's decode of prompt + ids adds to its
  // decode of the prompt.
  class TextStream {
   public:
    virtual ~TextStream() = default;
    virtual std::string Push(int32_t id) = 0;
    virtual std::string Finish() = 0;
  };
  virtual std::unique_ptr<TextStream> NewTextStream() const = 0;
};

}  // namespace flover

#endif  // FLOVER_TOKENIZER_TOKENIZER_H_
