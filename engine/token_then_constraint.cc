#include "engine/token_then_constraint.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace flover {
namespace {

class TokenThenState final : public ConstraintState {
 public:
  // `then` null: anything after the token. `only` allows the token alone,
  // what comes once `max_before` tokens came before it (-1: no limit).
  TokenThenState(int32_t token, bool text_before, const std::vector<uint32_t>& before,
                 const std::vector<uint32_t>& only, int max_before, const CompiledConstraint* then)
      : token_(token), text_before_(text_before), before_(before), only_(only), max_before_(max_before),
        then_(then) {}
  const std::vector<uint32_t>& AllowedNext() const override {
    if (after_ != nullptr) return after_->AllowedNext();
    if (seen_) return before_;  // after the token, with no constraint then: all of it
    return max_before_ >= 0 && count_ >= max_before_ ? only_ : before_;
  }
  bool Complete() const override {
    if (after_ != nullptr) return after_->Complete();
    return seen_ || (text_before_ && !(max_before_ >= 0 && count_ >= max_before_));
  }
  bool CanContinue() const override { return after_ != nullptr ? after_->CanContinue() : true; }
  bool failed() const override { return failed_ || (after_ != nullptr && after_->failed()); }
  absl::Status Accept(int32_t token) override {
    if (after_ != nullptr) return after_->Accept(token);
    if (failed_ || !HasToken(AllowedNext(), token)) {
      failed_ = true;
      return absl::InvalidArgumentError(absl::StrCat("token ", token, " breaks the constraint"));
    }
    if (seen_) return absl::OkStatus();
    if (token == token_) {
      seen_ = true;
      if (then_ != nullptr) after_ = then_->Start();
    } else {
      ++count_;
    }
    return absl::OkStatus();
  }
  std::string ForcedBytes() override { return after_ != nullptr ? after_->ForcedBytes() : ""; }

 private:
  const int32_t token_;
  const bool text_before_;
  const std::vector<uint32_t>& before_;  // what may come before `then` starts
  const std::vector<uint32_t>& only_;    // the token alone
  const int max_before_;
  const CompiledConstraint* then_;
  std::unique_ptr<ConstraintState> after_;  // null until token_ (and with no `then`)
  bool seen_ = false;
  int count_ = 0;  // tokens before token_
  bool failed_ = false;
};

class TokenThenConstraint final : public CompiledConstraint {
 public:
  TokenThenConstraint(int32_t token, bool text_before, std::shared_ptr<const CompiledConstraint> then,
                      int vocab_size, int max_before)
      : token_(token), text_before_(text_before), then_(std::move(then)), vocab_size_(vocab_size),
        max_before_(max_before) {
    before_.assign(TokenMaskWords(vocab_size_), 0);
    only_.assign(TokenMaskWords(vocab_size_), 0);
    AddToken(only_, token_);
    if (text_before_) {
      for (int32_t t = 0; t < vocab_size_; ++t) AddToken(before_, t);
    } else {
      AddToken(before_, token_);
    }
  }
  int vocab_size() const override { return vocab_size_; }
  std::unique_ptr<ConstraintState> Start() const override {
    return std::make_unique<TokenThenState>(token_, text_before_, before_, only_, max_before_, then_.get());
  }

 private:
  const int32_t token_;
  const bool text_before_;
  const std::shared_ptr<const CompiledConstraint> then_;
  const int vocab_size_, max_before_;
  std::vector<uint32_t> before_, only_;
};

}  // namespace

std::shared_ptr<const CompiledConstraint> TokenThen(int32_t token, bool text_before,
                                                    std::shared_ptr<const CompiledConstraint> then) {
  const int V = then->vocab_size();
  return std::make_shared<TokenThenConstraint>(token, text_before, std::move(then), V, -1);
}

std::shared_ptr<const CompiledConstraint> ReasoningBudget(int32_t close, int budget, int vocab_size,
                                                          std::shared_ptr<const CompiledConstraint> then) {
  if (then != nullptr) vocab_size = then->vocab_size();
  return std::make_shared<TokenThenConstraint>(close, /*text_before=*/true, std::move(then), vocab_size, budget);
}

}  // namespace flover
