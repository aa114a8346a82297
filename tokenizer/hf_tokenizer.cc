// HfTokenizer, part 1 of 4: reading tokenizer.json (and GPT-2's vocab.json
// + merges.txt) into the model, the pipeline's steps and the added tokens,
// with errors that name the part of the file. The other parts:
// hf_pretokenize.cc, hf_bpe.cc, hf_decode.cc.
#include "tokenizer/hf_tokenizer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "tokenizer/hf_tokenizer_internal.h"
#include "tokenizer/unicode.h"
#include "util/file_util.h"
#include "util/json.h"
#include "util/status_macros.h"

namespace flover {
namespace hf_internal {

const ByteSymbols& Bytes() {
  static const ByteSymbols* symbols = new ByteSymbols();
  return *symbols;
}

const SplitRegex& Gpt2Regex() {
  static const SplitRegex* re = new SplitRegex(*SplitRegex::Compile(kGpt2Pattern));
  return *re;
}

// A byte-level token's raw bytes; a token with a character outside the byte
// alphabet stands for its own UTF-8 (the library's ByteLevel decoder).
std::string ByteLevelBytes(absl::string_view token) {
  auto chars = DecodeUtf8(token);
  if (!chars.ok()) return std::string(token);
  std::string out;
  for (const Utf8Char& c : *chars) {
    auto it = Bytes().byte_of.find(c.cp);
    if (it == Bytes().byte_of.end()) return std::string(token);
    out += static_cast<char>(it->second);
  }
  return out;
}

// "<0xNN>" -> the byte, as the ByteFallback decoder reads it.
bool ByteToken(absl::string_view t, uint8_t* byte) {
  if (t.size() != 6 || !absl::StartsWith(t, "<0x") || t[5] != '>') return false;
  int v = 0;
  for (char h : t.substr(3, 2)) {
    const int d = h >= '0' && h <= '9'   ? h - '0'
                  : h >= 'a' && h <= 'f' ? h - 'a' + 10
                  : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                         : -1;
    if (d < 0) return false;
    v = v * 16 + d;
  }
  *byte = static_cast<uint8_t>(v);
  return true;
}

}  // namespace hf_internal

namespace {

using hf_internal::Piece;
using hf_internal::kMaxVocab;
using hf_internal::kEndOfText;
using hf_internal::Bytes;
using hf_internal::ByteLevelBytes;
using hf_internal::ByteToken;
using hf_internal::PairKey;
using google::protobuf::ListValue;
using google::protobuf::Struct;
using google::protobuf::Value;

// A JSON object's field; null when absent or JSON null.
const Value* Get(const Struct& s, absl::string_view key) {
  auto it = s.fields().find(std::string(key));
  if (it == s.fields().end() || it->second.kind_case() == Value::kNullValue) return nullptr;
  return &it->second;
}

// Reads one part of the file with errors that name it.
class PartReader {
 public:
  PartReader(absl::string_view what) : what_(what) {}

  absl::Status Error(absl::string_view part, absl::string_view msg) const {
    return absl::InvalidArgumentError(absl::StrCat(what_, ": ", part, ": ", msg));
  }
  absl::StatusOr<const Struct*> Object(const Value& v, absl::string_view part) const {
    if (v.kind_case() != Value::kStructValue) return Error(part, "must be an object");
    return &v.struct_value();
  }
  absl::StatusOr<std::string> Type(const Struct& s, absl::string_view part) const {
    const Value* t = Get(s, "type");
    if (t == nullptr || t->kind_case() != Value::kStringValue) {
      return Error(part, "has no \"type\"");
    }
    return t->string_value();
  }
  absl::StatusOr<std::string> String(const Struct& s, absl::string_view key,
                                     absl::string_view part) const {
    const Value* v = Get(s, key);
    if (v == nullptr || v->kind_case() != Value::kStringValue) {
      return Error(part, absl::StrCat("\"", key, "\" must be a string"));
    }
    return v->string_value();
  }
  absl::StatusOr<const ListValue*> List(const Struct& s, absl::string_view key,
                                        absl::string_view part) const {
    const Value* v = Get(s, key);
    if (v == nullptr || v->kind_case() != Value::kListValue) {
      return Error(part, absl::StrCat("\"", key, "\" must be a list"));
    }
    return &v->list_value();
  }
  // {"String": s} or {"Regex": r}: sets exactly one of *literal, *regex.
  absl::Status Pattern(const Struct& s, absl::string_view part, std::string* literal,
                       std::string* regex) const {
    const Value* p = Get(s, "pattern");
    if (p == nullptr || p->kind_case() != Value::kStructValue) {
      return Error(part, "\"pattern\" must be {\"String\": ...} or {\"Regex\": ...}");
    }
    if (const Value* v = Get(p->struct_value(), "String"); v && v->has_string_value()) {
      *literal = v->string_value();
      return absl::OkStatus();
    }
    if (const Value* v = Get(p->struct_value(), "Regex"); v && v->has_string_value()) {
      *regex = v->string_value();
      return absl::OkStatus();
    }
    return Error(part, "\"pattern\" must be {\"String\": ...} or {\"Regex\": ...}");
  }

