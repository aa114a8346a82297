// Embeddings from a decoder: a tiny random Qwen3-Embedding-shaped checkpoint
// (tests/golden/qwen3_embedding_tiny: Qwen3Model's tensors without the
// "model." prefix, sentence-transformers' modules.json and last-token
// pooling with a Normalize module; make_embedding_golden.py) and its GGUF
// twin (llama.cpp's converter: pooling_type 3): the model's final hidden
// rows, pooled (model/pooling.h), against sentence-transformers 6.2's
// float64 embeddings of 11 inputs, Matryoshka truncations included; and the
// tokenizer feeds the model what sentence-transformers feeds it (the query
// instruction as text, <|endoftext|> appended by the post-processor).
#include "model/pooling.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "model/loader/gguf.h"
#include "model/model_loader.h"
#include "testing/backends.h"
#include "testing/files.h"
#include "util/json.h"

namespace flover {
namespace {

using google::protobuf::Value;

constexpr char kDir[] = "tests/golden/qwen3_embedding_tiny";

std::vector<float> Floats(const Value& v) {
  std::vector<float> out;
  for (const Value& x : v.list_value().values()) out.push_back(static_cast<float>(x.number_value()));
  return out;
}

std::vector<int32_t> Ids(const Value& v) {
  std::vector<int32_t> out;
  for (const Value& x : v.list_value().values()) out.push_back(static_cast<int32_t>(x.number_value()));
  return out;
}

// The pooled embedding of `ids` (one sequence alone) with `dims` values.
std::vector<float> Embed(CausalLm& model, const std::vector<int32_t>& ids, const Pooling& pooling, int dims,
                         int max_positions) {
  auto cache = testing::CacheFor(model, 1, max_positions);
  ForwardBatch b;
  testing::AddCachedSequence(b, *cache, 0, max_positions, 0, ids);
  std::vector<float> logits;
  const absl::Status run = model.Forward(b, *cache, LogitsFor::kLastRowsOfEachSequence, &logits);
  EXPECT_TRUE(run.ok()) << run;
  const absl::Span<const float> rows = model.FinalHidden();
  const int C = static_cast<int>(rows.size() / ids.size());
  auto pooled = Pool(rows, static_cast<int>(ids.size()), C, pooling, dims);
  EXPECT_TRUE(pooled.ok()) << pooled.status();
  return pooled.ok() ? *pooled : std::vector<float>{};
}

class EmbeddingGoldenTest : public ::testing::TestWithParam<const char*> {};

TEST_P(EmbeddingGoldenTest, PooledFinalHiddenMatchesSentenceTransformers) {
  const std::string spec = GetParam();
  const bool gguf = spec != kDir;
  auto loaded = LoadModel(spec);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  // The pooling the model's files say: sentence-transformers' modules, or
  // llama.cpp's pooling_type.
  std::optional<Pooling> pooling;
  if (gguf) {
    auto file = GgufFile::Open(spec);
    ASSERT_TRUE(file.ok()) << file.status();
    auto type = file->GetInt("qwen3.pooling_type");
    ASSERT_TRUE(type.ok()) << type.status();
    pooling = PoolingFromGguf(*type);
  } else {
    auto read = ReadDirectoryPooling(spec);
    ASSERT_TRUE(read.ok()) << read.status();
    pooling = *read;
  }
  ASSERT_TRUE(pooling.has_value());
  EXPECT_EQ(pooling->kind, Pooling::Kind::kLast);
  EXPECT_TRUE(pooling->normalize);

  auto golden = ParseJsonObject(testing::ReadFileOrEmpty(std::string(kDir) + "/golden.json"), "golden.json");
  ASSERT_TRUE(golden.ok()) << golden.status();
  auto backend = testing::CpuBackend();
  auto model = testing::ModelOn(*backend, **loaded);
  ASSERT_TRUE(model->KeepFinalHidden(true).ok());
  const int max_positions = (*loaded)->info().max_positions;
  int cases = 0, truncated = 0;
  for (const Value& c : golden->fields().at("cases").list_value().values()) {
    const auto& f = c.struct_value().fields();
    const std::string name = f.at("name").string_value();
    const std::vector<int32_t> ids = Ids(f.at("input_ids"));
    if (!gguf) {  // the text as sentence-transformers builds it, through our tokenizer
      auto encoded = (*loaded)->tokenizer()->Encode(f.at("model_input").string_value());
      ASSERT_TRUE(encoded.ok()) << encoded.status();
      EXPECT_EQ(*encoded, ids) << name;
    }
    const std::vector<float> want = Floats(f.at("embedding"));
    const std::vector<float> got = Embed(*model, ids, *pooling, 0, max_positions);
    ASSERT_EQ(got.size(), want.size()) << name;
    double dot = 0, worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      dot += double{got[i]} * want[i];
      worst = std::max(worst, std::fabs(double{got[i]} - want[i]));
    }
    EXPECT_LT(worst, 2e-6) << name;
    EXPECT_GT(dot, 0.999999) << name;  // both unit vectors: the cosine
    ++cases;
    if (f.count("embedding_truncated_renormalized")) {
      const int dims = static_cast<int>(f.at("dimensions").number_value());
      const std::vector<float> want_d = Floats(f.at("embedding_truncated_renormalized"));
      const std::vector<float> got_d = Embed(*model, ids, *pooling, dims, max_positions);
      ASSERT_EQ(got_d.size(), want_d.size()) << name;
      for (size_t i = 0; i < want_d.size(); ++i) EXPECT_NEAR(got_d[i], want_d[i], 2e-6) << name << " " << i;
      ++truncated;
    }
  }
  EXPECT_EQ(cases, 11);
  EXPECT_EQ(truncated, 2);
}

INSTANTIATE_TEST_SUITE_P(DirectoryAndGguf, EmbeddingGoldenTest,
                         ::testing::Values(kDir, "tests/golden/gguf_qwen3_embedding/model.gguf"));

// The pooling kinds on rows whose answers are known, and bad arguments.
TEST(PoolingTest, KindsNormalisationAndDimensions) {
  const std::vector<float> rows = {3, 4, 0,  // position 0
                                   1, 0, 0,  // position 1
                                   0, 0, 2};  // position 2
  Pooling p;
  p.normalize = false;
  p.kind = Pooling::Kind::kLast;
  EXPECT_EQ(*Pool(rows, 3, 3, p), (std::vector<float>{0, 0, 2}));
  p.kind = Pooling::Kind::kCls;
  EXPECT_EQ(*Pool(rows, 3, 3, p), (std::vector<float>{3, 4, 0}));
  p.kind = Pooling::Kind::kMean;
  EXPECT_EQ(*Pool(rows, 3, 3, p), (std::vector<float>{4.0f / 3, 4.0f / 3, 2.0f / 3}));
  p.kind = Pooling::Kind::kCls;
  p.normalize = true;
  EXPECT_EQ(*Pool(rows, 3, 3, p), (std::vector<float>{0.6f, 0.8f, 0}));
  EXPECT_EQ(*Pool(rows, 3, 3, p, 1), (std::vector<float>{1.0f}));  // the first value, renormalised
  EXPECT_FALSE(Pool(rows, 3, 3, p, 4).ok());
  EXPECT_FALSE(Pool(rows, 2, 3, p).ok());
  EXPECT_EQ(*PoolingKindNamed("mean"), Pooling::Kind::kMean);
  EXPECT_THAT(std::string(PoolingKindNamed("max").status().message()), ::testing::HasSubstr("last, mean, cls"));
  EXPECT_FALSE(PoolingFromGguf(0).has_value());  // none
  EXPECT_FALSE(PoolingFromGguf(4).has_value());  // rank: a reranker's, not an embedding's
  // A directory without modules.json says nothing.
  auto none = ReadDirectoryPooling("tests/golden/llama_gqa");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
}

// Pooled as the engine pools, a chunk at a time: the same bits as Pool over
// the rows at once, for every kind and every cut.
TEST(PoolingTest, ChunkByChunkIsPoolAtOnce) {
  constexpr int T = 7, C = 5;
  std::vector<float> rows(T * C);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = std::sin(0.37f * static_cast<float>(i + 1)) * 3.1f;
  for (Pooling::Kind kind : {Pooling::Kind::kMean, Pooling::Kind::kCls, Pooling::Kind::kLast}) {
    const Pooling p{kind, true};
    const std::vector<float> whole = *Pool(rows, T, C, p, 3);
    for (int cut = 1; cut < T; ++cut) {
      PoolingSum sum(p, C);
      for (int at = 0; at < T; at += cut) {
        const int n = std::min(cut, T - at);
        sum.Add(absl::MakeConstSpan(rows).subspan(static_cast<size_t>(at) * C, static_cast<size_t>(n) * C), at, n, T);
      }
      EXPECT_EQ(*sum.Finish(3), whole) << static_cast<int>(kind) << " cut " << cut;
    }
  }
  EXPECT_FALSE(PoolingSum(Pooling{}, C).Finish(0).ok());  // no rows
}

}  // namespace
}  // namespace flover
