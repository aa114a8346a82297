// The engine's central promise: a request's tokens depend only on its own
// prompt, parameters and seed. For seeded Poisson arrival schedules (spaced
// in engine steps, not wall time) with prompts of 1 to 200 tokens, many of
// them sharing a system prompt or repeating an earlier conversation (so the
// prefix cache serves them), every request's output under fusion, dynamic,
// static and sequential scheduling equals its output run alone, for greedy
// and for seeded sampling; with prefix caching on and off; with a KV cache
// so small that sequences are preempted and recomputed; with f32 and with
// bf16 linear layers, and with a bf16 KV cache; for GPT-2 and Llama shapes;
// with speculative decoding (n-gram drafts verified in the fused step, many
// taken and many refused and rolled back) and without; for hybrid models
// (Qwen3.5's gated delta nets, LFM2's short convolutions: recurrent state
// resumed from prefix checkpoints, recomputed after preemption, rolled back
// from the slot a verify step leaves alone); on the CPU, and on a GPU when
// this build has the CUDA backend and the host a GPU (skipped, with the
// reason, otherwise).
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "model/model_loader.h"
#include "testing/collecting_sink.h"
#include "testing/backends.h"
#include "testing/files.h"

namespace flover {
namespace {

struct Workload {
  std::vector<Request> requests;
  // Before each submission, in engine steps: Poisson arrivals measured on
  // the engine's own clock, so requests overlap the same way on any machine.
  std::vector<int> gap_steps;
  std::vector<std::vector<int32_t>> alone;
};

Workload MakeWorkload(uint32_t seed, CausalLm& reference) {
  std::mt19937 rng(seed);
  const int V = reference.info().vocab_size;
  auto token = [&] { return std::uniform_int_distribution<int>(0, V - 1)(rng); };
  Workload w;
  std::vector<int32_t> system(70);  // two whole blocks and a part of one
  for (int32_t& t : system) t = token();
  std::exponential_distribution<double> gap(1.0 / 3.0);  // mean 3 steps
  for (int i = 0; i < 20; ++i) {
    Request r;
    // A third start with the shared system prompt; every fifth continues an
    // earlier conversation (its prompt, its answer, a new question).
    if (i % 5 == 4) {
      const int earlier = std::uniform_int_distribution<int>(0, i - 2)(rng);
      r.prompt = w.requests[earlier].prompt;
      r.prompt.insert(r.prompt.end(), w.alone[earlier].begin(), w.alone[earlier].end());
      r.prompt.resize(std::min<size_t>(r.prompt.size(), 180));
    } else if (i % 3 == 0) {
      r.prompt = system;
    }
    const int own = r.prompt.empty() ? std::uniform_int_distribution<int>(1, 200)(rng)
                                     : std::uniform_int_distribution<int>(1, 20)(rng);
    for (int t = 0; t < own; ++t) r.prompt.push_back(token());
    r.stop.max_new_tokens = std::uniform_int_distribution<int>(1, 40)(rng);
    r.stop.ignore_eos = i % 3 == 0;
    if (i % 2 == 1) {  // seeded sampling
      r.sampling.temperature = 0.9f;
      r.sampling.top_k = i % 4 == 1 ? 50 : 0;
      r.sampling.top_p = 0.95f;
      r.sampling.seed = seed * 1000 + i;
    } else {
      r.sampling.temperature = 0.0f;
    }
    w.requests.push_back(r);
    w.gap_steps.push_back(static_cast<int>(gap(rng)));
    GenerateOptions g;
    g.max_new_tokens = r.stop.max_new_tokens;
    g.ignore_eos = r.stop.ignore_eos;
    g.sampling = r.sampling;
    auto out = GenerateAlone(reference, r.prompt, g);
    EXPECT_TRUE(out.ok()) << out.status();
    w.alone.push_back(*out);
  }
  return w;
}

// How the KV cache is set up.
enum class Kv {
  kRoomy,     // room for every sequence; prefix caching on
  kNoReuse,   // room for every sequence; prefix caching off
  kTight,     // 10 blocks, a little more than the longest request needs: preemptions
};

struct PolicyCase {
  const char* name;
  SchedulerPolicy policy;
  Kv kv;
  kernels::MatmulDtype dtype = kernels::MatmulDtype::kF32;
  kernels::KvFormat kv_dtype = kernels::KvDtype::kF32;
  const char* device = "cpu";
  const char* model = "builtin:tiny";
  bool speculative = false;
  // With speculative: drafts from this model (the target's vocabulary) on
  // a backend of draft_dtype, instead of n-grams.
  const char* draft = nullptr;
  kernels::MatmulDtype draft_dtype = kernels::MatmulDtype::kBF16;
};

class EngineInvarianceTest : public ::testing::TestWithParam<PolicyCase> {};

TEST_P(EngineInvarianceTest, EveryRequestEqualsItsRunAlone) {
  // The reference runs on a backend of its own: the engine's belongs to its
  // loop thread.
  std::string skip;
  auto reference_backend =
      testing::BackendForTest(GetParam().device, &skip, GetParam().dtype, GetParam().kv_dtype);
  if (reference_backend == nullptr) GTEST_SKIP() << skip;
  auto engine_backend =
      testing::BackendForTest(GetParam().device, &skip, GetParam().dtype, GetParam().kv_dtype);
  ASSERT_NE(engine_backend, nullptr) << skip;
  for (const char* fixture : {GetParam().model, GetParam().draft}) {
    if (fixture != nullptr && std::string(fixture).rfind("tests/golden/", 0) == 0) FLOVER_SKIP_IF_NOT_CARRIED(std::string(fixture));
  }
  auto loaded = LoadModel(GetParam().model);
  ASSERT_TRUE(loaded.ok());
  auto reference = testing::ModelOn(*reference_backend, **loaded);
  auto model = testing::ModelOn(*engine_backend, **loaded);

  EngineOptions options;
  options.scheduler.policy = GetParam().policy;
  options.prefix_caching = GetParam().kv != Kv::kNoReuse;
  if (GetParam().kv == Kv::kTight) {
    // 10 blocks, and with recurrent layers 4 sequences' state (at most half
    // the memory holds states; the blocks take the rest).
    const KvCacheShape unit = model->CacheShape(1, 1);
    options.kv_cache.bytes = 10 * unit.bytes_per_block() + 4 * unit.bytes_per_state_slot();
  }
  options.scheduler.max_batch = 6;
  options.scheduler.max_tokens_per_step = 64;  // long prompts get chunked
  options.scheduler.batch_delay = absl::Milliseconds(4);
  options.scheduler.static_flush = absl::Milliseconds(20);
  options.max_seq_len = 256;
  if (GetParam().speculative) {
    // Short n-grams, so that drafts are proposed often and refused often.
    options.speculative.mode = SpeculativeMode::kNgram;
    options.speculative.max_tokens = 4;
    options.speculative.max_step_rows = 16;
    options.speculative.min_ngram = 1;
    options.speculative.max_ngram = 3;
  }
  std::unique_ptr<kernels::Backend> draft_backend;
  std::unique_ptr<LoadedModel> draft_loaded;
  std::unique_ptr<CausalLm> draft;
  if (GetParam().draft != nullptr) {
    draft_backend = testing::BackendForTest(GetParam().device, &skip, GetParam().draft_dtype);
    ASSERT_NE(draft_backend, nullptr) << skip;
    auto d = LoadModel(GetParam().draft);
    ASSERT_TRUE(d.ok()) << d.status();
    draft_loaded = std::move(*d);
    draft = testing::ModelOn(*draft_backend, *draft_loaded);
    options.speculative.mode = SpeculativeMode::kDraft;
    options.draft_model = draft.get();
  }
  auto engine = Engine::Create(*model, nullptr, options);
  ASSERT_TRUE(engine.ok()) << engine.status();

  for (uint32_t seed : {1u, 2u, 3u}) {
    const Workload w = MakeWorkload(seed, *reference);
    std::vector<std::shared_ptr<testing::CollectingSink>> sinks;
    for (size_t i = 0; i < w.requests.size(); ++i) {
      // Request i arrives once the engine has run gap_steps[i] steps since
      // the last arrival — or at once if it has nothing left to run (a
      // dynamic or static batch still gathering counts as something: it
      // flushes after its delay).
      const int64_t until = (*engine)->Stats().steps + w.gap_steps[i];
      while (true) {
        const EngineStats s = (*engine)->Stats();
        if (s.steps >= until || (s.active == 0 && s.queued == 0)) break;
        absl::SleepFor(absl::Microseconds(50));  // a poll, not a guessed wait
      }
      sinks.push_back(std::make_shared<testing::CollectingSink>());
      ASSERT_TRUE((*engine)->Submit(w.requests[i], sinks.back()).ok());
    }
    for (size_t i = 0; i < sinks.size(); ++i) {
      ASSERT_TRUE(sinks[i]->Wait()) << "request " << i << " never finished";
      EXPECT_EQ(sinks[i]->tokens(), w.alone[i])
          << GetParam().name << " seed " << seed << " request " << i << " (prompt "
          << w.requests[i].prompt.size() << ", sampled " << (w.requests[i].sampling.temperature > 0)
          << ")";
      const FinishEvent f = sinks[i]->finish();
      EXPECT_EQ(f.usage.generated_tokens, static_cast<int>(w.alone[i].size()));
      EXPECT_EQ(f.usage.prompt_tokens, static_cast<int>(w.requests[i].prompt.size()));
      EXPECT_TRUE(f.reason == FinishReason::kLength || f.reason == FinishReason::kEos)
          << FinishReasonName(f.reason) << ": " << f.error;
    }
  }
  const EngineStats stats = (*engine)->Stats();
  EXPECT_EQ(stats.active, 0);
  EXPECT_EQ(stats.queued, 0);
  EXPECT_EQ(stats.kv_bytes_in_use, 0);
  EXPECT_EQ(stats.finished[0] + stats.finished[2], 60);  // length + eos
  // The mechanisms under test were used: prefix hits where reuse is on
  // (never where it is off), preemptions where memory is tight.
  std::printf("%s: prefix cache hits %lld of %lld prompt tokens, %lld preemptions, %lld steps\n",
              GetParam().name, static_cast<long long>(stats.prefix_hit_tokens),
              static_cast<long long>(stats.prefix_query_tokens),
              static_cast<long long>(stats.preemptions), static_cast<long long>(stats.steps));
  if (GetParam().kv == Kv::kNoReuse) {
    EXPECT_EQ(stats.prefix_query_tokens, 0);
    EXPECT_EQ(stats.prefix_hit_tokens, 0);
  } else {
    EXPECT_GT(stats.prefix_hit_tokens, 0);
    EXPECT_GT(stats.prefix_query_tokens, stats.prefix_hit_tokens);
  }
  if (GetParam().kv == Kv::kTight && GetParam().policy != SchedulerPolicy::kSequential) {
    EXPECT_GT(stats.preemptions, 0);
  }
  // A step samples one token per sequence in it, plus the drafts taken, so
  // fewer steps than that means some steps carried several sequences: the
  // batching under test happened (sequential must never batch).
  const int64_t sampled = stats.generated_tokens - stats.accepted_tokens;
  if (GetParam().policy == SchedulerPolicy::kSequential) {
    EXPECT_GE(stats.steps, sampled);
  } else {
    EXPECT_LT(stats.steps, sampled) << "no step fused two sequences: the arrivals never overlapped";
  }
  // Speculation was exercised: drafts were verified, some taken (tokens
  // gained) and some refused (rolled back).
  std::printf("%s: %lld draft tokens verified, %lld taken\n", GetParam().name,
              static_cast<long long>(stats.draft_tokens), static_cast<long long>(stats.accepted_tokens));
  if (GetParam().speculative) {
    EXPECT_GT(stats.accepted_tokens, 0);
    EXPECT_LT(stats.accepted_tokens, stats.draft_tokens);
  } else {
    EXPECT_EQ(stats.draft_tokens, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Policies, EngineInvarianceTest,
    ::testing::Values(PolicyCase{"fusion", SchedulerPolicy::kFusion, Kv::kRoomy},
                      // Speculative decoding changes no output, whatever else
                      // is in the step, preempted or not, in every dtype.
                      PolicyCase{"fusion_spec", SchedulerPolicy::kFusion, Kv::kRoomy, kernels::MatmulDtype::kF32,
                                 kernels::KvDtype::kF32, "cpu", "builtin:tiny", true},
                      PolicyCase{"fusion_tight_kv_spec", SchedulerPolicy::kFusion, Kv::kTight,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu", "builtin:tiny", true},
                      PolicyCase{"fusion_no_prefix_reuse_spec", SchedulerPolicy::kFusion, Kv::kNoReuse,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu", "builtin:tiny", true},
                      PolicyCase{"dynamic_spec", SchedulerPolicy::kDynamic, Kv::kRoomy, kernels::MatmulDtype::kF32,
                                 kernels::KvDtype::kF32, "cpu", "builtin:tiny", true},
                      PolicyCase{"static_spec", SchedulerPolicy::kStatic, Kv::kRoomy, kernels::MatmulDtype::kF32,
                                 kernels::KvDtype::kF32, "cpu", "builtin:tiny", true},
                      PolicyCase{"sequential_spec", SchedulerPolicy::kSequential, Kv::kRoomy,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu", "builtin:tiny", true},
                      PolicyCase{"fusion_bf16_spec", SchedulerPolicy::kFusion, Kv::kRoomy,
                                 kernels::MatmulDtype::kBF16, kernels::KvDtype::kBF16, "cpu", "builtin:tiny", true},
                      PolicyCase{"llama_fusion_tight_kv_spec", SchedulerPolicy::kFusion, Kv::kTight,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu", "builtin:llama-tiny",
                                 true},
                      PolicyCase{"llama_fusion_int8_spec", SchedulerPolicy::kFusion, Kv::kRoomy,
                                 kernels::MatmulDtype::kInt8, kernels::KvDtype::kBF16, "cpu", "builtin:llama-tiny",
                                 true},
                      // Drafts from a draft model: the same weights in another
                      // dtype, so most greedy drafts stand and sampled ones
                      // often do not; its own KV cache, rolled back by
                      // comparing tokens, also across preemptions.
                      PolicyCase{"fusion_draft_model", SchedulerPolicy::kFusion, Kv::kRoomy,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu", "builtin:tiny", true,
                                 "builtin:tiny"},
                      PolicyCase{"fusion_tight_kv_draft_model", SchedulerPolicy::kFusion, Kv::kTight,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu", "builtin:tiny", true,
                                 "builtin:tiny"},
                      PolicyCase{"llama_dynamic_draft_model", SchedulerPolicy::kDynamic, Kv::kRoomy,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu", "builtin:llama-tiny", true,
                                 "builtin:llama-tiny"},
                      PolicyCase{"cuda_llama_fusion_spec", SchedulerPolicy::kFusion, Kv::kRoomy,
                                 kernels::MatmulDtype::kBF16, kernels::KvDtype::kBF16, "cuda", "builtin:llama-tiny",
                                 true},
                      PolicyCase{"cuda_llama_fusion_tight_kv_fp8_spec", SchedulerPolicy::kFusion, Kv::kTight,
                                 kernels::MatmulDtype::kBF16, kernels::KvDtype::kFp8, "cuda", "builtin:llama-tiny",
                                 true},
                      PolicyCase{"fusion_no_prefix_reuse", SchedulerPolicy::kFusion, Kv::kNoReuse},
                      PolicyCase{"fusion_tight_kv", SchedulerPolicy::kFusion, Kv::kTight},
                      PolicyCase{"dynamic", SchedulerPolicy::kDynamic, Kv::kRoomy},
                      PolicyCase{"dynamic_tight_kv", SchedulerPolicy::kDynamic, Kv::kTight},
                      PolicyCase{"static", SchedulerPolicy::kStatic, Kv::kRoomy},
                      PolicyCase{"sequential", SchedulerPolicy::kSequential, Kv::kRoomy},
                      PolicyCase{"fusion_bf16", SchedulerPolicy::kFusion, Kv::kRoomy,
                                 kernels::MatmulDtype::kBF16},
                      PolicyCase{"fusion_tight_kv_bf16", SchedulerPolicy::kFusion, Kv::kTight,
                                 kernels::MatmulDtype::kBF16},
                      PolicyCase{"fusion_kv_bf16", SchedulerPolicy::kFusion, Kv::kRoomy,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kBF16},
                      // A Llama-shaped model: grouped-query attention, rotary
                      // embeddings at each row's position, SwiGLU.
                      PolicyCase{"llama_fusion", SchedulerPolicy::kFusion, Kv::kRoomy,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu",
                                 "builtin:llama-tiny"},
                      PolicyCase{"llama_fusion_tight_kv", SchedulerPolicy::kFusion, Kv::kTight,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu",
                                 "builtin:llama-tiny"},
                      PolicyCase{"llama_dynamic", SchedulerPolicy::kDynamic, Kv::kRoomy,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu",
                                 "builtin:llama-tiny"},
                      PolicyCase{"llama_static", SchedulerPolicy::kStatic, Kv::kRoomy,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu",
                                 "builtin:llama-tiny"},
                      PolicyCase{"llama_sequential", SchedulerPolicy::kSequential, Kv::kRoomy,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu",
                                 "builtin:llama-tiny"},
                      PolicyCase{"llama_fusion_bf16", SchedulerPolicy::kFusion, Kv::kRoomy,
                                 kernels::MatmulDtype::kBF16, kernels::KvDtype::kBF16, "cpu",
                                 "builtin:llama-tiny"},
                      // Quantized KV caches (heads of 32 dims): each row
                      // quantized once when written, so prefix hits,
                      // preemption's recompute and refused drafts leave every
                      // output as it is alone; keys and values apart too.
                      PolicyCase{"llama_fusion_tight_kv_q8_0_spec", SchedulerPolicy::kFusion, Kv::kTight,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kQ8_0, "cpu",
                                 "builtin:llama-tiny-hd32", true},
                      PolicyCase{"llama_fusion_kv_q4_0_spec", SchedulerPolicy::kFusion, Kv::kRoomy,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kQ4_0, "cpu",
                                 "builtin:llama-tiny-hd32", true},
                      PolicyCase{"llama_dynamic_tight_kv_q8_0_q4_0", SchedulerPolicy::kDynamic, Kv::kTight,
                                 kernels::MatmulDtype::kF32, {kernels::KvDtype::kQ8_0, kernels::KvDtype::kQ4_0},
                                 "cpu", "builtin:llama-tiny-hd32"},
                      // Every layer windowed (40 positions): sequences give
                      // back the blocks behind their windows as they go, and
                      // prefix hits, preemption and drafts rolled back still
                      // leave every output as it is alone with all its blocks.
                      PolicyCase{"mistral_fusion", SchedulerPolicy::kFusion, Kv::kRoomy,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu",
                                 "builtin:mistral-tiny"},
                      PolicyCase{"mistral_fusion_tight_kv", SchedulerPolicy::kFusion, Kv::kTight,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu",
                                 "builtin:mistral-tiny"},
                      PolicyCase{"mistral_static", SchedulerPolicy::kStatic, Kv::kTight,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu",
                                 "builtin:mistral-tiny"},
                      PolicyCase{"mistral_fusion_bf16_spec", SchedulerPolicy::kFusion, Kv::kTight,
                                 kernels::MatmulDtype::kBF16, kernels::KvDtype::kBF16, "cpu",
                                 "builtin:mistral-tiny", true},
                      // Gemma 3's five local layers to one global: the local
                      // layers' blocks apart, given back behind their window,
                      // prefix hits only where the window before them is
                      // cached too.
                      PolicyCase{"gemma3_fusion", SchedulerPolicy::kFusion, Kv::kRoomy,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu",
                                 "builtin:gemma3-tiny"},
                      PolicyCase{"gemma3_fusion_tight_kv", SchedulerPolicy::kFusion, Kv::kTight,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu",
                                 "builtin:gemma3-tiny"},
                      PolicyCase{"gemma3_dynamic_tight_kv_bf16", SchedulerPolicy::kDynamic, Kv::kTight,
                                 kernels::MatmulDtype::kBF16, kernels::KvDtype::kBF16, "cpu",
                                 "builtin:gemma3-tiny"},
                      PolicyCase{"cuda_gemma3_fusion", SchedulerPolicy::kFusion, Kv::kTight,
                                 kernels::MatmulDtype::kBF16, kernels::KvDtype::kBF16, "cuda",
                                 "builtin:gemma3-tiny"},
                      PolicyCase{"cuda_mistral_fusion_tight_kv", SchedulerPolicy::kFusion, Kv::kTight,
                                 kernels::MatmulDtype::kBF16, kernels::KvDtype::kBF16, "cuda",
                                 "builtin:mistral-tiny"},
                      // A mixture of experts (8 experts, 2 per row): rows move
                      // between batches and so between experts' groups, and
                      // each still equals its run alone; with preemption,
                      // the dynamic scheduler, bf16, and speculative drafts.
                      // gpt-oss: sinks, windows on every other layer (16
                      // positions), experts with biases, top-4 then softmax.
                      PolicyCase{"gpt_oss_fusion_tight_kv_spec", SchedulerPolicy::kFusion, Kv::kTight,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu", "builtin:gpt-oss-tiny",
                                 true},
                      PolicyCase{"gpt_oss_dynamic_bf16", SchedulerPolicy::kDynamic, Kv::kRoomy,
                                 kernels::MatmulDtype::kBF16, kernels::KvDtype::kBF16, "cpu",
                                 "builtin:gpt-oss-tiny"},
                      PolicyCase{"gpt_oss_fusion_no_prefix_reuse", SchedulerPolicy::kFusion, Kv::kNoReuse,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu", "builtin:gpt-oss-tiny"},
                      // MXFP4 experts run in their blocks (the GGUF fixture,
                      // --dtype=native): preempted, prefix hits, speculated.
                      PolicyCase{"gpt_oss_native_mxfp4_tight_kv_spec", SchedulerPolicy::kFusion, Kv::kTight,
                                 kernels::MatmulDtype::kNative, kernels::KvDtype::kF32, "cpu",
                                 "tests/golden/gguf_gpt_oss/model.gguf", true},
                      // Gemma 4: global layers of wider heads over one KV
                      // head (V = K), local ones windowed in blocks of their
                      // own, the last layers reading earlier layers' K and V
                      // (no blocks of their own), per-layer inputs.
                      PolicyCase{"gemma4_fusion_tight_kv_spec", SchedulerPolicy::kFusion, Kv::kTight,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu", "builtin:gemma4-tiny",
                                 true},
                      PolicyCase{"gemma4_dynamic_bf16", SchedulerPolicy::kDynamic, Kv::kRoomy,
                                 kernels::MatmulDtype::kBF16, kernels::KvDtype::kBF16, "cpu",
                                 "builtin:gemma4-tiny"},
                      PolicyCase{"gemma4_gguf_fusion_tight_kv", SchedulerPolicy::kFusion, Kv::kTight,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu",
                                 "tests/golden/gguf_gemma4/model.gguf"},
                      // 26B-A4B's layout: experts beside the dense MLP.
                      PolicyCase{"gemma4_moe_fusion_tight_kv_spec", SchedulerPolicy::kFusion, Kv::kTight,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu",
                                 "tests/golden/gguf_gemma4_moe/model.gguf", true},
                      PolicyCase{"moe_fusion", SchedulerPolicy::kFusion, Kv::kRoomy,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu",
                                 "builtin:mixtral-tiny"},
                      PolicyCase{"moe_fusion_tight_kv", SchedulerPolicy::kFusion, Kv::kTight,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu",
                                 "builtin:mixtral-tiny"},
                      PolicyCase{"moe_dynamic", SchedulerPolicy::kDynamic, Kv::kRoomy,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu",
                                 "builtin:mixtral-tiny"},
                      PolicyCase{"moe_fusion_bf16_spec", SchedulerPolicy::kFusion, Kv::kRoomy,
                                 kernels::MatmulDtype::kBF16, kernels::KvDtype::kBF16, "cpu",
                                 "builtin:mixtral-tiny", true},
                      PolicyCase{"cuda_moe_fusion", SchedulerPolicy::kFusion, Kv::kRoomy,
                                 kernels::MatmulDtype::kBF16, kernels::KvDtype::kBF16, "cuda",
                                 "builtin:mixtral-tiny"},
                      // Hybrid models: a recurrent state per sequence beside
                      // the attention layers' blocks. Prompts cut into
                      // chunks anywhere, fused with anything, prefix hits
                      // resumed from checkpoints of the state, preempted and
                      // recomputed, drafts refused and the state rolled back:
                      // each output equals its run alone.
                      PolicyCase{"qwen35_fusion_spec", SchedulerPolicy::kFusion, Kv::kRoomy,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu", "builtin:qwen3.5-tiny",
                                 true},
                      PolicyCase{"qwen35_fusion_tight_kv_spec", SchedulerPolicy::kFusion, Kv::kTight,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu", "builtin:qwen3.5-tiny",
                                 true},
                      PolicyCase{"qwen35_fusion_no_prefix_reuse", SchedulerPolicy::kFusion, Kv::kNoReuse,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu",
                                 "builtin:qwen3.5-tiny"},
                      PolicyCase{"qwen35_dynamic_bf16", SchedulerPolicy::kDynamic, Kv::kRoomy,
                                 kernels::MatmulDtype::kBF16, kernels::KvDtype::kBF16, "cpu",
                                 "builtin:qwen3.5-tiny"},
                      // The recurrent state stays f32 beside q8_0 attention
                      // blocks: prefix hits from checkpoints and refused
                      // drafts as above. (Tight, the f32 states take most of
                      // the budget, so too few sequences run to preempt.)
                      // Its budget holds only 10 state slots: an admission
                      // that counted an idle checkpoint's slot another
                      // admission then pinned ran without one ("state slots
                      // (read -1, write -1)") until the engine made it wait.
                      PolicyCase{"qwen35_fusion_kv_q8_0_spec", SchedulerPolicy::kFusion, Kv::kRoomy,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kQ8_0, "cpu",
                                 "builtin:qwen3.5-tiny-hd32", true},
                      PolicyCase{"qwen35_sequential", SchedulerPolicy::kSequential, Kv::kRoomy,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu",
                                 "builtin:qwen3.5-tiny"},
                      PolicyCase{"lfm2_fusion_tight_kv_spec", SchedulerPolicy::kFusion, Kv::kTight,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu", "builtin:lfm2-tiny",
                                 true},
                      PolicyCase{"lfm2_static_bf16_spec", SchedulerPolicy::kStatic, Kv::kRoomy,
                                 kernels::MatmulDtype::kBF16, kernels::KvDtype::kBF16, "cpu", "builtin:lfm2-tiny",
                                 true},
                      // Mamba-2 (a selective scan; a convolution with a
                      // bias) beside experts, and Qwen3.5's delta net beside
                      // experts.
                      PolicyCase{"granite_fusion_spec", SchedulerPolicy::kFusion, Kv::kRoomy,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu",
                                 "builtin:granite-h-tiny", true},
                      PolicyCase{"granite_dynamic_bf16", SchedulerPolicy::kDynamic, Kv::kRoomy,
                                 kernels::MatmulDtype::kBF16, kernels::KvDtype::kBF16, "cpu",
                                 "builtin:granite-h-tiny"},
                      PolicyCase{"qwen35_moe_fusion_spec", SchedulerPolicy::kFusion, Kv::kRoomy,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu",
                                 "builtin:qwen3.5-moe-tiny", true},
                      PolicyCase{"cuda_qwen35_fusion_spec", SchedulerPolicy::kFusion, Kv::kTight,
                                 kernels::MatmulDtype::kBF16, kernels::KvDtype::kBF16, "cuda",
                                 "builtin:qwen3.5-tiny", true},
                      // int8: exact integer sums, so invariant by construction.
                      PolicyCase{"fusion_int8", SchedulerPolicy::kFusion, Kv::kRoomy,
                                 kernels::MatmulDtype::kInt8},
                      PolicyCase{"dynamic_int8", SchedulerPolicy::kDynamic, Kv::kRoomy,
                                 kernels::MatmulDtype::kInt8},
                      PolicyCase{"llama_fusion_int8", SchedulerPolicy::kFusion, Kv::kRoomy,
                                 kernels::MatmulDtype::kInt8, kernels::KvDtype::kBF16, "cpu",
                                 "builtin:llama-tiny"},
                      PolicyCase{"cuda_llama_fusion", SchedulerPolicy::kFusion, Kv::kRoomy,
                                 kernels::MatmulDtype::kBF16, kernels::KvDtype::kBF16, "cuda",
                                 "builtin:llama-tiny"},
                      // The same promise on a GPU.
                      PolicyCase{"cuda_fusion", SchedulerPolicy::kFusion, Kv::kRoomy,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cuda"},
                      PolicyCase{"cuda_fusion_tight_kv", SchedulerPolicy::kFusion, Kv::kTight,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cuda"},
                      PolicyCase{"cuda_dynamic", SchedulerPolicy::kDynamic, Kv::kRoomy,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cuda"},
                      PolicyCase{"cuda_static", SchedulerPolicy::kStatic, Kv::kRoomy,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cuda"},
                      PolicyCase{"cuda_sequential", SchedulerPolicy::kSequential, Kv::kRoomy,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cuda"},
                      PolicyCase{"cuda_fusion_bf16", SchedulerPolicy::kFusion, Kv::kRoomy,
                                 kernels::MatmulDtype::kBF16, kernels::KvDtype::kBF16, "cuda"},
                      PolicyCase{"cuda_fusion_tight_kv_bf16", SchedulerPolicy::kFusion, Kv::kTight,
                                 kernels::MatmulDtype::kBF16, kernels::KvDtype::kBF16, "cuda"},
                      PolicyCase{"cuda_fusion_f16", SchedulerPolicy::kFusion, Kv::kRoomy,
                                 kernels::MatmulDtype::kF16, kernels::KvDtype::kF32, "cuda"}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace flover
