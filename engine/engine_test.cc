// Engine behaviour: cancellation, deadlines, admission limits, validation,
// stop conditions, logprobs and draining.
#include "engine/engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>

#include "absl/strings/str_cat.h"
#include "engine/generate.h"
#include "model/loader/safetensors.h"
#include "model/model_loader.h"
#include "testing/collecting_sink.h"
#include "testing/manual_clock.h"
#include "tokenizer/unicode.h"
#include "util/field_error.h"
#include "testing/backends.h"
#include "kernels/cpu/cpu_threads.h"

namespace flover {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;
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
  // builtin:tiny with a KV cache of `blocks` blocks; returns a block's bytes.
  int64_t StartWithKvBlocks(int blocks) {
    loaded_ = testing::ValueOrDie(LoadModel("builtin:tiny"), "builtin:tiny");
    model_ = testing::ModelOn(*backend_, *loaded_);
    const int64_t per_block = model_->CacheShape(1, 1).bytes_per_block();
    EngineOptions o = Options();
    o.kv_cache.bytes = blocks * per_block;
    engine_ = testing::ValueOrDie(Engine::Create(*model_, nullptr, o), "engine");
    return per_block;
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
  // The loaded model's greedy continuation of `prompt` run alone with every
  // KV block kept (GenerateAlone), on a backend of its own.
  std::vector<int32_t> GreedyAlone(const std::vector<int32_t>& prompt, int max_new) {
    GenerateOptions g;
    g.max_new_tokens = max_new;
    g.ignore_eos = true;
    g.sampling.temperature = 0;
    auto cpu = testing::CpuBackend();
    auto reference = testing::ModelOn(*cpu, *loaded_);
    return testing::ValueOrDie(GenerateAlone(*reference, prompt, g), "GenerateAlone");
  }
  // The refusal's message, after the field it names ("field|message").
  std::string SubmitError(const Request& r) {
    auto id = engine_->Submit(r, std::make_shared<CollectingSink>());
    EXPECT_FALSE(id.ok());
    return absl::StrCat(ErrorField(id.status()), "|", id.status().message());
  }

  testing::ManualClock clock_;  // outlives the engine, which may read it
  std::unique_ptr<kernels::Backend> backend_ = testing::CpuBackend();
  std::unique_ptr<LoadedModel> loaded_;
  std::unique_ptr<CausalLm> model_;
  std::unique_ptr<Engine> engine_;
};

// The thread count set on the main thread (the server's --threads) reaches
// the engine's own thread, where the steps run: OpenMP keeps the count per
// thread, and a new thread starts with OpenMP's default, every core (found:
// a server started with --threads=1 stepped on two threads here).
TEST_F(EngineTest, ThreadCountReachesTheEngineThread) {
  int fresh = 0;  // what a thread nobody configured gets
  std::thread([&] { fresh = omp_get_max_threads(); }).join();
  const int want = fresh == 1 ? 2 : 1;  // differs from the default on any machine
  kernels::SetCpuThreads(want);
  Start("builtin:tiny", Options());
  auto sink = std::make_shared<CollectingSink>();
  int on_engine_thread = 0;
  sink->AtToken(2, [&] { on_engine_thread = omp_get_max_threads(); });
  ASSERT_TRUE(engine_->Submit(Greedy({1, 2, 3}, 3), sink).ok());
  ASSERT_TRUE(sink->Wait());
  kernels::SetCpuThreads(fresh);  // the next test's threads as they were
  EXPECT_EQ(on_engine_thread, want);
}

TEST_F(EngineTest, CancelWhileQueuedAndWhileRunning) {
  Start("builtin:tiny", Options(SchedulerPolicy::kSequential));
  // a is cancelled as its 5th token arrives: the engine must stop it before
  // the next step, on any machine.
  auto sink_a = std::make_shared<CollectingSink>();
  std::atomic<RequestId> a{0};
  sink_a->AtToken(5, [&] {
    while (a.load() == 0) std::this_thread::yield();  // Submit has returned
    ASSERT_TRUE(engine_->Cancel(a.load()).ok());
  });
  auto id = engine_->Submit(Greedy({1, 2, 3}, 480), sink_a);
  ASSERT_TRUE(id.ok()) << id.status();
  a.store(*id);
  auto [b, sink_b] = Submit(Greedy({4, 5}, 10));
  ASSERT_TRUE(engine_->Cancel(b).ok());  // b waits behind a (sequential)
  ASSERT_TRUE(sink_b->Wait());
  EXPECT_EQ(sink_b->finish().reason, FinishReason::kCancelled);
  EXPECT_TRUE(sink_b->tokens().empty());

  ASSERT_TRUE(sink_a->Wait());
  EXPECT_EQ(sink_a->finish().reason, FinishReason::kCancelled);
  EXPECT_EQ(sink_a->tokens().size(), 5u);
  EXPECT_EQ(sink_a->finishes(), 1);
  EXPECT_EQ(engine_->Cancel(*id).code(), absl::StatusCode::kNotFound);  // already finished
  const EngineStats s = engine_->Stats();
  EXPECT_EQ(s.finished[static_cast<int>(FinishReason::kCancelled)], 2);
  EXPECT_EQ(s.active, 0);
  EXPECT_EQ(s.queued, 0);
}

TEST_F(EngineTest, DeadlineWhileQueuedAndWhileRunning) {
  // Time is a manual clock that moves only at chosen tokens, so both
  // deadlines fire by construction, whatever the machine's speed.
  testing::ManualClock& clock = clock_;
  EngineOptions o = Options(SchedulerPolicy::kSequential);
  o.clock = clock.AsFunction();
  Start("builtin:tiny", o);
  // b waits behind a; time passes b's deadline as a's 3rd token arrives
  // (once b is queued). b expires before a's next step, and a holds at its
  // 4th token until the test has cancelled it (found: on a fast machine a
  // could finish all its tokens before the test's Cancel).
  auto sink_a = std::make_shared<CollectingSink>();
  auto sink_b = std::make_shared<CollectingSink>();
  std::atomic<bool> b_queued{false}, a_cancelled{false};
  sink_a->AtToken(3, [&] {
    while (!b_queued.load()) std::this_thread::yield();
    EXPECT_EQ(sink_b->finishes(), 0) << "b expired before its deadline";
    clock.Advance(absl::Seconds(2));
    sink_a->AtToken(4, [&] {
      while (!a_cancelled.load()) std::this_thread::yield();
    });
  });
  auto a = engine_->Submit(Greedy({1, 2, 3}, 480), sink_a);
  ASSERT_TRUE(a.ok()) << a.status();
  Request queued = Greedy({4}, 10);
  queued.deadline = clock.Now() + absl::Seconds(1);
  ASSERT_TRUE(engine_->Submit(queued, sink_b).ok());
  b_queued.store(true);
  ASSERT_TRUE(sink_b->Wait());
  EXPECT_EQ(sink_b->finish().reason, FinishReason::kDeadline);
  EXPECT_TRUE(sink_b->tokens().empty());
  EXPECT_GE(sink_a->tokens().size(), 3u);
  const absl::Status cancelled = engine_->Cancel(*a);
  a_cancelled.store(true);
  ASSERT_TRUE(cancelled.ok()) << cancelled;
  ASSERT_TRUE(sink_a->Wait());
  EXPECT_EQ(sink_a->finish().reason, FinishReason::kCancelled);  // no deadline of its own

  Request running = Greedy({7, 8}, 480);
  running.deadline = clock.Now() + absl::Seconds(1);
  auto sink_c = std::make_shared<CollectingSink>();
  sink_c->AtToken(6, [&] { clock.Advance(absl::Seconds(2)); });
  ASSERT_TRUE(engine_->Submit(running, sink_c).ok());
  ASSERT_TRUE(sink_c->Wait());
  EXPECT_EQ(sink_c->finish().reason, FinishReason::kDeadline);
  EXPECT_EQ(sink_c->tokens().size(), 6u);  // stopped before the step after the deadline
  const EngineStats s = engine_->Stats();
  EXPECT_EQ(s.finished[static_cast<int>(FinishReason::kDeadline)], 2);
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
  EXPECT_THAT(SubmitError(Greedy({}, 4)), StartsWith("prompt|prompt: is empty"));
  EXPECT_THAT(SubmitError(Greedy({1, 512}, 4)), StartsWith("prompt|prompt: token id 512 at index 1"));
  EXPECT_THAT(SubmitError(Greedy({1}, 0)), StartsWith("max_new_tokens|max_new_tokens"));
  EXPECT_THAT(SubmitError(Greedy(std::vector<int32_t>(500, 1), 20)),
              AllOf(StartsWith("max_new_tokens|"), HasSubstr("exceeds max_seq_len (512)")));
  Request r = Greedy({1}, 4);
  r.sampling.temperature = -1;
  EXPECT_THAT(SubmitError(r), StartsWith("temperature|temperature"));
  r = Greedy({1}, 4);
  r.sampling.top_p = 1.5;
  EXPECT_THAT(SubmitError(r), StartsWith("top_p|top_p"));
  r = Greedy({1}, 4);
  r.sampling.top_k = -2;
  EXPECT_THAT(SubmitError(r), StartsWith("top_k|top_k"));
  r = Greedy({1}, 4);
  r.stop.stop_strings = {"x"};
  EXPECT_THAT(SubmitError(r), StartsWith("stop_strings|stop_strings: the model has no tokenizer"));
  r = Greedy({1}, 4);
  r.stop.stop_token_ids = {9999};
  EXPECT_THAT(SubmitError(r), StartsWith("stop_token_ids|stop_token_ids"));
  r.stop.stop_token_ids.assign(kMaxStopTokenIds + 1, 3);
  EXPECT_THAT(SubmitError(r), StartsWith("stop_token_ids|stop_token_ids: at most 1024 ids, got 1025"));
  EXPECT_EQ(engine_->Stats().submitted, 0);
}

TEST_F(EngineTest, StopStringLimits) {
  EngineOptions o = Options();
  o.max_seq_len = 40;
  Start("tests/golden/tiny_f32", o);
  Request r = Greedy({1}, 4);
  r.stop.stop_strings.assign(kMaxStopStrings, "ab");
  r.stop.stop_strings.push_back(std::string(kMaxStopStringBytes, 'x'));
  EXPECT_THAT(SubmitError(r), StartsWith("stop_strings|stop_strings: at most 64 strings, got 65"));
  r.stop.stop_strings.erase(r.stop.stop_strings.begin());
  auto [ok, sink] = Submit(r);  // 64 strings, the longest allowed among them
  ASSERT_TRUE(sink->Wait());
  EXPECT_EQ(sink->finish().reason, FinishReason::kLength);
  r.stop.stop_strings.back().push_back('x');
  EXPECT_THAT(SubmitError(r), StartsWith("stop_strings|stop_strings: each at most 1024 bytes, got one of 1025"));
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

  // An end-of-turn id (a chat template's): generation ends with it as at
  // EOS, and its text is not part of the reply.
  r.stop.stop_token_ids.clear();
  r.stop.ignore_eos = false;
  r.stop.end_of_turn_ids = {stop_token};
  auto [d, sink_d] = Submit(r);
  ASSERT_TRUE(sink_d->Wait());
  EXPECT_EQ(sink_d->finish().reason, FinishReason::kEos);
  EXPECT_EQ(sink_d->tokens(), std::vector<int32_t>(alone->begin(), cut));
  const std::vector<int32_t> before_it(alone->begin(), cut - 1);
  EXPECT_EQ(sink_d->text(), SanitizeUtf8(tok.DecodeBytes(before_it)));
  // With ignore_eos it is ignored like EOS.
  r.stop.ignore_eos = true;
  auto [e, sink_e] = Submit(r);
  ASSERT_TRUE(sink_e->Wait());
  EXPECT_EQ(sink_e->finish().reason, FinishReason::kLength);
}

TEST_F(EngineTest, EosStopsUnlessIgnoredAndLogprobsAreReturned) {
  Start("builtin:tiny", Options());
  const int eos = loaded_->info().eos_token_ids.at(0);
  // Looks (deterministically: fixed weights and seeds) for a sampling seed
  // whose 40 tokens, with EOS ignored, contain EOS before the last one; a
  // hot temperature makes that likely within a few dozen seeds. Then the
  // same request without ignore_eos must stop right after the first EOS.
  Request r = Greedy({5, 6, 7}, 40, /*ignore_eos=*/true);
  r.return_logprobs = true;
  r.sampling.temperature = 8.0;
  std::vector<int32_t> ignored;
  std::vector<int32_t>::iterator first;
  bool found = false;
  for (int64_t seed = 0; seed < 400 && !found; ++seed) {
    r.sampling.seed = seed;
    auto [a, sink] = Submit(r);
    ASSERT_TRUE(sink->Wait());
    ignored = sink->tokens();
    ASSERT_EQ(ignored.size(), 40u);  // EOS ignored: always max_new_tokens
    EXPECT_EQ(sink->finish().reason, FinishReason::kLength);
    for (float lp : sink->logprobs()) {
      EXPECT_LE(lp, 0.0f);
      EXPECT_TRUE(std::isfinite(lp));
    }
    first = std::find(ignored.begin(), ignored.end() - 1, eos);
    found = first != ignored.end() - 1;
  }
  ASSERT_TRUE(found) << "no seed in 400 sampled EOS (id " << eos << ") within 39 tokens";

  r.stop.ignore_eos = false;
  auto [b, sink_b] = Submit(r);
  ASSERT_TRUE(sink_b->Wait());
  EXPECT_EQ(sink_b->tokens(), std::vector<int32_t>(ignored.begin(), first + 1));
  EXPECT_EQ(sink_b->finish().reason, FinishReason::kEos);
  EXPECT_LT(sink_b->tokens().size(), 40u);
  EXPECT_EQ(sink_b->finish().usage.generated_tokens, static_cast<int>(sink_b->tokens().size()));
}

// Counts which of the model's forwards the engine calls.
class CountingModel final : public CausalLm {
 public:
  explicit CountingModel(CausalLm& model) : model_(model) {}
  const ModelInfo& info() const override { return model_.info(); }
  kernels::Backend& backend() const override { return model_.backend(); }
  KvCacheShape CacheShape(int num_blocks, int max_seq, int state_slots) const override {
    return model_.CacheShape(num_blocks, max_seq, state_slots);
  }
  absl::StatusOr<absl::Span<float>> Forward(const ForwardBatch& batch, KvCache& cache,
                                            LogitsFor which) override {
    ++logits;
    return model_.Forward(batch, cache, which);
  }
  absl::StatusOr<absl::Span<const int32_t>> ForwardGreedy(const ForwardBatch& batch,
                                                          KvCache& cache) override {
    ++best_tokens;
    return model_.ForwardGreedy(batch, cache);
  }
  absl::Status PrepareForBatches(int max_rows, int max_logit_rows) override {
    return model_.PrepareForBatches(max_rows, max_logit_rows);
  }
  std::atomic<int> logits{0}, best_tokens{0};

