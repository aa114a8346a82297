// HfTokenizer, part 4 of 4: ids back to text — the decoder's steps, whole
// and as a stream that releases only complete UTF-8.
#include "tokenizer/hf_tokenizer.h"

#include <utility>

#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "tokenizer/hf_tokenizer_internal.h"
#include "tokenizer/unicode.h"

namespace flover {

using hf_internal::Bytes;
using hf_internal::ByteLevelBytes;
using hf_internal::ByteToken;

std::vector<std::string> HfTokenizer::DecodeChain(std::vector<std::string> tokens) const {
  for (const DecoderStep& d : decoder_) {
    std::vector<std::string> out;
    switch (d.kind) {
      case DecoderStep::kByteLevel: {
        std::string bytes;
        for (const std::string& t : tokens) bytes += ByteLevelBytes(t);
        out.push_back(SanitizeUtf8(bytes));
        break;
      }
      case DecoderStep::kReplace:
        for (std::string& t : tokens) out.push_back(absl::StrReplaceAll(t, {{d.a, d.b}}));
        break;
      case DecoderStep::kByteFallback: {
        std::string pending;
        auto flush = [&] {
          if (pending.empty()) return;
          if (DecodeUtf8(pending).ok()) {
            out.push_back(pending);
          } else {
            for (size_t i = 0; i < pending.size(); ++i) out.push_back("\xEF\xBF\xBD");
          }
          pending.clear();
        };
        for (std::string& t : tokens) {
          uint8_t byte;
          if (ByteToken(t, &byte)) {
            pending += static_cast<char>(byte);
          } else {
            flush();
            out.push_back(std::move(t));
          }
        }
        flush();
        break;
      }
      case DecoderStep::kFuse:
        out.push_back(absl::StrJoin(tokens, ""));
        break;
      case DecoderStep::kStrip:
        for (const std::string& t : tokens) {
          auto cs = DecodeUtf8(t);
          if (!cs.ok()) {
            out.push_back(t);
            continue;
          }
          size_t b = 0, e = cs->size();
          while (b < e && b < static_cast<size_t>(d.strip_start) && (*cs)[b].cp == d.strip_char) ++b;
          for (int k = 0; k < d.strip_stop && e > b && (*cs)[e - 1].cp == d.strip_char; ++k) --e;
          out.push_back(b == e ? "" : t.substr((*cs)[b].begin, (*cs)[e - 1].end - (*cs)[b].begin));
        }
        break;
      case DecoderStep::kMetaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          // In the first token the replacement is dropped, not a space.
          out.push_back(absl::StrReplaceAll(
              tokens[i], {{d.a, i == 0 && d.metaspace_prepend ? "" : " "}}));
        }
        break;
    }
    tokens = std::move(out);
  }
  return tokens;
}

std::string HfTokenizer::Decode(absl::Span<const int32_t> ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size() || tokens_[id].empty()) continue;  // as the library: skipped
    tokens.push_back(tokens_[id]);
  }
  if (!has_decoder_) return absl::StrJoin(tokens, " ");
  return absl::StrJoin(DecodeChain(std::move(tokens)), "");
}

std::string HfTokenizer::DecodeBytes(absl::Span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id >= 0 && id < vocab_size()) out += raw_[id];
  }
  return out;
}

class HfTokenizer::Stream final : public Tokenizer::TextStream {
 public:
  explicit Stream(const HfTokenizer& t) : t_(t) {}

  std::string Push(int32_t id) override {
    if (id < 0 || id >= t_.vocab_size()) return "";
    if (t_.fallback_byte_[id]) {
      std::string out = FlushTail();
      bytes_ += t_.raw_[id];
      return out;
    }
    std::string out = FlushBytes();
    tail_ += t_.raw_[id];
    const size_t end = CompleteUtf8Prefix(tail_);
    out += SanitizeUtf8(absl::string_view(tail_).substr(0, end));
    tail_.erase(0, end);
    return out;
  }

  std::string Finish() override { return FlushBytes() + FlushTail(); }

 private:
  // A finished run of byte-fallback tokens, as the ByteFallback decoder.
  std::string FlushBytes() {
    std::string out;
    if (DecodeUtf8(bytes_).ok()) {
      out = std::move(bytes_);
    } else {
      for (size_t i = 0; i < bytes_.size(); ++i) out += "\xEF\xBF\xBD";
    }
    bytes_.clear();
    return out;
  }
  std::string FlushTail() {
    std::string out = SanitizeUtf8(tail_);
    tail_.clear();
    return out;
  }

  const HfTokenizer& t_;
  std::string bytes_;  // pending byte-fallback bytes
  std::string tail_;   // an unfinished UTF-8 character from byte-level tokens
};

std::unique_ptr<Tokenizer::TextStream> HfTokenizer::NewTextStream() const {
  return std::make_unique<Stream>(*this);
}

}  // namespace flover
