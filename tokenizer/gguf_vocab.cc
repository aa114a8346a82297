// HfTokenizer::FromGgufVocab: a GGUF file's tokenizer as the HfTokenizer
// pipeline llama.cpp's tokenizer amounts to (see gguf_vocab.h).
#include "tokenizer/gguf_vocab.h"

#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tokenizer/hf_tokenizer.h"
#include "util/status_macros.h"

namespace flover {
namespace {

constexpr int64_t kMaxTokens = 1 << 22;

// A byte-level BPE pre-tokenizer as the models' tokenizer.json files spell
// it: `splits` (each an isolated Split), then ByteLevel, with GPT-2's
// pattern when `gpt2_regex`.
struct PreTokenizerKind {
  std::vector<const char*> names;  // tokenizer.ggml.pre values
  std::vector<const char*> splits;
  bool gpt2_regex = false;
  bool ignore_merges = false;  // a word that is a token is that token
  bool add_bos = false;        // llama.cpp's default for add_bos_token
};

const std::vector<PreTokenizerKind>& PreTokenizerKinds() {
  static const auto* kinds = new std::vector<PreTokenizerKind>{
      // llama.cpp's own default (a file whose converter knew no better).
      {{"default", ""},
       {R"([\p{P}\$\+<=>\^~\|]+)",
        R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))",
        R"(\p{N}+)", R"([0-9][0-9][0-9])"}},
      // Llama 3's tokenizer.json (and LFM2's, which llama.cpp treats as it).
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral", "lfm2"},
       {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
       false, true, true},
      // Qwen 2's: Llama 3's with one digit at a time.
      {{"qwen2", "deepseek-r1-qwen"},
       {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      // Qwen3.5's: Qwen 2's with combining marks (\p{M}) kept in letter runs
      // and out of punctuation runs. As llama.cpp, without the NFC normalizer
      // Qwen3.5's tokenizer.json has.
      {{"qwen35"},
       {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      // o200k (gpt-oss; llama.cpp's LLAMA_VOCAB_PRE_TYPE_GPT4O): upper-case
      // runs apart from lower-case ones, by the letters' categories.
      {{"gpt-4o", "o200k"},
       {R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      // StarCoder's and SmolLM's: Digits(individual_digits), then GPT-2's.
      {{"smollm", "starcoder", "refact", "codeshell", "exaone", "minerva"}, {R"(\p{N})"}, true},
      // GPT-2's ByteLevel alone.
      {{"gpt2", "gpt-2", "phi-2", "mpt", "olmo", "jais", "jina-es", "jina-de", "jina-v2-es",
        "jina-v2-de"},
       {}, true},
  };
  return *kinds;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::FromGgufVocab(const GgufVocab& v,
                                                                       absl::string_view what) {
  auto err = [&](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", parts...));
  };
  const bool spm = v.model == "llama";
  // Gemma 4's: BPE merges over raw UTF-8 with SentencePiece's spaces (U+2581)
  // and byte tokens, as llama.cpp runs it.
  const bool spm_bpe = v.model == "gemma4";
  if (!spm && !spm_bpe && v.model != "gpt2") {
    return err("tokenizer.ggml.model \"", v.model,
               "\" is not supported (gpt2: byte-level BPE; llama: SentencePiece; gemma4: SentencePiece-style BPE)");
  }
  const int64_t n = static_cast<int64_t>(v.tokens.size());
  if (n == 0 || n > kMaxTokens) return err("tokenizer.ggml.tokens holds ", n, " tokens");
  if (!v.types.empty() && static_cast<int64_t>(v.types.size()) != n) {
    return err("tokenizer.ggml.token_type has ", v.types.size(), " entries for ", n, " tokens");
  }
  if (spm && static_cast<int64_t>(v.scores.size()) != n) {
    return err("tokenizer.ggml.scores has ", v.scores.size(), " entries for ", n,
               " tokens (a SentencePiece vocabulary needs one per token)");
  }
  for (auto [key, id] : {std::pair{"bos_token_id", v.bos_id}, std::pair{"eos_token_id", v.eos_id},
                         std::pair{"unknown_token_id", v.unk_id}}) {
    if (id >= n) return err("tokenizer.ggml.", key, " ", id, " is outside the ", n, " tokens");
  }
  const PreTokenizerKind* pre = nullptr;
  if (!spm && !spm_bpe) {
    for (const PreTokenizerKind& k : PreTokenizerKinds()) {
      if (std::find(k.names.begin(), k.names.end(), v.pre) != k.names.end()) pre = &k;
    }
    if (pre == nullptr) {
      std::vector<std::string> known;
      for (const PreTokenizerKind& k : PreTokenizerKinds()) {
        for (const char* name : k.names) {
          if (*name != '\0') known.push_back(name);
        }
      }
      return err("tokenizer.ggml.pre \"", v.pre, "\" is not supported (known: ",
                 absl::StrJoin(known, ", "), ")");
    }
  }

  std::unique_ptr<HfTokenizer> t(new HfTokenizer());
  auto type_of = [&](int64_t id) {
    return v.types.empty() ? GgufTokenType::kNormal : static_cast<GgufTokenType>(v.types[id]);
  };
  for (int64_t id = 0; id < n; ++id) {
    // As llama.cpp: an empty token gets a name no text spells by chance, and
    // of tokens spelled alike the last is the one text maps to.
    const std::string text = v.tokens[id].empty() ? absl::StrCat("[EMPTY_", id, "]") : v.tokens[id];
    t->model_vocab_[text] = static_cast<int32_t>(id);
    const GgufTokenType type = type_of(id);
    if (type == GgufTokenType::kControl || type == GgufTokenType::kUserDefined ||
        type == GgufTokenType::kUnknown) {
      AddedToken a;
      a.id = static_cast<int32_t>(id);
      a.content = text;
      a.special = type != GgufTokenType::kUserDefined;
      a.normalized = false;
      t->added_.push_back(std::move(a));
    }
  }

  // tokenizer.ggml.merges: "a b" by rank.
  auto add_merges = [&]() -> absl::Status {
    for (size_t rank = 0; rank < v.merges.size(); ++rank) {
      const std::string& m = v.merges[rank];
      const size_t space = m.find(' ', 1);  // as llama.cpp: a pair may start with a space
      const std::string where = absl::StrCat(what, ": tokenizer.ggml.merges[", rank, "]");
      if (space == std::string::npos) return absl::InvalidArgumentError(absl::StrCat(where, " has no space"));
      FLOVER_RETURN_IF_ERROR(t->AddMerge(absl::string_view(m).substr(0, space),
                                         absl::string_view(m).substr(space + 1),
                                         static_cast<int32_t>(rank), where));
    }
    return absl::OkStatus();
  };
  if (spm) {
    // Every pair of tokens whose concatenation is a token merges into it;
    // the higher its score, the earlier. Equal scores share a rank, so the
    // leftmost pair goes first, as in sentencepiece.
    std::vector<float> distinct(v.scores);
    std::sort(distinct.begin(), distinct.end(), std::greater<float>());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    for (const auto& [text, id] : t->model_vocab_) {
      const int32_t rank = static_cast<int32_t>(
          std::lower_bound(distinct.begin(), distinct.end(), v.scores[id], std::greater<float>()) -
          distinct.begin());
      for (size_t k = 1; k < text.size(); ++k) {
        if ((static_cast<unsigned char>(text[k]) & 0xC0) == 0x80) continue;  // inside a character
        const absl::string_view left = absl::string_view(text).substr(0, k),
                                right = absl::string_view(text).substr(k);
        if (!t->model_vocab_.contains(left) || !t->model_vocab_.contains(right)) continue;
        FLOVER_RETURN_IF_ERROR(t->AddMerge(left, right, rank, what));
      }
    }
    t->byte_fallback_ = true;
    t->fuse_unk_ = true;
    t->unk_id_ = v.unk_id;
    const bool prefix = v.add_space_prefix.value_or(true);
    const std::string kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space
    if (prefix) t->normalizer_.push_back({NormalizerStep::kPrepend, kSpace, ""});
    t->normalizer_.push_back({NormalizerStep::kReplace, " ", kSpace});
    t->has_decoder_ = true;
    DecoderStep replace{DecoderStep::kReplace, kSpace, " "};
    t->decoder_ = {replace, DecoderStep{DecoderStep::kByteFallback}, DecoderStep{DecoderStep::kFuse}};
    if (prefix) {
      DecoderStep strip{DecoderStep::kStrip};
      strip.strip_char = U' ';
      strip.strip_start = 1;
      t->decoder_.push_back(strip);
    }
  } else if (spm_bpe) {
    // llama.cpp's gemma4: spaces as U+2581 (no prefix unless the file asks),
    // the text cut into runs of newlines and runs of the rest, a run of
    // newlines that is a token taken whole, merges by rank, byte tokens for
    // what the vocabulary lacks.
    FLOVER_RETURN_IF_ERROR(add_merges());
    t->byte_fallback_ = true;
    t->unk_id_ = v.unk_id;
    t->whole_newline_runs_ = true;
    const std::string kSpace = "\xE2\x96\x81";
    if (v.add_space_prefix.value_or(false)) t->normalizer_.push_back({NormalizerStep::kPrepend, kSpace, ""});
    t->normalizer_.push_back({NormalizerStep::kReplace, " ", kSpace});
    PreTokenizerStep split;
    split.kind = PreTokenizerStep::kSplit;
    auto re = SplitRegex::Compile(R"([^\n]+|[\n]+)");
    if (!re.ok()) return re.status();
    split.regex = std::make_shared<const SplitRegex>(std::move(*re));
    split.behavior = PreTokenizerStep::kIsolated;
    t->pre_tokenizer_.push_back(std::move(split));
    t->has_decoder_ = true;
    t->decoder_ = {DecoderStep{DecoderStep::kReplace, kSpace, " "}, DecoderStep{DecoderStep::kByteFallback},
                   DecoderStep{DecoderStep::kFuse}};
  } else {
    FLOVER_RETURN_IF_ERROR(add_merges());
    t->ignore_merges_ = pre->ignore_merges;
    for (const char* pattern : pre->splits) {
      PreTokenizerStep split;
      split.kind = PreTokenizerStep::kSplit;
      auto re = SplitRegex::Compile(pattern);
      if (!re.ok()) return re.status();  // our own patterns: they compile
      split.regex = std::make_shared<const SplitRegex>(std::move(*re));
      split.behavior = PreTokenizerStep::kIsolated;
      t->pre_tokenizer_.push_back(std::move(split));
    }
    PreTokenizerStep byte_level;
    byte_level.kind = PreTokenizerStep::kByteLevel;
    byte_level.use_regex = pre->gpt2_regex;
    t->pre_tokenizer_.push_back(std::move(byte_level));
    t->has_decoder_ = true;
    t->decoder_ = {DecoderStep{DecoderStep::kByteLevel}};
  }

  const bool add_bos = v.add_bos.value_or(spm || spm_bpe || pre->add_bos);
  const bool add_eos = v.add_eos.value_or(false);
  if (add_bos) {
    if (v.bos_id < 0) return err("add_bos_token is set but the file names no tokenizer.ggml.bos_token_id");
    t->template_before_ = {v.bos_id};
  }
  if (add_eos) {
    if (v.eos_id < 0) return err("add_eos_token is set but the file names no tokenizer.ggml.eos_token_id");
    t->template_after_ = {v.eos_id};
  }
  FLOVER_RETURN_IF_ERROR(t->Finish(what));
  return t;
}

}  // namespace flover
