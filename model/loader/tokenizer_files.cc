#include "model/loader/tokenizer_files.h"

#include "absl/strings/str_cat.h"
#include "util/file_util.h"
#include "util/json.h"

namespace flover {

absl::StatusOr<std::shared_ptr<const HfTokenizer>> LoadDirectoryTokenizer(const std::string& dir,
                                                                         int model_vocab_size) {
  absl::StatusOr<std::unique_ptr<HfTokenizer>> tokenizer;
  const std::string json = dir + "/tokenizer.json";
  const std::string vocab = dir + "/vocab.json", merges = dir + "/merges.txt";
  if (FileExists(json)) {
    tokenizer = HfTokenizer::LoadFile(json);
  } else if (FileExists(vocab) != FileExists(merges)) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, ": a tokenizer needs both vocab.json and merges.txt, found only one"));
  } else if (FileExists(vocab)) {
    tokenizer = HfTokenizer::LoadGpt2Files(vocab, merges);
  } else {
    return std::shared_ptr<const HfTokenizer>();
  }
  if (!tokenizer.ok()) return tokenizer.status();
  if ((*tokenizer)->vocab_size() > model_vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, ": the tokenizer has ", (*tokenizer)->vocab_size(),
        " tokens but the model's vocab_size is ", model_vocab_size));
  }
  return std::shared_ptr<const HfTokenizer>(std::move(*tokenizer));
}

absl::StatusOr<std::vector<int32_t>> ResolveEosIds(const std::string& dir,
                                                   std::vector<int32_t> config_eos,
                                                   const HfTokenizer* tokenizer,
                                                   int model_vocab_size) {
  const std::string generation = dir + "/generation_config.json";
  if (FileExists(generation)) {
    auto text = ReadFile(generation);
    if (!text.ok()) return text.status();
    auto doc = ParseJsonObject(*text, generation);
    if (!doc.ok()) return doc.status();
    std::vector<int32_t> ids;
    if (auto st = JsonIntListField(*doc, "eos_token_id", 0, model_vocab_size - 1, generation, &ids);
        !st.ok()) {
      return st;
    }
    if (!ids.empty()) return ids;
  }
  if (!config_eos.empty()) return config_eos;
  const std::string tok_config = dir + "/tokenizer_config.json";
  if (tokenizer == nullptr || !FileExists(tok_config)) return config_eos;
  auto text = ReadFile(tok_config);
  if (!text.ok()) return text.status();
  auto doc = ParseJsonObject(*text, tok_config);
  if (!doc.ok()) return doc.status();
  auto it = doc->fields().find("eos_token");
  if (it == doc->fields().end()) return config_eos;
  // A string, or an AddedToken object with its "content".
  const google::protobuf::Value* v = &it->second;
  if (v->has_struct_value()) {
    auto c = v->struct_value().fields().find("content");
    v = c == v->struct_value().fields().end() ? nullptr : &c->second;
  }
  if (v == nullptr || !v->has_string_value()) {
    return absl::InvalidArgumentError(absl::StrCat(tok_config, ": eos_token must be a string"));
  }
  const int32_t id = tokenizer->TokenId(v->string_value());
  if (id < 0 || id >= model_vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        tok_config, ": eos_token '", v->string_value(), "' is not in the vocabulary"));
  }
  return std::vector<int32_t>{id};
}

}  // namespace flover
