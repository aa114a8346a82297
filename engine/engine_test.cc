// Engine behaviour: cancellation, deadlines, admission limits, validation,
// stop conditions, logprobs and draining.
#include "engine/engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "engine/generate.h"
#include "model/model_loader.h"
#include "engine/testing/collecting_sink.h"
#include "tokenizer/unicode.h"
#include "engine/testing/backends.h"

namespace flover {
namespace {

using ::testing::HasSubstr;
using testing::CollectingSink;

class EngineTest : public ::testing::Test {
 protected:
  void Start(const std::string& spec, EngineOptions options) {
    auto loaded = LoadModel(spec);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    loaded_ = std::move(*loaded);
    model_ = testing::ModelOn(*backend_, *loaded_);
    auto e = Engine::Create(*model_, loaded_->tokenizer().get(), options);
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = std::move(*e);
  }
  static EngineOptions Options(SchedulerPolicy policy = SchedulerPolicy::kFusion) {
    EngineOptions o;
    o.scheduler.policy = policy;
    o.scheduler.max_batch = 4;
    o.max_seq_len = 512;
    return o;
  }
  static Request Greedy(std::vector<int32_t> prompt, int max_new, bool ignore_eos = true) {
    Request r;
    r.prompt = std::move(prompt);
    r.sampling.temperature = 0;
    r.stop.max_new_tokens = max_new;
    r.stop.ignore_eos = ignore_eos;
    return r;
  }
  std::pair<RequestId, std::shared_ptr<CollectingSink>> Submit(const Request& r) {
    auto sink = std::make_shared<CollectingSink>();
    auto id = engine_->Submit(r, sink);
    EXPECT_TRUE(id.ok()) << id.status();
    return {id.ok() ? *id : 0, sink};
  }
  std::string SubmitError(const Request& r) {
    auto id = engine_->Submit(r, std::make_shared<CollectingSink>());
    EXPECT_FALSE(id.ok());
    return std::string(id.status().message());
  }