 private:
  CausalLm& model_;
};

// A step whose sequences all decode greedily with no logits processor asks
// the model for each row's best token only (ForwardGreedy: on a GPU just
// the ids come back): the tokens are those of the logits and the sampler
// (GenerateAlone). A step with a sampled, penalised or logprobs request
// among them takes the logits, and its greedy requests are unchanged.
TEST_F(EngineTest, GreedyStepsTakeEachRowsBestTokenOnly) {
  loaded_ = testing::ValueOrDie(LoadModel("builtin:tiny"), "builtin:tiny");
  model_ = testing::ModelOn(*backend_, *loaded_);
  CountingModel counting(*model_);
  engine_ = testing::ValueOrDie(Engine::Create(counting, nullptr, Options()), "engine");
  const std::vector<std::vector<int32_t>> prompts = {{5, 6, 7}, {9, 1}, {3, 3, 3, 3, 8}};
  std::vector<std::shared_ptr<CollectingSink>> sinks;
  for (const auto& p : prompts) sinks.push_back(Submit(Greedy(p, 24)).second);
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(sinks[i]->Wait());
    EXPECT_EQ(sinks[i]->tokens(), GreedyAlone(prompts[i], 24)) << "prompt " << i;
  }
  EXPECT_GT(counting.best_tokens.load(), 0);
  EXPECT_EQ(counting.logits.load(), 0);

