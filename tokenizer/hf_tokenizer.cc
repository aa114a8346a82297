#include "tokenizer/hf_tokenizer.h"

#include <algorithm>
#include <queue>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "tokenizer/unicode.h"
#include "util/file_util.h"
#include "util/json.h"
#include "util/status_macros.h"

namespace flover {
namespace {

using google::protobuf::ListValue;
using google::protobuf::Struct;
using google::protobuf::Value;
using Piece = HfTokenizer::Piece;

// Bounds that keep a hostile file from asking for absurd allocations.
constexpr int64_t kMaxVocab = 1 << 22;

// GPT-2's pre-tokenizer pattern (ByteLevel with use_regex).
constexpr absl::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr absl::string_view kEndOfText = "<|endoftext|>";

// GPT-2's bytes_to_unicode(): printable bytes stand for themselves, the rest
// for code points from U+0100 up, so that every byte is a visible symbol.
struct ByteSymbols {
  std::string of_byte[256];
  absl::flat_hash_map<char32_t, uint8_t> byte_of;
  ByteSymbols() {
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t cp = printable ? b : 256 + next++;
      AppendUtf8(cp, &of_byte[b]);
      byte_of[cp] = static_cast<uint8_t>(b);
    }
  }
};

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

bool IsWordChar(char32_t c) { return IsLetter(c) || IsNumber(c); }

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

// Byte offsets where each code point of `s` starts, plus s.size().
std::vector<size_t> CharStarts(const std::vector<Utf8Char>& cs, size_t size) {
  std::vector<size_t> starts;
  starts.reserve(cs.size() + 1);
  for (const Utf8Char& c : cs) starts.push_back(c.begin);
  starts.push_back(size);
  return starts;
}

// The library's split of one piece at (range, is_match) pairs covering it.
void ApplyBehavior(const Piece& piece, std::vector<std::pair<std::pair<size_t, size_t>, bool>> m,
                   HfTokenizer::PreTokenizerStep::Behavior behavior, bool invert,
                   std::vector<Piece>* out) {
  using Step = HfTokenizer::PreTokenizerStep;
  if (invert) {
    for (auto& [range, is_match] : m) is_match = !is_match;
  }
  // (range, remove) after the behavior.
  std::vector<std::pair<std::pair<size_t, size_t>, bool>> splits;
  bool previous = false;
  switch (behavior) {
    case Step::kIsolated:
      for (auto& [range, is_match] : m) splits.push_back({range, false});
      break;
    case Step::kRemoved:
      splits = m;
      break;
    case Step::kContiguous:
      for (auto& [range, is_match] : m) {
        if (is_match == previous && !splits.empty()) {
          splits.back().first.second = range.second;
        } else {
          splits.push_back({range, false});
        }
        previous = is_match;
      }
      break;
    case Step::kMergedWithPrevious:
      for (auto& [range, is_match] : m) {
        if (is_match && !previous && !splits.empty()) {
          splits.back().first.second = range.second;
        } else {
          splits.push_back({range, false});
        }
        previous = is_match;
      }
      break;
    case Step::kMergedWithNext:
      for (auto it = m.rbegin(); it != m.rend(); ++it) {
        if (it->second && !previous && !splits.empty()) {
          splits.back().first.first = it->first.first;
        } else {
          splits.push_back({it->first, false});
        }
        previous = it->second;
      }
      std::reverse(splits.begin(), splits.end());
      break;
  }
  for (const auto& [range, remove] : splits) {
    if (remove || range.first == range.second) continue;
    out->push_back({piece.text.substr(range.first, range.second - range.first),
                    piece.at_start && range.first == 0});
  }
}

// Covers `s` with (range, is_match) pairs at the literal's occurrences.
std::vector<std::pair<std::pair<size_t, size_t>, bool>> LiteralMatches(absl::string_view s,
                                                                      absl::string_view lit) {
  std::vector<std::pair<std::pair<size_t, size_t>, bool>> m;
  size_t prev = 0;
  for (size_t at = s.find(lit); !lit.empty() && at != absl::string_view::npos;
       at = s.find(lit, at + lit.size())) {
    if (at > prev) m.push_back({{prev, at}, false});
    m.push_back({{at, at + lit.size()}, true});
    prev = at + lit.size();
  }
  if (prev < s.size() || m.empty()) m.push_back({{prev, s.size()}, false});
  return m;
}

absl::StatusOr<std::vector<std::pair<std::pair<size_t, size_t>, bool>>> RegexMatches(
    absl::string_view s, const SplitRegex& re) {
  std::vector<std::pair<std::pair<size_t, size_t>, bool>> m;
  auto cs = DecodeUtf8(s);
  if (!cs.ok()) return cs.status();
  std::vector<char32_t> cps;
  cps.reserve(cs->size());
  for (const Utf8Char& c : *cs) cps.push_back(c.cp);
  const std::vector<size_t> at = CharStarts(*cs, s.size());
  size_t prev = 0, from = 0, b = 0, e = 0;
  while (true) {
    auto found = re.Find(cps, from, &b, &e);
    if (!found.ok()) return found.status();
    if (!*found) break;
    if (b > prev) m.push_back({{at[prev], at[b]}, false});
    m.push_back({{at[b], at[e]}, true});
    prev = from = e;
  }
  if (prev < cps.size() || m.empty()) m.push_back({{at[prev], s.size()}, false});
  return m;
}

// Ids per merge: both halves' and the result's.
uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

}  // namespace

