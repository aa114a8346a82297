#include "engine/grammar_constraint.h"

#include <xgrammar/xgrammar.h>

#include <algorithm>
#include <exception>
#include <functional>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "util/field_error.h"

namespace flover {
namespace {

// xgrammar's messages start "[hh:mm:ss] cpp/file.cc:123: "; the rest is
// what a client needs.
std::string Reason(const std::exception& e) {
  std::string m = e.what();
  if (!m.empty() && m[0] == '[') {
    const size_t close = m.find("] ");
    const size_t colon = close == std::string::npos ? std::string::npos : m.find(": ", close + 2);
    if (colon != std::string::npos) m = m.substr(colon + 2);
  }
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
  constexpr size_t kMaxReason = 400;  // its messages may quote the whole input
  if (m.size() > kMaxReason) m = m.substr(0, kMaxReason) + "...";
  return m;
}

// The deepest nesting of `open`/`close` outside strings quoted by one of
// `quotes` and (with `classes`) character classes, or -1 past `limit`.
int Depth(const std::string& text, char open, char close, char also_open, char also_close,
          absl::string_view quotes, bool classes, int limit) {
  int depth = 0, deepest = 0;
  char quote = 0;
  bool in_class = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\\') {
      ++i;  // an escaped character is never structure
      continue;
    }
    if (quote != 0) {
      if (c == quote) quote = 0;
      continue;
    }
    if (in_class) {
      if (c == ']') in_class = false;
      continue;
    }
    if (quotes.find(c) != absl::string_view::npos) {
      quote = c;
    } else if (classes && c == '[') {
      in_class = true;
    } else if (c == open || (also_open != 0 && c == also_open)) {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return -1;
    } else if (c == close || (also_close != 0 && c == also_close)) {
      --depth;
    }
  }
  return deepest;
}

// The first JSON Schema keyword of `schema` (walked through its subschemas)
// that xgrammar 0.2.8 does not enforce, alone or beside another, or "".
std::string UnenforcedKeyword(const nlohmann::json& schema) {
  if (!schema.is_object()) return "";
  static const char* const kIgnored[] = {
      "not", "if", "then", "else", "uniqueItems", "contains", "minContains", "maxContains",
      "dependentRequired", "dependentSchemas", "dependencies", "patternProperties",
      "propertyNames", "unevaluatedProperties", "unevaluatedItems"};
  for (const char* key : kIgnored) {
    if (!schema.contains(key)) continue;
    // uniqueItems: false asks for nothing.
    if (std::string(key) == "uniqueItems" && schema[key].is_boolean() && !schema[key].get<bool>()) continue;
    return key;
  }
  if (schema.contains("allOf") && schema["allOf"].is_array() && schema["allOf"].size() > 1) {
    return "allOf (with more than one schema)";
  }
  // Combinations xgrammar 0.2.8 drops a part of (it logs a warning and
  // ignores it; JSONSchemaBench's schemas hit each).
  const bool length = schema.contains("minLength") || schema.contains("maxLength");
  if (length && schema.contains("pattern")) return "minLength / maxLength with pattern";
  if (length && schema.contains("format")) return "minLength / maxLength with format";
  if (schema.contains("multipleOf")) {
    const bool integer = schema.contains("type") && schema["type"] == "integer";
    bool bounded = false;
    for (const char* bound : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
      bounded = bounded || schema.contains(bound);
    }
    if (!integer) return "multipleOf (other than on an integer)";
    if (bounded) return "multipleOf (with minimum or maximum)";
  }
  for (const char* key : {"properties", "$defs", "definitions"}) {
    if (!schema.contains(key) || !schema[key].is_object()) continue;
    for (const auto& [name, sub] : schema[key].items()) {
      if (std::string found = UnenforcedKeyword(sub); !found.empty()) return found;
    }
  }
  for (const char* key : {"anyOf", "oneOf", "allOf", "prefixItems"}) {
    if (!schema.contains(key) || !schema[key].is_array()) continue;
    for (const auto& sub : schema[key]) {
      if (std::string found = UnenforcedKeyword(sub); !found.empty()) return found;
    }
  }
  for (const char* key : {"items", "additionalProperties", "additionalItems"}) {
    if (!schema.contains(key)) continue;
    if (std::string found = UnenforcedKeyword(schema[key]); !found.empty()) return found;
  }
  return "";
}

