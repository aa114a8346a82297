// The Llama family's config.json reading beyond Llama itself: Mistral's
// sliding window, Phi-3, and what is refused by name (a window where
// transformers' default attention would not apply one as configured,
// rope scaling kinds Flover does not run, a model_type no family reads).
#include "model/llama/llama_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "model/llama/llama_family.h"
#include "model/model_loader.h"

namespace flover {
namespace {

using ::testing::HasSubstr;

std::string Config(const std::string& type, const std::string& extra) {
  return absl::StrCat(R"({"model_type": ")", type, R"(", "hidden_size": 64, "num_hidden_layers": 2,
      "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96,
      "vocab_size": 301, "max_position_embeddings": 64)",
                      extra.empty() ? "" : ", ", extra, "}");
}

// Gemma 2 where config.json leaves fields out: Gemma2Config's defaults
// (window 4096, head_dim 256, caps 50 and 30, scalar 224, tied), null caps
// off, and another activation refused by name.
TEST(LlamaConfigTest, Gemma2DefaultsAndRefusals) {
  auto bare = ParseLlamaConfig(Config("gemma2", ""), "c");
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_EQ(bare->sliding_window, 4096);
  EXPECT_EQ(bare->head_dim, 256);
  EXPECT_EQ(bare->attn_logit_softcapping, 50.0f);
  EXPECT_EQ(bare->final_logit_softcapping, 30.0f);
  EXPECT_EQ(bare->query_pre_attn_scalar, 224.0);
  EXPECT_TRUE(bare->tie_word_embeddings);
  auto uncapped = ParseLlamaConfig(
      Config("gemma2", R"("attn_logit_softcapping": null, "final_logit_softcapping": null,
                          "sliding_window": null, "head_dim": 16)"),
      "c");
  ASSERT_TRUE(uncapped.ok()) << uncapped.status();
  EXPECT_EQ(uncapped->attn_logit_softcapping, 0.0f);
  EXPECT_EQ(uncapped->final_logit_softcapping, 0.0f);
  EXPECT_EQ(uncapped->sliding_window, 0);
  EXPECT_EQ(uncapped->head_dim, 16);
  auto silu = ParseLlamaConfig(Config("gemma2", R"("hidden_activation": "silu")"), "c");
  EXPECT_THAT(std::string(silu.status().message()),
              HasSubstr("hidden_activation \"silu\" is not supported for model_type gemma2 "
                        "(only gelu_pytorch_tanh)"));
  auto cap = ParseLlamaConfig(Config("gemma2", R"("final_logit_softcapping": -1)"), "c");
  EXPECT_THAT(std::string(cap.status().message()), HasSubstr("final_logit_softcapping must be > 0"));
}

// The hybrid models' keys: Qwen3.5's linear attention (its image-text
// wrapper descended into, transformers 5's rope_parameters, layer kinds
// from layer_types or full_attention_interval) and LFM2's short
// convolutions (full_attn_idxs, its MLP width worked out, norm_eps); and
// inconsistent layer kinds, head counts and kernels refused naming the field.
TEST(LlamaConfigTest, HybridModelsKeysAndRefusals) {
  using Kind = LlamaConfig::LayerKind;
  const std::string linear = R"("linear_conv_kernel_dim": 4, "linear_key_head_dim": 16,
      "linear_value_head_dim": 24, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
      "rope_parameters": {"rope_theta": 1e7, "partial_rotary_factor": 0.25, "rope_type": "default",
                          "mrope_section": [2, 1, 1], "mrope_interleaved": true})";
  auto q = ParseLlamaConfig(Config("qwen3_5_text", linear + R"(, "head_dim": 32,
      "layer_types": ["linear_attention", "full_attention"])"), "c");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->layer_kinds, (std::vector<Kind>{Kind::kLinearAttention, Kind::kAttention}));
  EXPECT_EQ(q->rope_theta, 1e7);
  EXPECT_EQ(q->rotary(), 8);
  // Its multimodal sections cover the 4 rotary frequencies; others are refused.
  EXPECT_EQ(std::vector<int>(q->mrope, q->mrope + 3), (std::vector<int>{2, 1, 1}));
  EXPECT_TRUE(q->mrope_interleaved);
  std::string odd = linear;  // consecutive sections must cover them
  odd.replace(odd.find("[2, 1, 1]"), 9, "[11, 11, 10]");
  odd.replace(odd.find("\"mrope_interleaved\": true"), 25, "\"mrope_interleaved\": false");
  EXPECT_THAT(std::string(ParseLlamaConfig(Config("qwen3_5_text", odd + R"(, "head_dim": 32,
      "layer_types": ["linear_attention", "full_attention"])"), "c").status().message()),
              HasSubstr("mrope_section must be 3 sections adding up to the 4 rotary frequencies, got 11, 11, 10"));
  EXPECT_EQ(q->conv_kernel, 4);
  EXPECT_EQ(q->linear_v_dim, 24);
  EXPECT_EQ(q->text_prefix, "model.");
  // The released image-text layout: text_config is the model.
  std::string text = Config("qwen3_5_text", linear);
  text.replace(text.find("\"num_hidden_layers\": 2"), 22, "\"num_hidden_layers\": 8");
  auto wrapped = ParseLlamaConfig(
      absl::StrCat(R"({"model_type": "qwen3_5", "vision_config": {"depth": 1}, "text_config": )", text, "}"), "c");
  ASSERT_TRUE(wrapped.ok()) << wrapped.status();
  EXPECT_EQ(wrapped->architecture, "qwen3_5_text");
  EXPECT_EQ(wrapped->text_prefix, "model.language_model.");
  // No layer_types: every fourth layer is attention.
  EXPECT_EQ(wrapped->layer_kinds[3], Kind::kAttention);
  EXPECT_EQ(wrapped->layer_kinds[2], Kind::kLinearAttention);
  auto refused = [&](const std::string& type, const std::string& extra) {
    return std::string(ParseLlamaConfig(Config(type, extra), "c").status().message());
  };
  EXPECT_THAT(refused("qwen3_5_text", linear + R"(, "layer_types": ["linear_attention", "sliding_attention"])"),
              HasSubstr("layer_types holds \"sliding_attention\""));
  EXPECT_THAT(refused("qwen3_5_text", linear + R"(, "layer_types": ["full_attention"])"),
              HasSubstr("layer_types has 1 entries for 2 layers"));
  EXPECT_THAT(refused("qwen3_5_text", linear + R"(, "layer_types": ["linear_attention", "linear_attention"])"),
              HasSubstr("layer_types has no attention layer"));
  std::string three = linear;
  three.replace(three.find("\"linear_num_value_heads\": 4"), 27, "\"linear_num_value_heads\": 3");
  EXPECT_THAT(refused("qwen3_5_text", three + R"(, "layer_types": ["linear_attention", "full_attention"])"),
              HasSubstr("linear_num_value_heads (3) is not a multiple of linear_num_key_heads (2)"));
  EXPECT_THAT(refused("qwen3_5_text", R"("linear_key_head_dim": 16)"), HasSubstr("linear_conv_kernel_dim"));
  // The multi-token-prediction layer: one, sharing the model's embedding.
  EXPECT_EQ(q->mtp_layers, 0);
  auto mtp = ParseLlamaConfig(Config("qwen3_5_text", linear + R"(, "mtp_num_hidden_layers": 1,
      "mtp_use_dedicated_embeddings": false, "layer_types": ["linear_attention", "full_attention"])"), "c");
  ASSERT_TRUE(mtp.ok()) << mtp.status();
  EXPECT_EQ(mtp->mtp_layers, 1);
  EXPECT_EQ(mtp->n_layer, 2);  // not one of the model's layers
  EXPECT_THAT(refused("qwen3_5_text", linear + R"(, "mtp_num_hidden_layers": 2, "layer_types": ["linear_attention", "full_attention"])"),
              HasSubstr("mtp_num_hidden_layers"));
  EXPECT_THAT(refused("qwen3_5_text", linear + R"(, "mtp_num_hidden_layers": 1, "mtp_use_dedicated_embeddings": true,
                              "layer_types": ["linear_attention", "full_attention"])"),
              HasSubstr("mtp_use_dedicated_embeddings true"));
  auto lfm2 = ParseLlamaConfig(Config("lfm2", R"("conv_L_cache": 3, "norm_eps": 1e-5, "full_attn_idxs": [1],
      "block_auto_adjust_ff_dim": true, "block_ffn_dim_multiplier": 1.0, "block_multiple_of": 32,
      "block_ff_dim": 128)"), "c");
  ASSERT_TRUE(lfm2.ok()) << lfm2.status();
  EXPECT_EQ(lfm2->layer_kinds, (std::vector<Kind>{Kind::kShortConv, Kind::kAttention}));
  EXPECT_EQ(lfm2->intermediate, 96);  // 2/3 of 128, rounded up to 32s
  EXPECT_FLOAT_EQ(lfm2->rms_norm_eps, 1e-5f);
  EXPECT_TRUE(lfm2->tie_word_embeddings);
  EXPECT_THAT(refused("lfm2", R"("conv_L_cache": 40)"), HasSubstr("conv_L_cache"));
  EXPECT_THAT(refused("lfm2", R"("conv_L_cache": 3, "block_auto_adjust_ff_dim": true,
      "block_ffn_dim_multiplier": 1e300, "block_multiple_of": 32, "block_ff_dim": 128)"),
              HasSubstr("block_ffn_dim_multiplier"));
  EXPECT_THAT(refused("lfm2", R"("conv_L_cache": 3, "conv_bias": true)"), HasSubstr("conv_bias is not supported"));
  EXPECT_THAT(refused("lfm2", R"("conv_L_cache": 3, "layer_types": ["conv", "conv"])"),
              HasSubstr("layer_types has no attention layer"));
  EXPECT_THAT(refused("lfm2", R"("conv_L_cache": 3, "layer_types": ["linear_attention", "full_attention"])"),
              HasSubstr("layer_types holds \"linear_attention\" (lfm2's layers are full_attention and conv)"));
}

// The hybrid mixtures: Qwen3.5-MoE (always renormalised; no dense width in
// its config), Qwen3-Next (projections packed per key head), Granite 4.0-H
// (Mamba-2's keys, the multipliers, NoPE, transformers 5's
// "linear_attention" for its Mamba layers) and their refusals by name.
// gpt-oss: its keys, YaRN against transformers 5.23's _compute_yarn_parameters
// for the released rope_scaling on a head of 16 (truncate false, and true:
// only the ramp's dims move), and what is refused by name.
TEST(LlamaConfigTest, GptOssKeysYarnAndRefusals) {
  const std::string keys = R"("head_dim": 16, "num_local_experts": 8, "num_experts_per_tok": 4,
      "sliding_window": 8, "layer_types": ["sliding_attention", "full_attention"], "rope_theta": 150000,
      "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
      "original_max_position_embeddings": 4096, "truncate": TRUNCATE})";
  auto with = [&](const std::string& truncate, const std::string& extra) {
    std::string k = keys;
    k.replace(k.find("TRUNCATE"), 8, truncate);
    return ParseLlamaConfig(Config("gpt_oss", k + extra), "c");
  };
  auto c = with("false", "");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->qkv_bias && c->o_bias && c->attention_sinks && c->moe_biases);
  EXPECT_EQ(c->experts, 8);
  EXPECT_EQ(c->expert_intermediate, 96);
  const DecoderSpec spec = LlamaDecoderSpec(*c);
  EXPECT_EQ(spec.attention[0].window, 8);
  EXPECT_EQ(spec.attention[1].window, 0);
  EXPECT_TRUE(spec.attention_sinks);
  EXPECT_TRUE(spec.moe.biases);
  EXPECT_EQ(spec.glu, kernels::GluKind::kSwigluOai);
  EXPECT_EQ(spec.moe.router.scoring, kernels::RouterParams::Scoring::kTopKSoftmax);
  EXPECT_NEAR(spec.rope_scale, 1.3465735902799727, 1e-6);
  const std::vector<double> want = {1.0, 0.22541800141334534, 0.05081327259540558, 0.006794959306716919,
                                    0.0004564839182421565, 1.818833698052913e-05, 4.099978468730114e-06,
                                    9.242089618055616e-07};
  const std::vector<float> got = RopeInvFreq(*c);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-7 * want[i]) << i;
  auto truncated = with("true", "");
  ASSERT_TRUE(truncated.ok()) << truncated.status();
  EXPECT_NEAR(RopeInvFreq(*truncated)[3], 0.007755465339869261, 2e-9);
  EXPECT_NEAR(RopeInvFreq(*truncated)[4], 0.0009144543437287211, 2e-10);
  auto refused = [&](const std::string& extra) { return std::string(with("false", extra).status().message()); };
  EXPECT_THAT(refused(R"(, "swiglu_limit": 10.0)"), HasSubstr("swiglu_limit 10 is not supported"));
  std::string bad_types = keys;
  bad_types.replace(bad_types.find("\"full_attention\"]"), 17, "\"chunked_attention\"]");
  bad_types.replace(bad_types.find("TRUNCATE"), 8, "false");
  EXPECT_THAT(std::string(ParseLlamaConfig(Config("gpt_oss", bad_types), "c").status().message()),
              HasSubstr("layer_types holds \"chunked_attention\""));
  std::string one_type = keys;
  one_type.replace(one_type.find(", \"full_attention\""), 18, "");
  one_type.replace(one_type.find("TRUNCATE"), 8, "false");
  EXPECT_THAT(std::string(ParseLlamaConfig(Config("gpt_oss", one_type), "c").status().message()),
              HasSubstr("layer_types has 1 entries for 2 layers"));
  std::string mscale = keys;
  mscale.replace(mscale.find("\"truncate\""), 0, "\"mscale\": 1.0, ");
  mscale.replace(mscale.find("TRUNCATE"), 8, "false");
  EXPECT_THAT(std::string(ParseLlamaConfig(Config("gpt_oss", mscale), "c").status().message()),
              HasSubstr("rope_scaling mscale is not supported"));
  // attention_bias stays refused where the architecture does not read it.
  EXPECT_THAT(std::string(ParseLlamaConfig(Config("llama", R"("attention_bias": true)"), "c").status().message()),
              HasSubstr("attention_bias is not supported"));
}

// Gemma 4 as released (an image-text config whose text_config is
// gemma4_text): its global layers' heads, the layers that read an earlier
// layer's K and V, proportional rope, per-layer inputs; transformers'
// per_layer_config spelling; and inconsistent configs refused by field.
TEST(LlamaConfigTest, Gemma4KeysAndRefusals) {
  auto parse = [](const std::string& text_extra,
                  const std::string& layer_types = R"(["sliding_attention", "sliding_attention", "full_attention",
                                                      "sliding_attention", "sliding_attention", "full_attention"])",
                  const std::string& shared = "3") {
    return ParseLlamaConfig(absl::StrCat(R"({"model_type": "gemma4", "vision_config": {"hidden_size": 8},
        "text_config": {"model_type": "gemma4_text", "hidden_size": 64, "num_hidden_layers": 6,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 96,
        "vocab_size": 331, "max_position_embeddings": 4096, "sliding_window": 8, "layer_types": )",
                                         layer_types, R"(, "attention_k_eq_v": true,
        "num_kv_shared_layers": )", shared, R"(, "use_double_wide_mlp": true, "hidden_size_per_layer_input": 16,
        "vocab_size_per_layer_input": 331, "final_logit_softcapping": 30.0,
        "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
          "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0}})",
                                         text_extra, "}}"),
                            "c");
  };
  auto c = parse(R"(, "global_head_dim": 32, "num_global_key_value_heads": 1)");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "gemma4_text");
  EXPECT_EQ(c->text_prefix, "model.language_model.");
  const DecoderSpec s = LlamaDecoderSpec(*c);
  ASSERT_EQ(s.layer_attention.size(), 6u);
  EXPECT_EQ(s.layer_attention[0].head_dim, 16);
  EXPECT_EQ(s.layer_attention[0].kv_heads, 2);
  EXPECT_EQ(s.layer_attention[2].head_dim, 32);
  EXPECT_EQ(s.layer_attention[2].kv_heads, 1);
  // The last three read the last earlier layer of their kind.
  EXPECT_EQ(s.layer_attention[2].kv_from, -1);
  EXPECT_EQ(s.layer_attention[3].kv_from, 1);
  EXPECT_EQ(s.layer_attention[4].kv_from, 1);
  EXPECT_EQ(s.layer_attention[5].kv_from, 2);
  EXPECT_EQ(s.KvLayerCount(), 3);
  EXPECT_EQ(s.layer_intermediate, (std::vector<int>{96, 96, 96, 192, 192, 192}));
  EXPECT_EQ(s.per_layer_input, 16);
  EXPECT_TRUE(s.v_norm && s.layer_scale && s.qk_norm);
  EXPECT_EQ(s.attention[0].window, 8);
  EXPECT_EQ(s.attention[2].window, 0);
  EXPECT_EQ(s.attention[2].scale, 1.0f);
  EXPECT_EQ(s.final_softcap, 30.0f);
  // Proportional rope: 16 frequencies of 1e6^(-2j/32), the first 4 turning.
  ASSERT_EQ(s.inv_freq.size(), 16u);
  for (int j = 0; j < 16; ++j) {
    EXPECT_NEAR(s.inv_freq[j], j < 4 ? std::pow(1e6, -2.0 * j / 32) : 0.0, 1e-7) << j;
  }
  ASSERT_EQ(s.inv_freq_local.size(), 8u);
  EXPECT_NEAR(s.inv_freq_local[1], std::pow(1e4, -2.0 / 16), 1e-7);
  EXPECT_TRUE(s.Validate().ok()) << s.Validate();
  // transformers' save_pretrained spelling of the same.
  auto saved = parse(R"(, "per_layer_config": {"2": {"head_dim": 32, "num_key_value_heads": 1},
                        "5": {"head_dim": 32, "num_key_value_heads": 1}})");
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->global_head_dim, 32);
  EXPECT_EQ(saved->global_kv_heads, 1);
  const std::string types6 = R"(["sliding_attention", "sliding_attention", "full_attention",
                                  "sliding_attention", "sliding_attention", "full_attention"])";
  auto refused = [&](const std::string& extra, const std::string& types = "", const std::string& shared = "3") {
    auto r = parse(extra, types.empty() ? types6 : types, shared);
    return std::string(r.status().message());
  };
  EXPECT_THAT(refused(R"(, "global_head_dim": 32)", "", "6"), HasSubstr("num_kv_shared_layers"));
  EXPECT_THAT(refused(R"(, "global_head_dim": 32)", R"(["sliding_attention", "full_attention"])"),
              HasSubstr("layer_types has 2 entries for 6 layers"));
  // Layers 4 and 5 share, but no earlier layer is global.
  EXPECT_THAT(refused(R"(, "global_head_dim": 32)",
                      R"(["sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention",
                         "sliding_attention", "full_attention"])",
                      "2"),
              HasSubstr("no earlier layer of its kind keeps them"));
  EXPECT_THAT(refused(R"(, "per_layer_config": {"1": {"head_dim": 32}})"),
              HasSubstr("per_layer_config names \"1\", which is not a full_attention layer"));
  EXPECT_THAT(refused(R"(, "global_head_dim": 32, "use_bidirectional_attention": "all")"),
              HasSubstr("use_bidirectional_attention"));
  EXPECT_THAT(refused(R"(, "global_head_dim": 33)"), HasSubstr("global_head_dim must be even"));
  // Numbers past int's range are refused by name, not converted (a fuzzer's find).
  EXPECT_THAT(refused(R"(, "global_head_dim": 3.2e77)"), HasSubstr("global_head_dim must be an integer in [0, 65536]"));
  EXPECT_THAT(refused(R"(, "global_head_dim": 32.5)"), HasSubstr("global_head_dim must be an integer in [0, 65536]"));
  EXPECT_THAT(refused(R"(, "per_layer_config": {"2": {"head_dim": 1e300, "num_key_value_heads": 1}})"),
              HasSubstr("head_dim must be an integer in [0, 65536], got 1e+300"));
  // rope_parameters by layer type only where the architecture reads them so.
  EXPECT_THAT(std::string(ParseLlamaConfig(Config("llama", R"("rope_parameters": {"full_attention":
                                                     {"rope_type": "default", "rope_theta": 10000.0}})"),
                                           "c")
                              .status()
                              .message()),
              HasSubstr("rope_parameters by layer type are not supported for model_type llama"));
}