// ---------------------------------------------------------------- loading

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

// ---------------------------------------------------------------- encoding

namespace {

// The code point starting at byte i of well-formed UTF-8 (Encode checks its
// input; every later stage keeps it well formed), and its length.
char32_t CodePointAt(absl::string_view s, size_t i, size_t* len) {
  const unsigned char b = s[i];
  *len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  if (i + *len > s.size()) {
    *len = 1;
    return 0xFFFD;
  }
  char32_t cp = *len == 1 ? b : b & (0x7F >> *len);
  for (size_t k = 1; k < *len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return cp;
}

// The start of the code point that ends at byte i (> 0).
size_t PreviousStart(absl::string_view s, size_t i) {
  do {
    --i;
  } while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80);
  return i;
}

}  // namespace

std::string HfTokenizer::Normalize(absl::string_view in) const {
  std::string s(in);
  for (const NormalizerStep& n : normalizer_) {
    if (n.kind == NormalizerStep::kPrepend) {
      if (!s.empty()) s = absl::StrCat(n.a, s);
    } else {
      s = absl::StrReplaceAll(s, {{n.a, n.b}});
    }
  }
  return s;
}

void HfTokenizer::SplitAddedTokens(const Piece& piece, bool normalized_pass,
                                   std::vector<std::pair<Piece, int32_t>>* out) const {
  const std::string& s = piece.text;
  const auto& patterns = added_patterns_[normalized_pass ? 1 : 0];
  size_t start_offset = 0, pos = 0;
  while (pos < s.size()) {
    // Leftmost-longest: the first position where a pattern matches, and the
    // longest pattern there.
    size_t at = pos, len = 0;
    int index = -1;
    for (; at < s.size() && index < 0; ++at) {
      for (const auto& [pattern, i] : patterns[static_cast<uint8_t>(s[at])]) {
        if (s.compare(at, pattern.size(), pattern) == 0) {
          index = i;
          len = pattern.size();
          break;
        }
      }
    }
    if (index < 0) break;
    size_t start = at - 1, stop = start + len;
    pos = stop;
    const AddedToken& tok = added_[index];
    size_t n;
    if (tok.single_word) {
      const bool word_before = start > 0 && IsWordChar(CodePointAt(s, PreviousStart(s, start), &n));
      const bool word_after = stop < s.size() && IsWordChar(CodePointAt(s, stop, &n));
      if (word_before || word_after) continue;
    }
    if (tok.lstrip) {
      size_t b = start;
      while (b > 0) {
        const size_t p = PreviousStart(s, b);
        if (!IsSpace(CodePointAt(s, p, &n))) break;
        b = p;
      }
      start = std::max(b, start_offset);
    }
    if (tok.rstrip) {
      while (stop < s.size() && IsSpace(CodePointAt(s, stop, &n))) stop += n;
      pos = stop;
    }
    if (start < start_offset) continue;
    if (start_offset < start) {
      out->push_back({{s.substr(start_offset, start - start_offset),
                       piece.at_start && start_offset == 0},
                      -1});
    }
    out->push_back({{s.substr(start, stop - start), false}, tok.id});
    start_offset = stop;
  }
  if (start_offset < s.size()) {
    out->push_back({{s.substr(start_offset), piece.at_start && start_offset == 0}, -1});
  }
}

absl::Status HfTokenizer::PreTokenize(std::vector<Piece>* pieces) const {
  for (const PreTokenizerStep& step : pre_tokenizer_) {
    std::vector<Piece> next;
    next.reserve(pieces->size());
    for (Piece& piece : *pieces) {
      switch (step.kind) {
        case PreTokenizerStep::kByteLevel: {
          if (step.add_prefix_space && !absl::StartsWith(piece.text, " ")) {
            piece.text.insert(0, " ");
          }
          std::vector<Piece> words;
          if (step.use_regex) {
            auto m = RegexMatches(piece.text, Gpt2Regex());
            if (!m.ok()) return m.status();
            ApplyBehavior(piece, std::move(*m), PreTokenizerStep::kIsolated, false, &words);
          } else if (!piece.text.empty()) {
            words.push_back(std::move(piece));
          }
          for (Piece& w : words) {
            std::string symbols;
            symbols.reserve(w.text.size() * 2);
            for (char c : w.text) symbols += Bytes().of_byte[static_cast<uint8_t>(c)];
            next.push_back({std::move(symbols), w.at_start});
          }
          break;
        }
        case PreTokenizerStep::kSplit: {
          if (step.regex) {
            auto m = RegexMatches(piece.text, *step.regex);
            if (!m.ok()) return m.status();
            ApplyBehavior(piece, std::move(*m), step.behavior, step.invert, &next);
          } else {
            ApplyBehavior(piece, LiteralMatches(piece.text, step.literal), step.behavior,
                          step.invert, &next);
          }
          break;
        }
        case PreTokenizerStep::kMetaspace: {
          Piece p{absl::StrReplaceAll(piece.text, {{" ", step.replacement}}), piece.at_start};
          const bool prepend = step.prepend == PreTokenizerStep::kAlways ||
                               (step.prepend == PreTokenizerStep::kFirst && p.at_start);
          if (prepend && !absl::StartsWith(p.text, step.replacement)) {
            p.text.insert(0, step.replacement);
          }
          if (step.split) {
            ApplyBehavior(p, LiteralMatches(p.text, step.replacement),
                          PreTokenizerStep::kMergedWithNext, false, &next);
          } else if (!p.text.empty()) {
            next.push_back(std::move(p));
          }
          break;
        }
      }
    }
    *pieces = std::move(next);
  }
  return absl::OkStatus();
}

