#include "engine/speculation.h"

#include <vector>

#include "gtest/gtest.h"

namespace flover {
namespace {

TEST(NgramDraftTest, ContinuesTheLatestEarlierMatchOfTheLongestSuffix) {
  // "1 2 3" occurred twice before; the later one (followed by 8 9) wins.
  const std::vector<int32_t> t = {1, 2, 3, 4, 5, 0, 1, 2, 3, 8, 9, 7, 1, 2, 3};
  EXPECT_EQ(NgramDraft(t, 4, 3, 5), (std::vector<int32_t>{8, 9, 7, 1}));
  EXPECT_EQ(NgramDraft(t, 2, 3, 5), (std::vector<int32_t>{8, 9}));
  // A longer suffix that matches beats a later, shorter one.
  const std::vector<int32_t> u = {5, 1, 2, 3, 40, 9, 2, 3, 50, 5, 1, 2, 3};
  EXPECT_EQ(NgramDraft(u, 1, 2, 4), (std::vector<int32_t>{40}));
  EXPECT_EQ(NgramDraft(u, 1, 2, 2), (std::vector<int32_t>{50}));
  // The match may run into the suffix itself (a repeating pattern).
  const std::vector<int32_t> r = {7, 7, 7, 7};
  EXPECT_EQ(NgramDraft(r, 5, 3, 3), (std::vector<int32_t>{7}));
}

TEST(NgramDraftTest, NothingWithoutAMatchOrRoom) {
  const std::vector<int32_t> t = {1, 2, 3, 4, 5, 6};
  EXPECT_TRUE(NgramDraft(t, 4, 2, 4).empty());
  EXPECT_TRUE(NgramDraft({1, 2, 1, 2}, 0, 2, 2).empty());
  EXPECT_TRUE(NgramDraft({}, 4, 1, 3).empty());
  EXPECT_TRUE(NgramDraft({3}, 4, 1, 3).empty());
}

TEST(DraftLengthTest, GrowsAfterATakenDraftAndShrinksToWhatWasTaken) {
  EXPECT_EQ(NextDraftLength(4, 4, 6), 6);
  EXPECT_EQ(NextDraftLength(6, 6, 6), 6);
  EXPECT_EQ(NextDraftLength(6, 2, 6), 3);
  EXPECT_EQ(NextDraftLength(6, 0, 6), 1);
  EXPECT_EQ(NextDraftLength(0, 0, 6), 1);
}

TEST(DraftPacerTest, PausesLongerAfterEachRefusedDraftInARow) {
  DraftPacer p(6);
  EXPECT_TRUE(p.Drafts());
  EXPECT_EQ(p.length(), 6);
  auto paused_steps = [&] {
    int n = 0;
    while (!p.Drafts()) ++n;
    return n;
  };
  p.Verified(6, 0);  // refused outright: a pause of 2, length 1
  EXPECT_EQ(p.length(), 1);
  EXPECT_EQ(paused_steps(), 2);
  p.Verified(1, 0);
  EXPECT_EQ(paused_steps(), 4);
  p.Verified(1, 0);
  EXPECT_EQ(paused_steps(), 8);
  p.Verified(1, 0);
  EXPECT_EQ(paused_steps(), 16);
  p.Verified(1, 0);
  EXPECT_EQ(paused_steps(), 16);  // at most
  p.Verified(1, 1);  // taken: no pause, longer drafts, the count starts again
  EXPECT_EQ(paused_steps(), 0);
  EXPECT_EQ(p.length(), 3);
  p.Verified(3, 0);
  EXPECT_EQ(paused_steps(), 2);
  p.Verified(0, 0);  // nothing drafted (no match): no pause
  EXPECT_EQ(paused_steps(), 0);
}

TEST(SpeculativeModeTest, Names) {
  EXPECT_EQ(*ParseSpeculativeMode("ngram"), SpeculativeMode::kNgram);
  EXPECT_EQ(SpeculativeModeName(*ParseSpeculativeMode("off")), "off");
  EXPECT_EQ(*ParseSpeculativeMode("draft"), SpeculativeMode::kDraft);
  EXPECT_EQ(SpeculativeModeName(SpeculativeMode::kDraft), "draft");
  EXPECT_EQ(ParseSpeculativeMode("eagle").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace flover
