// Qwen3.5's multi-token-prediction layer (DecoderSpec::mtp_input) against
// its float64 reference (tests/golden/make_mtp_golden.py, built of
// transformers' own Qwen3.5 modules; llama.cpp's MTP graph agrees with it
// to 4.9e-6 of the logit scale): the model's final hidden rows
// (KeepFinalHidden), the MTP logits of every (h_p, t_{p+1}) pair of each
// golden prompt, and a chain of 4 drafts each fed the head norm's output of
// the one before; from the Hugging Face directory (mtp.*) and from GGUF
// (llama.cpp's nextn block), on the CPU and on a GPU when there is one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "model/model_loader.h"
#include "model/loader/safetensors.h"
#include "testing/backends.h"
#include "testing/files.h"
#include "testing/golden.h"
#include "util/json.h"

namespace flover {
namespace {

using ::testing::HasSubstr;
using testing::ScaledError;

class MtpGoldenTest : public ::testing::TestWithParam<std::tuple<const char*, const char*>> {
 protected:
  void SetUp() override {
    backend_ = testing::BackendForTest(std::get<1>(GetParam()), &skip_);
    if (backend_ == nullptr) GTEST_SKIP() << skip_;
    const std::string fixture = std::get<0>(GetParam());
    dir_ = "tests/golden/" + fixture;
    FLOVER_SKIP_IF_NOT_CARRIED(dir_);
    auto m = LoadModel(absl::StartsWith(fixture, "gguf_") ? dir_ + "/model.gguf" : dir_);
    ASSERT_TRUE(m.ok()) << m.status();
    ckpt_ = std::move(*m);
    model_ = testing::ModelOn(*backend_, *ckpt_);
    ASSERT_TRUE(model_->KeepFinalHidden(true).ok());
    auto mtp = ckpt_->InstantiateMtp(*model_);
    ASSERT_TRUE(mtp.ok()) << mtp.status();
    mtp_ = std::move(*mtp);
    golden_ = testing::LoadGolden(dir_, ckpt_->info().vocab_size);
  }

  // The model's final hidden rows of `tokens` from position 0.
  std::vector<float> Hidden(const std::vector<int32_t>& tokens) {
    auto cache = testing::CacheFor(*model_, 1, ckpt_->info().max_positions);
    ForwardBatch b;
    testing::AddCachedSequence(b, *cache, 0, ckpt_->info().max_positions, 0, tokens);
    std::vector<float> logits;
    EXPECT_TRUE(model_->Forward(b, *cache, LogitsFor::kLastRowsOfEachSequence, &logits).ok());
    const absl::Span<const float> h = model_->FinalHidden();
    return std::vector<float>(h.begin(), h.end());
  }

