#include "engine/sampler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "util/field_error.h"

namespace flover {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::vector<float> Logits() { return {0.5f, 2.0f, -1.0f, 1.5f, 0.0f, 1.0f}; }

SamplingParams Params(float temperature, int top_k = 0, float top_p = 1.0f, uint64_t seed = 1) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.seed = seed;
  return p;
}

std::map<int, int> Histogram(const SamplingParams& p, int draws) {
  Sampler s(p);
  std::map<int, int> h;
  for (int i = 0; i < draws; ++i) {
    auto l = Logits();
    h[s.Sample(absl::MakeSpan(l), {})]++;
  }
  return h;
}

TEST(SamplerTest, GreedyIsArgmaxWithLogprob) {
  Sampler s(Params(0));
  auto l = Logits();
  float lp = 0;
  EXPECT_EQ(s.Sample(absl::MakeSpan(l), {}, &lp), 1);
  double z = 0;
  for (float x : Logits()) z += std::exp(x);
  EXPECT_NEAR(lp, 2.0 - std::log(z), 1e-6);
}

// The alternatives come from the distribution the token was drawn from:
// most likely first, the drawn token's log-probability among them when it
// is in the top n, and all of a support summing to 1.
TEST(SamplerTest, TopLogprobsAreTheDrawingDistributions) {
  struct Path {
    SamplingParams params;
    size_t support;  // tokens the distribution gives any mass
  };
  for (const Path& p : {Path{Params(0), 6}, Path{Params(0.7f), 6}, Path{Params(1.3f, 3), 3},
                        Path{Params(1.0f, 0, 0.5f), 2}}) {
    for (uint64_t seed = 0; seed < 20; ++seed) {
      SamplingParams params = p.params;
      params.seed = seed;
      Sampler s(params);
      auto l = Logits();
      float lp = 0;
      std::vector<std::pair<int32_t, float>> top;
      const int32_t pick = s.Sample(absl::MakeSpan(l), {}, &lp, 10, &top);
      ASSERT_EQ(top.size(), p.support) << "t=" << params.temperature;
      double mass = 0;
      for (size_t i = 0; i < top.size(); ++i) {
        mass += std::exp(top[i].second);
        if (i > 0) {
          EXPECT_GE(top[i - 1].second, top[i].second);
        }
        if (top[i].first == pick) {
          EXPECT_FLOAT_EQ(top[i].second, lp);
        }
      }
      EXPECT_NEAR(mass, 1.0, 1e-5);
      EXPECT_EQ(top[0].first, 1);  // the largest logit
      // Two alternatives only: the two most likely.
      auto l2 = Logits();
      Sampler again(params);
      again.Sample(absl::MakeSpan(l2), {}, nullptr, 2, &top);
      ASSERT_EQ(top.size(), 2u);
      EXPECT_EQ(top[0].first, 1);
      EXPECT_EQ(top[1].first, 3);
    }
  }
}

TEST(SamplerTest, TinyOrHugeTemperaturesAreWellDefined) {
  // Found by the abuse test: a denormal temperature (1/t overflows to inf)
  // made the top logit's probability 0 * inf = NaN and sampled the last id.
  for (float t : {1e-45f, 1e-40f, 1e-30f}) {
    for (int top_k : {0, 3}) {
      Sampler s(Params(t, top_k));
      auto l = Logits();
      float lp = 1;
      EXPECT_EQ(s.Sample(absl::MakeSpan(l), {}, &lp), 1) << "t=" << t << " top_k=" << top_k;
      EXPECT_TRUE(std::isfinite(lp)) << lp;
      EXPECT_LE(lp, 0.0f);
    }
  }
  // The largest float: every token nearly equally likely, all of them drawn.
  const auto h = Histogram(Params(3.4e38f), 6000);
  EXPECT_EQ(h.size(), Logits().size());
}

