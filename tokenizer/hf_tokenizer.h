// Hugging Face tokenizers in C++: a tokenizer.json (the `tokenizers`
// library's format) with a BPE model, or GPT-2's vocab.json + merges.txt,
// producing the ids and text that library produces.
//
// The pipeline is the library's: added tokens are split out first
// (leftmost-longest, with their single_word / lstrip / rstrip / normalized
// flags), the rest is normalized, pre-tokenized and run through BPE, then the
// post-processor adds its special tokens (Encode is the library's
// `encode(text)`, add_special_tokens on). Supported parts:
//   normalizer      Prepend, Replace (string pattern), NFC (Qwen's), Sequence
//   pre_tokenizer   ByteLevel (with or without GPT-2's regex), Split (regex or
//                   string; Isolated, Removed, MergedWithPrevious,
//                   MergedWithNext, Contiguous; invert), Digits, Metaspace,
//                   Sequence
//   model           BPE: merges as "a b" strings or pairs, byte_fallback,
//                   unk_token with fuse_unk, ignore_merges
//   post_processor  TemplateProcessing (its single template), ByteLevel,
//                   Sequence
//   decoder         ByteLevel, Replace, ByteFallback, Fuse, Strip,
//                   Metaspace, Sequence
// Anything else (other Unicode normalizers, WordPiece, Unigram,
// BPE dropout, subword prefixes) is refused when loaded, naming the part.
//
// Decode(ids) is the library's decode(ids, skip_special_tokens=False).
// DecodeBytes(ids) is what the ids add to a text that came before them: each
// token's own bytes, without the decoder's start-of-text adjustments (a
// SentencePiece "▁" is a space, not stripped; byte tokens are their raw
// bytes). NewTextStream() turns that into text as the library would.
#ifndef FLOVER_TOKENIZER_HF_TOKENIZER_H_
#define FLOVER_TOKENIZER_HF_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "google/protobuf/struct.pb.h"
#include "tokenizer/split_regex.h"
#include "tokenizer/tokenizer.h"

namespace flover {

struct GgufVocab;

class HfTokenizer final : public Tokenizer {
 public:
  // `what` names the source in errors (usually the file's path).
  static absl::StatusOr<std::unique_ptr<HfTokenizer>> FromJson(absl::string_view json,
                                                                absl::string_view what);
  static absl::StatusOr<std::unique_ptr<HfTokenizer>> LoadFile(const std::string& path);
  // GPT-2's pair of files, as GPT2TokenizerFast builds its tokenizer from
  // them: byte-level BPE with GPT-2's split pattern, and "<|endoftext|>" a
  // special token when the vocabulary has it.
  static absl::StatusOr<std::unique_ptr<HfTokenizer>> FromGpt2Files(
      absl::string_view vocab_json, absl::string_view merges_txt, absl::string_view what);
  static absl::StatusOr<std::unique_ptr<HfTokenizer>> LoadGpt2Files(
      const std::string& vocab_path, const std::string& merges_path);
  // A GGUF file's tokenizer, tokenizing as llama.cpp does (gguf_vocab.h).
  static absl::StatusOr<std::unique_ptr<HfTokenizer>> FromGgufVocab(const GgufVocab& vocab,
                                                                    absl::string_view what);

  using Tokenizer::Encode;
  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text,
                                              bool add_special_tokens) const override;
  // Added tokens marked special (GGUF: control and unknown tokens).
  bool IsSpecial(int32_t id) const override;
  std::string DecodeBytes(absl::Span<const int32_t> ids) const override;
  std::string Decode(absl::Span<const int32_t> ids) const override;
  // Each token's bytes (DecodeBytes), except that a run of byte-fallback
  // tokens ("<0xNN>") is held until it ends and then becomes its UTF-8 text,
  // or one U+FFFD per byte when not valid, as the ByteFallback decoder does.
  std::unique_ptr<TextStream> NewTextStream() const override;
  // One more than the largest id of the vocabulary and the added tokens.
  int vocab_size() const override { return static_cast<int>(tokens_.size()); }

  // Replaces the post-processor with `bos` before and `eos` after the text
  // (-1: none), as transformers' Llama-style tokenizers rebuild it from
  // add_bos_token / add_eos_token.
  void SetSpecialTokensAround(int32_t bos, int32_t eos) {
    template_before_.clear();
    template_after_.clear();
    if (bos >= 0) template_before_.push_back(bos);
    if (eos >= 0) template_after_.push_back(eos);
  }

