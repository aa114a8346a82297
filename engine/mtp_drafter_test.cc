// Qwen3.5's multi-token-prediction layer as a drafter (engine/mtp_drafter.h)
// on qwen35_tiny, whose MTP layer has a float64 reference
// (tests/golden/make_mtp_golden.py): the drafts it proposes after the
// model's own hidden rows are the reference's chain; they are the same
// whether the rows come in one step or several, after drafts it proposed
// were refused and written over, or after a recomputation; and through the
// engine, --speculative=mtp changes no output.
#include "engine/mtp_drafter.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "engine/engine.h"
#include "engine/generate.h"
#include "model/model_loader.h"
#include "testing/backends.h"
#include "testing/collecting_sink.h"
#include "testing/files.h"
#include "testing/golden.h"
#include "util/json.h"

namespace flover {
namespace {

constexpr char kFixture[] = "tests/golden/qwen35_tiny";

class MtpDrafterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    loaded_ = testing::ValueOrDie(LoadModel(kFixture), "qwen35_tiny");
    backend_ = testing::CpuBackend();
    model_ = testing::ModelOn(*backend_, *loaded_);
    mtp_ = testing::ValueOrDie(loaded_->InstantiateMtp(*model_), "its MTP layer");
    ASSERT_TRUE(model_->KeepFinalHidden(true).ok());  // as the drafter asks (Hidden runs before one exists)
    auto json = ParseJsonObject(testing::ReadFileOrEmpty(std::string(kFixture) + "/golden_mtp.json"), "golden_mtp");
    ASSERT_TRUE(json.ok()) << json.status();
    const auto& chain = json->fields().at("chain").struct_value().fields();
    tokens_ = testing::JsonIds(chain.at("tokens"));
    drafts_ = testing::JsonIds(chain.at("drafts"));
  }
  std::unique_ptr<MtpDrafter> NewDrafter() {
    return testing::ValueOrDie(MtpDrafter::Create(*mtp_, *model_, 4, 128, 64, 0), "drafter");
  }
  // The model's final hidden rows of `tokens` from position 0, one forward.
  std::vector<float> Hidden(const std::vector<int32_t>& tokens) {
    auto cache = testing::CacheFor(*model_, 1, 128);
    ForwardBatch b;
    testing::AddCachedSequence(b, *cache, 0, 128, 0, tokens);
    std::vector<float> logits;
    EXPECT_TRUE(model_->Forward(b, *cache, LogitsFor::kLastRowsOfEachSequence, &logits).ok());
    return std::vector<float>(model_->FinalHidden().begin(), model_->FinalHidden().end());
  }
  // Rows [from, from + n) of `hidden`.
  absl::Span<const float> Rows(const std::vector<float>& hidden, int from, int n) const {
    const size_t C = loaded_->info().hidden;
    return absl::MakeConstSpan(hidden).subspan(from * C, n * C);
  }
  std::vector<int32_t> Propose(MtpDrafter& d, uint64_t id, const std::vector<int32_t>& tokens, int n) {
    auto got = d.Propose(std::vector<Drafter::Ask>{{id, tokens, n}}, 64);
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() ? (*got)[0] : std::vector<int32_t>{};
  }

  std::unique_ptr<LoadedModel> loaded_;
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<CausalLm> model_, mtp_;
  std::vector<int32_t> tokens_, drafts_;
};