  Request sampled = Greedy({4, 4}, 24), penalised = Greedy({2, 7}, 24), with_logprobs = Greedy({1, 2}, 24);
  sampled.sampling.temperature = 0.7f;
  penalised.sampling.repetition_penalty = 1.3f;
  with_logprobs.return_logprobs = true;
  for (const Request& other : {sampled, penalised, with_logprobs}) {
    counting.logits = 0;
    auto greedy = Submit(Greedy(prompts[0], 24)).second;
    auto beside = Submit(other).second;
    ASSERT_TRUE(greedy->Wait());
    ASSERT_TRUE(beside->Wait());
    EXPECT_EQ(greedy->tokens(), GreedyAlone(prompts[0], 24));
    EXPECT_GT(counting.logits.load(), 0);
  }
  // The logprobs request's tokens are the greedy ones too.
  auto alone = Submit(with_logprobs).second;
  ASSERT_TRUE(alone->Wait());
  EXPECT_EQ(alone->tokens(), GreedyAlone({1, 2}, 24));
}

// top_logprobs alternatives come with each token, the sampled one among
// them with its own log-probability (greedy: first); 21 is refused by name.
TEST_F(EngineTest, TopLogprobsComeWithEachToken) {
  Start("builtin:tiny", Options());
  Request r = Greedy({5, 6, 7}, 12);
  r.return_logprobs = true;
  r.top_logprobs = 4;
  auto [a, sink] = Submit(r);
  ASSERT_TRUE(sink->Wait());
  const auto tops = sink->top_logprobs();
  ASSERT_EQ(tops.size(), 12u);
  for (size_t i = 0; i < tops.size(); ++i) {
    ASSERT_EQ(tops[i].size(), 4u);
    EXPECT_EQ(tops[i][0].first, sink->tokens()[i]);
    EXPECT_FLOAT_EQ(tops[i][0].second, sink->logprobs()[i]);
    for (size_t j = 1; j < 4; ++j) EXPECT_LE(tops[i][j].second, tops[i][j - 1].second);
  }
  r.top_logprobs = kMaxTopLogprobs + 1;
  auto refused = engine_->Submit(r, std::make_shared<testing::CollectingSink>());
  EXPECT_THAT(refused.status().message(), HasSubstr("top_logprobs: must be in [0, 20], got 21"));
}

