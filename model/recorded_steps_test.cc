// Recorded steps (CUDA graphs) compute what plain steps compute, bitwise:
// two backends of one device, one replaying recordings and one not, run the
// same prefills, decode steps (the batch shrinking and growing, so keys
// come back after others and after a prompt's step) and verify steps
// (several rows of each sequence, every row's logits) and must return the
// same logits. On the CPU nothing is recorded and the two are trivially
// equal; on a GPU the test also asserts that steps were replayed, a mixture
// of experts' (its rows grouped on the device) among them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "testing/backends.h"
#include "model/model_loader.h"

namespace flover {
namespace {

struct Side {
  std::unique_ptr<kernels::Backend> backend;
  std::unique_ptr<CausalLm> model;
  std::unique_ptr<KvCache> cache;
};

class RecordedStepsTest
    : public ::testing::TestWithParam<std::tuple<const char*, const char*, kernels::MatmulDtype>> {};

TEST_P(RecordedStepsTest, ReplaysEqualPlainStepsBitwise) {
  const auto [device, model_name, dtype] = GetParam();
  auto loaded = LoadModel(model_name);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  Side runs[2];
  for (int r = 0; r < 2; ++r) {
    std::string skip;
    runs[r].backend = testing::BackendForTest(device, &skip, dtype, kernels::KvDtype::kF32,
                                              /*record_steps=*/r == 0);
    if (runs[r].backend == nullptr) GTEST_SKIP() << skip;
    runs[r].model = testing::ModelOn(*runs[r].backend, **loaded);
    runs[r].cache = testing::CacheFor(*runs[r].model, 6, 96);
  }
  const int vocab = runs[0].model->info().vocab_size;

  // Six sequences: prompts of different lengths, then decode steps over a
  // batch that shrinks (sequences finish) and grows (one comes back).
  std::vector<int> pos(6, 0);
  std::vector<int32_t> last(6);
  // A prompt step, a decode step (a row per sequence), or a verify step
  // (`verify` rows per sequence, as speculation's: its last token and
  // drafts, with every row's logits).
  auto step = [&](const std::vector<int>& slots, bool prompt, int verify = 0) {
    ForwardBatch batch;
    for (int s : slots) {
      std::vector<int32_t> tokens;
      const int n = prompt ? 3 + 2 * s : verify > 0 ? verify : 1;
      for (int i = 0; i < n; ++i) tokens.push_back((prompt ? 17 * s + 5 * i : last[s] + 3 * i) % vocab);
      batch.AddSequence(InterleavedBlocks(s, 6, 96), pos[s], tokens, verify > 0 ? n : 1);
    }
    std::vector<float> logits[2];
    for (int r = 0; r < 2; ++r) {
      auto out = runs[r].model->Forward(batch, *runs[r].cache, LogitsFor::kLastRowsOfEachSequence);
      ASSERT_TRUE(out.ok()) << out.status();
      logits[r].assign(out->begin(), out->end());
    }
    ASSERT_EQ(logits[0].size(), logits[1].size());
    ASSERT_EQ(std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * sizeof(float)), 0)
        << "step over " << slots.size() << " sequences differs";
    const int rows_each = verify > 0 ? verify : 1;
    ASSERT_EQ(logits[0].size(), slots.size() * rows_each * vocab);
    for (size_t i = 0; i < slots.size(); ++i) {
      const float* row = logits[0].data() + ((i + 1) * rows_each - 1) * vocab;
      last[slots[i]] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
      pos[slots[i]] += prompt ? 3 + 2 * slots[i] : rows_each;
    }
  };
  step({0, 1, 2, 3, 4, 5}, /*prompt=*/true);
  const std::vector<std::vector<int>> batches = {{0, 1, 2, 3, 4, 5}, {0, 1, 2, 3}, {0, 2},
                                                 {0, 1, 2, 3}, {0, 1, 2, 3, 4, 5}};
  for (const auto& slots : batches) {
    for (int i = 0; i < 6; ++i) step(slots, /*prompt=*/false);
  }
  // Verify steps: three rows of each of four sequences, then two of three
  // (the block tables grow between them; the tables a recording reads do
  // not move).
  for (int i = 0; i < 4; ++i) step({0, 1, 2, 3}, /*prompt=*/false, /*verify=*/3);
  for (int i = 0; i < 3; ++i) step({1, 3, 5}, /*prompt=*/false, /*verify=*/2);
  EXPECT_EQ(runs[1].backend->replays(), 0);
  if (std::string(device) != "cpu") {
    // 30 decode steps of 3 batch sizes and 7 verify steps of 2 shapes: the
    // first step of each shape runs plainly, every other one replays (the
    // second is recorded, then replayed). A mixture of experts is recorded
    // where its rows are grouped on the device (16-bit experts); f32 experts
    // are grouped on the host, which waits midway, so those steps all run
    // plainly.
    const bool grouped_on_host =
        std::string(model_name) == "builtin:mixtral-tiny" && dtype == kernels::MatmulDtype::kF32;
    EXPECT_EQ(runs[0].backend->replays(), grouped_on_host ? 0 : 5 * 6 - 3 + 7 - 2);
  }
}

INSTANTIATE_TEST_SUITE_P(
    DevicesModelsDtypes, RecordedStepsTest,
    ::testing::Combine(::testing::Values("cpu", "cuda"),
                       ::testing::Values("builtin:tiny", "builtin:llama-tiny", "builtin:mixtral-tiny"),
                       ::testing::Values(kernels::MatmulDtype::kF32, kernels::MatmulDtype::kBF16)),
    [](const auto& info) {
      std::string name = std::string(std::get<0>(info.param)) + "_" +
                         std::string(std::get<1>(info.param)).substr(8) + "_" +
                         kernels::MatmulDtypeName(std::get<2>(info.param));
      for (char& c : name) if (c == '-') c = '_';
      return name;
    });

}  // namespace
}  // namespace flover
