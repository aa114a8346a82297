#include "clients/load_plan.h"

#include <cmath>

#include "gtest/gtest.h"

namespace flover::clients {
namespace {

// Mean and coefficient of variation of the gaps.
std::pair<double, double> GapMoments(const std::vector<double>& t) {
  double sum = 0, sq = 0;
  const int n = static_cast<int>(t.size()) - 1;
  for (int i = 1; i <= n; ++i) {
    const double g = t[i] - t[i - 1];
    sum += g;
    sq += g * g;
  }
  const double mean = sum / n;
  return {mean, std::sqrt(sq / n - mean * mean) / mean};
}

TEST(LoadPlanTest, GapsHaveTheRateAndTheBurstinessAsked) {
  // A gamma of shape k has coefficient of variation 1/sqrt(k): 1 for
  // Poisson, 2 for burstiness 0.25, 0.5 for burstiness 4.
  for (double burstiness : {1.0, 0.25, 4.0}) {
    std::mt19937_64 rng(7);
    const std::vector<double> t = ArrivalOffsets(40000, 8.0, burstiness, rng);
    ASSERT_EQ(t.size(), 40000u);
    EXPECT_EQ(t[0], 0.0);
    for (size_t i = 1; i < t.size(); ++i) ASSERT_GE(t[i], t[i - 1]);
    const auto [mean, cv] = GapMoments(t);
    EXPECT_NEAR(mean, 1.0 / 8, 0.03 / 8) << burstiness;
    EXPECT_NEAR(cv, 1 / std::sqrt(burstiness), 0.05 / std::sqrt(burstiness)) << burstiness;
  }
}

TEST(LoadPlanTest, PoissonPlanIsTheExponentialOneAndBurstIsAllAtOnce) {
  std::mt19937_64 a(3), b(3);
  const std::vector<double> t = ArrivalOffsets(5, 2.0, 1.0, a);
  std::exponential_distribution<double> gap(2.0);
  double expect = 0;
  for (int i = 1; i < 5; ++i) {
    expect += gap(b);
    EXPECT_DOUBLE_EQ(t[i], expect);
  }
  std::mt19937_64 c(3);
  EXPECT_EQ(ArrivalOffsets(4, 0, 1.0, c), std::vector<double>(4, 0.0));
}

TEST(LoadPlanTest, SloChecksEachObjectiveGiven) {
  Slo none;
  EXPECT_FALSE(none.any());
  EXPECT_TRUE(MeetsSlo(none, 100, 1000, 10));
  Slo ttft{0.5, 0, 0};
  EXPECT_TRUE(MeetsSlo(ttft, 0.5, 9, 10));   // the bound is inclusive
  EXPECT_FALSE(MeetsSlo(ttft, 0.51, 9, 10));
  Slo tpot{0, 0.1, 0};
  EXPECT_TRUE(MeetsSlo(tpot, 1.0, 1.9, 10));   // 0.9 s over 9 gaps = 0.1
  EXPECT_FALSE(MeetsSlo(tpot, 1.0, 2.0, 10));  // 1.0 s over 9 gaps
  EXPECT_TRUE(MeetsSlo(tpot, 1.0, 50, 1));     // one token: no gap to miss
  Slo e2e{0, 0, 2};
  EXPECT_TRUE(MeetsSlo(e2e, 1, 2, 5));
  EXPECT_FALSE(MeetsSlo(e2e, 1, 2.01, 5));
  Slo all{0.5, 0.1, 2};
  EXPECT_TRUE(all.any());
  EXPECT_TRUE(MeetsSlo(all, 0.4, 1.2, 9));
  EXPECT_FALSE(MeetsSlo(all, 0.4, 1.3, 9));  // TPOT 0.1125
}

}  // namespace
}  // namespace flover::clients
