// SampleAndAccept against what single steps would sample: drafts are taken
// while they match, an ending token stops the rows, each row's penalties
// see the drafts before it, and a constraint advances row by row.
#include "engine/draft_verifier.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

namespace flover {
namespace {

using ::testing::ElementsAre;

constexpr int V = 8;

// Logit rows whose best token is each of `picks` in turn.
std::vector<float> RowsFavouring(const std::vector<int32_t>& picks) {
  std::vector<float> logits(picks.size() * V, 0.0f);
  for (size_t r = 0; r < picks.size(); ++r) logits[r * V + picks[r]] = 5.0f;
  return logits;
}

SampledTokens Verify(Sampler& sampler, const std::vector<int32_t>& tokens, const std::vector<int32_t>& drafts,
                  std::vector<float>& logits, int rows, ConstraintState* constraint = nullptr,
                  int32_t eos = -1) {
  std::vector<int32_t> history;
  SampledTokens out;
  SampleAndAccept({&sampler, tokens, drafts, constraint, true, 0, [eos](int32_t t) { return t == eos; }},
                  {absl::MakeSpan(logits), {}, V, 0, rows}, &history, &out);
  return out;
}

TEST(DraftVerifierTest, TakesDraftsWhileTheyMatchAndTheTokenAfter) {
  SamplingParams greedy;
  greedy.temperature = 0;
  Sampler sampler(greedy);
  // Drafts 3, 4, 5; the rows say 3, 4, 6: two stand, then 6.
  std::vector<float> logits = RowsFavouring({3, 4, 6, 1});
  SampledTokens out = Verify(sampler, {1, 2}, {3, 4, 5}, logits, 4);
  EXPECT_THAT(out.tokens, ElementsAre(3, 4, 6));
  EXPECT_EQ(out.accepted(), 2);
  EXPECT_EQ(out.logprobs.size(), 3u);
  // All of them: the last row's token follows.
  logits = RowsFavouring({3, 4, 5, 7});
  EXPECT_THAT(Verify(sampler, {1, 2}, {3, 4, 5}, logits, 4).tokens, ElementsAre(3, 4, 5, 7));
  // The first refused: one token, as a step without drafts.
  logits = RowsFavouring({0, 4, 5, 7});
  EXPECT_THAT(Verify(sampler, {1, 2}, {3, 4, 5}, logits, 4).tokens, ElementsAre(0));
  // Fewer rows than drafts (the step's budget): those verified only.
  logits = RowsFavouring({3, 4});
  EXPECT_THAT(Verify(sampler, {1, 2}, {3, 4, 5}, logits, 2).tokens, ElementsAre(3, 4));
  // A greedy step's best tokens in place of logits.
  std::vector<int32_t> history;
  SampledTokens best;
  const std::vector<int32_t> ids = {9, 9, 3, 4, 2};  // this sequence's rows start at 2
  SampleAndAccept({&sampler, {}, {3, 4}, nullptr, false, 0, [](int32_t) { return false; }},
                  {{}, ids, V, 2, 3}, &history, &best);
  EXPECT_THAT(best.tokens, ElementsAre(3, 4, 2));
}

TEST(DraftVerifierTest, AnEndingTokenStopsTheRows) {
  SamplingParams greedy;
  greedy.temperature = 0;
  Sampler sampler(greedy);
  std::vector<float> logits = RowsFavouring({3, 4, 5});
  // 4 is EOS: nothing after it stands, though it was the draft.
  EXPECT_THAT(Verify(sampler, {1}, {3, 4}, logits, 3, nullptr, /*eos=*/4).tokens, ElementsAre(3, 4));
}

TEST(DraftVerifierTest, EachRowsPenaltiesSeeTheDraftsBeforeIt) {
  // A presence penalty over the output: row 1 follows draft 3, so 3 is
  // penalised there and the row's 3.5-over-3 lead turns to 5.
  SamplingParams p;
  p.temperature = 0;
  p.presence_penalty = 2.0f;
  Sampler sampler(p, /*prompt_length=*/1);
  std::vector<float> logits(2 * V, 0.0f);
  logits[0 * V + 3] = 5.0f;
  logits[1 * V + 3] = 3.5f;
  logits[1 * V + 5] = 3.0f;
  SampledTokens out = Verify(sampler, {1}, {3, 9}, logits, 2);
  EXPECT_THAT(out.tokens, ElementsAre(3, 5));
}

// Allows only token `next`, then `next` + 1, ...; counts what it took.
class Counting final : public ConstraintState {
 public:
  explicit Counting(int32_t next) : next_(next), allowed_(1, 0) {}
  const std::vector<uint32_t>& AllowedNext() const override {
    allowed_[0] = 1u << next_;
    return allowed_;
  }
  bool Complete() const override { return false; }
  bool CanContinue() const override { return next_ < V; }
  absl::Status Accept(int32_t token) override {
    if (token != next_) {
      failed_ = true;
      return absl::InvalidArgumentError("refused");
    }
    taken.push_back(token);
    ++next_;
    return absl::OkStatus();
  }
  bool failed() const override { return failed_; }
  std::vector<int32_t> taken;

 private:
  int32_t next_;
  mutable std::vector<uint32_t> allowed_;
  bool failed_ = false;
};

TEST(DraftVerifierTest, AConstraintAdvancesRowByRow) {
  SamplingParams greedy;
  greedy.temperature = 0;
  Sampler sampler(greedy);
  Counting constraint(3);
  std::vector<float> logits = RowsFavouring({3, 4, 6});
  SampledTokens out = Verify(sampler, {1}, {3, 4}, logits, 3, &constraint);
  EXPECT_THAT(out.tokens, ElementsAre(3, 4, 6));
  // 6 was not allowed (no mask here): taken 3 and 4, then failed.
  EXPECT_THAT(constraint.taken, ElementsAre(3, 4));
  EXPECT_TRUE(constraint.failed());
}

}  // namespace
}  // namespace flover