void HfTokenizer::Bpe(absl::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto it = model_vocab_.find(word); it != model_vocab_.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  // Symbols as a doubly linked list over a vector (the library's Word).
  struct Symbol {
    int32_t id;
    int prev, next;
    bool alive;
  };
  std::vector<Symbol> syms;
  syms.reserve(word.size());
  auto add = [&](int32_t id) {
    const int i = static_cast<int>(syms.size());
    syms.push_back({id, i - 1, i + 1, true});
  };
  bool unk_pending = false;
  for (size_t i = 0, n = 0; i < word.size(); i += n) {
    CodePointAt(word, i, &n);
    const absl::string_view c = word.substr(i, n);
    if (auto it = model_vocab_.find(c); it != model_vocab_.end()) {
      if (unk_pending) add(unk_id_), unk_pending = false;
      add(it->second);
      continue;
    }
    if (byte_fallback_ &&
        std::all_of(c.begin(), c.end(), [&](char b) { return byte_token_[static_cast<uint8_t>(b)] >= 0; })) {
      for (char b : c) add(byte_token_[static_cast<uint8_t>(b)]);
      continue;  // (a pending unknown stays pending, as in the library)
    }
    if (unk_id_ < 0) continue;  // no unknown token: the character is dropped
    if (unk_pending && !fuse_unk_) add(unk_id_);
    unk_pending = true;
  }
  if (unk_pending) add(unk_id_);
  if (syms.empty()) return;
  syms.back().next = -1;

  // Merges by rank, then position, skipping entries that went stale.
  struct Merge {
    int32_t rank;
    int pos;
    int32_t new_id;
    bool operator<(const Merge& o) const {  // the top is the lowest (rank, pos)
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Merge> queue;
  auto lookup = [&](int pos, int next) {
    auto it = merges_.find(PairKey(syms[pos].id, syms[next].id));
    if (it != merges_.end()) queue.push({it->second.first, pos, it->second.second});
  };
  for (int i = 0; i + 1 < static_cast<int>(syms.size()); ++i) lookup(i, i + 1);
  while (!queue.empty()) {
    const Merge top = queue.top();
    queue.pop();
    Symbol& cur = syms[top.pos];
    if (!cur.alive || cur.next < 0) continue;
    Symbol& right = syms[cur.next];
    auto it = merges_.find(PairKey(cur.id, right.id));
    if (it == merges_.end() || it->second.second != top.new_id) continue;
    cur.id = top.new_id;
    right.alive = false;
    cur.next = right.next;
    if (cur.next >= 0) syms[cur.next].prev = top.pos;
    if (cur.prev >= 0) lookup(cur.prev, top.pos);
    if (cur.next >= 0) lookup(top.pos, cur.next);
  }
  for (int i = 0; i >= 0; i = syms[i].next) ids->push_back(syms[i].id);
}

absl::StatusOr<std::vector<int32_t>> HfTokenizer::Encode(absl::string_view text,
                                                        bool add_special_tokens) const {
  auto valid = DecodeUtf8(text);
  if (!valid.ok()) return valid.status();
  std::vector<int32_t> ids;
  if (add_special_tokens) ids = template_before_;
  std::vector<std::pair<Piece, int32_t>> raw_parts;
  SplitAddedTokens({std::string(text), true}, /*normalized_pass=*/false, &raw_parts);
  for (auto& [part, id] : raw_parts) {
    if (id >= 0) {
      ids.push_back(id);
      continue;
    }
    std::vector<std::pair<Piece, int32_t>> parts;
    SplitAddedTokens({Normalize(part.text), part.at_start}, /*normalized_pass=*/true, &parts);
    for (auto& [p, pid] : parts) {
      if (pid >= 0) {
        ids.push_back(pid);
        continue;
      }
      std::vector<Piece> pieces{std::move(p)};
      FLOVER_RETURN_IF_ERROR(PreTokenize(&pieces));
      for (const Piece& w : pieces) Bpe(w.text, &ids);
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), template_after_.begin(), template_after_.end());
  return ids;
}

bool HfTokenizer::IsSpecial(int32_t id) const {
  for (const AddedToken& a : added_) {
    if (a.id == id) return a.special;
  }
  return false;
}

// ---------------------------------------------------------------- decoding

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
