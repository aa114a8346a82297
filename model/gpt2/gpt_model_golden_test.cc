// GPT-2 forward numerics against Hugging Face transformers: logits at every
// prompt position, 32-step greedy continuations, and the equivalences the
// batched engine relies on (prefill-then-decode and chunked prefill equal one
// full prefill; a ragged batch equals its sequences run alone). Every test
// runs on the CPU, and on a GPU when this build has the CUDA backend and the
// host a GPU (skipped, with the reason, otherwise).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <tuple>
#include <cstdio>

#include "engine/generate.h"
#include "model/gpt2/gpt2_checkpoint.h"
#include "model/gpt2/gpt2_checkpoint.h"
#include "testing/files.h"
#include "testing/golden.h"
#include "testing/backends.h"

namespace flover {
namespace {

using testing::ScaledError;

// A fixture under tests/golden/ loaded with its golden logits, and a model
// over a backend of the given device and types.
class GoldenFixture : public ::testing::Test {
 protected:
  // False (with skip_ set) when the device cannot run here.
  bool Load(const std::string& fixture, const std::string& device,
            kernels::MatmulDtype matmul = kernels::MatmulDtype::kF32,
            kernels::KvDtype kv = kernels::KvDtype::kF32) {
    const std::string dir = "tests/golden/" + fixture;
    backend_ = testing::BackendForTest(device, &skip_, matmul, kv);
    if (backend_ == nullptr) return false;
    if (testing::FixtureNotCarried(dir)) {
      skip_ = dir + ": not in the part of the fixtures this run carries";
      return false;
    }
    auto m = Gpt2Checkpoint::Load(dir);
    EXPECT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
    gpt_ = testing::ModelOn(*backend_, *model_);
    golden_ = testing::LoadGolden(dir, model_->config().vocab_size);
    return true;
  }

  std::unique_ptr<KvCache> NewCache(int seqs) {
    return testing::CacheFor(*gpt_, seqs, model_->config().n_positions);
  }
  // Sequence `seq`'s blocks in a NewCache: a contiguous range.
  std::vector<int32_t> Blocks(int seq) const {
    return testing::SeqBlocks(seq, model_->config().n_positions);
  }

