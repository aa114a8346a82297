#include "model/loader/gguf_tokenizer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace flover {
namespace {

// An optional key: absent is fine, present with the wrong type is not.
absl::Status OptionalString(const GgufFile& f, const char* key, std::string* out) {
  auto v = f.GetString(key);
  if (absl::IsNotFound(v.status())) return absl::OkStatus();
  if (!v.ok()) return v.status();
  *out = std::move(*v);
  return absl::OkStatus();
}

// An optional token id: absent is -1; present, an integer in [0, 2^31).
absl::Status OptionalId(const GgufFile& f, const char* key, int32_t* out) {
  auto v = f.GetInt(key);
  if (absl::IsNotFound(v.status())) return absl::OkStatus();
  if (!v.ok()) return v.status();
  if (*v < 0 || *v > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(f.name(), ": ", key, " ", *v, " is not a token id"));
  }
  *out = static_cast<int32_t>(*v);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GgufVocab> ReadGgufVocab(const GgufFile& f) {
  GgufVocab v;
  auto tokens = f.GetStrings("tokenizer.ggml.tokens");
  if (!tokens.ok()) return tokens.status();
  v.tokens = **tokens;
  auto model = f.GetString("tokenizer.ggml.model");
  if (!model.ok()) return model.status();
  v.model = *model;
  if (auto st = OptionalString(f, "tokenizer.ggml.pre", &v.pre); !st.ok()) return st;
  if (auto types = f.GetInts("tokenizer.ggml.token_type"); types.ok()) {
    v.types.assign((*types)->begin(), (*types)->end());
  } else if (!absl::IsNotFound(types.status())) {
    return types.status();
  }
  if (auto scores = f.GetFloats("tokenizer.ggml.scores"); scores.ok()) {
    v.scores.assign((*scores)->begin(), (*scores)->end());
  } else if (!absl::IsNotFound(scores.status())) {
    return scores.status();
  }
  if (auto merges = f.GetStrings("tokenizer.ggml.merges"); merges.ok()) {
    v.merges = **merges;
  } else if (!absl::IsNotFound(merges.status())) {
    return merges.status();
  }
  for (auto [key, out] : {std::pair{"tokenizer.ggml.bos_token_id", &v.bos_id},
                          std::pair{"tokenizer.ggml.eos_token_id", &v.eos_id},
                          std::pair{"tokenizer.ggml.unknown_token_id", &v.unk_id}}) {
    if (auto st = OptionalId(f, key, out); !st.ok()) return st;
  }
  for (auto [key, out] : {std::pair{"tokenizer.ggml.add_bos_token", &v.add_bos},
                          std::pair{"tokenizer.ggml.add_eos_token", &v.add_eos},
                          std::pair{"tokenizer.ggml.add_space_prefix", &v.add_space_prefix}}) {
    auto b = f.GetBool(key);
    if (b.ok()) {
      *out = *b;
    } else if (!absl::IsNotFound(b.status())) {
      return b.status();
    }
  }
  return v;
}

absl::StatusOr<GgufText> ReadGgufText(const GgufFile& f, int model_vocab_size) {
  GgufText text;
  if (auto st = OptionalString(f, "tokenizer.chat_template", &text.chat_template); !st.ok()) {
    return st;
  }
  auto vocab = ReadGgufVocab(f);
  if (absl::IsNotFound(vocab.status()) && f.Find("tokenizer.ggml.tokens") == nullptr) {
    return text;  // token ids only
  }
  if (!vocab.ok()) return vocab.status();
  if (static_cast<int64_t>(vocab->tokens.size()) > model_vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.name(), ": tokenizer.ggml.tokens holds ", vocab->tokens.size(),
        " tokens, more than the model's ", model_vocab_size, " embedding rows"));
  }
  auto tokenizer = HfTokenizer::FromGgufVocab(*vocab, f.name());
  if (!tokenizer.ok()) return tokenizer.status();
  text.tokenizer = std::move(*tokenizer);
  text.bos_id = vocab->bos_id;
  int32_t eot = -1, eom = -1;
  for (auto [key, out] : {std::pair{"tokenizer.ggml.eot_token_id", &eot},
                          std::pair{"tokenizer.ggml.eom_token_id", &eom}}) {
    if (auto st = OptionalId(f, key, out); !st.ok()) return st;
  }
  // gpt-oss's harmony (llama.cpp's converter writes <|return|> as the EOS):
  // a reply also ends at <|call|>, a tool call's end, as llama.cpp ends it
  // (<|end|>, between the analysis and the answer, does not end one).
  // Gemma 4: a turn ends at <turn|>, and a turn of tool calls at
  // <|tool_response>, where the tools' results are to come (llama.cpp ends
  // both; its converter writes the markers as user-defined tokens).
  int32_t call = -1, turn_end = -1, tool_response = -1;
  const auto find = [&](const char* text, bool user_defined) -> int32_t {
    for (size_t i = 0; i < vocab->tokens.size(); ++i) {
      const int32_t type = i < vocab->types.size() ? vocab->types[i] : -1;
      const bool marked = type == static_cast<int32_t>(GgufTokenType::kControl) ||
                          (user_defined && type == static_cast<int32_t>(GgufTokenType::kUserDefined));
      if (marked && vocab->tokens[i] == text) return static_cast<int32_t>(i);
    }
    return -1;
  };
  if (vocab->eos_id >= 0 && find("<|return|>", false) == vocab->eos_id) call = find("<|call|>", false);
  if (vocab->model == "gemma4") {
    turn_end = find("<turn|>", true);
    tool_response = find("<|tool_response>", true);
  }
  for (int32_t id : {vocab->eos_id, eot, eom, call, turn_end, tool_response}) {
    if (id < 0) continue;
    if (id >= model_vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(f.name(), ": end-of-sequence id ", id, " is outside the vocabulary"));
    }
    if (std::find(text.eos_ids.begin(), text.eos_ids.end(), id) == text.eos_ids.end()) {
      text.eos_ids.push_back(id);
    }
  }
  return text;
}

}  // namespace flover