TEST(LlamaConfigTest, HybridMixturesKeysAndRefusals) {
  using Kind = LlamaConfig::LayerKind;
  const std::string linear = R"("linear_conv_kernel_dim": 4, "linear_key_head_dim": 16,
      "linear_value_head_dim": 16, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
      "layer_types": ["linear_attention", "full_attention"], "num_experts": 8, "num_experts_per_tok": 2,
      "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48)";
  std::string text = Config("qwen3_5_moe_text", linear);
  text.erase(text.find(R"("intermediate_size": 96,)"), 24);
  auto moe = ParseLlamaConfig(absl::StrCat(R"({"model_type": "qwen3_5_moe", "text_config": )", text, "}"), "c");
  ASSERT_TRUE(moe.ok()) << moe.status();
  EXPECT_EQ(moe->architecture, "qwen3_5_moe_text");
  EXPECT_EQ(moe->text_prefix, "model.language_model.");
  EXPECT_TRUE(moe->norm_topk_prob);
  EXPECT_EQ(moe->intermediate, 48);
  EXPECT_EQ(moe->shared_expert_intermediate, 48);
  EXPECT_EQ(LlamaDecoderSpec(*moe).moe.shared_gated, true);
  auto next = ParseLlamaConfig(Config("qwen3_next", linear + R"(, "norm_topk_prob": false)"), "c");
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_TRUE(next->linear_qkvz_packed);
  EXPECT_TRUE(next->linear_ba_packed);
  EXPECT_FALSE(next->norm_topk_prob);
  const std::string mamba = R"("layer_types": ["mamba", "attention"], "mamba_n_heads": 8, "mamba_d_head": 16,
      "mamba_n_groups": 2, "mamba_d_state": 16, "mamba_expand": 2, "mamba_d_conv": 4, "num_local_experts": 8,
      "num_experts_per_tok": 2, "shared_intermediate_size": 48, "embedding_multiplier": 12,
      "residual_multiplier": 0.22, "attention_multiplier": 0.125, "logits_scaling": 6,
      "position_embedding_type": "nope")";
  auto granite = ParseLlamaConfig(Config("granitemoehybrid", mamba), "c");
  ASSERT_TRUE(granite.ok()) << granite.status();
  EXPECT_EQ(granite->layer_kinds, (std::vector<Kind>{Kind::kMamba2, Kind::kAttention}));
  EXPECT_EQ(granite->expert_intermediate, 96);
  EXPECT_EQ(granite->shared_expert_intermediate, 48);
  EXPECT_TRUE(granite->mamba_conv_bias);
  const DecoderSpec spec = LlamaDecoderSpec(*granite);
  EXPECT_TRUE(spec.inv_freq.empty());
  EXPECT_FLOAT_EQ(spec.embed_scale, 12.0f);
  EXPECT_FLOAT_EQ(spec.residual_scale, 0.22f);
  EXPECT_FLOAT_EQ(spec.attention[1].scale, 0.125f);
  EXPECT_FALSE(spec.moe.shared_gated);
  EXPECT_EQ(spec.recurrent.conv_channels(64), 128 + 2 * 2 * 16);
  // transformers 5 writes a Mamba layer as "linear_attention"; "auto" head size.
  auto with = [](std::string s, const std::string& from, const std::string& to) {
    return s.replace(s.find(from), from.size(), to);
  };
  const std::string v5 = with(with(mamba, R"(["mamba", "attention"])", R"(["linear_attention", "full_attention"])"),
                              R"("mamba_d_head": 16)", R"("mamba_d_head": "auto")");
  auto written = ParseLlamaConfig(Config("granitemoehybrid", v5), "c");
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(written->layer_kinds[0], Kind::kMamba2);
  EXPECT_EQ(written->mamba_head_dim, 16);
  // Micro: no experts, the shared MLP is the MLP.
  auto dense =
      ParseLlamaConfig(Config("granitemoehybrid", with(mamba, R"("num_local_experts": 8)", R"("num_local_experts": 0)")),
                       "c");
  ASSERT_TRUE(dense.ok()) << dense.status();
  EXPECT_EQ(dense->experts, 0);
  EXPECT_EQ(dense->intermediate, 48);
  auto refused = [&](const std::string& extra, const std::string& from, const std::string& to) {
    return std::string(ParseLlamaConfig(Config("granitemoehybrid", with(extra, from, to)), "c").status().message());
  };
  EXPECT_THAT(refused(mamba, R"("mamba_n_groups": 2)", R"("mamba_n_groups": 3)"),
              HasSubstr("mamba_n_heads (8) is not a multiple of mamba_n_groups (3)"));
  EXPECT_THAT(refused(mamba, R"("mamba_d_head": 16)", R"("mamba_d_head": 32)"),
              HasSubstr("mamba_n_heads (8) x mamba_d_head (32) is not mamba_expand x hidden_size (128)"));
  EXPECT_THAT(refused(mamba, R"("position_embedding_type": "nope")", R"("position_embedding_type": "alibi")"),
              HasSubstr("position_embedding_type \"alibi\""));
  EXPECT_THAT(refused(mamba, R"("mamba_d_conv": 4)", R"("mamba_d_conv": 4, "mamba_proj_bias": true)"),
              HasSubstr("mamba_proj_bias"));
  EXPECT_THAT(refused(mamba, R"("mamba_d_conv": 4)", R"("mamba_d_conv": 4, "time_step_limit": [1, 0.5])"),
              HasSubstr("time_step_limit"));
  EXPECT_THAT(refused(mamba, R"("logits_scaling": 6)", R"("logits_scaling": 0)"), HasSubstr("logits_scaling"));
  EXPECT_THAT(refused(mamba, R"(["mamba", "attention"])", R"(["conv", "attention"])"),
              HasSubstr("layer_types holds \"conv\" (granitemoehybrid's layers are full_attention and mamba)"));
}