  std::unique_ptr<kernels::Backend> backend_ = testing::CpuBackend();
  std::unique_ptr<LoadedModel> loaded_;
  std::unique_ptr<CausalLm> model_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(EngineTest, CancelWhileQueuedAndWhileRunning) {
  Start("builtin:tiny", Options(SchedulerPolicy::kSequential));
  auto [a, sink_a] = Submit(Greedy({1, 2, 3}, 480));
  auto [b, sink_b] = Submit(Greedy({4, 5}, 10));
  ASSERT_TRUE(engine_->Cancel(b).ok());  // b waits behind a
  ASSERT_TRUE(sink_b->Wait());
  EXPECT_EQ(sink_b->finish().reason, FinishReason::kCancelled);
  EXPECT_TRUE(sink_b->tokens().empty());

  while (sink_a->tokens().size() < 5) absl::SleepFor(absl::Milliseconds(1));
  ASSERT_TRUE(engine_->Cancel(a).ok());
  ASSERT_TRUE(sink_a->Wait());
  EXPECT_EQ(sink_a->finish().reason, FinishReason::kCancelled);
  EXPECT_LT(sink_a->tokens().size(), 480u);
  EXPECT_EQ(sink_a->finishes(), 1);
  EXPECT_EQ(engine_->Cancel(a).code(), absl::StatusCode::kNotFound);  // already finished
  const EngineStats s = engine_->Stats();
  EXPECT_EQ(s.finished[static_cast<int>(FinishReason::kCancelled)], 2);
  EXPECT_EQ(s.active, 0);
  EXPECT_EQ(s.queued, 0);
}

TEST_F(EngineTest, DeadlineWhileQueuedAndWhileRunning) {
  Start("builtin:tiny", Options(SchedulerPolicy::kSequential));
  auto [a, sink_a] = Submit(Greedy({1, 2, 3}, 480));
  Request queued = Greedy({4}, 10);
  queued.deadline = absl::Now() + absl::Milliseconds(2);
  auto [b, sink_b] = Submit(queued);
  ASSERT_TRUE(sink_b->Wait());
  EXPECT_EQ(sink_b->finish().reason, FinishReason::kDeadline);
  EXPECT_TRUE(sink_b->tokens().empty());
  ASSERT_TRUE(engine_->Cancel(a).ok());
  ASSERT_TRUE(sink_a->Wait());

  Request running = Greedy({7, 8}, 480);
  running.deadline = absl::Now() + absl::Milliseconds(20);
  auto [c, sink_c] = Submit(running);
  ASSERT_TRUE(sink_c->Wait());
  EXPECT_EQ(sink_c->finish().reason, FinishReason::kDeadline);
  EXPECT_LT(sink_c->tokens().size(), 480u);
}

TEST_F(EngineTest, FullQueueIsRefusedAtOnce) {
  EngineOptions o = Options(SchedulerPolicy::kDynamic);
  o.scheduler.batch_delay = absl::Seconds(60);  // nothing gets admitted
  o.max_queue = 2;
  Start("builtin:tiny", o);
  Submit(Greedy({1}, 4));
  Submit(Greedy({2}, 4));
  auto third = engine_->Submit(Greedy({3}, 4), std::make_shared<CollectingSink>());
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(third.status().message()), HasSubstr("queue is full"));
  EXPECT_EQ(engine_->Stats().queued, 2);
}

TEST_F(EngineTest, InvalidRequestsNameTheField) {
  Start("builtin:tiny", Options());
  EXPECT_THAT(SubmitError(Greedy({}, 4)), HasSubstr("prompt: is empty"));
  EXPECT_THAT(SubmitError(Greedy({1, 512}, 4)), HasSubstr("prompt: token id 512 at index 1"));
  EXPECT_THAT(SubmitError(Greedy({1}, 0)), HasSubstr("max_new_tokens"));
  EXPECT_THAT(SubmitError(Greedy(std::vector<int32_t>(500, 1), 20)),
              HasSubstr("exceeds max_seq_len (512)"));
  Request r = Greedy({1}, 4);
  r.sampling.temperature = -1;
  EXPECT_THAT(SubmitError(r), HasSubstr("temperature"));
  r = Greedy({1}, 4);
  r.sampling.top_p = 1.5;
  EXPECT_THAT(SubmitError(r), HasSubstr("top_p"));
  r = Greedy({1}, 4);
  r.sampling.top_k = -2;
  EXPECT_THAT(SubmitError(r), HasSubstr("top_k"));
  r = Greedy({1}, 4);
  r.stop.stop_strings = {"x"};
  EXPECT_THAT(SubmitError(r), HasSubstr("stop_strings: the model has no tokenizer"));
  r = Greedy({1}, 4);
  r.stop.stop_token_ids = {9999};
  EXPECT_THAT(SubmitError(r), HasSubstr("stop_token_ids"));
  EXPECT_EQ(engine_->Stats().submitted, 0);
}

TEST_F(EngineTest, StopStringsAndStopTokensAndText) {
  EngineOptions o = Options();
  o.max_seq_len = 40;  // the fixture's positions
  Start("tests/golden/tiny_f32", o);
  ASSERT_NE(engine_, nullptr);
  const Tokenizer& tok = *loaded_->tokenizer();
  auto prompt = tok.Encode("The quick brown fox");
  ASSERT_TRUE(prompt.ok());
  GenerateOptions g;
  g.max_new_tokens = 30;
  g.ignore_eos = true;
  g.sampling.temperature = 0;
  auto cpu = testing::CpuBackend();
  auto reference = testing::ModelOn(*cpu, *loaded_);
  auto alone = GenerateAlone(*reference, *prompt, g);
  ASSERT_TRUE(alone.ok());
  const std::string text = tok.Decode(*alone);

  // Without stops: same tokens, and the streamed text is the decoded text.
  auto [a, sink_a] = Submit(Greedy(*prompt, 30));
  ASSERT_TRUE(sink_a->Wait());
  EXPECT_EQ(sink_a->tokens(), *alone);
  EXPECT_EQ(sink_a->text(), text);

  // A stop string: the text of a later output token that is plain ASCII (the
  // random fixture model mostly emits partial UTF-8 bytes, so seeded
  // sampling is used and the first seed whose output has one is taken). The
  // output ends right before the stop string's first occurrence.
  std::string stop, raw;
  Request r = Greedy(*prompt, 30);
  r.sampling.temperature = 1.5f;
  std::vector<int32_t> sampled;
  for (uint64_t seed = 1; seed < 50 && stop.empty(); ++seed) {
    g.sampling = r.sampling;
    g.sampling.seed = r.sampling.seed = seed;
    auto out = GenerateAlone(*reference, *prompt, g);
    ASSERT_TRUE(out.ok());
    for (size_t k = 3; k < out->size() && stop.empty(); ++k) {
      const std::string piece = tok.DecodeBytes({(*out)[k]});
      if (!piece.empty() && std::all_of(piece.begin(), piece.end(),
                                        [](char c) { return c > ' ' && c < 127; })) {
        stop = piece;
        sampled = *out;
      }
    }
  }
  ASSERT_FALSE(stop.empty()) << "no ASCII token in 49 sampled outputs";
  raw = tok.DecodeBytes(sampled);
  r.stop.stop_strings = {stop, "never appears in this output"};
  auto [b, sink_b] = Submit(r);
  ASSERT_TRUE(sink_b->Wait());
  EXPECT_EQ(sink_b->finish().reason, FinishReason::kStop);
  EXPECT_EQ(sink_b->text(), SanitizeUtf8(raw.substr(0, raw.find(stop))));
  EXPECT_LT(sink_b->tokens().size(), sampled.size());

  // A stop token: generation ends with it.
  const int32_t stop_token = (*alone)[6];
  r = Greedy(*prompt, 30);
  r.stop.stop_strings.clear();
  r.stop.stop_token_ids = {stop_token};
  auto [c, sink_c] = Submit(r);
  ASSERT_TRUE(sink_c->Wait());
  EXPECT_EQ(sink_c->finish().reason, FinishReason::kStop);
  const auto cut = std::find(alone->begin(), alone->end(), stop_token) + 1;
  EXPECT_EQ(sink_c->tokens(), std::vector<int32_t>(alone->begin(), cut));
}

TEST_F(EngineTest, EosStopsUnlessIgnoredAndLogprobsAreReturned) {
  Start("builtin:tiny", Options());
  // Find a prompt whose greedy continuation hits EOS (id 511) quickly by
  // making EOS the prompt's own repeated token is not guaranteed; instead
  // check the rule on whatever the model does: with ignore_eos the output
  // is always max_new_tokens long, and without it, it stops at the first EOS.
  Request r = Greedy({5, 6, 7}, 40, /*ignore_eos=*/true);
  r.return_logprobs = true;
  r.sampling.temperature = 1.0;
  r.sampling.seed = 3;
  auto [a, sink] = Submit(r);
  ASSERT_TRUE(sink->Wait());
  EXPECT_EQ(sink->tokens().size(), 40u);
  for (float lp : sink->logprobs()) {
    EXPECT_LE(lp, 0.0f);
    EXPECT_TRUE(std::isfinite(lp));
  }
  const std::vector<int32_t> with_eos = sink->tokens();
  r.stop.ignore_eos = false;
  auto [b, sink_b] = Submit(r);
  ASSERT_TRUE(sink_b->Wait());
  const int eos = loaded_->info().eos_token_ids.at(0);
  const auto first = std::find(with_eos.begin(), with_eos.end(), eos);
  if (first == with_eos.end()) {
    EXPECT_EQ(sink_b->tokens(), with_eos);
    EXPECT_EQ(sink_b->finish().reason, FinishReason::kLength);
  } else {
    EXPECT_EQ(sink_b->tokens(), std::vector<int32_t>(with_eos.begin(), first + 1));
    EXPECT_EQ(sink_b->finish().reason, FinishReason::kEos);
  }
}

TEST_F(EngineTest, ShutdownDrainsInFlightRequestsAndRefusesNewOnes) {
  Start("builtin:tiny", Options());
  std::vector<std::shared_ptr<CollectingSink>> sinks;
  for (int i = 0; i < 6; ++i) sinks.push_back(Submit(Greedy({i + 1, 2}, 50)).second);
  engine_->Shutdown(absl::Seconds(30));
  for (auto& s : sinks) {
    ASSERT_EQ(s->finishes(), 1);
    EXPECT_EQ(s->finish().reason, FinishReason::kLength);
    EXPECT_EQ(s->tokens().size(), 50u);
  }
  auto late = engine_->Submit(Greedy({1}, 4), std::make_shared<CollectingSink>());
  EXPECT_EQ(late.status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(EngineTest, ShutdownWithoutDrainCancelsWhatIsLeft) {
  Start("builtin:tiny", Options());
  auto [a, sink] = Submit(Greedy({1, 2}, 480));
  engine_->Shutdown(absl::ZeroDuration());
  ASSERT_EQ(sink->finishes(), 1);
  EXPECT_EQ(sink->finish().reason, FinishReason::kCancelled);
}

}  // namespace
}  // namespace flover