  std::string skip_, dir_;
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<LoadedModel> ckpt_;
  std::unique_ptr<CausalLm> model_, mtp_;
  testing::Golden golden_;
};

TEST_P(MtpGoldenTest, HiddenRowsAndMtpLogitsMatchTheReference) {
  const int V = ckpt_->info().vocab_size, C = ckpt_->info().hidden;
  auto file = SafetensorsFile::Open(dir_ + "/golden_mtp.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  double worst_hidden = 0, worst_mtp = 0;
  for (size_t i = 0; i < golden_.prompts.size(); ++i) {
    const std::vector<int32_t>& p = golden_.prompts[i];
    const int n = static_cast<int>(p.size());
    const std::vector<float> h = Hidden(p);
    ASSERT_EQ(h.size(), size_t(n) * C);
    auto want_h = file->ReadFloat("hidden." + std::to_string(i), {n, C});
    ASSERT_TRUE(want_h.ok()) << want_h.status();
    for (int row = 0; row < n; ++row) {
      worst_hidden = std::max(worst_hidden, ScaledError(&h[size_t(row) * C], &(*want_h)[size_t(row) * C], C));
    }
    if (n < 2) continue;
    // The pairs (h_p, t_{p+1}), p = 0 .. n - 2, at positions p.
    auto cache = testing::CacheFor(*mtp_, 1, ckpt_->info().max_positions);
    ForwardBatch b;
    testing::AddCachedSequence(b, *cache, 0, ckpt_->info().max_positions, 0,
                               absl::MakeConstSpan(p).subspan(1));
    b.hidden.assign(h.begin(), h.end() - C);
    std::vector<float> logits;
    ASSERT_TRUE(mtp_->Forward(b, *cache, LogitsFor::kEveryRow, &logits).ok());
    auto want = file->ReadFloat("mtp." + std::to_string(i), {n - 1, V});
    ASSERT_TRUE(want.ok()) << want.status();
    for (int row = 0; row + 1 < n; ++row) {
      const double err = ScaledError(&logits[size_t(row) * V], &(*want)[size_t(row) * V], V);
      EXPECT_LT(err, 2e-5) << "prompt " << i << " pair " << row;
      worst_mtp = std::max(worst_mtp, err);
    }
  }
  EXPECT_LT(worst_hidden, 2e-5);
  std::printf("%s on %s: hidden rows within %.2e, MTP logits within %.2e of the reference's scale\n",
              std::get<0>(GetParam()), std::get<1>(GetParam()), worst_hidden, worst_mtp);
}

TEST_P(MtpGoldenTest, ChainedDraftsMatchTheReference) {
  auto json = ParseJsonObject(testing::ReadFileOrEmpty(dir_ + "/golden_mtp.json"), "golden_mtp.json");
  ASSERT_TRUE(json.ok()) << json.status();
  const auto& chain = json->fields().at("chain").struct_value().fields();
  const std::vector<int32_t> tokens = testing::JsonIds(chain.at("tokens"));
  const std::vector<int32_t> want = testing::JsonIds(chain.at("drafts"));
  const int C = ckpt_->info().hidden, n = static_cast<int>(tokens.size());
  // The model over all but the last token; the MTP layer over its pairs,
  // then each draft with the head norm's output that drafted it.
  const std::vector<float> h = Hidden(std::vector<int32_t>(tokens.begin(), tokens.end() - 1));
  ASSERT_TRUE(mtp_->KeepFinalHidden(true).ok());
  const int max_seq = ckpt_->info().max_positions;
  auto cache = testing::CacheFor(*mtp_, 1, max_seq);
  std::vector<int32_t> drafts;
  ForwardBatch b;
  testing::AddCachedSequence(b, *cache, 0, max_seq, 0, absl::MakeConstSpan(tokens).subspan(1));
  b.hidden = h;
  for (int k = 0; k < static_cast<int>(want.size()); ++k) {
    auto best = mtp_->ForwardGreedy(b, *cache);
    ASSERT_TRUE(best.ok()) << best.status();
    drafts.push_back((*best)[0]);
    const absl::Span<const float> out = mtp_->FinalHidden();
    ASSERT_EQ(out.size(), size_t(b.num_rows()) * C);
    const std::vector<float> last(out.end() - C, out.end());
    const int pos = n - 1 + k;  // the next pair's position
    b.Clear();
    testing::AddCachedSequence(b, *cache, 0, max_seq, pos, absl::MakeConstSpan(&drafts.back(), 1));
    b.hidden = last;
  }
  EXPECT_EQ(drafts, want);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MtpGoldenTest,
                         ::testing::Combine(::testing::Values("qwen35_tiny", "gguf_qwen35"),
                                            ::testing::Values("cpu", "cuda")),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param)) + "_" + std::get<1>(info.param);
                         });

// What has no MTP layer says so, and a model keeps no hidden rows unasked.
TEST(MtpTest, ModelsWithoutTheLayerRefuseByName) {
  auto backend = testing::CpuBackend();
  auto lfm2 = LoadModel("tests/golden/lfm2_tiny");
  ASSERT_TRUE(lfm2.ok()) << lfm2.status();
  auto model = testing::ModelOn(*backend, **lfm2);
  auto mtp = (*lfm2)->InstantiateMtp(*model);
  EXPECT_EQ(mtp.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(mtp.status().message(), HasSubstr("lfm2_tiny has no multi-token-prediction layer"));
  auto cache = testing::CacheFor(*model, 1, 64);
  ForwardBatch b;
  testing::AddCachedSequence(b, *cache, 0, 64, 0, std::vector<int32_t>{1, 2, 3});
  std::vector<float> logits;
  ASSERT_TRUE(model->Forward(b, *cache, LogitsFor::kLastRowsOfEachSequence, &logits).ok());
  EXPECT_TRUE(model->FinalHidden().empty());
}

// A step of the MTP layer without its hidden rows is refused, naming them.
TEST(MtpTest, AStepWithoutHiddenRowsIsRefused) {
  auto backend = testing::CpuBackend();
  auto q = LoadModel("tests/golden/qwen35_tiny");
  ASSERT_TRUE(q.ok()) << q.status();
  auto model = testing::ModelOn(*backend, **q);
  auto mtp = (*q)->InstantiateMtp(*model);
  ASSERT_TRUE(mtp.ok()) << mtp.status();
  auto cache = testing::CacheFor(**mtp, 1, 64);
  ForwardBatch b;
  testing::AddCachedSequence(b, *cache, 0, 64, 0, std::vector<int32_t>{1, 2, 3});
  std::vector<float> logits;
  const absl::Status st = (*mtp)->Forward(b, *cache, LogitsFor::kLastRowsOfEachSequence, &logits);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("needs 3 x 64 hidden values, got 0"));
}

}  // namespace
}  // namespace flover