// A cache of four blocks (128 positions): a request that could not run even
// alone is refused at once, naming its size and the cache's; one that just
// fits runs.
TEST_F(EngineTest, ARequestLargerThanTheWholeCacheIsRefusedWithTheSizes) {
  StartWithKvBlocks(4);
  EXPECT_EQ(engine_->max_context(), 128);  // not max_seq_len (512)
  auto refused = engine_->Submit(Greedy(std::vector<int32_t>(100, 3), 29),
                                 std::make_shared<CollectingSink>());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("prompt (100 tokens) + max_new_tokens (29) needs 5 KV blocks of 32 positions"));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("the whole KV cache has 4"));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("--kv_cache_memory"));
  auto [id, sink] = Submit(Greedy(std::vector<int32_t>(100, 3), 28));
  ASSERT_TRUE(sink->Wait());
  EXPECT_EQ(sink->tokens().size(), 28u);
}

// A model whose every layer has a window (builtin:mistral-tiny: 40
// positions) gives back a sequence's blocks wholly behind it: 150 + 100
// positions (8 blocks) run in a cache of 4, and answer what they answer run
// alone with every block kept (GenerateAlone). Kept to the end instead
// (kv_cache.free_behind_window off), the same request needs all 8.
TEST_F(EngineTest, AWindowedModelHoldsOnlyTheBlocksItsWindowReads) {
  loaded_ = testing::ValueOrDie(LoadModel("builtin:mistral-tiny"), "builtin:mistral-tiny");
  model_ = testing::ModelOn(*backend_, *loaded_);
  ASSERT_EQ(model_->CacheShape(1, 1).window, 40);
  const int64_t per_block = model_->CacheShape(1, 1).bytes_per_block();
  std::vector<int32_t> prompt(150);
  for (int i = 0; i < 150; ++i) prompt[i] = (i * 37 + 5) % 512;
  const std::vector<int32_t> alone = GreedyAlone(prompt, 100);

  auto run = [&](int blocks, bool free_behind_window) {
    engine_.reset();
    EngineOptions o = Options();
    o.kv_cache.bytes = blocks * per_block;
    o.kv_cache.free_behind_window = free_behind_window;
    o.scheduler.max_tokens_per_step = 64;  // the prompt in chunks of 64
    engine_ = testing::ValueOrDie(Engine::Create(*model_, nullptr, o), "engine");
  };
  run(4, true);
  EXPECT_EQ(engine_->max_context(), 512);  // not the cache's 128 positions
  auto [id, sink] = Submit(Greedy(prompt, 100));
  ASSERT_TRUE(sink->Wait());
  EXPECT_EQ(sink->tokens(), alone);
  EXPECT_EQ(engine_->Stats().preemptions, 0);

  // Room for all: the most it holds is 4 blocks, in the prompt's second
  // chunk ([64, 128) and the window before it); at the end 2.
  run(16, true);
  auto roomy = Submit(Greedy(prompt, 100)).second;
  ASSERT_TRUE(roomy->Wait());
  EXPECT_EQ(roomy->tokens(), alone);
  EngineStats s = engine_->Stats();
  EXPECT_EQ(s.kv_bytes_peak, 4 * per_block);
  EXPECT_EQ(s.kv_bytes_in_use, 0);
  // The blocks it gave back and its last ones stay cached for prefix reuse.
  EXPECT_EQ(s.kv_bytes_cached, 7 * per_block);  // 249 positions computed: 7 whole blocks

  run(16, false);
  auto kept = Submit(Greedy(prompt, 100)).second;
  ASSERT_TRUE(kept->Wait());
  EXPECT_EQ(kept->tokens(), alone);
  EXPECT_EQ(engine_->Stats().kv_bytes_peak, 8 * per_block);
  run(4, false);
  EXPECT_EQ(engine_->max_context(), 128);
  auto refused = engine_->Submit(Greedy(prompt, 100), std::make_shared<CollectingSink>());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
}