 private:
  std::string what_;
};


// Flattens nested Sequences of parts ("normalizers", "pretokenizers", ...).
absl::Status Flatten(const PartReader& r, const Value& v, absl::string_view part,
                     absl::string_view list_key, std::vector<const Struct*>* out) {
  auto obj = r.Object(v, part);
  if (!obj.ok()) return obj.status();
  auto type = r.Type(**obj, part);
  if (!type.ok()) return type.status();
  if (*type != "Sequence") {
    out->push_back(*obj);
    return absl::OkStatus();
  }
  auto list = r.List(**obj, list_key, part);
  if (!list.ok()) return list.status();
  for (const Value& item : (*list)->values()) {
    FLOVER_RETURN_IF_ERROR(Flatten(r, item, part, list_key, out));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<HfTokenizer::NormalizerStep>> ParseNormalizer(const PartReader& r,
                                                                         const Value* v) {
  using Step = HfTokenizer::NormalizerStep;
  std::vector<Step> steps;
  if (v == nullptr) return steps;
  std::vector<const Struct*> parts;
  FLOVER_RETURN_IF_ERROR(Flatten(r, *v, "normalizer", "normalizers", &parts));
  for (const Struct* p : parts) {
    const std::string type = *r.Type(*p, "normalizer");
    if (type == "Prepend") {
      auto s = r.String(*p, "prepend", "normalizer Prepend");
      if (!s.ok()) return s.status();
      steps.push_back({Step::kPrepend, *s, ""});
    } else if (type == "Replace") {
      std::string literal, regex;
      FLOVER_RETURN_IF_ERROR(r.Pattern(*p, "normalizer Replace", &literal, &regex));
      if (!regex.empty() || literal.empty()) {
        return r.Error("normalizer Replace", "only a non-empty String pattern is supported");
      }
      auto content = r.String(*p, "content", "normalizer Replace");
      if (!content.ok()) return content.status();
      steps.push_back({Step::kReplace, literal, *content});
    } else if (type == "NFC") {  // Qwen 2 and 3
      steps.push_back({Step::kNfc, "", ""});
    } else {
      return r.Error("normalizer", absl::StrCat("type ", type, " is not supported"));
    }
  }
  return steps;
}

absl::StatusOr<HfTokenizer::PreTokenizerStep::Prepend> ParsePrependScheme(const PartReader& r,
                                                                           const Struct& p,
                                                                           absl::string_view part) {
  using Step = HfTokenizer::PreTokenizerStep;
  if (const Value* scheme = Get(p, "prepend_scheme")) {
    const std::string& s = scheme->string_value();
    if (s == "always") return Step::kAlways;
    if (s == "first") return Step::kFirst;
    if (s == "never") return Step::kNever;
    return r.Error(part, absl::StrCat("unknown prepend_scheme \"", s, "\""));
  }
  // Files older than prepend_scheme say add_prefix_space.
  return JsonBoolField(p, "add_prefix_space", true) ? Step::kAlways : Step::kNever;
}

absl::StatusOr<std::string> ParseReplacement(const PartReader& r, const Struct& p,
                                             absl::string_view part) {
  auto rep = r.String(p, "replacement", part);
  if (!rep.ok()) return rep.status();
  auto cps = DecodeUtf8(*rep);
  if (!cps.ok() || cps->size() != 1) return r.Error(part, "replacement must be one character");
  return *rep;
}

absl::StatusOr<std::vector<HfTokenizer::PreTokenizerStep>> ParsePreTokenizer(const PartReader& r,
                                                                             const Value* v) {
  using Step = HfTokenizer::PreTokenizerStep;
  std::vector<Step> steps;
  if (v == nullptr) return steps;
  std::vector<const Struct*> parts;
  FLOVER_RETURN_IF_ERROR(Flatten(r, *v, "pre_tokenizer", "pretokenizers", &parts));
  for (const Struct* p : parts) {
    const std::string type = *r.Type(*p, "pre_tokenizer");
    Step step;
    if (type == "ByteLevel") {
      step.kind = Step::kByteLevel;
      step.add_prefix_space = JsonBoolField(*p, "add_prefix_space", true);
      step.use_regex = JsonBoolField(*p, "use_regex", true);
    } else if (type == "Split") {
      step.kind = Step::kSplit;
      std::string regex;
      FLOVER_RETURN_IF_ERROR(r.Pattern(*p, "pre_tokenizer Split", &step.literal, &regex));
      if (step.literal.empty()) {
        auto re = SplitRegex::Compile(regex);
        if (!re.ok()) return r.Error("pre_tokenizer Split", re.status().message());
        step.regex = std::make_shared<const SplitRegex>(std::move(*re));
      }
      auto behavior = r.String(*p, "behavior", "pre_tokenizer Split");
      if (!behavior.ok()) return behavior.status();
      const std::pair<const char*, Step::Behavior> kBehaviors[] = {
          {"Isolated", Step::kIsolated},
          {"Removed", Step::kRemoved},
          {"MergedWithPrevious", Step::kMergedWithPrevious},
          {"MergedWithNext", Step::kMergedWithNext},
          {"Contiguous", Step::kContiguous}};
      bool known = false;
      for (const auto& [name, b] : kBehaviors) {
        if (*behavior == name) step.behavior = b, known = true;
      }
      if (!known) {
        return r.Error("pre_tokenizer Split", absl::StrCat("unknown behavior \"", *behavior, "\""));
      }
      step.invert = JsonBoolField(*p, "invert", false);
    } else if (type == "Digits") {
      // Each digit (individual_digits) or each run of digits split out,
      // isolated: Rust's char::is_numeric is \p{N}.
      step.kind = Step::kSplit;
      const bool individual = JsonBoolField(*p, "individual_digits", false);
      auto re = SplitRegex::Compile(individual ? R"(\p{N})" : R"(\p{N}+)");
      if (!re.ok()) return re.status();
      step.regex = std::make_shared<const SplitRegex>(std::move(*re));
      step.behavior = Step::kIsolated;
    } else if (type == "Metaspace") {
      step.kind = Step::kMetaspace;
      auto rep = ParseReplacement(r, *p, "pre_tokenizer Metaspace");
      if (!rep.ok()) return rep.status();
      step.replacement = *rep;
      auto scheme = ParsePrependScheme(r, *p, "pre_tokenizer Metaspace");
      if (!scheme.ok()) return scheme.status();
      step.prepend = *scheme;
      step.split = JsonBoolField(*p, "split", true);
    } else {
      return r.Error("pre_tokenizer", absl::StrCat("type ", type, " is not supported"));
    }
    steps.push_back(std::move(step));
  }
  return steps;
}

absl::StatusOr<std::vector<HfTokenizer::DecoderStep>> ParseDecoder(const PartReader& r,
                                                                   const Value& v) {
  using Step = HfTokenizer::DecoderStep;
  std::vector<Step> steps;
  std::vector<const Struct*> parts;
  FLOVER_RETURN_IF_ERROR(Flatten(r, v, "decoder", "decoders", &parts));
  for (const Struct* p : parts) {
    const std::string type = *r.Type(*p, "decoder");
    Step step;
    if (type == "ByteLevel") {
      step.kind = Step::kByteLevel;
    } else if (type == "Replace") {
      step.kind = Step::kReplace;
      std::string regex;
      FLOVER_RETURN_IF_ERROR(r.Pattern(*p, "decoder Replace", &step.a, &regex));
      if (!regex.empty() || step.a.empty()) {
        return r.Error("decoder Replace", "only a non-empty String pattern is supported");
      }
      auto content = r.String(*p, "content", "decoder Replace");
      if (!content.ok()) return content.status();
      step.b = *content;
    } else if (type == "ByteFallback") {
      step.kind = Step::kByteFallback;
    } else if (type == "Fuse") {
      step.kind = Step::kFuse;
    } else if (type == "Strip") {
      step.kind = Step::kStrip;
      auto content = r.String(*p, "content", "decoder Strip");
      if (!content.ok()) return content.status();
      auto cps = DecodeUtf8(*content);
      if (!cps.ok() || cps->size() != 1) return r.Error("decoder Strip", "content must be one character");
      step.strip_char = (*cps)[0].cp;
      for (auto [key, out] : {std::pair{"start", &step.strip_start}, {"stop", &step.strip_stop}}) {
        auto n = JsonIntField(*p, key, 0, 1 << 20, "decoder Strip");
        if (!n.ok()) return n.status();
        *out = *n;
      }
    } else if (type == "Metaspace") {
      step.kind = Step::kMetaspace;
      auto rep = ParseReplacement(r, *p, "decoder Metaspace");
      if (!rep.ok()) return rep.status();
      step.a = *rep;
      auto scheme = ParsePrependScheme(r, *p, "decoder Metaspace");
      if (!scheme.ok()) return scheme.status();
      step.metaspace_prepend = *scheme != HfTokenizer::PreTokenizerStep::kNever;
    } else {
      return r.Error("decoder", absl::StrCat("type ", type, " is not supported"));
    }
    steps.push_back(std::move(step));
  }
  return steps;
}

}  // namespace

namespace {

// Sets the model vocabulary from a JSON object of token -> id, ids in
// [0, max_id]; `where` names it in errors.
absl::Status ReadVocab(const Struct& vocab, int64_t max_id, absl::string_view where,
                       absl::flat_hash_map<std::string, int32_t>* out) {
  absl::flat_hash_map<int32_t, const std::string*> by_id;
  for (const auto& [token, value] : vocab.fields()) {
    auto id = JsonToInt(value, absl::StrCat("vocab id of '", token, "'"), 0, max_id);
    if (!id.ok()) return absl::InvalidArgumentError(absl::StrCat(where, ": ", id.status().message()));
    auto [it, fresh] = by_id.emplace(static_cast<int32_t>(*id), &token);
    if (!fresh) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": id ", *id, " is used twice ('",
                                                     *it->second, "' and '", token, "')"));
    }
    (*out)[token] = static_cast<int32_t>(*id);
  }
  if (out->empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": empty vocabulary"));
  return absl::OkStatus();
}

}  // namespace

