// The draft model of speculative decoding (engine/draft_model.h): its
// proposals are the greedy continuation of each sequence's tokens, whatever
// it computed before (a refused draft rolled back by comparing tokens, a
// prompt caught up in parts), fused across sequences; and a draft model
// with the target's own weights and dtype drafts exactly what the target
// then samples greedily, so the engine takes every draft.
#include "engine/draft_model.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "engine/engine.h"
#include "engine/generate.h"
#include "model/model_loader.h"
#include "testing/backends.h"
#include "testing/collecting_sink.h"

namespace flover {
namespace {

class DraftModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    loaded_ = testing::ValueOrDie(LoadModel("builtin:tiny"), "builtin:tiny");
    backend_ = testing::CpuBackend();
    model_ = testing::ModelOn(*backend_, *loaded_);
  }
  // The n greedy tokens after `tokens`, the model alone.
  std::vector<int32_t> Greedy(const std::vector<int32_t>& tokens, int n) {
    return testing::ValueOrDie(GenerateAlone(*model_, tokens, GreedyTokens(n)), "generate");
  }
  std::unique_ptr<LoadedModel> loaded_;
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<CausalLm> model_;
};

TEST_F(DraftModelTest, ProposalsAreTheGreedyContinuationWhateverWasComputedBefore) {
  std::unique_ptr<kernels::Backend> draft_backend = testing::CpuBackend();
  std::unique_ptr<CausalLm> draft_lm = testing::ModelOn(*draft_backend, *loaded_);
  auto draft = testing::ValueOrDie(DraftModel::Create(*draft_lm, loaded_->info(), 4, 128, 64, 0), "draft");
  std::vector<int32_t> a = {5, 17, 99, 3, 42, 7};
  std::vector<int32_t> b(50);  // longer than one call's rows: caught up in parts
  for (int i = 0; i < 50; ++i) b[i] = (i * 37 + 11) % 200;
  auto propose = [&](std::vector<DraftModel::Ask> asks, int rows) {
    return testing::ValueOrDie(draft->Propose(asks, rows), "propose");
  };
  // a fits; b gets 30 rows of its prompt and no drafts yet.
  auto first = propose({{1, a, 4}, {2, b, 3}}, 36);
  EXPECT_EQ(first[0], Greedy(a, 4));
  EXPECT_TRUE(first[1].empty());
  auto second = propose({{2, b, 3}}, 64);
  EXPECT_EQ(second[0], Greedy(b, 3));
  // a's drafts were refused after the first: a different token follows it.
  std::vector<int32_t> a2 = a;
  a2.push_back(first[0][0]);
  a2.push_back(first[0][1] == 8 ? 9 : 8);
  auto third = propose({{1, a2, 5}, {2, b, 2}}, 64);
  EXPECT_EQ(third[0], Greedy(a2, 5));
  EXPECT_EQ(third[1], Greedy(b, 2));
  // A sequence that finished gives its blocks back; its id starts afresh.
  draft->Forget(1);
  auto fourth = propose({{1, b, 2}}, 64);
  EXPECT_EQ(fourth[0], Greedy(b, 2));
}

TEST_F(DraftModelTest, TheTargetsOwnWeightsAreDraftsTheTargetTakesEveryTime) {
  std::unique_ptr<kernels::Backend> draft_backend = testing::CpuBackend();
  std::unique_ptr<CausalLm> draft_lm = testing::ModelOn(*draft_backend, *loaded_);
  EngineOptions o;
  o.scheduler.max_batch = 4;
  o.max_seq_len = 128;
  o.speculative.mode = SpeculativeMode::kDraft;
  o.speculative.max_tokens = 4;
  o.speculative.max_step_rows = 16;
  o.draft_model = draft_lm.get();
  std::vector<std::vector<int32_t>> prompts = {{5, 17, 99}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {200, 3}};
  // The references first: the engine runs model_ on its own thread until
  // every request is done (found: a reference computed beside it, on the
  // same model, raced the engine's steps for its buffers under load).
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) want.push_back(Greedy(p, 30));
  auto engine = testing::ValueOrDie(Engine::Create(*model_, nullptr, o), "engine");
  std::vector<std::shared_ptr<testing::CollectingSink>> sinks;
  for (const auto& p : prompts) {
    Request r;
    r.prompt = p;
    r.sampling.temperature = 0;
    r.stop.max_new_tokens = 30;
    r.stop.ignore_eos = true;
    sinks.push_back(std::make_shared<testing::CollectingSink>());
    ASSERT_TRUE(engine->Submit(r, sinks.back()).ok());
  }
  for (size_t i = 0; i < sinks.size(); ++i) {
    ASSERT_TRUE(sinks[i]->Wait());
    EXPECT_EQ(sinks[i]->tokens(), want[i]) << i;
  }
  const EngineStats s = engine->Stats();
  EXPECT_GT(s.draft_tokens, 30);
  EXPECT_EQ(s.accepted_tokens, s.draft_tokens);
  EXPECT_LT(s.steps, 3 * 30 / 2);  // several tokens a step
}

TEST_F(DraftModelTest, ADraftModelOfAnotherVocabularyIsRefused) {
  auto other = testing::ValueOrDie(LoadModel("builtin:llama-tiny"), "llama-tiny");
  std::unique_ptr<kernels::Backend> draft_backend = testing::CpuBackend();
  std::unique_ptr<CausalLm> draft_lm = testing::ModelOn(*draft_backend, *other);
  EngineOptions o;
  o.max_seq_len = 128;
  o.speculative.mode = SpeculativeMode::kDraft;
  o.draft_model = draft_lm.get();
  auto engine = Engine::Create(*model_, nullptr, o);
  if (other->info().vocab_size == loaded_->info().vocab_size) GTEST_SKIP() << "the same vocabulary size";
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("vocabulary"), std::string::npos) << engine.status();
  o.draft_model = nullptr;
  EXPECT_FALSE(Engine::Create(*model_, nullptr, o).ok());
}

}  // namespace
}  // namespace flover
