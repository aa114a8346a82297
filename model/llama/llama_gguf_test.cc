// GGUF Llama models beyond the golden fixtures: the real SmolLM2-135M-Instruct
// file (Q4_1, Q8_0 embedding, tied head) against transformers on its
// dequantized weights (make_gguf_golden.py), and hyper-parameters Flover does
// not run, refused by name.
#include "model/llama/llama_gguf.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "engine/generate.h"
#include "testing/backends.h"
#include "model/llama/llama_checkpoint.h"
#include "testing/files.h"
#include "testing/golden.h"
#include "testing/gguf_writer.h"
#include "util/json.h"

namespace flover {
namespace {

using ::testing::HasSubstr;
using testing::GgufWriter;

constexpr char kSmolLM2[] = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

TEST(LlamaGgufTest, SmolLM2MatchesTransformersOnItsDequantizedWeights) {
  ASSERT_TRUE(GgufFile::Open(kSmolLM2).ok()) << "run tools/setup.sh to fetch " << kSmolLM2;
  auto ckpt = LlamaCheckpoint::Load(kSmolLM2);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const LlamaConfig& c = (*ckpt)->config();
  EXPECT_EQ(c.n_layer, 30);
  EXPECT_EQ(c.hidden, 576);
  EXPECT_EQ(c.n_head, 9);
  EXPECT_EQ(c.n_kv_head, 3);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.max_positions, 8192);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ((*ckpt)->stored_dtype(), "Q4_1");
  EXPECT_THAT((*ckpt)->chat_template().text, HasSubstr("<|im_start|>"));
  EXPECT_EQ((*ckpt)->chat_template().eos_token, "<|im_end|>");

  std::string skip;
  auto backend = testing::BackendForTest("cpu", &skip);
  ASSERT_NE(backend, nullptr) << skip;
  auto model = testing::ModelOn(*backend, **ckpt);
  auto golden = ParseJsonObject(testing::ReadFileOrEmpty("tests/golden/gguf_smollm2/golden.json"),
                                "golden.json");
  ASSERT_TRUE(golden.ok()) << golden.status();
  const auto& prompts = golden->fields().at("prompts").list_value().values();
  auto logits_file = SafetensorsFile::Open("tests/golden/gguf_smollm2/golden_logits.safetensors");
  ASSERT_TRUE(logits_file.ok()) << logits_file.status();
  for (int i = 0; i < prompts.size(); ++i) {
    const auto& p = prompts[i].struct_value().fields();
    const std::vector<int32_t> ids = testing::JsonIds(p.at("ids"));
    // The prompt's text tokenizes to the ids transformers ran.
    auto encoded = (*ckpt)->tokenizer()->Encode(p.at("text").string_value());
    ASSERT_TRUE(encoded.ok());
    EXPECT_EQ(*encoded, ids);
    auto want = logits_file->ReadFloat("last." + std::to_string(i), {c.vocab_size});
    ASSERT_TRUE(want.ok()) << want.status();
    auto cache = testing::CacheFor(*model, 1, static_cast<int>(ids.size()));
    ForwardBatch b;
    b.AddSequence(testing::SeqBlocks(0, static_cast<int>(ids.size())), 0, ids);
    std::vector<float> logits;
    ASSERT_TRUE(model->Forward(b, *cache, LogitsFor::kLastRowsOfEachSequence, &logits).ok());
    const double err = testing::ScaledError(logits.data(), want->data(), c.vocab_size);
    std::printf("SmolLM2 prompt %d (%zu tokens): scaled logit error %.2e vs transformers\n", i,
                ids.size(), err);
    EXPECT_LT(err, 1e-4);
  }
  GenerateOptions options;
  options.max_new_tokens = 24;
  options.sampling.temperature = 0;
  options.ignore_eos = true;  // transformers' continuation runs past <|im_end|>
  const std::vector<int32_t> prompt =
      testing::JsonIds(prompts[0].struct_value().fields().at("ids"));
  auto out = GenerateAlone(*model, prompt, options);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, testing::JsonIds(golden->fields().at("greedy_output")));
  EXPECT_EQ((*ckpt)->tokenizer()->Decode(absl::MakeConstSpan(*out).subspan(0, 7)),
            "The capital of France is Paris.");
}

