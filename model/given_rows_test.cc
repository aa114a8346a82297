// Given input rows (ForwardBatch::given: an image's features in place of
// its placeholder tokens) replace the token table's rows and nothing else:
// a prompt whose row 3 is given token u's table row (read from the
// checkpoint, not from the model) computes what the prompt with u there
// computes, bitwise, alone or fused beside another sequence; a step whose
// given rows do not fit the batch is refused by name.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "model/loader/safetensors.h"
#include "model/model_loader.h"
#include "testing/backends.h"
#include "testing/files.h"

namespace flover {
namespace {

constexpr int kMaxSeq = 32;

class GivenRowsTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    std::string skip;
    backend_ = testing::BackendForTest(GetParam(), &skip);
    if (backend_ == nullptr) GTEST_SKIP() << skip;
    FLOVER_SKIP_IF_NOT_CARRIED(std::string("tests/golden/llama_gqa"));
    auto loaded = LoadModel("tests/golden/llama_gqa");
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    model_ = testing::ModelOn(*backend_, **loaded);
    hidden_ = model_->info().hidden;
    auto file = SafetensorsFile::Open("tests/golden/llama_gqa/model.safetensors");
    ASSERT_TRUE(file.ok()) << file.status();
    auto table = file->ReadFloat("model.embed_tokens.weight", {model_->info().vocab_size, hidden_});
    ASSERT_TRUE(table.ok()) << table.status();
    table_ = std::move(*table);
  }

  // Every row's logits of `batch` on a fresh cache.
  std::vector<float> Logits(const ForwardBatch& batch) {
    auto cache = testing::CacheFor(*model_, 2, kMaxSeq);
    auto out = model_->Forward(batch, *cache, LogitsFor::kEveryRow);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? std::vector<float>(out->begin(), out->end()) : std::vector<float>();
  }
  std::vector<float> Row(int32_t token) const {
    return std::vector<float>(table_.begin() + int64_t{token} * hidden_, table_.begin() + int64_t{token + 1} * hidden_);
  }

  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<CausalLm> model_;
  std::vector<float> table_;
  int hidden_ = 0;
};

TEST_P(GivenRowsTest, GivenRowsStandForTheirTokens) {
  const std::vector<int32_t> prompt = {5, 17, 42, 99, 7, 250};
  std::vector<int32_t> swapped = prompt;
  swapped[3] = 123;
  swapped[4] = 200;
  const std::vector<int32_t> other = {9, 8, 7, 6};

  ForwardBatch want;
  want.AddSequence(testing::SeqBlocks(0, kMaxSeq), 0, other);
  want.AddSequence(testing::SeqBlocks(1, kMaxSeq), 0, swapped);
  const std::vector<float> expected = Logits(want);

  // Rows 3 and 4 of the second sequence (batch rows 7 and 8) given u's rows.
  ForwardBatch given;
  given.AddSequence(testing::SeqBlocks(0, kMaxSeq), 0, other);
  given.AddSequence(testing::SeqBlocks(1, kMaxSeq), 0, prompt);
  std::vector<float> rows = Row(123);
  const std::vector<float> second = Row(200);
  rows.insert(rows.end(), second.begin(), second.end());
  given.GiveRows(4 + 3, rows, hidden_);
  const std::vector<float> got = Logits(given);
  ASSERT_EQ(got.size(), expected.size());
  EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)), 0);

  // Without the given rows the prompt's own tokens are read: different.
  ForwardBatch plain;
  plain.AddSequence(testing::SeqBlocks(0, kMaxSeq), 0, other);
  plain.AddSequence(testing::SeqBlocks(1, kMaxSeq), 0, prompt);
  EXPECT_NE(Logits(plain), expected);
}

TEST_P(GivenRowsTest, RowsOutsideTheBatchOrValuesOfTheWrongSizeAreRefused) {
  auto refusal = [&](const std::vector<ForwardBatch::GivenRows>& spans, size_t values) {
    ForwardBatch b;
    b.AddSequence(testing::SeqBlocks(0, kMaxSeq), 0, std::vector<int32_t>{1, 2, 3, 4});
    b.given = spans;
    b.embeds.assign(values, 0.5f);
    auto cache = testing::CacheFor(*model_, 2, kMaxSeq);
    auto out = model_->Forward(b, *cache, LogitsFor::kEveryRow);
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(out.status().message());
  };
  const size_t C = hidden_;
  EXPECT_NE(refusal({{3, 2}}, 2 * C).find("given input rows 3..4 are out of order or outside the batch's 4 rows"),
            std::string::npos);
  EXPECT_NE(refusal({{2, 1}, {1, 1}}, 2 * C).find("out of order"), std::string::npos);
  EXPECT_NE(refusal({{0, 0}}, 0).find("given input rows"), std::string::npos);
  EXPECT_NE(refusal({{1, 2}}, C).find("given input rows need 2 x 64 values, got 64"), std::string::npos);
}

// Named by device, so the GPU bundle's --gtest_filter=*cuda* finds them.
INSTANTIATE_TEST_SUITE_P(Devices, GivenRowsTest, ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace flover
