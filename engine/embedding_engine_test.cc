// Embedding and scoring requests in the engine (Request::embed,
// Request::score_tokens). Embedding requests: prompt-only sequences
// in the same fused steps as generation, on the tiny Qwen3-Embedding-shaped
// fixture (tests/golden/qwen3_embedding_tiny). Each vector equals
// sentence-transformers' float64 embedding of the same input (within 2e-6),
// and is bitwise the model's own rows pooled from one whole forward of the
// prompt, whatever it was fused with, however the scheduler cut it, and
// after a prefix-cache hit (last-token pooling) or none (mean and CLS take
// no cached prefix: their rows must be computed).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "model/model_loader.h"
#include "model/pooling.h"
#include "testing/backends.h"
#include "testing/collecting_sink.h"
#include "testing/files.h"
#include "util/field_error.h"
#include "util/json.h"

namespace flover {
namespace {

using google::protobuf::Value;
using testing::CollectingSink;

constexpr char kDir[] = "tests/golden/qwen3_embedding_tiny";

struct Case {
  std::string name;
  std::vector<int32_t> ids;
  std::vector<float> want;  // sentence-transformers, float64
};

std::vector<Case> Cases() {
  auto golden = ParseJsonObject(testing::ReadFileOrEmpty(std::string(kDir) + "/golden.json"), "golden.json");
  EXPECT_TRUE(golden.ok()) << golden.status();
  std::vector<Case> out;
  if (!golden.ok()) return out;
  for (const Value& c : golden->fields().at("cases").list_value().values()) {
    const auto& f = c.struct_value().fields();
    Case k{f.at("name").string_value(), {}, {}};
    for (const Value& x : f.at("input_ids").list_value().values()) k.ids.push_back(static_cast<int32_t>(x.number_value()));
    for (const Value& x : f.at("embedding").list_value().values()) k.want.push_back(static_cast<float>(x.number_value()));
    out.push_back(std::move(k));
  }
  return out;
}

class EmbeddingEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    loaded_ = testing::ValueOrDie(LoadModel(kDir), kDir);
    backend_ = testing::CpuBackend();
    model_ = testing::ModelOn(*backend_, *loaded_);
    reference_ = testing::ModelOn(*backend_, *loaded_);
    ASSERT_TRUE(reference_->KeepFinalHidden(true).ok());
    EngineOptions o;
    o.scheduler.max_batch = 16;
    o.scheduler.max_tokens_per_step = 48;  // the longest prompt (263 tokens) goes in chunks
    o.max_seq_len = 320;
    o.embeddings = true;
    engine_ = testing::ValueOrDie(Engine::Create(*model_, loaded_->tokenizer().get(), o), "engine");
  }

  // The model's own rows of `ids` from one whole forward, pooled (while the
  // engine is idle: the two models share the backend).
  std::vector<float> Reference(const std::vector<int32_t>& ids, const Pooling& pooling) {
    auto cache = testing::CacheFor(*reference_, 1, 320);
    ForwardBatch b;
    testing::AddCachedSequence(b, *cache, 0, 320, 0, ids);
    std::vector<float> logits;
    EXPECT_TRUE(reference_->Forward(b, *cache, LogitsFor::kLastRowsOfEachSequence, &logits).ok());
    const absl::Span<const float> rows = reference_->FinalHidden();
    return testing::ValueOrDie(Pool(rows, static_cast<int>(ids.size()), static_cast<int>(rows.size() / ids.size()),
                                    pooling),
                               "pool");
  }

  std::shared_ptr<CollectingSink> Submit(const std::vector<int32_t>& ids, const Pooling& pooling) {
    Request r;
    r.prompt = ids;
    r.embed = pooling;
    auto sink = std::make_shared<CollectingSink>();
    EXPECT_TRUE(engine_->Submit(r, sink).ok());
    return sink;
  }
  std::vector<float> Vector(CollectingSink& sink) {
    EXPECT_TRUE(sink.Wait());
    EXPECT_EQ(sink.finish().reason, FinishReason::kStop);
    EXPECT_TRUE(sink.tokens().empty());
    EXPECT_EQ(sink.finish().usage.generated_tokens, 0);
    return sink.finish().embedding;
  }