class GrammarState final : public ConstraintState {
 public:
  GrammarState(const xgrammar::CompiledGrammar& grammar, const std::vector<int32_t>& end_ids,
               const std::vector<uint32_t>* forbidden, int vocab_size)
      : matcher_(grammar, std::nullopt, /*terminate_without_stop_token=*/false,
                 /*max_rollback_tokens=*/0),
        end_ids_(end_ids),
        forbidden_(forbidden),
        vocab_size_(vocab_size),
        words_(xgrammar::GetBitmaskSize(vocab_size)) {
    Update();
  }
  const std::vector<uint32_t>& AllowedNext() const override { return words_; }
  bool Complete() const override { return complete_; }
  bool CanContinue() const override { return can_continue_; }
  bool failed() const override { return failed_; }
  absl::Status Accept(int32_t token) override {
    if (failed_ || token < 0 || token >= vocab_size_ || !matcher_.AcceptToken(token)) {
      failed_ = true;
      return absl::InvalidArgumentError(absl::StrCat("token ", token, " breaks the constraint"));
    }
    Update();
    return absl::OkStatus();
  }

 private:
  void Update() {
    // xgrammar writes int32 words; ours are their unsigned twins (the same
    // bits, and a signed and unsigned type may alias).
    int64_t shape[1] = {static_cast<int64_t>(words_.size())};
    DLTensor tensor{words_.data(), DLDevice{kDLCPU, 0}, 1, xgrammar::GetBitmaskDLType(), shape,
                    nullptr, 0};
    matcher_.FillNextTokenBitmask(&tensor);
    if (forbidden_ != nullptr) {
      for (size_t w = 0; w < words_.size() && w < forbidden_->size(); ++w) words_[w] &= ~(*forbidden_)[w];
    }
    complete_ = false;
    for (int32_t e : end_ids_) {
      if (e < 0 || e >= vocab_size_) continue;
      if (HasToken(words_, e)) complete_ = true;
      RemoveToken(words_, e);  // Complete() decides
    }
    // Bits past the vocabulary are never tokens.
    for (int t = vocab_size_; t < static_cast<int>(words_.size()) * 32; ++t) {
      RemoveToken(words_, t);
    }
    can_continue_ = std::any_of(words_.begin(), words_.end(), [](uint32_t w) { return w != 0; });
  }

  xgrammar::GrammarMatcher matcher_;
  const std::vector<int32_t>& end_ids_;
  const std::vector<uint32_t>* forbidden_;  // tokens never allowed, or null
  int vocab_size_;
  std::vector<uint32_t> words_;
  bool complete_ = false, can_continue_ = false, failed_ = false;
};

class CompiledGrammarConstraint final : public CompiledConstraint {
 public:
  CompiledGrammarConstraint(xgrammar::CompiledGrammar grammar, std::vector<int32_t> end_ids,
                            std::shared_ptr<const std::vector<uint32_t>> forbidden, int vocab_size)
      : grammar_(std::move(grammar)),
        end_ids_(std::move(end_ids)),
        forbidden_(std::move(forbidden)),
        vocab_size_(vocab_size) {}
  int vocab_size() const override { return vocab_size_; }
  std::unique_ptr<ConstraintState> Start() const override {
    return std::make_unique<GrammarState>(grammar_, end_ids_, forbidden_.get(), vocab_size_);
  }

 private:
  xgrammar::CompiledGrammar grammar_;
  std::vector<int32_t> end_ids_;
  std::shared_ptr<const std::vector<uint32_t>> forbidden_;
  int vocab_size_;
};

xgrammar::TokenizerInfo InfoFor(const TokenBytes& tokens, const std::vector<int32_t>& end_ids) {
  std::vector<std::string> vocab(tokens.vocab_size());
  for (int32_t id = 0; id < tokens.vocab_size(); ++id) vocab[id] = tokens.Of(id);  // "" = special
  std::vector<int32_t> stops;
  for (int32_t e : end_ids) {
    if (e >= 0 && e < tokens.vocab_size()) stops.push_back(e);
  }
  return xgrammar::TokenizerInfo(vocab, xgrammar::VocabType::RAW, tokens.vocab_size(), stops);
}

}  // namespace

struct GrammarConstraints::Impl {
  Impl(const TokenBytes& tokens, std::vector<int32_t> ends)
      : end_ids(std::move(ends)),
        vocab_size(tokens.vocab_size()),
        compiler(InfoFor(tokens, end_ids), /*max_threads=*/2, /*cache_enabled=*/true,
                 kGrammarCacheBytes) {
    // xgrammar's JSON strings take raw control characters (U+0000-U+001F),
    // which JSON forbids (RFC 8259: they must be escaped), and compact JSON
    // has no other place for them: JSON constraints never allow a token
    // holding one.
    auto controls = std::make_shared<std::vector<uint32_t>>(TokenMaskWords(vocab_size), 0);
    for (int32_t id = 0; id < vocab_size; ++id) {
      for (unsigned char c : tokens.Of(id)) {
        if (c < 0x20) {
          AddToken(*controls, id);
          break;
        }
      }
    }
    json_forbidden = std::move(controls);
  }