TEST(LlamaConfigTest, MistralSlidingWindow) {
  auto windowed = ParseLlamaConfig(Config("mistral", R"("sliding_window": 4096)"), "c");
  ASSERT_TRUE(windowed.ok()) << windowed.status();
  EXPECT_EQ(windowed->architecture, "mistral");
  EXPECT_EQ(windowed->sliding_window, 4096);
  // Mistral v0.2 and later: null, no window.
  auto none = ParseLlamaConfig(Config("mistral", R"("sliding_window": null)"), "c");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->sliding_window, 0);
  auto bad = ParseLlamaConfig(Config("mistral", R"("sliding_window": 0)"), "c");
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("sliding_window"));
}

TEST(LlamaConfigTest, Phi3) {
  // Phi-3 mini's configs carry a window transformers' eager and SDPA
  // attention do not apply; neither does Flover.
  auto phi3 = ParseLlamaConfig(Config("phi3", R"("sliding_window": 2047, "rope_scaling": null)"), "c");
  ASSERT_TRUE(phi3.ok()) << phi3.status();
  EXPECT_EQ(phi3->architecture, "phi3");
  EXPECT_EQ(phi3->sliding_window, 0);
  EXPECT_FALSE(phi3->qkv_bias);
  // LongRoPE (Phi-3.5, Phi-4-mini): served to original_max_position_embeddings
  // with the short factors; factor lists that do not fit the head are
  // refused by name.
  const std::string factors = R"("short_factor": [1, 2, 3, 4, 5, 6, 7, 8], "long_factor": [2, 2, 2, 2, 2, 2, 2, 2])";
  auto longrope = ParseLlamaConfig(
      Config("phi3", R"("original_max_position_embeddings": 16, "rope_scaling": {"type": "longrope", )" + factors + "}"),
      "c");
  ASSERT_TRUE(longrope.ok()) << longrope.status();
  EXPECT_EQ(longrope->max_positions, 16);
  EXPECT_NEAR(longrope->rope_scaling.attention_factor, std::sqrt(1 + std::log(4.0) / std::log(16.0)), 1e-12);
  EXPECT_FLOAT_EQ(RopeInvFreq(*longrope)[7], RopeInvFreq(*phi3)[7] / 8.0f);
  // Served past its original context: the long factors at every position,
  // to max_position_embeddings, with the same attention factor; and back.
  LlamaConfig served = *longrope;
  ServeLlamaContext(&served, 17);
  EXPECT_EQ(served.max_positions, phi3->max_positions);
  EXPECT_EQ(InfoOf(served).max_positions, phi3->max_positions);
  EXPECT_FLOAT_EQ(RopeInvFreq(served)[0], RopeInvFreq(*phi3)[0] / 2.0f);
  EXPECT_FLOAT_EQ(RopeInvFreq(served)[7], RopeInvFreq(*phi3)[7] / 2.0f);
  EXPECT_EQ(LlamaDecoderSpec(served).rope_scale, LlamaDecoderSpec(*longrope).rope_scale);
  ServeLlamaContext(&served, 16);
  EXPECT_EQ(served.max_positions, 16);
  EXPECT_EQ(RopeInvFreq(served), RopeInvFreq(*longrope));
  // Other configs are unchanged.
  LlamaConfig plain = *phi3;
  ServeLlamaContext(&plain, 100000);
  EXPECT_EQ(plain.max_positions, phi3->max_positions);
  EXPECT_EQ(RopeInvFreq(plain), RopeInvFreq(*phi3));
  auto short_list = ParseLlamaConfig(
      Config("phi3", R"("original_max_position_embeddings": 16, "rope_scaling": {"type": "longrope", "short_factor": [1], "long_factor": [1]})"),
      "c");
  EXPECT_THAT(std::string(short_list.status().message()), HasSubstr("1 short and 1 long factors for 16 rotary dims (8 each)"));
  // Phi-4-mini's partial rotary: the first int(16 * 0.75) = 12 dims of each
  // head turn, so LongRoPE has 6 factors of each kind.
  const std::string six = R"("short_factor": [1, 2, 3, 4, 5, 6], "long_factor": [2, 2, 2, 2, 2, 2])";
  auto partial = ParseLlamaConfig(Config("phi3", R"("partial_rotary_factor": 0.75, "original_max_position_embeddings": 16, "rope_scaling": {"type": "longrope", )" + six + "}"), "c");
  ASSERT_TRUE(partial.ok()) << partial.status();
  EXPECT_EQ(partial->rotary(), 12);
  ASSERT_EQ(RopeInvFreq(*partial).size(), 6u);
  EXPECT_FLOAT_EQ(RopeInvFreq(*partial)[5], static_cast<float>(1.0 / std::pow(10000.0, 10.0 / 12) / 6));
  EXPECT_FLOAT_EQ(LlamaDecoderSpec(*partial).rope_scale, static_cast<float>(partial->rope_scaling.attention_factor));
  EXPECT_EQ(LlamaDecoderSpec(*partial).inv_freq.size(), 6u);
  EXPECT_THAT(std::string(ParseLlamaConfig(Config("phi3", R"("partial_rotary_factor": 0.75, "original_max_position_embeddings": 16, "rope_scaling": {"type": "longrope", )" + factors + "}"), "c").status().message()),
              HasSubstr("8 short and 8 long factors for 12 rotary dims (6 each)"));
  for (const char* bad : {"0", "1.5", "-1"}) {
    EXPECT_THAT(std::string(ParseLlamaConfig(Config("phi3", absl::StrCat(R"("partial_rotary_factor": )", bad)), "c").status().message()),
                HasSubstr("partial_rotary_factor must be in (0, 1]")) << bad;
  }
  EXPECT_THAT(std::string(ParseLlamaConfig(Config("phi3", R"("partial_rotary_factor": 0.1)"), "c").status().message()),
              HasSubstr("partial_rotary_factor 0.1 of head_dim 16 turns 1 dims (must be even and at least 2)"));
  auto no_original = ParseLlamaConfig(Config("phi3", R"("rope_scaling": {"type": "su", )" + factors + "}"), "c");
  EXPECT_THAT(std::string(no_original.status().message()), HasSubstr("original_max_position_embeddings"));
}

