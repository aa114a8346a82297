#include "engine/grammar_constraint.h"

#include <xgrammar/xgrammar.h>

#include <algorithm>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
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
  std::string ForcedBytes() override { return failed_ ? "" : matcher_.FindJumpForwardString(); }

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
  Impl(std::shared_ptr<const TokenBytes> token_bytes, std::vector<int32_t> ends)
      : tokens(std::move(token_bytes)),
        end_ids(std::move(ends)),
        vocab_size(tokens->vocab_size()),
        compiler(InfoFor(*tokens, end_ids), /*max_threads=*/2, /*cache_enabled=*/true,
                 kGrammarCacheBytes) {
    // xgrammar's JSON strings take raw control characters (U+0000-U+001F),
    // which JSON forbids (RFC 8259: they must be escaped), and compact JSON
    // has no other place for them: JSON constraints never allow a token
    // holding one.
    auto controls = std::make_shared<std::vector<uint32_t>>(TokenMaskWords(vocab_size), 0);
    for (int32_t id = 0; id < vocab_size; ++id) {
      for (unsigned char c : tokens->Of(id)) {
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

  // What each token does in a JSON string, for string limits: worked out
  // on the first request that asks for them.
  std::shared_ptr<const JsonStringTable> StringTable() {
    std::call_once(string_table_once, [&] { string_table = std::make_shared<const JsonStringTable>(*tokens); });
    return string_table;
  }

  std::shared_ptr<const TokenBytes> tokens;
  std::vector<int32_t> end_ids;
  int vocab_size;
  std::once_flag string_table_once;
  std::shared_ptr<const JsonStringTable> string_table;
  std::shared_ptr<const std::vector<uint32_t>> json_forbidden;  // tokens with control bytes
  std::mutex mu;  // the compiler, one compile at a time
  xgrammar::GrammarCompiler compiler;
};

GrammarConstraints::GrammarConstraints(std::shared_ptr<const TokenBytes> tokens,
                                       std::vector<int32_t> end_ids)
    : impl_(std::make_unique<Impl>(std::move(tokens), std::move(end_ids))) {}

GrammarConstraints::~GrammarConstraints() = default;

absl::StatusOr<std::shared_ptr<const CompiledConstraint>> GrammarConstraints::JsonSchema(
    const std::string& schema, const std::string& field, JsonStringLimits limits) {
  absl::StatusOr<std::string> enforced = EnforcedJsonSchema(schema, field);
  if (!enforced.ok()) return enforced.status();
  // JSON Schema's own defaults (additional properties allowed unless the
  // schema says otherwise). Compact JSON: free whitespace lets a model
  // loop on spaces (a known failure of any_whitespace in vLLM).
  auto compiled = impl_->Compile(
      field,
      [&] {
        return impl_->compiler.CompileJSONSchema(*enforced, /*any_whitespace=*/false, std::nullopt,
                                                 std::nullopt, /*strict_mode=*/false);
      },
      impl_->json_forbidden);
  if (!compiled.ok() || !limits.any()) return compiled;
  return WithJsonStringLimits(*std::move(compiled), impl_->tokens, impl_->StringTable(), limits);
}

absl::StatusOr<std::shared_ptr<const CompiledConstraint>> GrammarConstraints::AnyJson(const std::string& field,
                                                                                      JsonStringLimits limits) {
  // OpenAI's json_object: a JSON object (not any JSON value).
  return JsonSchema(R"({"type": "object"})", field, limits);
}

absl::StatusOr<std::shared_ptr<const CompiledConstraint>> GrammarConstraints::Regex(
    const std::string& regex, const std::string& field) {
  if (regex.size() > kMaxRegexBytes) {
    return FieldError(field, absl::StrCat("at most ", kMaxRegexBytes, " bytes, got ", regex.size()));
  }
  if (NestingDepth(regex, '(', ')', 0, 0, "", /*classes=*/true, kMaxConstraintDepth) < 0) {
    return FieldError(field, absl::StrCat("groups nested deeper than ", kMaxConstraintDepth, " levels"));
  }
  const std::string safe = RegexForXgrammar(regex);
  return impl_->Compile(field, [&] { return impl_->compiler.CompileRegex(safe); });
}

absl::StatusOr<std::shared_ptr<const CompiledConstraint>> GrammarConstraints::Grammar(
    const std::string& ebnf, const std::string& field) {
  if (ebnf.size() > kMaxGrammarBytes) {
    return FieldError(field, absl::StrCat("at most ", kMaxGrammarBytes, " bytes, got ", ebnf.size()));
  }
  if (NestingDepth(ebnf, '(', ')', 0, 0, "\"'", /*classes=*/true, kMaxConstraintDepth) < 0) {
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
