#include "model/loader/tokenizer_files.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "util/file_util.h"
#include "util/json.h"

namespace flover {
namespace {

using google::protobuf::Value;

// A special token as tokenizer_config.json writes it: a string, or an
// AddedToken object with its "content"; "" when absent or null.
absl::StatusOr<std::string> TokenText(const google::protobuf::Struct& doc, const char* key,
                                      const std::string& path) {
  auto it = doc.fields().find(key);
  if (it == doc.fields().end() || it->second.kind_case() == Value::kNullValue) return std::string();
  const Value* v = &it->second;
  if (v->has_struct_value()) {
    auto c = v->struct_value().fields().find("content");
    v = c == v->struct_value().fields().end() ? nullptr : &c->second;
  }
  if (v == nullptr || !v->has_string_value()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", key, " must be a string"));
  }
  return v->string_value();
}

// The transformers tokenizer classes that rebuild the post-processor from
// add_bos_token / add_eos_token, with their defaults: (class, bos, eos).
struct BosEosClass {
  const char* name;
  bool add_bos;
  const char* bos;  // the class's default bos_token / eos_token
  const char* eos;
};
constexpr BosEosClass kBosEosClasses[] = {
    {"LlamaTokenizer", true, "<s>", "</s>"},
    {"CodeLlamaTokenizer", true, "<s>", "</s>"},
    {"GemmaTokenizer", true, "<bos>", "<eos>"},
    {"CohereTokenizer", true, "<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>"},
    {"GPTNeoXTokenizer", false, "<|endoftext|>", "<|endoftext|>"},
};

// AutoTokenizer's class for a config.json model_type, where it is one above.
std::string ClassOfModelType(const std::string& model_type) {
  // transformers' AutoTokenizer maps Mistral and Phi-3 to Llama's class too.
  if (model_type == "llama" || model_type == "mistral" || model_type == "phi3") {
    return "LlamaTokenizer";
  }
  if (model_type == "gemma" || model_type == "gemma2") return "GemmaTokenizer";
  if (model_type == "cohere") return "CohereTokenizer";
  if (model_type == "gpt_neox") return "GPTNeoXTokenizer";
  return "";
}

}  // namespace

absl::StatusOr<TokenizerConfig> ReadTokenizerConfig(const std::string& dir) {
  TokenizerConfig c;
  const std::string path = dir + "/tokenizer_config.json";
  if (!FileExists(path)) return c;
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  auto doc = ParseJsonObject(*text, path);
  if (!doc.ok()) return doc.status();
  const auto& f = doc->fields();
  if (auto it = f.find("tokenizer_class"); it != f.end() && it->second.has_string_value()) {
    c.tokenizer_class = it->second.string_value();
    if (absl::EndsWith(c.tokenizer_class, "Fast")) c.tokenizer_class.resize(c.tokenizer_class.size() - 4);
  }
  for (auto [key, out] : {std::pair{"add_bos_token", &c.add_bos_token},
                          std::pair{"add_eos_token", &c.add_eos_token}}) {
    auto it = f.find(key);
    if (it == f.end() || it->second.kind_case() == Value::kNullValue) continue;
    if (!it->second.has_bool_value()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", key, " must be true or false"));
    }
    *out = it->second.bool_value();
  }
  for (auto [key, out] : {std::pair{"bos_token", &c.bos_token}, std::pair{"eos_token", &c.eos_token}}) {
    auto t = TokenText(*doc, key, path);
    if (!t.ok()) return t.status();
    *out = std::move(*t);
  }
  if (auto it = f.find("chat_template"); it != f.end()) {
    const Value& v = it->second;
    if (v.has_string_value()) {
      c.chat_template = v.string_value();
    } else if (v.has_list_value()) {  // [{"name": ..., "template": ...}]: the default one
      for (const Value& item : v.list_value().values()) {
        const auto& t = item.struct_value().fields();
        auto name = t.find("name"), tmpl = t.find("template");
        if (name != t.end() && name->second.string_value() == "default" && tmpl != t.end()) {
          c.chat_template = tmpl->second.string_value();
        }
      }
      if (c.chat_template.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": chat_template is a list of named templates without a \"default\""));
      }
    } else if (v.kind_case() != Value::kNullValue) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": chat_template must be a string or a list"));
    }
  }
  return c;
}

absl::StatusOr<ChatTemplateInfo> LoadDirectoryChatTemplate(const std::string& dir) {
  auto config = ReadTokenizerConfig(dir);
  if (!config.ok()) return config.status();
  ChatTemplateInfo info;
  info.bos_token = config->bos_token;
  info.eos_token = config->eos_token;
  const std::string jinja = dir + "/chat_template.jinja";
  if (FileExists(jinja)) {
    auto text = ReadFile(jinja);
    if (!text.ok()) return text.status();
    info.text = std::move(*text);
    info.source = jinja;
  } else if (!config->chat_template.empty()) {
    info.text = config->chat_template;
    info.source = dir + "/tokenizer_config.json: chat_template";
  }
  return info;
}

absl::StatusOr<std::shared_ptr<const HfTokenizer>> LoadDirectoryTokenizer(
    const std::string& dir, int model_vocab_size, const std::string& model_type) {
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
  auto config = ReadTokenizerConfig(dir);
  if (!config.ok()) return config.status();
  const std::string cls =
      config->tokenizer_class.empty() ? ClassOfModelType(model_type) : config->tokenizer_class;
  for (const BosEosClass& k : kBosEosClasses) {
    if (cls != k.name) continue;
    int32_t ids[2] = {-1, -1};
    const bool add[2] = {config->add_bos_token.value_or(k.add_bos), config->add_eos_token.value_or(false)};
    const std::string text[2] = {config->bos_token.empty() ? k.bos : config->bos_token,
                                 config->eos_token.empty() ? k.eos : config->eos_token};
    for (int i = 0; i < 2; ++i) {
      if (!add[i]) continue;
      ids[i] = (*tokenizer)->TokenId(text[i]);
      if (ids[i] < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            dir, ": ", i == 0 ? "add_bos_token" : "add_eos_token", " asks for '", text[i],
            "', which the tokenizer does not have"));
      }
    }
    (*tokenizer)->SetSpecialTokensAround(ids[0], ids[1]);
  }
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