TEST(SamplerTest, SameSeedSameTokensDifferentSeedDifferent) {
  auto run = [](uint64_t seed) {
    Sampler s(Params(1.0f, 0, 1.0f, seed));
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) {
      auto l = Logits();
      out.push_back(s.Sample(absl::MakeSpan(l), {}));
    }
    return out;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

TEST(SamplerTest, TemperatureSamplingFollowsTheSoftmax) {
  const int draws = 60000;
  const float T = 0.7f;
  auto h = Histogram(Params(T), draws);
  double z = 0;
  for (float x : Logits()) z += std::exp(x / T);
  for (int i = 0; i < 6; ++i) {
    const double p = std::exp(Logits()[i] / T) / z;
    const double sd = std::sqrt(p * (1 - p) / draws);
    EXPECT_NEAR(h[i] / double(draws), p, 5 * sd + 1e-4) << i;
  }
}

TEST(SamplerTest, TopKKeepsOnlyTheKLargest) {
  auto h = Histogram(Params(1.0f, 2), 5000);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_GT(h[1], 0);
  EXPECT_GT(h[3], 0);
  // Ratio of the two kept tokens is e^(2 - 1.5).
  EXPECT_NEAR(double(h[1]) / h[3], std::exp(0.5), 0.15);
  auto h1 = Histogram(Params(1.0f, 1), 200);
  EXPECT_EQ(h1[1], 200);
}

TEST(SamplerTest, TopPKeepsTheSmallestNucleus) {
  // Probabilities sorted: id1 .39, id3 .24, id5 .14, id0 .09, id4 .05, id2 .02.
  auto h = Histogram(Params(1.0f, 0, 0.6f), 5000);
  EXPECT_EQ(h.size(), 2u);  // .39 < .6 <= .39 + .24
  EXPECT_GT(h[1], 0);
  EXPECT_GT(h[3], 0);
  auto h1 = Histogram(Params(1.0f, 0, 0.01f), 200);
  EXPECT_EQ(h1[1], 200);  // the top token alone always survives
}

TEST(SamplerTest, RepetitionPenaltyDividesPositiveAndMultipliesNegative) {
  SamplingParams p = Params(0);
  p.repetition_penalty = 2.0f;
  Sampler s(p);
  auto l = Logits();
  // id1 (2.0) is repeated twice but penalized once: 1.0 < 1.5 so id3 wins.
  EXPECT_EQ(s.Sample(absl::MakeSpan(l), {1, 1, 2}), 3);
  EXPECT_FLOAT_EQ(l[1], 1.0f);
  EXPECT_FLOAT_EQ(l[2], -2.0f);
  EXPECT_FLOAT_EQ(l[3], 1.5f);
}

TEST(SamplerTest, ValidationNamesTheField) {
  // The message starts with the field, and the error carries it.
  auto msg = [](SamplingParams p) {
    absl::Status st = ValidateSamplingParams(p);
    return absl::StrCat(ErrorField(st), "|", st.message());
  };
  EXPECT_TRUE(ValidateSamplingParams(Params(0.8f, 40, 0.9f)).ok());
  EXPECT_THAT(msg(Params(-0.1f)), StartsWith("temperature|temperature: "));
  EXPECT_THAT(msg(Params(NAN)), StartsWith("temperature|temperature: "));
  EXPECT_THAT(msg(Params(1, -1)), StartsWith("top_k|top_k: "));
  EXPECT_THAT(msg(Params(1, 0, 0.0f)), StartsWith("top_p|top_p: "));
  EXPECT_THAT(msg(Params(1, 0, 1.5f)), StartsWith("top_p|top_p: "));
  SamplingParams p = Params(1);
  p.repetition_penalty = 0;
  EXPECT_THAT(msg(p), StartsWith("repetition_penalty|repetition_penalty: "));
}

// The stages on their own (logits_processors.h): each filter lists what it
// keeps and sets the mass, whether it runs first or after another.
TEST(CandidateFiltersTest, TopKListsTheKBestInIdOrderFirstOrAfterANucleus) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, 0.5f, 2.5f};
  std::vector<int32_t> ids;
  std::vector<float> probs(logits.size()), scratch;
  const Candidates::Weights w{1.0f, 3.0f};
  Candidates first(logits, w, &ids, &probs, &scratch);
  TopK(3).Narrow(first);
  EXPECT_THAT(ids, ::testing::ElementsAre(1, 3, 5));  // 3, 3, 2.5: id order
  EXPECT_DOUBLE_EQ(first.mass(), double{probs[1]} + probs[3] + probs[5]);
  // After top-p 0.95 (which lists all but the least likely, most likely
  // first): the best two of that list, in its order, ties to the lower id.
  Candidates after(logits, w, &ids, &probs, &scratch);
  TopP(0.95f).Narrow(after);
  ASSERT_FALSE(after.whole());
  EXPECT_THAT(ids, ::testing::ElementsAre(1, 3, 5, 2, 0));
  TopK(2).Narrow(after);
  EXPECT_THAT(ids, ::testing::ElementsAre(1, 3));
  EXPECT_DOUBLE_EQ(after.mass(), double{probs[1]} + probs[3]);
  // k at least the vocabulary keeps everything, listed.
  Candidates all(logits, w, &ids, &probs, &scratch);
  TopK(100).Narrow(all);
  EXPECT_EQ(ids.size(), logits.size());
}