// Gemma 3's shape (builtin:gemma3-tiny: five local layers with a window of
// 40 to one global): the local layers keep their K and V in blocks of
// their own and give back those behind the window, while the global
// layer's blocks cover the whole context. 150 + 100 positions answer what
// they answer alone; the local layers hold at most 4 blocks (the prompt's
// second chunk and the window before it) where kept together they would
// hold 8; a prompt repeated is served from the prefix cache, its local
// blocks included, and answers the same.
TEST_F(EngineTest, LocalLayersHoldOnlyTheirWindowsBlocks) {
  loaded_ = testing::ValueOrDie(LoadModel("builtin:gemma3-tiny"), "builtin:gemma3-tiny");
  model_ = testing::ModelOn(*backend_, *loaded_);
  std::vector<int32_t> prompt(150);
  for (int i = 0; i < 150; ++i) prompt[i] = (i * 41 + 7) % 512;
  const std::vector<int32_t> alone = GreedyAlone(prompt, 100);

  KvCacheShape unit = model_->CacheShape(1, 1);
  const int64_t shared_block = unit.bytes_per_block();
  unit.local_blocks = 1;
  const int64_t global_block = unit.bytes_per_block(), local_block = unit.bytes_per_local_block();
  auto run = [&](bool free_behind_window) {
    engine_.reset();
    EngineOptions o = Options();
    o.kv_cache.bytes = int64_t{1} << 20;
    o.kv_cache.free_behind_window = free_behind_window;
    o.scheduler.max_tokens_per_step = 64;
    engine_ = testing::ValueOrDie(Engine::Create(*model_, nullptr, o), "engine");
  };
  run(true);
  auto first = Submit(Greedy(prompt, 100)).second;
  ASSERT_TRUE(first->Wait());
  EXPECT_EQ(first->tokens(), alone);
  EngineStats s = engine_->Stats();
  EXPECT_EQ(s.kv_bytes_peak, 4 * global_block + 4 * local_block);
  // Again: 224 of its 249 computed positions in the prefix cache (7 whole
  // blocks), the local layers' last window among them.
  std::vector<int32_t> again = prompt;
  again.insert(again.end(), alone.begin(), alone.end() - 1);
  auto second = Submit(Greedy(again, 1)).second;
  ASSERT_TRUE(second->Wait());
  EXPECT_EQ(second->tokens(), std::vector<int32_t>{alone.back()});
  EXPECT_EQ(engine_->Stats().prefix_hit_tokens - s.prefix_hit_tokens, 224);

  run(false);
  auto kept = Submit(Greedy(prompt, 100)).second;
  ASSERT_TRUE(kept->Wait());
  EXPECT_EQ(kept->tokens(), alone);
  EXPECT_EQ(engine_->Stats().kv_bytes_peak, 8 * shared_block);
}

