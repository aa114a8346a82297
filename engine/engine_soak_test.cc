// Soak: 2,000 short requests through the engine with random cancels. No
// slot, memory or request leaks: every request finishes exactly once, the
// stats return to zero, and the process RSS stays flat.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/model_loader.h"
#include "engine/testing/collecting_sink.h"
#include "kernels/cpu/cpu_ops.h"

namespace flover {
namespace {

int64_t RssBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// Runs `n` requests (each with a 1-in-5 chance of a cancel while it runs)
// and waits for all; returns how many were cancelled.
int RunBatch(Engine& engine, int n, std::mt19937& rng) {
  std::vector<std::shared_ptr<testing::CollectingSink>> sinks;
  std::vector<RequestId> ids;
  for (int i = 0; i < n; ++i) {
    Request r;
    const int len = std::uniform_int_distribution<int>(1, 24)(rng);
    for (int t = 0; t < len; ++t) r.prompt.push_back(std::uniform_int_distribution<int>(0, 511)(rng));
    r.stop.max_new_tokens = std::uniform_int_distribution<int>(1, 12)(rng);
    r.sampling.temperature = 0.8f;
    r.sampling.seed = i;
    sinks.push_back(std::make_shared<testing::CollectingSink>());
    auto id = engine.Submit(r, sinks.back());
    EXPECT_TRUE(id.ok()) << id.status();
    ids.push_back(*id);
    if (std::uniform_int_distribution<int>(0, 4)(rng) == 0) {
      (void)engine.Cancel(ids[std::uniform_int_distribution<size_t>(0, ids.size() - 1)(rng)]);
    }
  }
  int cancelled = 0;
  for (auto& s : sinks) {
    EXPECT_TRUE(s->Wait());
    EXPECT_EQ(s->finishes(), 1);
    cancelled += s->finish().reason == FinishReason::kCancelled;
  }
  return cancelled;
}

TEST(EngineSoakTest, TwoThousandRequestsWithCancelsLeakNothing) {
  auto loaded = LoadModel("builtin:tiny");
  ASSERT_TRUE(loaded.ok());
  kernels::CpuOps ops;
  GptModel model((*loaded)->config, std::move((*loaded)->weights), ops);
  EngineOptions options;
  options.scheduler.max_batch = 16;
  options.scheduler.max_tokens_per_step = 128;
  options.max_seq_len = 64;
  options.max_queue = 4096;
  auto engine = Engine::Create(model, nullptr, options);
  ASSERT_TRUE(engine.ok());
  std::mt19937 rng(11);

  int cancelled = RunBatch(**engine, 1000, rng);  // warm-up: buffers, primitive caches
  const int64_t rss_after_warmup = RssBytes();
  cancelled += RunBatch(**engine, 1000, rng);
  const int64_t rss_after_soak = RssBytes();

  const EngineStats s = (*engine)->Stats();
  EXPECT_EQ(s.submitted, 2000);
  int64_t finished = 0;
  for (int64_t f : s.finished) finished += f;
  EXPECT_EQ(finished, 2000);
  EXPECT_EQ(s.finished[static_cast<int>(FinishReason::kCancelled)], cancelled);
  EXPECT_GT(cancelled, 0);
  EXPECT_EQ(s.queued, 0);
  EXPECT_EQ(s.active, 0);
  EXPECT_EQ(s.kv_bytes_in_use, 0);
  EXPECT_LT(rss_after_soak - rss_after_warmup, 4 << 20)
      << "RSS grew from " << rss_after_warmup << " to " << rss_after_soak;
}

}  // namespace
}  // namespace flover
