// The memory shuffle end to end on a real cache: after random finish
// patterns, applying CompactionMoves leaves the live sequences in slots
// [0, n) with every filled K/V position equal to a cache that never moved.
// On the CPU, and on a GPU when there is one (the moves are then
// device-to-device copies, read back for the comparison).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "model/gpt2/gpt_model.h"
#include "model/model_loader.h"
#include "engine/scheduler.h"
#include "engine/testing/backends.h"

namespace flover {
namespace {

// Element i of a K or V arena of `dtype`, as its bits.
uint32_t Bits(const void* arena, int64_t i, kernels::KvDtype dtype) {
  if (dtype == kernels::KvDtype::kBF16) return static_cast<const uint16_t*>(arena)[i];
  uint32_t u;
  std::memcpy(&u, static_cast<const float*>(arena) + i, sizeof(u));
  return u;
}

// One layer's K or V arena, copied to host memory.
std::vector<char> ArenaOnHost(const KvCache& cache, void* arena, const kernels::KvLayer& kv) {
  const kernels::Tensor t{arena, kv.dtype == kernels::KvDtype::kBF16 ? kernels::DType::kBF16
                                                                     : kernels::DType::kF32,
                          1, int64_t{kv.slots} * kv.slot_stride()};
  std::vector<char> host(t.bytes());
  EXPECT_TRUE(cache.backend().Download(t, host.data()).ok());
  return host;
}

// Positions [0, len) of every layer, head and dim of one slot, as a flat list.
std::vector<uint32_t> SlotContent(const KvCache& cache, int slot, int len) {
  std::vector<uint32_t> out;
  const KvCacheShape& s = cache.shape();
  for (int l = 0; l < s.layers; ++l) {
    kernels::KvLayer kv = cache.layer(l);
    const std::vector<char> k = ArenaOnHost(cache, kv.k, kv), v = ArenaOnHost(cache, kv.v, kv);
    kv.k = const_cast<char*>(k.data());
    kv.v = const_cast<char*>(v.data());
    for (int h = 0; h < s.heads; ++h) {
      const int64_t base = slot * kv.slot_stride() + h * kv.head_stride();
      for (int d = 0; d < s.head_dim; ++d)
        for (int p = 0; p < len; ++p) out.push_back(Bits(kv.k, base + kv.key_offset(d, p), kv.dtype));
      for (int p = 0; p < len; ++p)
        for (int d = 0; d < s.head_dim; ++d)
          out.push_back(Bits(kv.v, base + int64_t{p} * s.head_dim + d, kv.dtype));
    }
  }
  return out;
}

class KvShuffleTest
    : public ::testing::TestWithParam<std::tuple<kernels::KvDtype, const char*>> {};

TEST_P(KvShuffleTest, LiveSlotsStayDenseAndIntact) {
  const kernels::KvDtype kv_dtype = std::get<0>(GetParam());
  std::string skip;
  auto backend = testing::BackendForTest(std::get<1>(GetParam()), &skip,
                                         kernels::MatmulDtype::kF32, kv_dtype);
  if (backend == nullptr) GTEST_SKIP() << skip;
  auto loaded = LoadModel("builtin:tiny");
  ASSERT_TRUE(loaded.ok());
  auto gpt = testing::ModelOn(*backend, **loaded);
  CausalLm& model = *gpt;
  const int slots = 8, max_seq = 64;
  auto cache = KvCache::Create(*backend, model.CacheShape(slots, max_seq));
  // The reference: one slot per sequence id, never moved.
  auto reference = KvCache::Create(*backend, model.CacheShape(64, max_seq));
  ASSERT_TRUE(cache.ok() && reference.ok());
  ASSERT_EQ((*cache)->shape().dtype, kv_dtype);

  std::mt19937 rng(5);
  std::vector<ActiveSequence> live;
  RequestId next_id = 0;
  std::vector<float> logits;
  for (int round = 0; round < 12; ++round) {
    // Fill free slots (the lowest ones) with new sequences of random length,
    // writing the same tokens into the reference at slot == id.
    std::vector<bool> used(slots, false);
    for (const auto& a : live) used[a.slot] = true;
    for (int s = 0; s < slots && next_id < 64; ++s) {
      if (used[s]) continue;
      const int len = std::uniform_int_distribution<int>(1, max_seq)(rng);
      std::vector<int32_t> tokens(len);
      for (int32_t& t : tokens) t = std::uniform_int_distribution<int>(0, 511)(rng);
      ForwardBatch b;
      b.AddSequence(s, 0, tokens);
      ASSERT_TRUE(model.Forward(b, **cache, LogitsFor::kLastRowOfEachSequence, &logits).ok());
      ForwardBatch r;
      r.AddSequence(static_cast<int>(next_id), 0, tokens);
      ASSERT_TRUE(model.Forward(r, **reference, LogitsFor::kLastRowOfEachSequence, &logits).ok());
      live.push_back({next_id++, s, len, len});
    }
    // A random finish pattern: first, middle, last slots, several at once.
    std::shuffle(live.begin(), live.end(), rng);
    live.resize(std::uniform_int_distribution<int>(0, static_cast<int>(live.size()))(rng));
    const std::vector<SlotMove> moves = CompactionMoves(live);
    for (const SlotMove& m : moves) {
      ASSERT_TRUE(model.MoveSlot(**cache, m.from, m.to, m.len).ok());
      for (auto& a : live) {
        if (a.id == m.id) a.slot = m.to;
      }
    }
    std::vector<bool> dense(live.size(), false);
    for (const auto& a : live) {
      ASSERT_LT(a.slot, static_cast<int>(live.size())) << "round " << round;
      ASSERT_FALSE(dense[a.slot]);
      dense[a.slot] = true;
      EXPECT_EQ(SlotContent(**cache, a.slot, a.computed),
                SlotContent(**reference, static_cast<int>(a.id), a.computed))
          << "round " << round << " sequence " << a.id;
    }
  }
  EXPECT_GT(next_id, 20u);
}

INSTANTIATE_TEST_SUITE_P(KvDtypesAndDevices, KvShuffleTest,
                         ::testing::Combine(::testing::Values(kernels::KvDtype::kF32,
                                                              kernels::KvDtype::kBF16),
                                            ::testing::Values("cpu", "cuda")),
                         [](const auto& info) {
                           return std::string(kernels::KvDtypeName(std::get<0>(info.param))) +
                                  "_" + std::get<1>(info.param);
                         });

}  // namespace
}  // namespace flover
