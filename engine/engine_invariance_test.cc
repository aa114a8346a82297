// The engine's central promise: a request's tokens depend only on its own
// prompt, parameters and seed. For seeded Poisson arrival schedules (spaced
// in engine steps, not wall time) with
// prompts of 1 to 200 tokens, every request's output under fusion (shuffle on
// and off), dynamic, static and sequential scheduling equals its output run
// alone, for greedy and for seeded sampling; with f32 and with bf16 linear
// layers, and with a bf16 KV cache (shuffled); for GPT-2 and Llama shapes;
// on the CPU, and on a GPU
// when this build has the CUDA backend and the host a GPU (skipped, with the
// reason, otherwise).
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "model/model_loader.h"
#include "engine/testing/collecting_sink.h"
#include "engine/testing/backends.h"

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
  Workload w;
  std::exponential_distribution<double> gap(1.0 / 3.0);  // mean 3 steps
  for (int i = 0; i < 20; ++i) {
    Request r;
    const int prompt_len = std::uniform_int_distribution<int>(1, 200)(rng);
    for (int t = 0; t < prompt_len; ++t) r.prompt.push_back(std::uniform_int_distribution<int>(0, V - 1)(rng));
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

struct PolicyCase {
  const char* name;
  SchedulerPolicy policy;
  bool shuffle;
  kernels::MatmulDtype dtype = kernels::MatmulDtype::kF32;
  kernels::KvDtype kv_dtype = kernels::KvDtype::kF32;
  const char* device = "cpu";
  const char* model = "builtin:tiny";
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
  auto loaded = LoadModel(GetParam().model);
  ASSERT_TRUE(loaded.ok());
  auto reference = testing::ModelOn(*reference_backend, **loaded);
  auto model = testing::ModelOn(*engine_backend, **loaded);

  EngineOptions options;
  options.scheduler.policy = GetParam().policy;
  options.scheduler.kv_shuffle = GetParam().shuffle;
  options.scheduler.max_batch = 6;
  options.scheduler.max_tokens_per_step = 64;  // long prompts get chunked
  options.scheduler.batch_delay = absl::Milliseconds(4);
  options.scheduler.static_flush = absl::Milliseconds(20);
  options.max_seq_len = 256;
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
      EXPECT_TRUE(f.reason == FinishReason::kLength || f.reason == FinishReason::kEos);
    }
  }
  const EngineStats stats = (*engine)->Stats();
  EXPECT_EQ(stats.active, 0);
  EXPECT_EQ(stats.queued, 0);
  EXPECT_EQ(stats.kv_bytes_in_use, 0);
  EXPECT_EQ(stats.finished[0] + stats.finished[2], 60);  // length + eos
  if (GetParam().policy == SchedulerPolicy::kFusion && GetParam().shuffle) {
    EXPECT_GT(stats.shuffle_moves, 0);
  }
  if (!GetParam().shuffle) {
    EXPECT_EQ(stats.shuffle_moves, 0);
  }
  // A step samples at most one token per sequence in it, so fewer steps than
  // tokens means some steps carried several sequences: the batching under
  // test happened (sequential must never batch).
  if (GetParam().policy == SchedulerPolicy::kSequential) {
    EXPECT_GE(stats.steps, stats.generated_tokens);
  } else {
    EXPECT_LT(stats.steps, stats.generated_tokens)
        << "no step fused two sequences: the arrivals never overlapped";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Policies, EngineInvarianceTest,
    ::testing::Values(PolicyCase{"fusion", SchedulerPolicy::kFusion, true},
                      PolicyCase{"fusion_noshuffle", SchedulerPolicy::kFusion, false},
                      PolicyCase{"dynamic", SchedulerPolicy::kDynamic, true},
                      PolicyCase{"static", SchedulerPolicy::kStatic, true},
                      PolicyCase{"sequential", SchedulerPolicy::kSequential, true},
                      PolicyCase{"fusion_bf16", SchedulerPolicy::kFusion, true,
                                 kernels::MatmulDtype::kBF16},
                      PolicyCase{"fusion_noshuffle_bf16", SchedulerPolicy::kFusion, false,
                                 kernels::MatmulDtype::kBF16},
                      PolicyCase{"fusion_kv_bf16", SchedulerPolicy::kFusion, true,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kBF16},
                      // A Llama-shaped model: grouped-query attention, rotary
                      // embeddings at each row's position, SwiGLU.
                      PolicyCase{"llama_fusion", SchedulerPolicy::kFusion, true,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu",
                                 "builtin:llama-tiny"},
                      PolicyCase{"llama_fusion_noshuffle", SchedulerPolicy::kFusion, false,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu",
                                 "builtin:llama-tiny"},
                      PolicyCase{"llama_dynamic", SchedulerPolicy::kDynamic, true,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu",
                                 "builtin:llama-tiny"},
                      PolicyCase{"llama_static", SchedulerPolicy::kStatic, true,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu",
                                 "builtin:llama-tiny"},
                      PolicyCase{"llama_sequential", SchedulerPolicy::kSequential, true,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cpu",
                                 "builtin:llama-tiny"},
                      PolicyCase{"llama_fusion_bf16", SchedulerPolicy::kFusion, true,
                                 kernels::MatmulDtype::kBF16, kernels::KvDtype::kBF16, "cpu",
                                 "builtin:llama-tiny"},
                      // int8: exact integer sums, so invariant by construction.
                      PolicyCase{"fusion_int8", SchedulerPolicy::kFusion, true,
                                 kernels::MatmulDtype::kInt8},
                      PolicyCase{"dynamic_int8", SchedulerPolicy::kDynamic, true,
                                 kernels::MatmulDtype::kInt8},
                      PolicyCase{"llama_fusion_int8", SchedulerPolicy::kFusion, true,
                                 kernels::MatmulDtype::kInt8, kernels::KvDtype::kBF16, "cpu",
                                 "builtin:llama-tiny"},
                      PolicyCase{"cuda_llama_fusion", SchedulerPolicy::kFusion, true,
                                 kernels::MatmulDtype::kBF16, kernels::KvDtype::kBF16, "cuda",
                                 "builtin:llama-tiny"},
                      // The same promise on a GPU.
                      PolicyCase{"cuda_fusion", SchedulerPolicy::kFusion, true,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cuda"},
                      PolicyCase{"cuda_fusion_noshuffle", SchedulerPolicy::kFusion, false,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cuda"},
                      PolicyCase{"cuda_dynamic", SchedulerPolicy::kDynamic, true,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cuda"},
                      PolicyCase{"cuda_static", SchedulerPolicy::kStatic, true,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cuda"},
                      PolicyCase{"cuda_sequential", SchedulerPolicy::kSequential, true,
                                 kernels::MatmulDtype::kF32, kernels::KvDtype::kF32, "cuda"},
                      PolicyCase{"cuda_fusion_bf16", SchedulerPolicy::kFusion, true,
                                 kernels::MatmulDtype::kBF16, kernels::KvDtype::kBF16, "cuda"},
                      PolicyCase{"cuda_fusion_noshuffle_bf16", SchedulerPolicy::kFusion, false,
                                 kernels::MatmulDtype::kBF16, kernels::KvDtype::kBF16, "cuda"},
                      PolicyCase{"cuda_fusion_f16", SchedulerPolicy::kFusion, true,
                                 kernels::MatmulDtype::kF16, kernels::KvDtype::kF32, "cuda"}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace flover