// Finished sequences leave their whole blocks cached; the same prompt then
// starts from them (and answers the same); a request that needs the memory
// evicts them.
TEST_F(EngineTest, FinishedBlocksStayCachedUntilMemoryIsNeeded) {
  const int64_t per_block = StartWithKvBlocks(4);
  std::vector<int32_t> prompt(70);
  for (int i = 0; i < 70; ++i) prompt[i] = (i * 7 + 1) % 500;

  auto first = Submit(Greedy(prompt, 10)).second;
  ASSERT_TRUE(first->Wait());
  EngineStats s = engine_->Stats();
  EXPECT_EQ(s.kv_bytes_in_use, 0);
  EXPECT_EQ(s.kv_bytes_cached, 2 * per_block);  // 79 positions computed: 2 whole blocks
  EXPECT_EQ(s.kv_bytes_total, 4 * per_block);
  EXPECT_EQ(s.prefix_hit_tokens, 0);

  auto again = Submit(Greedy(prompt, 10)).second;
  ASSERT_TRUE(again->Wait());
  EXPECT_EQ(again->tokens(), first->tokens());
  s = engine_->Stats();
  EXPECT_EQ(s.prefix_hit_tokens, 64);
  EXPECT_EQ(s.prefix_query_tokens, 2 * 69);
  EXPECT_EQ(s.prompt_tokens, 70 + 6);  // the second computed only its last 6

  // 100 + 28 positions take every block: the cached ones are evicted.
  auto big = Submit(Greedy(std::vector<int32_t>(100, 3), 28)).second;
  ASSERT_TRUE(big->Wait());
  EXPECT_EQ(engine_->Stats().kv_bytes_cached, 3 * per_block);  // its own 127 positions
  auto third = Submit(Greedy(prompt, 10)).second;
  ASSERT_TRUE(third->Wait());
  EXPECT_EQ(third->tokens(), first->tokens());
  EXPECT_EQ(engine_->Stats().prefix_hit_tokens, 64);  // no new hit
  EXPECT_EQ(engine_->Stats().preemptions, 0);
}

