#include "engine/choice_constraint.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "util/field_error.h"

namespace flover {

// All choices together, in bytes: bounds the compile work (a lookup per
// byte and token length).
constexpr size_t kMaxChoicesTotalBytes = 64 << 10;

TokenBytes::TokenBytes(const Tokenizer& tokenizer, const std::vector<std::string>& spelled) {
  const int V = tokenizer.vocab_size();
  bytes_.resize(V);
  for (int32_t id = 0; id < V; ++id) {
    bytes_[id] = tokenizer.DecodeBytes({id});
    if (tokenizer.IsSpecial(id) && std::find(spelled.begin(), spelled.end(), bytes_[id]) == spelled.end()) {
      bytes_[id].clear();
      continue;
    }
    if (bytes_[id].empty()) continue;
    by_bytes_[bytes_[id]].push_back(id);
    longest_ = std::max(longest_, bytes_[id].size());
  }
}

const std::vector<int32_t>* TokenBytes::TokensSpelling(absl::string_view s) const {
  auto it = by_bytes_.find(s);
  return it == by_bytes_.end() ? nullptr : &it->second;
}

namespace {

struct Choice {
  std::string text;
  // spellable[i]: some tokens spell text[i:] (spellable[size] is true).
  std::vector<bool> spellable;
};

class CompiledChoices;

class ChoiceState final : public ConstraintState {
 public:
  explicit ChoiceState(const CompiledChoices& c) : c_(c) { Update(); }
  const std::vector<uint32_t>& AllowedNext() const override { return words_; }
  bool Complete() const override { return complete_; }
  bool CanContinue() const override { return can_continue_; }
  absl::Status Accept(int32_t token) override;
  bool failed() const override { return failed_; }

 private:
  // words_, complete_ and can_continue_ after out_.
  void Update();
  // Whether `choice` is still possible after out_ + extra, at a position
  // its remainder can be spelled from.
  bool Fits(const Choice& choice, absl::string_view extra) const;

  const CompiledChoices& c_;
  std::string out_;  // the bytes emitted so far
  std::vector<uint32_t> words_;
  bool complete_ = false, can_continue_ = false, failed_ = false;
};

class CompiledChoices final : public CompiledConstraint {
 public:
  CompiledChoices(std::vector<Choice> choices, std::shared_ptr<const TokenBytes> tokens)
      : choices_(std::move(choices)), tokens_(std::move(tokens)) {}
  int vocab_size() const override { return tokens_->vocab_size(); }
  std::unique_ptr<ConstraintState> Start() const override {
    return std::make_unique<ChoiceState>(*this);
  }
  const std::vector<Choice>& choices() const { return choices_; }
  const TokenBytes& tokens() const { return *tokens_; }

 private:
  std::vector<Choice> choices_;
  std::shared_ptr<const TokenBytes> tokens_;
};

bool ChoiceState::Fits(const Choice& choice, absl::string_view extra) const {
  const size_t end = out_.size() + extra.size();
  return choice.text.size() >= end && absl::StartsWith(choice.text, out_) &&
         absl::string_view(choice.text).substr(out_.size(), extra.size()) == extra &&
         choice.spellable[end];
}

void ChoiceState::Update() {
  const TokenBytes& tokens = c_.tokens();
  words_.assign(TokenMaskWords(tokens.vocab_size()), 0);
  complete_ = can_continue_ = false;
  const size_t p = out_.size();
  for (const Choice& choice : c_.choices()) {
    if (choice.text == out_) complete_ = true;
    if (choice.text.size() <= p || !absl::StartsWith(choice.text, out_)) continue;
    can_continue_ = true;
    const size_t most = std::min(tokens.longest(), choice.text.size() - p);
    for (size_t k = 1; k <= most; ++k) {
      if (!choice.spellable[p + k]) continue;
      const std::vector<int32_t>* ids = tokens.TokensSpelling(absl::string_view(choice.text).substr(p, k));
      if (ids == nullptr) continue;
      for (int32_t id : *ids) AddToken(words_, id);
    }
  }
}

absl::Status ChoiceState::Accept(int32_t token) {
  const TokenBytes& tokens = c_.tokens();
  if (token >= 0 && token < tokens.vocab_size() && !tokens.Of(token).empty()) {
    const std::string& b = tokens.Of(token);
    for (const Choice& choice : c_.choices()) {
      if (Fits(choice, b)) {
        out_ += b;
        Update();
        return absl::OkStatus();
      }
    }
  }
  failed_ = true;
  return absl::InvalidArgumentError(absl::StrCat("token ", token, " spells none of the choices"));
}

}  // namespace

absl::StatusOr<std::shared_ptr<const CompiledConstraint>> CompileChoices(
    const std::vector<std::string>& choices, std::shared_ptr<const TokenBytes> tokens) {
  if (choices.empty()) return FieldError("choice", "must list at least one string");
  if (choices.size() > kMaxChoices) {
    return FieldError("choice", absl::StrCat("at most ", kMaxChoices, " strings, got ", choices.size()));
  }
  size_t total = 0;
  absl::flat_hash_set<std::string> seen;
  std::vector<Choice> compiled;
  for (size_t c = 0; c < choices.size(); ++c) {
    const std::string& text = choices[c];
    const std::string at = absl::StrCat("choice[", c, "]");
    if (text.empty()) return FieldError(at, "is empty");
    if (text.size() > kMaxChoiceBytes) {
      return FieldError(at, absl::StrCat("at most ", kMaxChoiceBytes, " bytes, got ", text.size()));
    }
    total += text.size();
    if (total > kMaxChoicesTotalBytes) {
      return FieldError("choice", absl::StrCat("at most ", kMaxChoicesTotalBytes, " bytes in all"));
    }
    if (!seen.insert(text).second) return FieldError(at, "repeats an earlier choice");
    Choice choice{text, std::vector<bool>(text.size() + 1, false)};
    choice.spellable[text.size()] = true;
    for (size_t i = text.size(); i-- > 0;) {
      const size_t most = std::min(tokens->longest(), text.size() - i);
      for (size_t k = 1; k <= most && !choice.spellable[i]; ++k) {
        choice.spellable[i] = choice.spellable[i + k] &&
                              tokens->TokensSpelling(absl::string_view(text).substr(i, k)) != nullptr;
      }
    }
    if (!choice.spellable[0]) return FieldError(at, "no tokens of this model spell it");
    compiled.push_back(std::move(choice));
  }
  return std::shared_ptr<const CompiledConstraint>(
      std::make_shared<CompiledChoices>(std::move(compiled), std::move(tokens)));
}

}  // namespace flover
