// --dtype=auto's choice (AutoMatmulDtype): native only for a GGUF file that
// holds matrices in a block format the CPU kernels run as stored, only on the
// CPU, and only where this CPU runs them; f32 for everything else.
#include "model/model_loader.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "kernels/cpu/block_linear.h"
#include "model/forward_batch.h"
#include "testing/backends.h"
#include "testing/golden.h"
#include "testing/gguf_writer.h"

namespace flover {
namespace {

using kernels::MatmulDtype;
using testing::GgufWriter;

std::string WriteFile(const std::string& name, const std::string& bytes) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// A file with one tensor of ggml type `type`, `ne` its dimensions.
std::string OneTensor(const std::string& name, uint32_t type, const std::vector<uint64_t>& ne,
                      int bytes) {
  GgufWriter w;
  w.String("general.architecture", "llama").Tensor("blk.0.attn_q.weight", type, ne, std::string(bytes, '\0'));
  return WriteFile(name, w.Bytes());
}

// What the CPU picks for a file of runnable blocks on this machine.
MatmulDtype CpuBlocks() {
  return kernels::BlockLinear::CheckSupported().ok() ? MatmulDtype::kNative : MatmulDtype::kF32;
}

TEST(AutoMatmulDtypeTest, NativeForBlocksTheCpuRuns) {
  if (!kernels::BlockLinear::CheckSupported().ok()) {
    std::printf("this CPU lacks the block kernels' features: auto must pick f32 here\n");
  }
  // Q8_0 (8), Q4_0 (2), Q4_1 (3): 32 values a block; Q4_K (12), Q6_K (14): 256.
  EXPECT_EQ(AutoMatmulDtype(OneTensor("q8.gguf", 8, {64, 2}, 136), "cpu"), CpuBlocks());
  EXPECT_EQ(AutoMatmulDtype(OneTensor("q4_0.gguf", 2, {64, 2}, 72), "cpu"), CpuBlocks());
  EXPECT_EQ(AutoMatmulDtype(OneTensor("q4_1.gguf", 3, {64, 2}, 80), "cpu"), CpuBlocks());
  EXPECT_EQ(AutoMatmulDtype(OneTensor("q4k.gguf", 12, {256, 2}, 288), "cpu"), CpuBlocks());
  EXPECT_EQ(AutoMatmulDtype(OneTensor("q6k.gguf", 14, {256, 2}, 420), "cpu"), CpuBlocks());
  // Q5_0 (6), Q5_1 (7), Q5_K (13).
  EXPECT_EQ(AutoMatmulDtype(OneTensor("q5_0.gguf", 6, {64, 2}, 88), "cpu"), CpuBlocks());
  EXPECT_EQ(AutoMatmulDtype(OneTensor("q5_1.gguf", 7, {64, 2}, 96), "cpu"), CpuBlocks());
  EXPECT_EQ(AutoMatmulDtype(OneTensor("q5k.gguf", 13, {256, 2}, 352), "cpu"), CpuBlocks());
  // Q3_K and IQ4_NL run as Q6_K and Q8_0 blocks of the same values.
  EXPECT_EQ(AutoMatmulDtype(OneTensor("q3k.gguf", 11, {256, 2}, 220), "cpu"), CpuBlocks());
  EXPECT_EQ(AutoMatmulDtype(OneTensor("iq4nl.gguf", 20, {64, 2}, 72), "cpu"), CpuBlocks());
}

TEST(AutoMatmulDtypeTest, F32ForEverythingElse) {
  const std::string q8 = OneTensor("q8_gpu.gguf", 8, {64, 2}, 136);
  // CUDA has block kernels, but they have never run on a GPU: auto stays f32 there.
  EXPECT_EQ(AutoMatmulDtype(q8, "cuda"), MatmulDtype::kF32);
  EXPECT_EQ(AutoMatmulDtype(q8, "cuda:1"), MatmulDtype::kF32);
  // Float matrices, block types without a CPU kernel (Q2_K, IQ4_XS), a vector of blocks.
  EXPECT_EQ(AutoMatmulDtype(OneTensor("f32.gguf", 0, {4, 2}, 32), "cpu"), MatmulDtype::kF32);
  EXPECT_EQ(AutoMatmulDtype(OneTensor("f16.gguf", 1, {4, 2}, 16), "cpu"), MatmulDtype::kF32);
  EXPECT_EQ(AutoMatmulDtype(OneTensor("q2k.gguf", 10, {256, 2}, 168), "cpu"), MatmulDtype::kF32);
  EXPECT_EQ(AutoMatmulDtype(OneTensor("iq4xs.gguf", 23, {256, 2}, 272), "cpu"), MatmulDtype::kF32);
  EXPECT_EQ(AutoMatmulDtype(OneTensor("q8_vector.gguf", 8, {64}, 68), "cpu"), MatmulDtype::kF32);
  // Built-ins, directories, missing, foreign and broken files: f32 (LoadModel
  // reports what is wrong with them).
  EXPECT_EQ(AutoMatmulDtype("builtin:llama-tiny", "cpu"), MatmulDtype::kF32);
  EXPECT_EQ(AutoMatmulDtype(std::getenv("TEST_TMPDIR"), "cpu"), MatmulDtype::kF32);
  EXPECT_EQ(AutoMatmulDtype("/no/such/model.gguf", "cpu"), MatmulDtype::kF32);
  EXPECT_EQ(AutoMatmulDtype(WriteFile("text.gguf", "not a model"), "cpu"), MatmulDtype::kF32);
  std::string cut = GgufWriter().Tensor("w", 8, {64, 2}, std::string(136, '\0')).Bytes();
  cut.resize(40);
  EXPECT_EQ(AutoMatmulDtype(WriteFile("cut.gguf", cut), "cpu"), MatmulDtype::kF32);
}


// The matrices native widens to f32: quantized types without a kernel or a
// stand-in (float matrices are as they come).
TEST(WidenedMatricesTest, NamesTheTypesWithoutAKernel) {
  GgufWriter w;
  w.String("general.architecture", "llama")
      .Tensor("blk.0.attn_q.weight", 10, {256, 2}, std::string(168, '\0'))     // Q2_K
      .Tensor("blk.0.attn_k.weight", 23, {256, 2}, std::string(272, '\0'))     // IQ4_XS
      .Tensor("blk.0.attn_v.weight", 23, {256, 2}, std::string(272, '\0'))     // IQ4_XS
      .Tensor("blk.0.attn_output.weight", 11, {256, 2}, std::string(220, '\0'))  // Q3_K: as Q6_K
      .Tensor("blk.0.ffn_up.weight", 12, {256, 2}, std::string(288, '\0'))     // Q4_K
      .Tensor("blk.0.ffn_down.weight", 1, {4, 2}, std::string(16, '\0'));      // F16
  EXPECT_EQ(WidenedMatrices(WriteFile("mixed.gguf", w.Bytes())), "3 of 6 matrices (Q2_K, IQ4_XS)");
  EXPECT_EQ(WidenedMatrices(OneTensor("q4k_only.gguf", 12, {256, 2}, 288)), "");
  EXPECT_EQ(WidenedMatrices("builtin:llama-tiny"), "");
  EXPECT_EQ(WidenedMatrices("/no/such/model.gguf"), "");
}

// A built-in in random blocks runs natively and computes what its own
// dequantized weights compute in f32 (the f32 backend reads the blocks'
// values): only native's rounding of the inputs to 8 bits separates them.
TEST(LoadBuiltinInBlocksTest, NativeLogitsMatchTheDequantizedWeights) {
  auto loaded = LoadBuiltinInBlocks("builtin:llama-tiny", kernels::BlockFormat::kQ8_0);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->stored_dtype(), "Q8_0 (random blocks)");
  std::string skip;
  auto native = testing::BackendForTest("cpu", &skip, kernels::MatmulDtype::kNative);
  if (native == nullptr) GTEST_SKIP() << skip;
  auto f32 = testing::CpuBackend();
  auto a = testing::ModelOn(*native, **loaded);
  auto b = testing::ModelOn(*f32, **loaded);
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5, 9, 2};
  ForwardBatch batch;
  batch.AddSequence(testing::SeqBlocks(0, 64), 0, prompt);
  auto ca = testing::CacheFor(*a, 1, 64);
  auto cb = testing::CacheFor(*b, 1, 64);
  std::vector<float> la, lb;
  ASSERT_TRUE(a->Forward(batch, *ca, LogitsFor::kEveryRow, &la).ok());
  ASSERT_TRUE(b->Forward(batch, *cb, LogitsFor::kEveryRow, &lb).ok());
  ASSERT_EQ(la.size(), lb.size());
  const int V = (*loaded)->info().vocab_size;
  for (size_t row = 0; row < prompt.size(); ++row) {
    const double err = testing::ScaledError(&la[row * V], &lb[row * V], V);
    // Measured at most 2.6e-2 (Zen 5); the decoder goldens hold native
    // blocks to 0.3 of transformers on the same dequantized weights.
    EXPECT_LT(err, 0.1) << "row " << row;
    EXPECT_GT(err, 0.0) << "row " << row << ": native ran no block kernel";
  }
}

TEST(LoadBuiltinInBlocksTest, OtherModelsAreRefusedByName) {
  auto gpt2 = LoadBuiltinInBlocks("builtin:gpt2-small", kernels::BlockFormat::kQ4_K);
  ASSERT_FALSE(gpt2.ok());
  EXPECT_EQ(gpt2.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(gpt2.status().message().find("builtin:gpt2-small"), std::string::npos);
  EXPECT_FALSE(LoadBuiltinInBlocks("/no/such/model", kernels::BlockFormat::kQ4_K).ok());
}

}  // namespace
}  // namespace flover