TEST(LlamaConfigTest, RefusesWindowsTransformersWouldNotApplyAsConfigured) {
  auto qwen2 = ParseLlamaConfig(Config("qwen2", R"("use_sliding_window": true, "sliding_window": 8)"), "c");
  EXPECT_THAT(std::string(qwen2.status().message()),
              HasSubstr("sliding_window attention is not supported for model_type qwen2"));
  auto qwen2_off = ParseLlamaConfig(Config("qwen2", R"("use_sliding_window": false, "sliding_window": 8)"), "c");
  EXPECT_TRUE(qwen2_off.ok()) << qwen2_off.status();
  auto llama = ParseLlamaConfig(Config("llama", R"("sliding_window": 8)"), "c");
  EXPECT_THAT(std::string(llama.status().message()), HasSubstr("(it is for mistral)"));
}

TEST(LlamaConfigTest, UnknownModelTypeIsRefusedNamingTheSupportedOnes) {
  EXPECT_THAT(std::string(ParseLlamaConfig(Config("falcon", ""), "c").status().message()),
              HasSubstr("model_type \"falcon\" is not a Llama-family model (gemma2, gemma3_text, gemma3, "
                        "gemma4_text, gemma4, gpt_oss, granitemoehybrid, lfm2, llama, idefics3, smolvlm, mistral, mixtral, olmoe, phi3, qwen2, qwen2_moe, qwen3, "
                        "qwen3_5_text, qwen3_5, qwen3_5_moe_text, qwen3_5_moe, qwen3_next, qwen3_moe, qwen3_vl_text, qwen3_vl, smollm3)"));
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/falcon";
  ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  std::ofstream(dir + "/config.json") << Config("falcon", "");
  auto loaded = LoadModel(dir);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(loaded.status().message()),
              HasSubstr("model_type \"falcon\" is not supported (Flover serves gemma2, gemma3, gemma3_text, gemma4, gemma4_text, gpt2, "
                        "gpt_oss, gptj, granitemoehybrid, idefics3, lfm2, llama, mistral, mixtral, olmoe, phi3, qwen2, "
                        "qwen2_moe, qwen3, qwen3_5, qwen3_5_moe, qwen3_5_moe_text, qwen3_5_text, qwen3_moe, qwen3_next, "
                        "qwen3_vl, qwen3_vl_text, smollm3, smolvlm)"));
}