// Given prompt rows (an image's features, issue 56) stand in for their
// tokens: rows equal to other tokens' table rows (read from the checkpoint)
// generate what those tokens generate, fused beside another request; the
// prefix cache reuses their K/V only for the same key at the same place.
TEST_F(EngineTest, GivenPromptRowsStandForTokensAndKeyThePrefixCache) {
  EngineOptions o = Options();
  o.max_seq_len = 96;  // the model's positions
  Start("tests/golden/llama_gqa", o);
  const int C = model_->info().hidden, V = model_->info().vocab_size;
  auto file = SafetensorsFile::Open("tests/golden/llama_gqa/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  auto table = file->ReadFloat("model.embed_tokens.weight", {V, C});
  ASSERT_TRUE(table.ok()) << table.status();
  std::vector<int32_t> prompt(40), swapped;
  for (int i = 0; i < 40; ++i) prompt[i] = (i * 7 + 3) % V;
  swapped = prompt;
  auto values = std::make_shared<std::vector<float>>();
  for (int i = 0; i < 3; ++i) {
    swapped[5 + i] = 100 + i;
    values->insert(values->end(), table->begin() + (100 + i) * C, table->begin() + (101 + i) * C);
  }
  auto with_rows = [&](uint64_t key) {
    Request r = Greedy(prompt, 8);
    r.given_rows.push_back({5, 3, values, key});
    return r;
  };
  const std::vector<int32_t> want = GreedyAlone(swapped, 8);
  ASSERT_NE(want, GreedyAlone(prompt, 8));

  auto beside = Submit(Greedy({1, 2, 3, 4, 5, 6, 7}, 12)).second;
  auto first = Submit(with_rows(1)).second;
  ASSERT_TRUE(first->Wait() && beside->Wait());
  EXPECT_EQ(first->tokens(), want);
  EXPECT_EQ(engine_->Stats().prefix_hit_tokens, 0);
  // The same content again: its first block (32 positions) is reused.
  auto again = Submit(with_rows(1)).second;
  ASSERT_TRUE(again->Wait());
  EXPECT_EQ(again->tokens(), want);
  EXPECT_EQ(engine_->Stats().prefix_hit_tokens, 32);
  // The same tokens without the rows, or with rows of another key: no reuse.
  auto plain = Submit(Greedy(prompt, 8)).second;
  auto other = Submit(with_rows(2)).second;
  ASSERT_TRUE(plain->Wait() && other->Wait());
  EXPECT_EQ(plain->tokens(), GreedyAlone(prompt, 8));
  EXPECT_EQ(other->tokens(), want);
  EXPECT_EQ(engine_->Stats().prefix_hit_tokens, 32);

  // Spans that do not fit are refused by name.
  Request bad = with_rows(1);
  bad.given_rows[0].position = 38;
  EXPECT_THAT(SubmitError(bad), HasSubstr("given_rows|given_rows: span 0 (prompt rows 38..40) is empty, out of order or "
                                          "outside the prompt's 40 tokens"));
  bad = with_rows(1);
  bad.given_rows.push_back({6, 1, values, 3});
  EXPECT_THAT(SubmitError(bad), HasSubstr("span 1 (prompt rows 6..6) is empty, out of order"));
  bad = with_rows(1);
  bad.given_rows[0].count = 2;
  EXPECT_THAT(SubmitError(bad), HasSubstr("given_rows|given_rows: span 0 needs 2 x 64 values, got 192"));
  bad = with_rows(1);
  auto nan = std::make_shared<std::vector<float>>(*values);
  (*nan)[7] = std::nanf("");
  bad.given_rows[0].values = nan;
  EXPECT_THAT(SubmitError(bad), HasSubstr("span 0 holds a value that is not finite"));
  // Additions after layers, or a grid, to a model that takes neither.
  bad = with_rows(1);
  bad.given_rows[0].layers = 1;
  EXPECT_THAT(SubmitError(bad), HasSubstr("span 0 carries additions after 1 layers; the model takes 0"));
  bad = with_rows(1);
  bad.given_rows[0].grid_h = 1;
  bad.given_rows[0].grid_w = bad.given_rows[0].count;
  EXPECT_THAT(SubmitError(bad), HasSubstr("span 0 has a grid, but this model's rows take no grid positions"));
  bad.given_rows[0].grid_w = bad.given_rows[0].count + 1;
  EXPECT_THAT(SubmitError(bad), HasSubstr("span 0's grid of 1 x"));
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
