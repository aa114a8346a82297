#include "engine/token_then_constraint.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace flover {
namespace {

class TokenThenState final : public ConstraintState {
 public:
  TokenThenState(int32_t token, bool text_before, const std::vector<uint32_t>& before,
                 const CompiledConstraint& then)
      : token_(token), text_before_(text_before), before_(before), then_(then) {}
  const std::vector<uint32_t>& AllowedNext() const override {
    return after_ != nullptr ? after_->AllowedNext() : before_;
  }
  bool Complete() const override { return after_ != nullptr ? after_->Complete() : text_before_; }
  bool CanContinue() const override { return after_ != nullptr ? after_->CanContinue() : true; }
  bool failed() const override { return failed_ || (after_ != nullptr && after_->failed()); }
  absl::Status Accept(int32_t token) override {
    if (after_ != nullptr) return after_->Accept(token);
    if (failed_ || !HasToken(before_, token)) {
      failed_ = true;
      return absl::InvalidArgumentError(absl::StrCat("token ", token, " breaks the constraint"));
    }
    if (token == token_) after_ = then_.Start();
    return absl::OkStatus();
  }
  std::string ForcedBytes() override { return after_ != nullptr ? after_->ForcedBytes() : ""; }

 private:
  const int32_t token_;
  const bool text_before_;
  const std::vector<uint32_t>& before_;  // what may come before `then` starts
  const CompiledConstraint& then_;
  std::unique_ptr<ConstraintState> after_;  // null until token_
  bool failed_ = false;
};

class TokenThenConstraint final : public CompiledConstraint {
 public:
  TokenThenConstraint(int32_t token, bool text_before, std::shared_ptr<const CompiledConstraint> then)
      : token_(token), text_before_(text_before), then_(std::move(then)) {
    const int V = then_->vocab_size();
    before_.assign(TokenMaskWords(V), 0);
    if (text_before_) {
      for (int32_t t = 0; t < V; ++t) AddToken(before_, t);
    } else {
      AddToken(before_, token_);
    }
  }
  int vocab_size() const override { return then_->vocab_size(); }
  std::unique_ptr<ConstraintState> Start() const override {
    return std::make_unique<TokenThenState>(token_, text_before_, before_, *then_);
  }

 private:
  const int32_t token_;
  const bool text_before_;
  const std::shared_ptr<const CompiledConstraint> then_;
  std::vector<uint32_t> before_;
};

}  // namespace

std::shared_ptr<const CompiledConstraint> TokenThen(int32_t token, bool text_before,
                                                    std::shared_ptr<const CompiledConstraint> then) {
  return std::make_shared<TokenThenConstraint>(token, text_before, std::move(then));
}

}  // namespace flover
