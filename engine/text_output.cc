#include "engine/text_output.h"

#include <algorithm>
#include <utility>

namespace flover {

TextOutput::TextOutput(std::unique_ptr<Tokenizer::TextStream> stream,
                       std::vector<std::string> stop_strings)
    : stream_(std::move(stream)), stop_strings_(std::move(stop_strings)) {
  for (const std::string& s : stop_strings_) longest_stop_ = std::max(longest_stop_, s.size());
}

std::optional<FinishReason> TextOutput::OnToken(int32_t token, bool end_of_sequence,
                                                TokenEvent& event) {
  if (end_of_sequence) return std::nullopt;
  std::optional<FinishReason> reason;
  if (Append(stream_->Push(token))) reason = FinishReason::kStop;
  event.text = Release(/*all=*/false);
  return reason;
}

void TextOutput::OnFinish(FinishEvent& event) {
  if (!stopped_) Append(stream_->Finish());  // e.g. a run of byte tokens
  event.text = Release(/*all=*/true);
}

bool TextOutput::Append(const std::string& piece) {
  const size_t before = text_.size();
  text_ += piece;
  // A stop string may end in this piece and start in earlier ones.
  const size_t from = before >= longest_stop_ ? before - longest_stop_ + 1 : 0;
  size_t cut = std::string::npos;
  for (const std::string& s : stop_strings_) {
    const size_t at = text_.find(s, from);
    if (at != std::string::npos) cut = std::min(cut, at);
  }
  if (cut == std::string::npos) return false;
  text_.resize(std::max(cut, released_));
  stopped_ = true;
  return true;
}

std::string TextOutput::Release(bool all) {
  size_t end = text_.size();
  if (!all && !stopped_) {
    // Hold back a tail that could still grow into a stop string, without
    // splitting a character.
    const size_t hold = longest_stop_ > 0 ? longest_stop_ - 1 : 0;
    end = end > hold ? end - hold : 0;
    while (end > released_ && end < text_.size() &&
           (static_cast<unsigned char>(text_[end]) & 0xC0) == 0x80) {
      --end;
    }
  }
  if (end <= released_) return "";
  std::string out = text_.substr(released_, end - released_);
  released_ = end;
  return out;
}

}  // namespace flover