// A llama file's hyper-parameters (and an embedding), with `edit` applied.
std::string ConfigError(const std::function<void(GgufWriter&)>& edit, bool with_embedding = true) {
  GgufWriter w;
  w.String("general.architecture", "llama")
      .U32("llama.block_count", 1)
      .U32("llama.embedding_length", 8)
      .U32("llama.feed_forward_length", 16)
      .U32("llama.attention.head_count", 2)
      .U32("llama.context_length", 32);
  edit(w);
  if (with_embedding) w.F32Tensor("token_embd.weight", {8, 4}, std::vector<float>(32));
  auto f = GgufFile::Parse(w.Bytes(), "m.gguf");
  if (!f.ok()) return std::string(f.status().message());
  auto c = LlamaConfigFromGguf(*f);
  return c.ok() ? "ok" : std::string(c.status().message());
}

TEST(LlamaGgufTest, ReadsHyperParameters) {
  GgufWriter w;
  w.String("general.architecture", "llama")
      .U32("llama.block_count", 2)
      .U32("llama.embedding_length", 64)
      .U32("llama.feed_forward_length", 96)
      .U32("llama.attention.head_count", 4)
      .U32("llama.attention.head_count_kv", 2)
      .U32("llama.context_length", 128)
      .F32("llama.attention.layer_norm_rms_epsilon", 1e-5f)
      .F32("llama.rope.freq_base", 500000.0f)
      .String("llama.rope.scaling.type", "linear")
      .F32("llama.rope.scaling.factor", 2.0f);
  w.F32Tensor("token_embd.weight", {64, 10}, std::vector<float>(640));
  w.F32Tensor("output.weight", {64, 10}, std::vector<float>(640));
  auto f = GgufFile::Parse(w.Bytes(), "m.gguf");
  ASSERT_TRUE(f.ok()) << f.status();
  auto c = LlamaConfigFromGguf(*f);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->n_layer, 2);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->n_kv_head, 2);
  EXPECT_EQ(c->intermediate, 96);
  EXPECT_EQ(c->vocab_size, 10);
  EXPECT_EQ(c->max_positions, 128);
  EXPECT_FLOAT_EQ(c->rms_norm_eps, 1e-5f);
  EXPECT_EQ(c->rope_theta, 500000.0);
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kLinear);
  EXPECT_EQ(c->rope_scaling.factor, 2.0);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_EQ(c->mtp_layers, 0);
}

// llama.cpp's nextn blocks (Qwen3.5's MTP layer, written by its converter
// unless told --no-mtp) follow the model's: block_count counts them.
TEST(LlamaGgufTest, NextnBlocksAreNotTheModelsLayers) {
  auto f = GgufFile::Open("tests/golden/gguf_qwen35/model.gguf");
  ASSERT_TRUE(f.ok()) << f.status();
  auto c = LlamaConfigFromGguf(*f);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->n_layer, 8);
  EXPECT_EQ(c->mtp_layers, 1);
  EXPECT_EQ(c->layer_kinds.size(), 8u);
  EXPECT_THAT(ConfigError([](GgufWriter& w) { w.U32("llama.nextn_predict_layers", 1); }),
              HasSubstr("nextn_predict_layers 1 is out of range (block_count 1)"));
}