  // The id of a token (added tokens first, then the model's vocabulary), or
  // -1 when there is none.
  int32_t TokenId(absl::string_view token) const;

  // Parts of the pipeline (public for the implementation's helpers).
  struct AddedToken {
    int32_t id = -1;
    std::string content;
    bool single_word = false, lstrip = false, rstrip = false, normalized = false;
    bool special = false;
  };
  struct NormalizerStep {
    enum Kind { kPrepend, kReplace, kNfc } kind;
    std::string a, b;  // Prepend: a; Replace: a -> b; Nfc: none (NfcNormalize)
  };
  struct PreTokenizerStep {
    enum Kind { kByteLevel, kSplit, kMetaspace } kind;
    // ByteLevel
    bool add_prefix_space = false, use_regex = false;
    // Split: a regex, or a literal string when `literal` is set.
    std::shared_ptr<const SplitRegex> regex;
    std::string literal;
    enum Behavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };
    Behavior behavior = kIsolated;
    bool invert = false;
    // Metaspace
    std::string replacement;
    enum Prepend { kAlways, kFirst, kNever } prepend = kAlways;
    bool split = false;
  };
  struct DecoderStep {
    enum Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace } kind;
    std::string a, b;       // Replace: a -> b; Metaspace: a (replacement)
    char32_t strip_char = 0;
    int strip_start = 0, strip_stop = 0;
    bool metaspace_prepend = true;  // prepend_scheme != never
  };
  // A piece of text on its way through the pipeline; `at_start` when it
  // begins at the start of the input (Metaspace's "first" scheme).
  struct Piece {
    std::string text;
    bool at_start = false;
  };

 private:
  HfTokenizer() = default;

  // Adds the merge a + b of the given rank; `where` names it in errors.
  absl::Status AddMerge(absl::string_view a, absl::string_view b, int32_t rank,
                        absl::string_view where);
  absl::Status ParsePostProcessor(const google::protobuf::Value& v, absl::string_view what);
  // Builds the id tables, the added-token patterns and the per-id bytes.
  absl::Status Finish(absl::string_view what);
  // Splits `text` into plain runs and added tokens (id >= 0).
  void SplitAddedTokens(const Piece& text, bool normalized_pass,
                        std::vector<std::pair<Piece, int32_t>>* out) const;
  std::string Normalize(absl::string_view s) const;
  absl::Status PreTokenize(std::vector<Piece>* pieces) const;
  void Bpe(absl::string_view word, std::vector<int32_t>* ids) const;
  std::vector<std::string> DecodeChain(std::vector<std::string> tokens) const;

  // Vocabulary: the model's and the added tokens, by id ("" for a hole).
  std::vector<std::string> tokens_;
  absl::flat_hash_map<std::string, int32_t> model_vocab_;
  std::vector<AddedToken> added_;
  absl::flat_hash_map<std::string, int32_t> added_by_content_;
  // [pass][first byte] -> (pattern, index into added_), longest first; pass
  // 0 holds the tokens matched in raw text, 1 the normalized ones.
  std::vector<std::pair<std::string, int>> added_patterns_[2][256];
  // (left id, right id) -> (rank, merged id).
  absl::flat_hash_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  // A word of newlines alone that is a token is that token (llama.cpp's
  // gemma4 tokenizer; other words merge as usual).
  bool whole_newline_runs_ = false;
  int32_t byte_token_[256];  // "<0xNN>" ids for byte_fallback, or -1

  std::vector<NormalizerStep> normalizer_;
  std::vector<PreTokenizerStep> pre_tokenizer_;
  bool has_decoder_ = false;
  std::vector<DecoderStep> decoder_;
  // Template ids before and after the text ("$A") of the single template.
  std::vector<int32_t> template_before_, template_after_;

  // Per-id bytes for DecodeBytes, and whether the decoder reads the id as a
  // ByteFallback byte.
  std::vector<std::string> raw_;
  std::vector<bool> fallback_byte_;

  class Stream;
};

}  // namespace flover

#endif  // FLOVER_TOKENIZER_HF_TOKENIZER_H_