  absl::StatusOr<std::shared_ptr<const CompiledConstraint>> Compile(
      const std::string& field, const std::function<xgrammar::CompiledGrammar()>& compile,
      std::shared_ptr<const std::vector<uint32_t>> forbidden = nullptr) {
    try {
      std::lock_guard<std::mutex> lock(mu);
      return std::shared_ptr<const CompiledConstraint>(std::make_shared<CompiledGrammarConstraint>(
          compile(), end_ids, std::move(forbidden), vocab_size));
    } catch (const std::exception& e) {
      return FieldError(field, Reason(e));
    }
  }

  std::vector<int32_t> end_ids;
  int vocab_size;
  std::shared_ptr<const std::vector<uint32_t>> json_forbidden;  // tokens with control bytes
  std::mutex mu;  // the compiler, one compile at a time
  xgrammar::GrammarCompiler compiler;
};

GrammarConstraints::GrammarConstraints(std::shared_ptr<const TokenBytes> tokens,
                                       std::vector<int32_t> end_ids)
    : impl_(std::make_unique<Impl>(*tokens, std::move(end_ids))) {}

GrammarConstraints::~GrammarConstraints() = default;

absl::Status CheckJsonSchema(const std::string& schema, const std::string& field) {
  if (schema.size() > kMaxSchemaBytes) {
    return FieldError(field, absl::StrCat("at most ", kMaxSchemaBytes, " bytes, got ", schema.size()));
  }
  if (Depth(schema, '{', '}', '[', ']', "\"", /*classes=*/false, kMaxConstraintDepth) < 0) {
    return FieldError(field, absl::StrCat("nested deeper than ", kMaxConstraintDepth, " levels"));
  }
  const nlohmann::json parsed = nlohmann::json::parse(schema, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return FieldError(field, "not valid JSON");
  if (const std::string keyword = UnenforcedKeyword(parsed); !keyword.empty()) {
    return FieldError(field, absl::StrCat("the keyword ", keyword,
                                          " is not supported (it would not be enforced)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const CompiledConstraint>> GrammarConstraints::JsonSchema(
    const std::string& schema, const std::string& field) {
  if (absl::Status st = CheckJsonSchema(schema, field); !st.ok()) return st;
  // JSON Schema's own defaults (additional properties allowed unless the
  // schema says otherwise). Compact JSON: free whitespace lets a model
  // loop on spaces (a known failure of any_whitespace in vLLM).
  return impl_->Compile(
      field,
      [&] {
        return impl_->compiler.CompileJSONSchema(schema, /*any_whitespace=*/false, std::nullopt,
                                                 std::nullopt, /*strict_mode=*/false);
      },
      impl_->json_forbidden);
}

absl::StatusOr<std::shared_ptr<const CompiledConstraint>> GrammarConstraints::AnyJson(
    const std::string& field) {
  // OpenAI's json_object: a JSON object (not any JSON value).
  return JsonSchema(R"({"type": "object"})", field);
}

absl::StatusOr<std::shared_ptr<const CompiledConstraint>> GrammarConstraints::Regex(
    const std::string& regex, const std::string& field) {
  if (regex.size() > kMaxRegexBytes) {
    return FieldError(field, absl::StrCat("at most ", kMaxRegexBytes, " bytes, got ", regex.size()));
  }
  if (Depth(regex, '(', ')', 0, 0, "", /*classes=*/true, kMaxConstraintDepth) < 0) {
    return FieldError(field, absl::StrCat("groups nested deeper than ", kMaxConstraintDepth, " levels"));
  }
  return impl_->Compile(field, [&] { return impl_->compiler.CompileRegex(regex); });
}

absl::StatusOr<std::shared_ptr<const CompiledConstraint>> GrammarConstraints::Grammar(
    const std::string& ebnf, const std::string& field) {
  if (ebnf.size() > kMaxGrammarBytes) {
    return FieldError(field, absl::StrCat("at most ", kMaxGrammarBytes, " bytes, got ", ebnf.size()));
  }
  if (Depth(ebnf, '(', ')', 0, 0, "\"'", /*classes=*/true, kMaxConstraintDepth) < 0) {
    return FieldError(field, absl::StrCat("parentheses nested deeper than ", kMaxConstraintDepth, " levels"));
  }
  return impl_->Compile(field, [&] { return impl_->compiler.CompileGrammar(ebnf, "root"); });
}

absl::StatusOr<std::shared_ptr<const CompiledConstraint>> GrammarConstraints::StructuralTag(
    const std::string& tag, const std::string& field) {
  if (tag.size() > kMaxSchemaBytes * 4) {
    return FieldError(field, absl::StrCat("at most ", kMaxSchemaBytes * 4, " bytes, got ", tag.size()));
  }
  // No control-byte mask: free text and the tags' own newlines need them
  // (the tool-call parser escapes any a model writes inside a string).
  return impl_->Compile(field, [&] { return impl_->compiler.CompileStructuralTag(tag); });
}

}  // namespace flover