  std::unique_ptr<LoadedModel> loaded_;
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<CausalLm> model_, reference_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(EmbeddingEngineTest, VectorsMatchSentenceTransformersFusedOrAloneWithAndWithoutPrefixHits) {
  const std::vector<Case> cases = Cases();
  ASSERT_EQ(cases.size(), 11u);
  const Pooling last{Pooling::Kind::kLast, true};
  // Alone, one after another.
  std::vector<std::vector<float>> alone;
  for (const Case& c : cases) {
    alone.push_back(Vector(*Submit(c.ids, last)));
    ASSERT_EQ(alone.back().size(), c.want.size()) << c.name;
    double worst = 0;
    for (size_t i = 0; i < c.want.size(); ++i) worst = std::max(worst, std::fabs(double{alone.back()[i]} - c.want[i]));
    EXPECT_LT(worst, 2e-6) << c.name;
    EXPECT_EQ(alone.back(), Reference(c.ids, last)) << c.name;
  }
  const int64_t hits_before = engine_->Stats().prefix_hit_tokens;
  // All at once, beside a generating request: each the same bits. The long
  // prompt was run alone above, so it now starts from cached blocks.
  Request chat;
  chat.prompt = cases[0].ids;
  chat.stop.max_new_tokens = 8;
  chat.stop.ignore_eos = true;
  auto chat_alone = std::make_shared<CollectingSink>();
  ASSERT_TRUE(engine_->Submit(chat, chat_alone).ok());
  ASSERT_TRUE(chat_alone->Wait());
  auto chat_fused = std::make_shared<CollectingSink>();
  ASSERT_TRUE(engine_->Submit(chat, chat_fused).ok());
  std::vector<std::shared_ptr<CollectingSink>> sinks;
  for (const Case& c : cases) sinks.push_back(Submit(c.ids, last));
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(Vector(*sinks[i]), alone[i]) << cases[i].name;
  ASSERT_TRUE(chat_fused->Wait());
  EXPECT_EQ(chat_fused->tokens(), chat_alone->tokens());
  EXPECT_GT(engine_->Stats().prefix_hit_tokens, hits_before);
}

TEST_F(EmbeddingEngineTest, MeanAndClsReadEveryRowTheyPoolAndTakeNoCachedPrefix) {
  const std::vector<Case> cases = Cases();
  for (Pooling::Kind kind : {Pooling::Kind::kMean, Pooling::Kind::kCls}) {
    const Pooling pooling{kind, kind == Pooling::Kind::kMean};
    // (The reference runs while the engine is idle: they share a backend.)
    std::vector<std::vector<float>> want;
    for (const Case& c : cases) want.push_back(Reference(c.ids, pooling));
    // Twice: a cached prefix would have left rows out the second time.
    for (int round = 0; round < 2; ++round) {
      std::vector<std::shared_ptr<CollectingSink>> sinks;
      for (const Case& c : cases) sinks.push_back(Submit(c.ids, pooling));
      for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(Vector(*sinks[i]), want[i]) << cases[i].name << " " << round;
    }
  }
}

// Scoring requests (Request::score_tokens): a tiny Qwen3-Reranker-style
// checkpoint's logits of "yes" and "no" at each pair's last position, as
// transformers computes them in float64 (make_rerank_golden.py), alone and
// fused with each other: the same bits.
TEST(ScoringEngineTest, LogitsOfTheScoreTokensAtThePromptsEnd) {
  constexpr char kReranker[] = "tests/golden/qwen3_reranker_tiny";
  auto golden = ParseJsonObject(testing::ReadFileOrEmpty(std::string(kReranker) + "/golden.json"), "golden.json");
  ASSERT_TRUE(golden.ok()) << golden.status();
  auto loaded = testing::ValueOrDie(LoadModel(kReranker), kReranker);
  auto backend = testing::CpuBackend();
  auto model = testing::ModelOn(*backend, *loaded);
  EngineOptions o;
  o.max_seq_len = 256;
  o.scheduler.max_tokens_per_step = 64;  // prompts of 96-118 tokens in chunks
  auto engine = testing::ValueOrDie(Engine::Create(*model, loaded->tokenizer().get(), o), "engine");
  const auto& ids = golden->fields().at("token_ids").struct_value().fields();
  const std::vector<int32_t> yes_no = {static_cast<int32_t>(ids.at("yes").number_value()),
                                       static_cast<int32_t>(ids.at("no").number_value())};
  auto submit = [&](const Value& pair) {
    Request r;
    for (const Value& x : pair.struct_value().fields().at("input_ids").list_value().values()) {
      r.prompt.push_back(static_cast<int32_t>(x.number_value()));
    }
    r.score_tokens = yes_no;
    auto sink = std::make_shared<CollectingSink>();
    EXPECT_TRUE(engine->Submit(r, sink).ok());
    return sink;
  };
  auto logits = [](CollectingSink& sink) {
    EXPECT_TRUE(sink.Wait());
    EXPECT_EQ(sink.finish().reason, FinishReason::kStop);
    EXPECT_TRUE(sink.tokens().empty());
    return sink.finish().logits;
  };
  const auto& pairs = golden->fields().at("pairs").list_value().values();
  std::vector<std::vector<float>> alone;
  for (const Value& pair : pairs) {
    alone.push_back(logits(*submit(pair)));
    const auto& f = pair.struct_value().fields();
    ASSERT_EQ(alone.back().size(), 2u);
    EXPECT_NEAR(alone.back()[0], f.at("logit_yes").number_value(), 1e-5);
    EXPECT_NEAR(alone.back()[1], f.at("logit_no").number_value(), 1e-5);
  }
  std::vector<std::shared_ptr<CollectingSink>> sinks;
  for (const Value& pair : pairs) sinks.push_back(submit(pair));
  for (size_t i = 0; i < sinks.size(); ++i) EXPECT_EQ(logits(*sinks[i]), alone[i]) << i;
  Request bad;
  bad.prompt = {1, 2};
  bad.score_tokens = {100000};
  EXPECT_EQ(ErrorField(engine->Submit(bad, std::make_shared<CollectingSink>()).status()), "score_tokens");
}

// Under preemption: a cache of 12 blocks, 9 of them a generating request's
// long prompt, which takes one more block every 32 tokens it writes while
// embedding requests' prompts fill the rest; each time, the newest
// unfinished prompt gives its blocks back and is computed again later (a
// mean-pooled one starts its sum over). Every vector is the same bits as
// the reference's.
TEST_F(EmbeddingEngineTest, UnderPreemptionVectorsEqualTheReference) {
  const std::vector<Case> cases = Cases();
  const Pooling mean{Pooling::Kind::kMean, true};
  size_t longest = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    if (cases[i].ids.size() > cases[longest].ids.size()) longest = i;
  }
  std::vector<std::vector<float>> want;
  for (const Case& c : cases) want.push_back(Reference(c.ids, mean));
  auto tight_model = testing::ModelOn(*backend_, *loaded_);
  EngineOptions o;
  o.max_seq_len = 320;
  o.embeddings = true;
  o.scheduler.max_batch = 16;
  o.scheduler.max_tokens_per_step = 16;  // prompts take many steps, while the chat grows
  o.kv_cache.bytes = 12 * tight_model->CacheShape(1, 1).bytes_per_block();
  auto tight = testing::ValueOrDie(Engine::Create(*tight_model, loaded_->tokenizer().get(), o), "engine");
  Request chat;
  chat.prompt = cases[longest].ids;
  chat.stop.max_new_tokens = 48;
  chat.stop.ignore_eos = true;
  auto chat_sink = std::make_shared<CollectingSink>();
  ASSERT_TRUE(tight->Submit(chat, chat_sink).ok());
  std::vector<std::pair<size_t, std::shared_ptr<CollectingSink>>> sinks;
  for (int round = 0; round < 4; ++round) {
    for (size_t i = 0; i < cases.size(); ++i) {
      if (i == longest) continue;  // (it would wait for the chat's blocks)
      Request r;
      r.prompt = cases[i].ids;
      r.embed = mean;
      sinks.push_back({i, std::make_shared<CollectingSink>()});
      ASSERT_TRUE(tight->Submit(r, sinks.back().second).ok());
    }
  }
  int64_t prompts = static_cast<int64_t>(chat.prompt.size());
  for (auto& [i, sink] : sinks) {
    EXPECT_EQ(Vector(*sink), want[i]) << cases[i].name;
    prompts += static_cast<int64_t>(cases[i].ids.size());
  }
  ASSERT_TRUE(chat_sink->Wait());
  // Preempted prompts were computed again: more prompt tokens than sent.
  EXPECT_GT(tight->Stats().preemptions, 0);
  EXPECT_GT(tight->Stats().prompt_tokens, prompts);
}