TEST_F(MtpDrafterTest, DraftsAreTheReferencesChain) {
  auto d = NewDrafter();
  const int n = static_cast<int>(tokens_.size());
  const std::vector<float> h = Hidden(std::vector<int32_t>(tokens_.begin(), tokens_.end() - 1));
  // Nothing read yet: no drafts.
  EXPECT_FALSE(d->Repays(1, tokens_, 10));
  EXPECT_TRUE(Propose(*d, 1, tokens_, 4).empty());
  d->Computed(1, 0, n - 1, Rows(h, 0, n - 1), tokens_);
  EXPECT_TRUE(d->Repays(1, tokens_, 10));  // at hand: read when it drafts
  ASSERT_TRUE(d->StepDone().ok());
  EXPECT_TRUE(d->Repays(1, tokens_, 10));
  EXPECT_FALSE(d->Repays(1, std::vector<int32_t>(tokens_.begin(), tokens_.end() - 1), 10));
  EXPECT_EQ(Propose(*d, 1, tokens_, 4), drafts_);
  // In two steps (a prompt in chunks): the same.
  auto chunked = NewDrafter();
  chunked->Computed(7, 0, 3, Rows(h, 0, 3), tokens_);
  ASSERT_TRUE(chunked->StepDone().ok());
  EXPECT_FALSE(chunked->Repays(7, tokens_, 10));
  chunked->Computed(7, 3, n - 4, Rows(h, 3, n - 4), tokens_);
  ASSERT_TRUE(chunked->StepDone().ok());
  EXPECT_EQ(Propose(*chunked, 7, tokens_, 4), drafts_);
}

TEST_F(MtpDrafterTest, RefusedDraftsAreWrittenOverAndRecomputedRowsReplaceTheirOwn) {
  // The drafts were proposed (and written past the pairs), then the first
  // was taken and a different token sampled after it.
  std::vector<int32_t> taken = tokens_;
  taken.push_back(drafts_[0]);
  taken.push_back(drafts_[1] == 5 ? 6 : 5);
  const int n = static_cast<int>(tokens_.size());
  const std::vector<float> h = Hidden(std::vector<int32_t>(taken.begin(), taken.end() - 1));
  auto d = NewDrafter();
  d->Computed(1, 0, n - 1, Rows(h, 0, n - 1), tokens_);
  ASSERT_TRUE(d->StepDone().ok());
  ASSERT_EQ(Propose(*d, 1, tokens_, 4), drafts_);
  // The verify step's rows that stand: the last sampled token and the draft taken.
  d->Computed(1, n - 1, 2, Rows(h, n - 1, 2), taken);
  ASSERT_TRUE(d->StepDone().ok());
  // A drafter that read all of it at once.
  auto fresh = NewDrafter();
  fresh->Computed(2, 0, n + 1, Rows(h, 0, n + 1), taken);
  ASSERT_TRUE(fresh->StepDone().ok());
  const std::vector<int32_t> want = Propose(*fresh, 2, taken, 4);
  ASSERT_EQ(want.size(), 4u);
  EXPECT_EQ(Propose(*d, 1, taken, 4), want);
  // The sequence computed again from the start (preempted): the same.
  d->Computed(1, 0, n + 1, Rows(h, 0, n + 1), taken);
  ASSERT_TRUE(d->StepDone().ok());
  EXPECT_EQ(Propose(*d, 1, taken, 4), want);
  // A prefix it never saw (a prefix-cache hit): its context starts after it.
  auto hit = NewDrafter();
  hit->Computed(3, 5, n - 4, Rows(h, 5, n - 4), taken);
  ASSERT_TRUE(hit->StepDone().ok());
  EXPECT_EQ(Propose(*hit, 3, taken, 3).size(), 3u);
  // Forgotten: nothing to draft from.
  hit->Forget(3);
  EXPECT_TRUE(Propose(*hit, 3, taken, 3).empty());
}