// A mixture of experts' keys: which layers are sparse, and inconsistent
// counts refused naming the field.
TEST(LlamaConfigTest, MixtureOfExpertsKeys) {
  auto qwen = ParseLlamaConfig(Config("qwen3_moe", R"("num_experts": 8, "num_experts_per_tok": 2,
      "moe_intermediate_size": 32, "decoder_sparse_step": 2, "mlp_only_layers": [1])"), "c");
  ASSERT_TRUE(qwen.ok()) << qwen.status();
  EXPECT_EQ(qwen->experts, 8);
  EXPECT_EQ(qwen->expert_intermediate, 32);
  EXPECT_FALSE(qwen->norm_topk_prob);
  EXPECT_FALSE(qwen->sparse(0));  // (0 + 1) % 2 != 0
  EXPECT_FALSE(qwen->sparse(1));  // mlp_only_layers
  auto mixtral = ParseLlamaConfig(Config("mixtral", R"("num_local_experts": 8, "num_experts_per_tok": 2)"), "c");
  ASSERT_TRUE(mixtral.ok()) << mixtral.status();
  EXPECT_TRUE(mixtral->norm_topk_prob);  // Mixtral always renormalises
  EXPECT_EQ(mixtral->expert_intermediate, 96);
  EXPECT_TRUE(mixtral->sparse(0) && mixtral->sparse(1));
  // Of the 2 * 8 experts a token passes through 2 * 2 (and every router).
  const ModelInfo info = InfoOf(*mixtral);
  EXPECT_EQ(info.num_parameters - info.matmul_parameters - 2 * 301 * 64 + 301 * 64 - (2 * 2 + 1) * 64,
            2 * 6 * 3 * 64 * 96);
  EXPECT_EQ(info.experts, 8);  // what the server's start-up line says
  EXPECT_EQ(info.experts_per_token, 2);
  EXPECT_EQ(InfoOf(*qwen).experts_per_token, 2);
  for (auto [extra, field] : std::vector<std::pair<const char*, const char*>>{
           {R"("num_local_experts": 8, "num_experts_per_tok": 9)", "num_experts_per_tok"},
           {R"("num_local_experts": 0, "num_experts_per_tok": 1)", "num_local_experts"},
           {R"("num_experts_per_tok": 2)", "num_local_experts"}}) {
    auto bad = ParseLlamaConfig(Config("mixtral", extra), "c");
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << extra;
    EXPECT_THAT(std::string(bad.status().message()), HasSubstr(field)) << extra;
  }
  auto layer = ParseLlamaConfig(Config("qwen3_moe", R"("num_experts": 8, "num_experts_per_tok": 2,
      "moe_intermediate_size": 32, "mlp_only_layers": [5])"), "c");
  EXPECT_THAT(std::string(layer.status().message()), HasSubstr("mlp_only_layers"));
  auto clip = ParseLlamaConfig(Config("olmoe", R"("num_experts": 8, "num_experts_per_tok": 2, "clip_qkv": 8)"), "c");
  EXPECT_THAT(std::string(clip.status().message()), HasSubstr("clip_qkv"));
}

// SmolLM3's NoPE layers: the list, or every fourth layer without it.
TEST(LlamaConfigTest, SmolLM3RopeLayers) {
  auto listed = ParseLlamaConfig(Config("smollm3", R"("no_rope_layers": [1, 0])"), "c");
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(LlamaDecoderSpec(*listed).rope_layers, (std::vector<bool>{true, false}));
  EXPECT_TRUE(listed->tie_word_embeddings);
  auto every = ParseLlamaConfig(Config("smollm3", R"("no_rope_layer_interval": 2)"), "c");
  ASSERT_TRUE(every.ok()) << every.status();
  EXPECT_EQ(LlamaDecoderSpec(*every).rope_layers, (std::vector<bool>{true, false}));
  auto bad = ParseLlamaConfig(Config("smollm3", R"("no_rope_layers": [1, 0, 1])"), "c");
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("no_rope_layers has 3 entries for 2 layers"));
  auto window = ParseLlamaConfig(Config("smollm3", R"("use_sliding_window": true)"), "c");
  EXPECT_THAT(std::string(window.status().message()), HasSubstr("sliding_window"));
}

TEST(LlamaConfigTest, BuiltinFamilyVariantsHaveLlama1bShapes) {
  auto base = LoadModel("builtin:llama-1b");
  ASSERT_TRUE(base.ok()) << base.status();
  for (const char* name : {"qwen2", "phi3", "gemma2"}) {
    auto m = LoadModel(std::string("builtin:") + name + "-1b");
    ASSERT_TRUE(m.ok()) << name << ": " << m.status();
    const ModelInfo& info = (*m)->info();
    EXPECT_EQ(info.architecture, name);
    EXPECT_EQ(info.n_layer, (*base)->info().n_layer);
    EXPECT_EQ(info.hidden, (*base)->info().hidden);
    EXPECT_EQ(info.n_kv_head, (*base)->info().n_kv_head);
  }
  auto gptj = LoadModel("builtin:gptj-1b");
  ASSERT_TRUE(gptj.ok()) << gptj.status();
  EXPECT_EQ((*gptj)->info().architecture, "gptj");
  EXPECT_NEAR((*gptj)->info().num_parameters, 1.0e9, 0.1e9);
}

}  // namespace
}  // namespace flover
