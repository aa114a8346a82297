#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/gpt2/gpt2_checkpoint.h"
#include "model/gpt2/gpt_family.h"

namespace flover {
namespace {

using ::testing::HasSubstr;

TEST(TpShardTest, VocabularySplitsIntoContiguousRangesOfAnySize) {
  GptConfig c = *BuiltinGpt2Config("tiny");
  c.vocab_size = 211;
  const DecoderShard a = DecoderShardOf(GptDecoderSpec(c), {2, 0}),
                     b = DecoderShardOf(GptDecoderSpec(c), {2, 1});
  EXPECT_EQ(a.vocab_begin, 0);
  EXPECT_EQ(a.vocab_end, 106);
  EXPECT_EQ(b.vocab_begin, 106);
  EXPECT_EQ(b.vocab_end, 211);
  EXPECT_EQ(a.q_heads, 2);
  EXPECT_EQ(b.q_head_begin, 2);
  EXPECT_TRUE(a.adds_replicated_bias);
  EXPECT_FALSE(b.adds_replicated_bias);
}

TEST(TpShardTest, ShardsHaveTheLocalShapes) {
  auto m = Gpt2Checkpoint::Load("builtin:tiny");  // 4 heads of 16, 64 wide, MLP 256
  ASSERT_TRUE(m.ok());
  const GptConfig& c = (*m)->config();
  auto shard = LoadGptWeights((*m)->source(), c, {2, 1});
  auto whole = LoadGptWeights((*m)->source(), c, {1, 0});
  ASSERT_TRUE(shard.ok() && whole.ok());
  const DecoderWeights& s = *shard;
  EXPECT_EQ(s.embed.size(), 256u * 64);
  EXPECT_EQ(s.layers[0].qkv.f32.size(), 64u * 3 * 32);
  EXPECT_EQ(s.layers[0].qkv_b.size(), 3u * 32);
  EXPECT_EQ(s.layers[0].o.f32.size(), 32u * 64);
  EXPECT_EQ(s.layers[0].up.f32.size(), 64u * 128);
  EXPECT_EQ(s.layers[0].down.f32.size(), 128u * 64);
  // Rank 1's Q columns are the full matrix's columns [32, 64), K's [96, 128).
  const auto& full = whole->layers[0].qkv.f32;
  EXPECT_EQ(s.layers[0].qkv.f32[0], full[32]);
  EXPECT_EQ(s.layers[0].qkv.f32[32], full[64 + 32]);
  EXPECT_EQ(s.layers[0].qkv.f32[64], full[128 + 32]);
  EXPECT_EQ(s.layers[0].qkv.f32[96], full[192 + 32]);  // row 1 starts after 96 columns
  // Rank 1's c_fc columns are [128, 256); its c_proj rows [128, 256).
  EXPECT_EQ(s.layers[0].up.f32[0], whole->layers[0].up.f32[128]);
  EXPECT_EQ(s.layers[0].up.f32[128], whole->layers[0].up.f32[256 + 128]);
  EXPECT_EQ(s.layers[0].down.f32[0], whole->layers[0].down.f32[128 * 64]);
  // Row-split biases and positions are added once: rank 1 holds zeros and
  // reads no wpe.
  ASSERT_EQ(s.layers[0].o_b.size(), 64u);
  for (float v : s.layers[0].o_b) EXPECT_EQ(v, 0.0f);
  EXPECT_TRUE(s.position_table.empty());
  EXPECT_EQ(whole->position_table.size(), 512u * 64);
}

TEST(TpShardTest, InvalidSplitsNameTheProblem) {
  const GptConfig c = *BuiltinGpt2Config("tiny");  // 4 heads
  EXPECT_THAT(std::string(ValidateDecoderShard(GptDecoderSpec(c), {3, 0}).message()),
              HasSubstr("--tp=3 does not divide the model's 4 attention heads"));
  EXPECT_TRUE(ValidateDecoderShard(GptDecoderSpec(c), {4, 3}).ok());
  EXPECT_FALSE(ValidateDecoderShard(GptDecoderSpec(c), {2, 2}).ok());
}

}  // namespace
}  // namespace flover