TEST(LogitsProcessorsTest, RepetitionPenaltyOncePerDistinctTokenAndIgnoresOutOfRange) {
  std::vector<float> logits = {2.0f, -2.0f, 4.0f};
  RepetitionPenalty p(2.0f);
  p.Process(absl::MakeSpan(logits), {0, 1, 0, 1, 7, -1});
  EXPECT_THAT(logits, ::testing::ElementsAre(1.0f, -4.0f, 4.0f));
  p.Process(absl::MakeSpan(logits), {2});  // scratch reset between calls
  EXPECT_THAT(logits, ::testing::ElementsAre(1.0f, -4.0f, 2.0f));
}

TEST(LogitsProcessorsTest, PresenceAndFrequencyCountOnlyTheOutput) {
  std::vector<float> logits = {1.0f, 1.0f, 1.0f, 1.0f};
  PresenceFrequencyPenalty p(0.5f, 0.25f, /*prompt_length=*/2);
  // Prompt {3, 3}; output {0, 1, 0}: token 0 twice, token 1 once, 3 not at all.
  p.Process(absl::MakeSpan(logits), {3, 3, 0, 1, 0});
  EXPECT_THAT(logits, ::testing::ElementsAre(1.0f - 0.5f - 0.5f, 1.0f - 0.5f - 0.25f, 1.0f, 1.0f));
}

TEST(LogitsProcessorsTest, LogitBiasAddsToItsTokens) {
  std::vector<float> logits = {1.0f, 2.0f, 3.0f};
  LogitBias({{0, 5.0f}, {2, -100.0f}}).Process(absl::MakeSpan(logits), {});
  EXPECT_THAT(logits, ::testing::ElementsAre(6.0f, 2.0f, -97.0f));
}

TEST(SamplerTest, BiasAndMinPDecideWhatCanBeDrawn) {
  // A bias of -100 keeps a token from ever being drawn; min_p 0.5 keeps only
  // tokens at least half as likely as the best.
  SamplingParams params;
  params.logit_bias = {{1, -100.0f}};
  params.min_p = 0.5f;
  std::map<int32_t, int> counts;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    params.seed = seed;
    Sampler s(params);
    std::vector<float> logits = {0.0f, 5.0f, std::log(0.6f), std::log(0.4f)};
    ++counts[s.Sample(absl::MakeSpan(logits), {})];
  }
  EXPECT_EQ(counts.count(1), 0u);  // biased away
  EXPECT_EQ(counts.count(3), 0u);  // 0.4 < 0.5 of the best
  EXPECT_GT(counts[0], 150);       // 1 : 0.6 of the mass
  EXPECT_GT(counts[2], 80);
  // Out-of-range values are refused by name.
  SamplingParams bad;
  bad.presence_penalty = 3.0f;
  EXPECT_EQ(ErrorField(ValidateSamplingParams(bad)), "presence_penalty");
  bad = SamplingParams();
  bad.min_p = 1.5f;
  EXPECT_EQ(ErrorField(ValidateSamplingParams(bad)), "min_p");
  bad = SamplingParams();
  bad.logit_bias = {{2, 101.0f}};
  EXPECT_EQ(ErrorField(ValidateSamplingParams(bad)), "logit_bias");
}

TEST(RngTest, UniformInUnitInterval) {
  Rng r(123);
  double sum = 0;
  for (int i = 0; i < 100000; ++i) {
    const double u = r.NextDouble();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 100000, 0.5, 0.005);
}

}  // namespace
}  // namespace flover