absl::Status HfTokenizer::AddMerge(absl::string_view a, absl::string_view b, int32_t rank,
                                   absl::string_view where) {
  auto left = model_vocab_.find(a), right = model_vocab_.find(b);
  auto merged = model_vocab_.find(absl::StrCat(a, b));
  if (left == model_vocab_.end() || right == model_vocab_.end() || merged == model_vocab_.end()) {
    const bool halves = left != model_vocab_.end() && right != model_vocab_.end();
    return absl::InvalidArgumentError(absl::StrCat(
        where, halves ? " makes '" : " uses '", halves ? absl::StrCat(a, b) : (left == model_vocab_.end() ? a : b),
        "', which is not in the vocabulary"));
  }
  // A repeated pair keeps its last rank, as in the library.
  merges_[PairKey(left->second, right->second)] = {rank, merged->second};
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::FromJson(absl::string_view json,
                                                                   absl::string_view what) {
  auto doc = ParseJsonObject(json, what);
  if (!doc.ok()) return doc.status();
  const PartReader r(what);
  std::unique_ptr<HfTokenizer> t(new HfTokenizer());

  // The model.
  const Value* model_value = Get(*doc, "model");
  if (model_value == nullptr) return r.Error("model", "missing");
  auto model = r.Object(*model_value, "model");
  if (!model.ok()) return model.status();
  const Struct& m = **model;
  if (const Value* type = Get(m, "type"); type != nullptr && type->string_value() != "BPE") {
    return r.Error("model", absl::StrCat("type ", type->string_value(),
                                         " is not supported (Flover reads BPE models)"));
  }
  if (const Value* d = Get(m, "dropout");
      d != nullptr && !(d->kind_case() == Value::kNumberValue && d->number_value() == 0)) {
    return r.Error("model", "BPE dropout is not supported (it makes encoding random)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const Value* v = Get(m, key); v != nullptr && !v->string_value().empty()) {
      return r.Error("model", absl::StrCat(key, " is not supported"));
    }
  }
  const Value* vocab = Get(m, "vocab");
  if (vocab == nullptr || vocab->kind_case() != Value::kStructValue) {
    return r.Error("model", "\"vocab\" must be an object");
  }
  FLOVER_RETURN_IF_ERROR(ReadVocab(vocab->struct_value(), kMaxVocab - 1,
                                   absl::StrCat(what, ": model.vocab"), &t->model_vocab_));
  auto merges = r.List(m, "merges", "model");
  if (!merges.ok()) return merges.status();
  int32_t rank = 0;
  for (const Value& item : (*merges)->values()) {
    const std::string where = absl::StrCat(what, ": model.merges[", rank, "]");
    std::string a, b;
    if (item.kind_case() == Value::kStringValue) {
      std::vector<std::string> parts = absl::StrSplit(item.string_value(), ' ');
      if (parts.size() != 2) {
        return absl::InvalidArgumentError(absl::StrCat(where, " is not two tokens separated by a space"));
      }
      a = parts[0], b = parts[1];
    } else if (item.kind_case() == Value::kListValue && item.list_value().values_size() == 2 &&
               item.list_value().values(0).has_string_value() &&
               item.list_value().values(1).has_string_value()) {
      a = item.list_value().values(0).string_value();
      b = item.list_value().values(1).string_value();
    } else {
      return absl::InvalidArgumentError(absl::StrCat(where, " is not \"a b\" or [\"a\", \"b\"]"));
    }
    FLOVER_RETURN_IF_ERROR(t->AddMerge(a, b, rank++, where));
  }
  if (const Value* unk = Get(m, "unk_token")) {
    auto it = t->model_vocab_.find(unk->string_value());
    if (it == t->model_vocab_.end()) {
      return r.Error("model", absl::StrCat("unk_token '", unk->string_value(), "' is not in the vocabulary"));
    }
    t->unk_id_ = it->second;
  }
  t->fuse_unk_ = JsonBoolField(m, "fuse_unk", false);
  t->byte_fallback_ = JsonBoolField(m, "byte_fallback", false);
  t->ignore_merges_ = JsonBoolField(m, "ignore_merges", false);

  // Added tokens.
  if (const Value* added = Get(*doc, "added_tokens")) {
    if (added->kind_case() != Value::kListValue) return r.Error("added_tokens", "must be a list");
    for (const Value& item : added->list_value().values()) {
      auto obj = r.Object(item, "added_tokens");
      if (!obj.ok()) return obj.status();
      AddedToken a;
      auto id = JsonIntField(**obj, "id", 0, kMaxVocab - 1, absl::StrCat(what, ": added_tokens"));
      if (!id.ok()) return id.status();
      a.id = *id;
      auto content = r.String(**obj, "content", "added_tokens");
      if (!content.ok()) return content.status();
      if (content->empty()) return r.Error("added_tokens", absl::StrCat("token ", a.id, " is empty"));
      a.content = *content;
      a.single_word = JsonBoolField(**obj, "single_word", false);
      a.lstrip = JsonBoolField(**obj, "lstrip", false);
      a.rstrip = JsonBoolField(**obj, "rstrip", false);
      a.normalized = JsonBoolField(**obj, "normalized", true);
      a.special = JsonBoolField(**obj, "special", false);
      t->added_.push_back(std::move(a));
    }
  }

  // The pipeline around the model.
  auto normalizer = ParseNormalizer(r, Get(*doc, "normalizer"));
  if (!normalizer.ok()) return normalizer.status();
  t->normalizer_ = std::move(*normalizer);
  auto pre = ParsePreTokenizer(r, Get(*doc, "pre_tokenizer"));
  if (!pre.ok()) return pre.status();
  t->pre_tokenizer_ = std::move(*pre);
  if (const Value* decoder = Get(*doc, "decoder")) {
    auto steps = ParseDecoder(r, *decoder);
    if (!steps.ok()) return steps.status();
    t->has_decoder_ = true;
    t->decoder_ = std::move(*steps);
  }
  if (const Value* post = Get(*doc, "post_processor")) {
    FLOVER_RETURN_IF_ERROR(t->ParsePostProcessor(*post, what));
  }
  FLOVER_RETURN_IF_ERROR(t->Finish(what));
  return t;
}

absl::Status HfTokenizer::ParsePostProcessor(const Value& v, absl::string_view what) {
  const PartReader r(what);
  std::vector<const Struct*> parts;
  FLOVER_RETURN_IF_ERROR(Flatten(r, v, "post_processor", "processors", &parts));
  bool have_template = false;
  for (const Struct* p : parts) {
    const std::string type = *r.Type(*p, "post_processor");
    if (type == "ByteLevel") continue;  // offsets only
    if (type != "TemplateProcessing") {
      return r.Error("post_processor", absl::StrCat("type ", type, " is not supported"));
    }
    if (have_template) return r.Error("post_processor", "more than one TemplateProcessing");
    have_template = true;
    auto single = r.List(*p, "single", "post_processor TemplateProcessing");
    if (!single.ok()) return single.status();
    const Value* specials = Get(*p, "special_tokens");
    bool after = false;
    for (const Value& item : (*single)->values()) {
      auto obj = r.Object(item, "post_processor TemplateProcessing");
      if (!obj.ok()) return obj.status();
      if (Get(**obj, "Sequence") != nullptr) {
        if (after) return r.Error("post_processor TemplateProcessing", "the single template has two sequences");
        after = true;
        continue;
      }
      const Value* sp = Get(**obj, "SpecialToken");
      const Value* name = sp ? Get(sp->struct_value(), "id") : nullptr;
      if (name == nullptr || !name->has_string_value()) {
        return r.Error("post_processor TemplateProcessing", "template items must be Sequence or SpecialToken");
      }
      const Value* def = specials && specials->has_struct_value()
                             ? Get(specials->struct_value(), name->string_value())
                             : nullptr;
      const Value* ids = def && def->has_struct_value() ? Get(def->struct_value(), "ids") : nullptr;
      if (ids == nullptr || !ids->has_list_value()) {
        return r.Error("post_processor TemplateProcessing",
                       absl::StrCat("special token '", name->string_value(), "' has no ids"));
      }
      for (const Value& id : ids->list_value().values()) {
        auto n = JsonToInt(id, name->string_value(), 0, kMaxVocab - 1);
        if (!n.ok()) return r.Error("post_processor TemplateProcessing", n.status().message());
        (after ? template_after_ : template_before_).push_back(static_cast<int32_t>(*n));
      }
    }
    if (!after) return r.Error("post_processor TemplateProcessing", "the single template has no $A");
  }
  return absl::OkStatus();
}

absl::Status HfTokenizer::Finish(absl::string_view what) {
  int64_t size = 0;
  for (const auto& [token, id] : model_vocab_) size = std::max<int64_t>(size, id + 1);
  for (const AddedToken& a : added_) size = std::max<int64_t>(size, a.id + 1);
  tokens_.assign(size, "");
  for (const auto& [token, id] : model_vocab_) tokens_[id] = token;
  for (const AddedToken& a : added_) {
    tokens_[a.id] = a.content;  // decoding prefers the added token, as the library
    added_by_content_[a.content] = a.id;
  }
  for (int32_t id : template_before_) {
    if (id >= size) return absl::InvalidArgumentError(absl::StrCat(what, ": template id ", id, " is not in the vocabulary"));
  }
  for (int32_t id : template_after_) {
    if (id >= size) return absl::InvalidArgumentError(absl::StrCat(what, ": template id ", id, " is not in the vocabulary"));
  }
  for (int b = 0; b < 256; ++b) {
    auto it = model_vocab_.find(absl::StrFormat("<0x%02X>", b));
    byte_token_[b] = it == model_vocab_.end() ? -1 : it->second;
  }
  // Added-token patterns by first byte, longest first, per pass.
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < added_.size(); ++i) {
      if (added_[i].normalized != (pass == 1)) continue;
      std::string pattern = pass == 1 ? Normalize(added_[i].content) : added_[i].content;
      if (pattern.empty()) continue;
      added_patterns_[pass][static_cast<uint8_t>(pattern[0])].push_back(
          {std::move(pattern), static_cast<int>(i)});
    }
    for (auto& bucket : added_patterns_[pass]) {
      std::stable_sort(bucket.begin(), bucket.end(), [](const auto& x, const auto& y) {
        return x.first.size() > y.first.size();
      });
    }
  }
  // Each token's bytes as a continuation: the decoder's per-token steps.
  raw_.resize(size);
  fallback_byte_.assign(size, false);
  const bool byte_fallback_decoder =
      std::any_of(decoder_.begin(), decoder_.end(),
                  [](const DecoderStep& d) { return d.kind == DecoderStep::kByteFallback; });
  for (int64_t id = 0; id < size; ++id) {
    uint8_t unused;
    fallback_byte_[id] = byte_fallback_decoder && ByteToken(tokens_[id], &unused);
    std::string s = tokens_[id];
    for (const DecoderStep& d : decoder_) {
      uint8_t byte;
      switch (d.kind) {
        case DecoderStep::kByteLevel:
          s = ByteLevelBytes(s);
          break;
        case DecoderStep::kReplace:
          s = absl::StrReplaceAll(s, {{d.a, d.b}});
          break;
        case DecoderStep::kByteFallback:
          if (ByteToken(s, &byte)) s = std::string(1, static_cast<char>(byte));
          break;
        case DecoderStep::kMetaspace:
          s = absl::StrReplaceAll(s, {{d.a, " "}});
          break;
        case DecoderStep::kFuse:
        case DecoderStep::kStrip:
          break;  // whole-text adjustments, not a token's own bytes
      }
    }
    raw_[id] = std::move(s);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::LoadFile(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  return FromJson(*text, path);
}

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::FromGpt2Files(
    absl::string_view vocab_json, absl::string_view merges_txt, absl::string_view what) {
  auto vocab = ParseJsonObject(vocab_json, absl::StrCat(what, ": vocab.json"));
  if (!vocab.ok()) return vocab.status();
  std::unique_ptr<HfTokenizer> t(new HfTokenizer());
  // vocab.json's ids are dense: 0 .. size-1.
  FLOVER_RETURN_IF_ERROR(ReadVocab(*vocab, static_cast<int64_t>(vocab->fields_size()) - 1,
                                   absl::StrCat(what, ": vocab.json"), &t->model_vocab_));
  for (int b = 0; b < 256; ++b) {
    if (!t->model_vocab_.contains(Bytes().of_byte[b])) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": vocab.json lacks the symbol for byte ", b));
    }
  }
  int32_t rank = 0;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(merges_txt, '\n')) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && absl::StartsWith(line, "#version"))) continue;
    std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
    const std::string where = absl::StrCat(what, ": merges.txt line ", line_no);
    if (parts.size() != 2 || parts[0].empty() || parts[1].empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where, " is not two symbols separated by a space"));
    }
    FLOVER_RETURN_IF_ERROR(t->AddMerge(parts[0], parts[1], rank++, where));
  }
  if (auto it = t->model_vocab_.find(kEndOfText); it != t->model_vocab_.end()) {
    AddedToken eot;
    eot.id = it->second;
    eot.content = std::string(kEndOfText);
    eot.normalized = true;  // as GPT2TokenizerFast registers it
    eot.special = true;
    t->added_.push_back(std::move(eot));
  }
  PreTokenizerStep byte_level;
  byte_level.kind = PreTokenizerStep::kByteLevel;
  byte_level.use_regex = true;
  t->pre_tokenizer_.push_back(std::move(byte_level));
  t->has_decoder_ = true;
  DecoderStep decode;
  decode.kind = DecoderStep::kByteLevel;
  t->decoder_.push_back(decode);
  FLOVER_RETURN_IF_ERROR(t->Finish(what));
  return t;
}

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::LoadGpt2Files(
    const std::string& vocab_path, const std::string& merges_path) {
  auto vocab = ReadFile(vocab_path);
  if (!vocab.ok()) return vocab.status();
  auto merges = ReadFile(merges_path);
  if (!merges.ok()) return merges.status();
  return FromGpt2Files(*vocab, *merges, absl::StrCat(vocab_path, " + ", merges_path));
}

int32_t HfTokenizer::TokenId(absl::string_view token) const {
  if (auto it = added_by_content_.find(token); it != added_by_content_.end()) return it->second;
  if (auto it = model_vocab_.find(token); it != model_vocab_.end()) return it->second;
  return -1;
}

}  // namespace flover