  std::string skip_;
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<Gpt2Checkpoint> model_;
  std::unique_ptr<CausalLm> gpt_;
  testing::Golden golden_;
};

const char* const kDevices[] = {"cpu", "cuda"};

class GoldenModelTest
    : public GoldenFixture,
      public ::testing::WithParamInterface<std::tuple<const char*, const char*>> {
 protected:
  const char* fixture() const { return std::get<0>(GetParam()); }
  void SetUp() override {
    if (!Load(fixture(), std::get<1>(GetParam()))) GTEST_SKIP() << skip_;
  }
};

TEST_P(GoldenModelTest, LogitsAtEveryPositionMatchTransformers) {
  const int V = model_->config().vocab_size;
  EXPECT_EQ(golden_.prompts.front().size(), 1u);  // includes a 1-token prompt
  EXPECT_EQ(golden_.prompts.back().size(), size_t(model_->config().n_positions - 2));
  double worst = 0;
  for (size_t i = 0; i < golden_.prompts.size(); ++i) {
    auto cache = NewCache(1);
    ForwardBatch b;
    b.AddSequence(Blocks(0), 0, golden_.prompts[i]);
    std::vector<float> logits;
    ASSERT_TRUE(gpt_->Forward(b, *cache, LogitsFor::kEveryRow, &logits).ok());
    ASSERT_EQ(logits.size(), golden_.prompts[i].size() * V);
    for (size_t row = 0; row < golden_.prompts[i].size(); ++row) {
      const double err = ScaledError(&logits[row * V], &golden_.logits[i][row * V], V);
      EXPECT_LT(err, 1e-4) << "prompt " << i << " position " << row;
      worst = std::max(worst, err);
    }
  }
  std::printf("%s on %s: worst scaled logit error %.2e\n", fixture(), std::get<1>(GetParam()),
              worst);
}

TEST_P(GoldenModelTest, GreedyContinuationMatchesTransformers) {
  const GenerateOptions options = GreedyTokens(32);
  auto out = GenerateAlone(*gpt_, golden_.greedy_prompt, options);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, golden_.greedy_output);
}

TEST_P(GoldenModelTest, PrefillThenDecodeEqualsOneFullPrefill) {
  const int V = model_->config().vocab_size;
  const std::vector<int32_t>& prompt = golden_.prompts.back();
  const std::vector<float>& full = golden_.logits.back();
  // Prefill the first 5 tokens, then one token per step; and separately a
  // prefill in uneven chunks (5, 11, rest).
  for (const std::vector<int>& chunks :
       {std::vector<int>{5}, std::vector<int>{5, 11, int(prompt.size()) - 16}}) {
    auto cache = NewCache(1);
    int pos = 0;
    size_t chunk = 0;
    while (pos < int(prompt.size())) {
      const int len = chunk < chunks.size() ? chunks[chunk++] : 1;
      ForwardBatch b;
      b.AddSequence(Blocks(0), pos, absl::MakeConstSpan(&prompt[pos], len));
      std::vector<float> logits;
      ASSERT_TRUE(gpt_->Forward(b, *cache, LogitsFor::kLastRowsOfEachSequence, &logits).ok());
      const int last = pos + len - 1;
      EXPECT_LT(ScaledError(logits.data(), &full[size_t(last) * V], V), 1e-4) << "position " << last;
      pos += len;
    }
  }
}

TEST_P(GoldenModelTest, RaggedBatchEqualsEachSequenceAlone) {
  const int V = model_->config().vocab_size;
  // All prompts in one forward, each in blocks scattered over the cache
  // (every S + 1-th, in reversed order of sequences), plus a decode row for
  // a sequence already in the cache.
  auto cache = NewCache(int(golden_.prompts.size()) + 1);
  const int S = int(golden_.prompts.size());
  const int P = model_->config().n_positions;
  const std::vector<int32_t>& p1 = golden_.prompts[1];
  {
    ForwardBatch warm;
    warm.AddSequence(InterleavedBlocks(S, S + 1, P), 0, absl::MakeConstSpan(p1.data(), p1.size() - 1));
    std::vector<float> ignored;
    ASSERT_TRUE(gpt_->Forward(warm, *cache, LogitsFor::kLastRowsOfEachSequence, &ignored).ok());
  }
  ForwardBatch b;
  for (int i = 0; i < S; ++i) b.AddSequence(InterleavedBlocks(S - 1 - i, S + 1, P), 0, golden_.prompts[i]);
  b.AddSequence(InterleavedBlocks(S, S + 1, P), int(p1.size()) - 1, {p1.back()});
  std::vector<float> logits;
  ASSERT_TRUE(gpt_->Forward(b, *cache, LogitsFor::kLastRowsOfEachSequence, &logits).ok());
  ASSERT_EQ(logits.size(), size_t(S + 1) * V);
  for (int i = 0; i < S; ++i) {
    const size_t last = golden_.prompts[i].size() - 1;
    EXPECT_LT(ScaledError(&logits[size_t(i) * V], &golden_.logits[i][last * V], V), 1e-4) << i;
  }
  EXPECT_LT(ScaledError(&logits[size_t(S) * V], &golden_.logits[1][(p1.size() - 1) * V], V), 1e-4);
}

TEST_P(GoldenModelTest, StoredDtypeAndTokenizerAreReported) {
  const std::string want = golden_.stored_dtype == "float32"   ? "F32"
                           : golden_.stored_dtype == "float16" ? "F16"
                                                               : "BF16";
  EXPECT_EQ(model_->stored_dtype(), want);
  EXPECT_EQ((model_->tokenizer() != nullptr), std::string(fixture()) == "tiny_f32");
}

TEST_P(GoldenModelTest, BadBatchesAreRejected) {
  auto cache = NewCache(2);
  std::vector<float> logits;
  ForwardBatch b;
  b.AddSequence(Blocks(0), 0, {model_->config().vocab_size});
  EXPECT_EQ(gpt_->Forward(b, *cache, LogitsFor::kEveryRow, &logits).code(),
            absl::StatusCode::kInvalidArgument);
  b.Clear();
  b.AddSequence(Blocks(0), model_->config().n_positions - 1, {1, 2});
  EXPECT_EQ(gpt_->Forward(b, *cache, LogitsFor::kEveryRow, &logits).code(),
            absl::StatusCode::kInvalidArgument);
  b.Clear();
  b.AddSequence(Blocks(1), 0, {1});  // two sequences writing one block
  b.AddSequence(Blocks(1), 0, {2});
  EXPECT_EQ(gpt_->Forward(b, *cache, LogitsFor::kEveryRow, &logits).code(),
            absl::StatusCode::kInvalidArgument);
  b.Clear();
  b.AddSequence(Blocks(2), 0, {1});  // blocks past the cache's end
  EXPECT_EQ(gpt_->Forward(b, *cache, LogitsFor::kEveryRow, &logits).code(),
            absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(FixturesAndDevices, GoldenModelTest,
                         ::testing::Combine(::testing::Values("tiny_f32", "tiny_f16_prefix",
                                                              "tiny_bf16_prefix"),
                                            ::testing::ValuesIn(kDevices)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param)) + "_" +
                                  std::get<1>(info.param);
                         });

// --dtype=bf16 (linear layers round weights and inputs to bfloat16) and
// --kv_dtype=bf16 (keys and values stored as bfloat16) keep 8 significant
// bits, so logits move by ~1% of their scale; --dtype=int8 (weights to 255
// levels per output column, inputs to 255 per row) by ~1-2%. They must stay
// close to transformers' float32 ones, really differ from ours in float32
// (the reduced path is in use), and keep every batching equivalence bit for
// bit.
struct ReducedCase {
  const char* name;
  kernels::MatmulDtype matmul;
  kernels::KvDtype kv;
  double tolerance;  // scaled logit error vs transformers' F32
};

class GoldenReducedTest
    : public GoldenFixture,
      public ::testing::WithParamInterface<std::tuple<const char*, ReducedCase, const char*>> {
 protected:
  const char* fixture() const { return std::get<0>(GetParam()); }

  void SetUp() override {
    const ReducedCase& c = std::get<1>(GetParam());
    if (!Load(fixture(), std::get<2>(GetParam()), c.matmul, c.kv)) GTEST_SKIP() << skip_;
  }

  // Logits of every row of `prompt` run from position 0 in chunks of the
  // given lengths (the last one repeated until the prompt is done).
  std::vector<float> RunInChunks(const std::vector<int32_t>& prompt, std::vector<int> chunks) {
    auto cache = NewCache(1);
    std::vector<float> all, logits;
    for (int pos = 0, c = 0; pos < int(prompt.size()); ++c) {
      const int len = std::min(chunks[std::min<size_t>(c, chunks.size() - 1)], int(prompt.size()) - pos);
      ForwardBatch b;
      b.AddSequence(Blocks(0), pos, absl::MakeConstSpan(&prompt[pos], len));
      EXPECT_TRUE(gpt_->Forward(b, *cache, LogitsFor::kEveryRow, &logits).ok());
      all.insert(all.end(), logits.begin(), logits.end());
      pos += len;
    }
    return all;
  }

};

TEST_P(GoldenReducedTest, LogitsStayNearTransformers) {
  const ReducedCase& c = std::get<1>(GetParam());
  const int V = model_->config().vocab_size;
  // int8 with an f32 KV cache is also held to transformers' emulation of
  // the same arithmetic (make_int8_golden.py). They agree to ~3e-7 on most
  // fixtures; but where an input lands within an ulp of a rounding midpoint
  // (norms and gelu differ from transformers' by ulps), one integer moves by
  // one and, through attention, every later position with it: on
  // tiny_f16_prefix that is 1.6e-2 from position 11 of the longest prompt,
  // and the emulation moves as much when it divides by the scale instead of
  // multiplying by its inverse. Far below what a wrong scale or offset gives.
  std::vector<std::vector<float>> emulation;
  if (c.matmul == kernels::MatmulDtype::kInt8 && c.kv == kernels::KvDtype::kF32) {
    emulation = testing::LoadPromptLogits(std::string("tests/golden/") + fixture() +
                                              "/golden_int8.safetensors",
                                          "logits_int8", golden_.prompts, V);
  }
  double worst = 0, worst_vs_emulation = 0, emulation_worst = 0;
  for (size_t i = 0; i < golden_.prompts.size(); ++i) {
    const std::vector<float> logits = RunInChunks(golden_.prompts[i], {int(golden_.prompts[i].size())});
    for (size_t row = 0; row < golden_.prompts[i].size(); ++row) {
      const double err = ScaledError(&logits[row * V], &golden_.logits[i][row * V], V);
      EXPECT_LT(err, c.tolerance) << "prompt " << i << " position " << row;
      worst = std::max(worst, err);
      if (!emulation.empty()) {
        const float* emu = &emulation[i][row * V];
        const double vs_emu = ScaledError(&logits[row * V], emu, V);
        EXPECT_LT(vs_emu, 2e-2) << "prompt " << i << " position " << row;
        worst_vs_emulation = std::max(worst_vs_emulation, vs_emu);
        emulation_worst = std::max(emulation_worst, ScaledError(emu, &golden_.logits[i][row * V], V));
      }
    }
  }
  EXPECT_GT(worst, 1e-4) << "no rounding visible: is the reduced-precision path in use?";
  std::printf("%s %s on %s: worst scaled logit error %.2e", fixture(), c.name,
              std::get<2>(GetParam()), worst);
  if (!emulation.empty()) {
    std::printf(" (emulation %.2e), %.2e vs the emulation", emulation_worst, worst_vs_emulation);
  }
  std::printf("\n");
}

// How many of the 32 greedy tokens agree with transformers' F32 ones before
// the first difference: reported (a reduced dtype may pick another token
// where two logits are close), and the first token is held to agree.
TEST_P(GoldenReducedTest, GreedyAgreementWithTransformersIsReported) {
  GenerateOptions options;
  options.max_new_tokens = int(golden_.greedy_output.size());
  options.sampling.temperature = 0;
  options.ignore_eos = true;
  auto out = GenerateAlone(*gpt_, golden_.greedy_prompt, options);
  ASSERT_TRUE(out.ok()) << out.status();
  const size_t agree = testing::AgreeingPrefix(*out, golden_.greedy_output);
  EXPECT_GE(agree, 1u);
  std::printf("%s %s on %s: greedy tokens agreeing with transformers' F32: %zu of %zu\n",
              fixture(), std::get<1>(GetParam()).name, std::get<2>(GetParam()), agree,
              golden_.greedy_output.size());
}

TEST_P(GoldenReducedTest, ChunkedPrefillAndDecodeEqualOnePrefillBitwise) {
  const std::vector<int32_t>& prompt = golden_.prompts.back();
  const std::vector<float> full = RunInChunks(prompt, {int(prompt.size())});
  EXPECT_EQ(RunInChunks(prompt, {5, 1}), full);       // prefill 5, then decode
  EXPECT_EQ(RunInChunks(prompt, {5, 11, 40}), full);  // uneven chunks
}

INSTANTIATE_TEST_SUITE_P(
    FixturesAndDtypes, GoldenReducedTest,
    ::testing::Combine(
        ::testing::Values("tiny_f32", "tiny_f16_prefix", "tiny_bf16_prefix"),
        ::testing::Values(
            ReducedCase{"bf16 linear", kernels::MatmulDtype::kBF16, kernels::KvDtype::kF32, 3e-2},
            ReducedCase{"bf16 kv", kernels::MatmulDtype::kF32, kernels::KvDtype::kBF16, 3e-2},
            ReducedCase{"bf16 both", kernels::MatmulDtype::kBF16, kernels::KvDtype::kBF16, 3e-2},
            // f16 runs on CUDA only; the CPU case skips with the reason.
            ReducedCase{"f16 linear", kernels::MatmulDtype::kF16, kernels::KvDtype::kBF16, 3e-2},
            // int8 runs on the CPU only (AVX-512 VNNI); the CUDA case skips.
            ReducedCase{"int8 linear", kernels::MatmulDtype::kInt8, kernels::KvDtype::kF32, 0.1},
            ReducedCase{"int8 bf16kv", kernels::MatmulDtype::kInt8, kernels::KvDtype::kBF16, 0.1}),
        ::testing::ValuesIn(kDevices)),
    [](const auto& info) {
      std::string name = std::string(std::get<0>(info.param)) + "_" + std::get<1>(info.param).name +
                         "_" + std::get<2>(info.param);
      std::replace(name.begin(), name.end(), ' ', '_');
      return name;
    });

}  // namespace
}  // namespace flover
