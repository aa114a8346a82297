// Choices as a constraint: the compiler's refusals, a state's walk over a
// real byte-level vocabulary (GPT-2's, in the tiny fixture), and the engine
// masking with it: every output, greedy or sampled, is one of the choices,
// ends as soon as nothing more is possible, reports logprobs of the masked
// distribution, and equals the same request run alone while fused with
// others.
#include "engine/choice_constraint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "model/model_loader.h"
#include "testing/backends.h"
#include "testing/collecting_sink.h"

namespace flover {
namespace {

using ::testing::HasSubstr;
using testing::CollectingSink;

class ChoiceConstraintTest : public ::testing::Test {
 protected:
  void SetUp() override {
    loaded_ = testing::ValueOrDie(LoadModel("tests/golden/tiny_f32"), "tiny_f32");
    ASSERT_NE(loaded_->tokenizer(), nullptr);
    tokens_ = std::make_shared<TokenBytes>(*loaded_->tokenizer());
  }
  std::shared_ptr<const CompiledConstraint> Compile(const std::vector<std::string>& choices) {
    return testing::ValueOrDie(CompileChoices(choices, tokens_), "choices");
  }
  std::string Spell(const std::vector<int32_t>& ids) const {
    std::string s;
    for (int32_t id : ids) s += tokens_->Of(id);
    return s;
  }
  void StartEngine() {
    backend_ = testing::CpuBackend();
    model_ = testing::ModelOn(*backend_, *loaded_);
    EngineOptions o;
    o.scheduler.max_batch = 8;
    o.max_seq_len = 40;  // the fixture's positions
    engine_ = testing::ValueOrDie(Engine::Create(*model_, loaded_->tokenizer().get(), o), "engine");
  }
  std::shared_ptr<CollectingSink> Submit(const Request& r) {
    auto sink = std::make_shared<CollectingSink>();
    auto id = engine_->Submit(r, sink);
    EXPECT_TRUE(id.ok()) << id.status();
    return sink;
  }