// Through the engine: every output as without speculation, greedy and
// sampled, fused with each other and with prompts in chunks.
TEST_F(MtpDrafterTest, SpeculationChangesNoOutput) {
  EngineOptions o;
  o.scheduler.max_batch = 4;
  o.scheduler.max_tokens_per_step = 16;  // the 20-token prompt in two chunks
  o.max_seq_len = 128;
  o.speculative.mode = SpeculativeMode::kMtp;
  o.speculative.max_tokens = 3;
  o.mtp_model = mtp_.get();
  std::unique_ptr<kernels::Backend> reference_backend = testing::CpuBackend();
  auto reference = testing::ModelOn(*reference_backend, *loaded_);
  auto engine = testing::ValueOrDie(Engine::Create(*model_, nullptr, o), "engine");
  testing::Golden g = testing::LoadGolden(kFixture, loaded_->info().vocab_size);
  std::vector<Request> requests;
  std::vector<std::shared_ptr<testing::CollectingSink>> sinks;
  for (int i = 0; i < 6; ++i) {
    Request r;
    r.prompt = g.prompts[1 + i % 3];
    r.prompt.resize(std::min<size_t>(r.prompt.size(), 20 + i));
    r.stop.max_new_tokens = 24;
    r.stop.ignore_eos = true;
    if (i % 2 == 1) {
      r.sampling.temperature = 0.8f;
      r.sampling.seed = 100 + i;
    }
    requests.push_back(r);
    sinks.push_back(std::make_shared<testing::CollectingSink>());
    ASSERT_TRUE(engine->Submit(r, sinks.back()).ok());
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_TRUE(sinks[i]->Wait());
    GenerateOptions alone;
    alone.max_new_tokens = requests[i].stop.max_new_tokens;
    alone.ignore_eos = true;
    alone.sampling = requests[i].sampling;
    EXPECT_EQ(sinks[i]->tokens(), testing::ValueOrDie(GenerateAlone(*reference, requests[i].prompt, alone), "alone"))
        << "request " << i;
  }
  const EngineStats s = engine->Stats();
  std::printf("mtp: %lld draft tokens verified, %lld taken, %lld steps\n", static_cast<long long>(s.draft_tokens),
              static_cast<long long>(s.accepted_tokens), static_cast<long long>(s.steps));
  EXPECT_GT(s.draft_tokens, 0);  // the layer drafted, and its drafts were verified
}

// Qwen3.5-MoE's layer (its MLP a mixture of experts, as the model's), as
// the built-in generates it: outputs as without speculation.
TEST(MtpMixtureTest, SpeculationChangesNoOutput) {
  auto loaded = testing::ValueOrDie(LoadModel("builtin:qwen3.5-moe-tiny"), "builtin");
  auto backend = testing::CpuBackend();
  auto model = testing::ModelOn(*backend, *loaded);
  auto mtp = testing::ValueOrDie(loaded->InstantiateMtp(*model), "its MTP layer");
  std::unique_ptr<kernels::Backend> reference_backend = testing::CpuBackend();
  auto reference = testing::ModelOn(*reference_backend, *loaded);
  EngineOptions o;
  o.max_seq_len = 128;
  o.speculative.mode = SpeculativeMode::kMtp;
  o.mtp_model = mtp.get();
  auto engine = testing::ValueOrDie(Engine::Create(*model, nullptr, o), "engine");
  Request r;
  for (int i = 0; i < 30; ++i) r.prompt.push_back((i * 37 + 5) % 512);
  r.stop.max_new_tokens = 20;
  r.stop.ignore_eos = true;
  r.sampling.temperature = 0.0f;
  auto sink = std::make_shared<testing::CollectingSink>();
  ASSERT_TRUE(engine->Submit(r, sink).ok());
  ASSERT_TRUE(sink->Wait());
  EXPECT_EQ(sink->tokens(), testing::ValueOrDie(GenerateAlone(*reference, r.prompt, GreedyTokens(20)), "alone"));
  EXPECT_GT(engine->Stats().draft_tokens, 0);
}

TEST_F(MtpDrafterTest, RefusedWhereItCannotRun) {
  EngineOptions o;
  o.speculative.mode = SpeculativeMode::kMtp;
  auto no_layer = Engine::Create(*model_, nullptr, o);
  EXPECT_EQ(no_layer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseSpeculativeMode("mtp").value(), SpeculativeMode::kMtp);
  EXPECT_EQ(SpeculativeModeName(SpeculativeMode::kMtp), "mtp");
}

}  // namespace
}  // namespace flover