TEST(LlamaGgufTest, RefusesWhatItCannotRunByName) {
  EXPECT_EQ(ConfigError([](GgufWriter&) {}), "ok");
  EXPECT_THAT(ConfigError([](GgufWriter& w) { w.String("general.architecture", "x"); }),
              HasSubstr("metadata key general.architecture appears twice"));
  EXPECT_THAT(ConfigError([](GgufWriter& w) { w.U32("llama.rope.dimension_count", 2); }),
              HasSubstr("m.gguf: llama.rope.dimension_count 2 for a head dimension of 4 "
                        "(partial rotary embeddings only unpermuted, even and at most the head)"));
  EXPECT_THAT(ConfigError([](GgufWriter& w) { w.F32Tensor("rope_factors_short.weight", {2}, {1, 1}); }),
              HasSubstr("rope_factors_short/long (LongRoPE) are read only for phi3, not llama"));
  // A mixture of experts' counts, inconsistent or missing, named.
  EXPECT_THAT(ConfigError([](GgufWriter& w) { w.U32("llama.expert_count", 8); }),
              HasSubstr("m.gguf: no metadata llama.expert_used_count"));
  EXPECT_THAT(ConfigError([](GgufWriter& w) {
                w.U32("llama.expert_count", 8);
                w.U32("llama.expert_used_count", 9);
              }),
              HasSubstr("llama.expert_used_count 9 is out of range"));
  EXPECT_THAT(ConfigError([](GgufWriter& w) { w.U32("llama.expert_count", 2000); }),
              HasSubstr("llama.expert_count 2000 is out of range"));
  EXPECT_THAT(ConfigError([](GgufWriter& w) { w.String("llama.rope.scaling.type", "longrope"); }),
              HasSubstr("llama.rope.scaling.type \"longrope\" is not supported (none, linear, yarn)"));
  EXPECT_THAT(ConfigError([](GgufWriter& w) { w.String("llama.rope.scaling.type", "yarn"); }),
              HasSubstr("llama.rope.scaling.original_context_length 0 is out of range (yarn needs it)"));
  EXPECT_THAT(ConfigError([](GgufWriter& w) { w.U32("llama.attention.head_count_kv", 3); }),
              HasSubstr("num_attention_heads (2) is not a multiple of num_key_value_heads (3)"));
  EXPECT_THAT(ConfigError([](GgufWriter& w) { w.U32("llama.attention.value_length", 2); }),
              HasSubstr("llama.attention.value_length 2 differs from key_length 4"));
  EXPECT_THAT(ConfigError([](GgufWriter&) {}, /*with_embedding=*/false),
              HasSubstr("no tensor 'token_embd.weight'"));
  EXPECT_THAT(ConfigError([](GgufWriter& w) { w.F32Tensor("rope_freqs.weight", {3}, {1, 1, 1}); }),
              HasSubstr("rope_freqs.weight has 3 factors for 4 rotary dims"));
  // Another architecture, and a key of the wrong type.
  GgufWriter other;
  other.String("general.architecture", "mamba");
  auto f = GgufFile::Parse(other.Bytes(), "m.gguf");
  ASSERT_TRUE(f.ok());
  EXPECT_THAT(LlamaConfigFromGguf(*f).status().message(),
              HasSubstr("general.architecture \"mamba\" is not supported"));
  GgufWriter typed;
  typed.String("general.architecture", "llama").String("llama.block_count", "two");
  f = GgufFile::Parse(typed.Bytes(), "m.gguf");
  ASSERT_TRUE(f.ok());
  EXPECT_THAT(LlamaConfigFromGguf(*f).status().message(),
              HasSubstr("metadata llama.block_count must be an integer, not string"));
}

// A one-layer OLMoE file of 4 experts (2 per token), its merged expert
// tensors and router with `gate_experts` and `router_rows` experts: loads
// when they agree with expert_count, and is refused naming the tensor when
// they do not.
std::string MoeFileError(uint64_t gate_experts, uint64_t router_rows) {
  GgufWriter w;
  w.String("general.architecture", "olmoe")
      .U32("olmoe.block_count", 1)
      .U32("olmoe.embedding_length", 8)
      .U32("olmoe.feed_forward_length", 4)
      .U32("olmoe.attention.head_count", 2)
      .U32("olmoe.context_length", 32)
      .U32("olmoe.expert_count", 4)
      .U32("olmoe.expert_used_count", 2);
  auto tensor = [&](const std::string& name, std::vector<uint64_t> ne) {
    uint64_t n = 1;
    for (uint64_t d : ne) n *= d;
    w.F32Tensor(name, ne, std::vector<float>(n, 0.5f));
  };
  tensor("token_embd.weight", {8, 4});
  tensor("output_norm.weight", {8});
  tensor("output.weight", {8, 4});
  for (const char* name : {"attn_norm", "attn_q_norm", "attn_k_norm", "ffn_norm"}) {
    tensor(std::string("blk.0.") + name + ".weight", {8});
  }
  for (const char* name : {"attn_q", "attn_k", "attn_v", "attn_output"}) {
    tensor(std::string("blk.0.") + name + ".weight", {8, 8});
  }
  tensor("blk.0.ffn_gate_inp.weight", {8, router_rows});
  tensor("blk.0.ffn_gate_exps.weight", {8, 4, gate_experts});
  tensor("blk.0.ffn_up_exps.weight", {8, 4, 4});
  tensor("blk.0.ffn_down_exps.weight", {4, 8, 4});
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/moe.gguf";
  std::ofstream(path, std::ios::binary) << w.Bytes();
  auto ckpt = LlamaCheckpoint::Load(path);
  return ckpt.ok() ? "ok" : std::string(ckpt.status().message());
}

TEST(LlamaGgufTest, ExpertTensorsMustHoldTheExpertCount) {
  EXPECT_EQ(MoeFileError(4, 4), "ok");
  EXPECT_THAT(MoeFileError(3, 4), HasSubstr("tensor 'blk.0.ffn_gate_exps.weight' has shape [3, 4, 8], which "
                                            "holds no expert 3"));
  EXPECT_THAT(MoeFileError(4, 3), HasSubstr("tensor 'blk.0.ffn_gate_inp.weight' has shape [3, 8]; the model's "
                                            "hyper-parameters need [4, 8]"));
}

}  // namespace
}  // namespace flover