TEST_F(EmbeddingEngineTest, BadRequestsAreRefusedByName) {
  Request r;
  r.prompt = {1, 2, 3};
  r.embed = Pooling{};
  r.embed_dims = 100000;
  auto st = engine_->Submit(r, std::make_shared<CollectingSink>()).status();
  EXPECT_EQ(ErrorField(st), "dimensions") << st;
  // An engine made without embeddings refuses them.
  auto plain_model = testing::ModelOn(*backend_, *loaded_);
  EngineOptions o;
  o.max_seq_len = 320;
  auto plain = testing::ValueOrDie(Engine::Create(*plain_model, loaded_->tokenizer().get(), o), "engine");
  r.embed_dims = 0;
  st = plain->Submit(r, std::make_shared<CollectingSink>()).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("--embeddings"));
  // An embedding model's engine takes embeddings only; a prompt past the
  // context is refused naming it (not max_new_tokens).
  auto only_model = testing::ModelOn(*backend_, *loaded_);
  o.embeddings = o.embedding_only = true;
  auto only = testing::ValueOrDie(Engine::Create(*only_model, loaded_->tokenizer().get(), o), "engine");
  Request generate;
  generate.prompt = {1, 2, 3};
  EXPECT_EQ(ErrorField(only->Submit(generate, std::make_shared<CollectingSink>()).status()), "model");
  r.prompt.assign(320, 5);
  EXPECT_EQ(ErrorField(only->Submit(r, std::make_shared<CollectingSink>()).status()), "prompt");
  r.prompt.assign(319, 5);
  EXPECT_TRUE(only->Submit(r, std::make_shared<CollectingSink>()).ok());
}

}  // namespace
}  // namespace flover
