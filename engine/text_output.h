// A sequence's generated text: decoded token by token, cut at the first of
// the request's stop strings, and released only once it can no longer
// change (a tail that could still grow into a stop string, or an unfinished
// UTF-8 character, is held back until the next token or the end).
#ifndef FLOVER_ENGINE_TEXT_OUTPUT_H_
#define FLOVER_ENGINE_TEXT_OUTPUT_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/sequence_observer.h"
#include "tokenizer/tokenizer.h"

namespace flover {

class TextOutput final : public SequenceObserver {
 public:
  TextOutput(std::unique_ptr<Tokenizer::TextStream> stream, std::vector<std::string> stop_strings);

  // The token's text (none for an end-of-sequence token) goes into
  // event.text as far as it can be released; kStop when it completes a stop
  // string (the text ends before it).
  std::optional<FinishReason> OnToken(int32_t token, bool end_of_sequence,
                                      TokenEvent& event) override;
  // The decoder's tail (e.g. a run of byte tokens) and everything held back.
  void OnFinish(FinishEvent& event) override;

 private:
  // Appends generated text, cut at the first stop string (true when one was
  // found).
  bool Append(const std::string& piece);
  // The text not yet sent that can no longer change (all of it when `all`).
  std::string Release(bool all);

  std::unique_ptr<Tokenizer::TextStream> stream_;
  std::vector<std::string> stop_strings_;
  size_t longest_stop_ = 0;
  std::string text_;   // generated so far (cut at a stop string)
  size_t released_ = 0;  // bytes of text_ already sent
  bool stopped_ = false;
};

}  // namespace flover

#endif  // FLOVER_ENGINE_TEXT_OUTPUT_H_