  std::unique_ptr<LoadedModel> loaded_;
  std::shared_ptr<const TokenBytes> tokens_;
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<CausalLm> model_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(ChoiceConstraintTest, RefusesWhatCannotBeServedNamingTheChoice) {
  auto error = [&](const std::vector<std::string>& choices) {
    auto c = CompileChoices(choices, tokens_);
    EXPECT_FALSE(c.ok());
    return c.ok() ? std::string() : std::string(c.status().message());
  };
  EXPECT_THAT(error({}), HasSubstr("at least one"));
  EXPECT_THAT(error({"a", ""}), HasSubstr("choice[1]: is empty"));
  EXPECT_THAT(error({"yes", "yes"}), HasSubstr("choice[1]: repeats"));
  EXPECT_THAT(error(std::vector<std::string>(kMaxChoices + 1, "x")), HasSubstr("at most"));
  EXPECT_THAT(error({std::string(kMaxChoiceBytes + 1, 'a')}), HasSubstr("bytes"));
}

TEST_F(ChoiceConstraintTest, AStateAllowsExactlyTheTokensThatKeepAChoiceSpellable) {
  auto compiled = Compile({"yes", "no", "maybe so"});
  auto state = compiled->Start();
  std::vector<uint32_t> words = state->AllowedNext();
  auto allowed = [&](int32_t id) { return HasToken(words, id); };
  int n = 0;
  for (int32_t id = 0; id < tokens_->vocab_size(); ++id) {
    if (!allowed(id)) continue;
    ++n;
    const std::string& b = tokens_->Of(id);
    const bool prefix = std::string("yes").rfind(b, 0) == 0 || std::string("no").rfind(b, 0) == 0 ||
                        std::string("maybe so").rfind(b, 0) == 0;
    EXPECT_TRUE(prefix) << "token " << id << " '" << b << "'";
  }
  EXPECT_GE(n, 3);  // at least "y", "n", "m"
  EXPECT_FALSE(state->Complete());
  EXPECT_TRUE(state->CanContinue());
  // Spell "no" one byte token at a time: complete, nothing may follow.
  for (char c : std::string("no")) {
    const std::vector<int32_t>* ids = tokens_->TokensSpelling(std::string(1, c));
    ASSERT_NE(ids, nullptr);
    ASSERT_TRUE(state->Accept(ids->front()).ok());
  }
  EXPECT_TRUE(state->Complete());
  EXPECT_FALSE(state->CanContinue());
  words = state->AllowedNext();
  EXPECT_TRUE(std::all_of(words.begin(), words.end(), [](uint32_t w) { return w == 0; }));
  // A token that spells none of them is refused, and the state marked failed.
  auto fresh = compiled->Start();
  EXPECT_FALSE(fresh->Accept(tokens_->TokensSpelling("x")->front()).ok());
  EXPECT_TRUE(fresh->failed());
  auto again = compiled->Start();
  EXPECT_TRUE(again->Accept(tokens_->TokensSpelling("m")->front()).ok());
  EXPECT_FALSE(again->failed());
}

TEST_F(ChoiceConstraintTest, EveryOutputIsAChoiceAndEqualsItsRunAlone) {
  StartEngine();
  const std::vector<std::string> choices = {"yes", "no", "maybe so", "The quick brown fox"};
  auto compiled = Compile(choices);
  auto prompt = loaded_->tokenizer()->Encode("Answer:");
  ASSERT_TRUE(prompt.ok());
  std::vector<Request> requests;
  for (uint64_t seed = 0; seed < 12; ++seed) {
    Request r;
    r.prompt = *prompt;
    r.sampling.temperature = seed == 0 ? 0.0f : 1.5f;  // one greedy, the rest sampled
    r.sampling.top_k = seed % 3 == 0 ? 0 : 40;
    r.sampling.top_p = seed % 2 == 0 ? 1.0f : 0.9f;
    r.sampling.seed = seed;
    r.stop.max_new_tokens = 30;
    r.return_logprobs = true;
    r.top_logprobs = 5;
    r.constraint = compiled;
    requests.push_back(r);
  }
  // Alone, one at a time.
  std::vector<std::vector<int32_t>> alone;
  for (const Request& r : requests) {
    auto sink = Submit(r);
    ASSERT_TRUE(sink->Wait());
    alone.push_back(sink->tokens());
    const std::string out = Spell(sink->tokens());
    EXPECT_NE(std::find(choices.begin(), choices.end(), out), choices.end()) << "'" << out << "'";
    EXPECT_EQ(sink->text(), out);
    // Each choice ends the output: nothing may follow it.
    EXPECT_EQ(sink->finish().reason, FinishReason::kStop);
    for (float lp : sink->logprobs()) EXPECT_TRUE(std::isfinite(lp) && lp <= 0.0f);
    // Alternatives come from the masked distribution: each spells on.
    for (const auto& top : sink->top_logprobs()) {
      for (const auto& [id, lp] : top) EXPECT_TRUE(std::isfinite(lp)) << id;
    }
  }
  // All at once, fused with unconstrained requests: the same tokens.
  std::vector<std::shared_ptr<CollectingSink>> fused;
  for (size_t i = 0; i < requests.size(); ++i) {
    fused.push_back(Submit(requests[i]));
    Request free = requests[i];
    free.constraint = nullptr;
    (void)Submit(free);
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_TRUE(fused[i]->Wait());
    EXPECT_EQ(fused[i]->tokens(), alone[i]) << "request " << i;
  }
}

TEST_F(ChoiceConstraintTest, EndOfSequenceOnlyWhereAChoiceIsComplete) {
  StartEngine();
  // "a" is complete but may continue to "a b": the model's EOS may end it
  // there, and nowhere else.
  auto compiled = Compile({"a", "a b c d e"});
  auto prompt = loaded_->tokenizer()->Encode("x");
  ASSERT_TRUE(prompt.ok());
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    Request r;
    r.prompt = *prompt;
    r.sampling.seed = seed;
    r.sampling.temperature = 2.0f;
    r.stop.max_new_tokens = 30;
    r.constraint = compiled;
    auto sink = Submit(r);
    ASSERT_TRUE(sink->Wait());
    const std::vector<int32_t> ids = sink->tokens();
    std::vector<int32_t> spelled = ids;
    if (sink->finish().reason == FinishReason::kEos) {
      ASSERT_FALSE(ids.empty());
      EXPECT_TRUE(loaded_->info().IsEos(ids.back()));
      spelled.pop_back();
      EXPECT_EQ(Spell(spelled), "a") << "EOS only where a choice is complete";
    } else {
      EXPECT_EQ(sink->finish().reason, FinishReason::kStop);
      EXPECT_EQ(Spell(spelled), "a b c d e");
    }
  }
  // A constraint for another vocabulary is refused by name.
  Request r;
  r.prompt = *prompt;
  r.constraint = nullptr;
  class OtherVocab final : public CompiledConstraint {
   public:
    int vocab_size() const override { return 7; }
    std::unique_ptr<ConstraintState> Start() const override { return nullptr; }  // never reached
  };
  r.constraint = std::make_shared<OtherVocab>();
  auto refused = engine_->Submit(r, std::make_shared<CollectingSink>());
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("vocabulary"));
}

}  // namespace
}  // namespace flover
