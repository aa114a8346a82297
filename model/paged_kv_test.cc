// The paged KV cache end to end on a real model: sequences whose blocks are
// taken from a churning free list (scattered, out of order, reused after
// other sequences finished) and which are prefilled in chunks beside each
// other compute, row for row and bit for bit, what each computes alone in
// a fresh cache of contiguous blocks. On the CPU, and on a GPU when there
// is one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "testing/backends.h"
#include "model/model_loader.h"

namespace flover {
namespace {

struct Seq {
  std::vector<int32_t> tokens;  // the whole sequence, fed chunk by chunk
  int pos = 0;
  std::vector<int32_t> blocks;
  std::unique_ptr<KvCache> alone;  // the reference: this sequence only
};

class PagedKvTest : public ::testing::TestWithParam<std::tuple<kernels::KvDtype, const char*>> {};

TEST_P(PagedKvTest, ScatteredReusedBlocksComputeWhatAContiguousCacheDoes) {
  const kernels::KvDtype kv_dtype = std::get<0>(GetParam());
  std::string skip;
  auto backend = testing::BackendForTest(std::get<1>(GetParam()), &skip,
                                         kernels::MatmulDtype::kF32, kv_dtype);
  if (backend == nullptr) GTEST_SKIP() << skip;
  auto loaded = LoadModel("builtin:tiny");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto model = testing::ModelOn(*backend, **loaded);
  const int V = model->info().vocab_size;
  const int max_seq = 96, pool_blocks = 10;  // room for ~3 full sequences
  auto cache = KvCache::Create(*backend, model->CacheShape(pool_blocks, max_seq));
  ASSERT_TRUE(cache.ok()) << cache.status();
  ASSERT_EQ((*cache)->shape().format, kernels::KvFormat(kv_dtype));

  std::mt19937 rng(11);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<int32_t> free_blocks(pool_blocks);
  for (int i = 0; i < pool_blocks; ++i) free_blocks[i] = i;
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);
  std::vector<Seq> live;
  int started = 0, finished = 0, steps = 0, shared_steps = 0, reused = 0;
  std::vector<bool> ever_used(pool_blocks, false);
  std::vector<float> logits, want;
  while (finished < 20) {
    // Start a sequence when fewer than 4 are live.
    while (live.size() < 4 && started < 20) {
      Seq s;
      s.tokens.resize(uniform(1, max_seq));
      for (int32_t& t : s.tokens) t = uniform(0, V - 1);
      s.alone = testing::CacheFor(*model, 1, max_seq);
      live.push_back(std::move(s));
      ++started;
    }
    // Each live sequence takes a chunk if the free list has its blocks.
    std::shuffle(live.begin(), live.end(), rng);
    ForwardBatch batch;
    std::vector<std::pair<Seq*, int>> in_batch;  // sequence, chunk length
    for (Seq& s : live) {
      const int len = std::min(uniform(1, 24), static_cast<int>(s.tokens.size()) - s.pos);
      const int need = KvCacheShape::BlocksFor(s.pos + len) - static_cast<int>(s.blocks.size());
      if (need > static_cast<int>(free_blocks.size())) continue;
      for (int i = 0; i < need; ++i) {
        const int32_t id = free_blocks.back();
        free_blocks.pop_back();
        if (ever_used[id]) ++reused;
        ever_used[id] = true;
        s.blocks.push_back(id);
      }
      batch.AddSequence(s.blocks, s.pos, absl::MakeConstSpan(s.tokens.data() + s.pos, len));
      in_batch.push_back({&s, len});
    }
    ASSERT_FALSE(in_batch.empty()) << "the pool cannot hold one chunk";
    ASSERT_TRUE(model->Forward(batch, **cache, LogitsFor::kEveryRow, &logits).ok());
    ++steps;
    if (in_batch.size() > 1) ++shared_steps;
    size_t row = 0;
    for (auto& [s, len] : in_batch) {
      ForwardBatch one;
      one.AddSequence(testing::SeqBlocks(0, max_seq), s->pos,
                      absl::MakeConstSpan(s->tokens.data() + s->pos, len));
      ASSERT_TRUE(model->Forward(one, *s->alone, LogitsFor::kEveryRow, &want).ok());
      ASSERT_EQ(std::memcmp(&logits[row * V], want.data(), want.size() * sizeof(float)), 0)
          << "step " << steps << ": positions [" << s->pos << ", " << s->pos + len
          << ") differ from the sequence alone";
      row += len;
      s->pos += len;
    }
    // Finished sequences give their blocks back, in a random order.
    for (auto it = live.begin(); it != live.end();) {
      if (it->pos < static_cast<int>(it->tokens.size())) {
        ++it;
        continue;
      }
      for (int32_t id : it->blocks) {
        free_blocks.insert(free_blocks.begin() + uniform(0, static_cast<int>(free_blocks.size())), id);
      }
      it = live.erase(it);
      ++finished;
    }
  }
  // The churn happened: blocks were handed out again after being freed, and
  // sequences shared steps.
  EXPECT_GT(reused, 10);
  EXPECT_GT(shared_steps, 10) << "of " << steps << " steps";
}

// A batch may ask for the logits of any number of each sequence's last rows
// (a draft being verified): they are, bit for bit, those rows of the logits
// of every row. Asking for none, or for more rows than a sequence has, is
// refused.
TEST_P(PagedKvTest, LogitsOfEachSequencesLastRowsAreThoseRows) {
  std::string skip;
  auto backend = testing::BackendForTest(std::get<1>(GetParam()), &skip, kernels::MatmulDtype::kF32,
                                         std::get<0>(GetParam()));
  if (backend == nullptr) GTEST_SKIP() << skip;
  auto loaded = LoadModel("builtin:tiny");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto model = testing::ModelOn(*backend, **loaded);
  const int V = model->info().vocab_size, max_seq = 32;
  const std::vector<int> lens = {5, 1, 7, 2}, wanted = {3, 1, 7, 1};
  auto batch_of = [&](bool with_rows) {
    ForwardBatch b;
    int32_t token = 1;
    for (size_t i = 0; i < lens.size(); ++i) {
      std::vector<int32_t> tokens(lens[i]);
      for (int32_t& t : tokens) t = (token++ * 7) % V;
      b.AddSequence(testing::SeqBlocks(static_cast<int>(i), max_seq), 0, tokens, with_rows ? wanted[i] : 1);
    }
    return b;
  };
  std::vector<float> every, asked;
  auto cache = testing::CacheFor(*model, 4, max_seq);
  ASSERT_TRUE(model->Forward(batch_of(false), *cache, LogitsFor::kEveryRow, &every).ok());
  auto again = testing::CacheFor(*model, 4, max_seq);
  ASSERT_TRUE(model->Forward(batch_of(true), *again, LogitsFor::kLastRowsOfEachSequence, &asked).ok());
  ASSERT_EQ(asked.size(), size_t(3 + 1 + 7 + 1) * V);
  size_t row = 0, out = 0;
  for (size_t i = 0; i < lens.size(); ++i) {
    for (int r = lens[i] - wanted[i]; r < lens[i]; ++r, ++out) {
      ASSERT_EQ(std::memcmp(&asked[out * V], &every[(row + r) * V], V * sizeof(float)), 0)
          << "sequence " << i << ", row " << r;
    }
    row += lens[i];
  }
  for (int32_t bad : {0, 6}) {
    ForwardBatch b = batch_of(true);
    b.logit_rows[0] = bad;
    const absl::Status st = model->Forward(b, *again, LogitsFor::kLastRowsOfEachSequence, &asked);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("logits of"), std::string::npos) << st;
  }
}

// Every layer of builtin:mistral-tiny attends its last 40 positions: a
// sequence's blocks wholly behind its first row's window may be named
// kNoBlock (given back) and the logits are bitwise those with the real
// blocks; a given-back block a row would read or write is refused, and so
// is any given-back block for a model with a layer that reads everything.
TEST_P(PagedKvTest, GivenBackBlocksOnlyBehindEveryLayersWindow) {
  std::string skip;
  auto backend = testing::BackendForTest(std::get<1>(GetParam()), &skip, kernels::MatmulDtype::kF32,
                                         std::get<0>(GetParam()));
  if (backend == nullptr) GTEST_SKIP() << skip;
  auto loaded = LoadModel("builtin:mistral-tiny");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto model = testing::ModelOn(*backend, **loaded);
  const int max_seq = 160, V = model->info().vocab_size;
  std::vector<int32_t> tokens(max_seq);
  for (int i = 0; i < max_seq; ++i) tokens[i] = (i * 13 + 3) % V;
  const std::vector<int32_t> blocks = testing::SeqBlocks(0, max_seq);
  // Positions [0, 120) first, then rows [120, 160): its first row reads
  // from 81 on, so blocks 0 and 1 ([0, 64)) are behind the window.
  auto run = [&](std::vector<int32_t> second, std::vector<float>* logits) {
    auto cache = testing::CacheFor(*model, 1, max_seq);
    ForwardBatch b;
    b.AddSequence(blocks, 0, absl::MakeConstSpan(tokens.data(), 120));
    EXPECT_TRUE(model->Forward(b, *cache, LogitsFor::kLastRowsOfEachSequence, logits).ok());
    b.Clear();
    b.AddSequence(second, 120, absl::MakeConstSpan(tokens.data() + 120, 40), 40);
    return model->Forward(b, *cache, LogitsFor::kLastRowsOfEachSequence, logits);
  };
  std::vector<float> kept, given_back;
  ASSERT_TRUE(run(blocks, &kept).ok());
  std::vector<int32_t> behind = blocks;
  behind[0] = behind[1] = kernels::KvLayer::kNoBlock;
  ASSERT_TRUE(run(behind, &given_back).ok());
  ASSERT_EQ(kept.size(), size_t(40) * V);
  EXPECT_EQ(std::memcmp(kept.data(), given_back.data(), kept.size() * sizeof(float)), 0);
  std::vector<int32_t> read = blocks;
  read[2] = kernels::KvLayer::kNoBlock;  // [64, 96): the first row reads 81 on
  absl::Status st = run(read, &given_back);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("reads block 2 (positions from 64), which it gave back"), std::string::npos) << st;
  std::vector<int32_t> written = blocks;
  written[3] = kernels::KvLayer::kNoBlock;  // [96, 128) holds position 120
  st = run(written, &given_back);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("writes block 3, which it gave back"), std::string::npos) << st;

  auto llama = LoadModel("builtin:llama-tiny");
  ASSERT_TRUE(llama.ok()) << llama.status();
  model = testing::ModelOn(*backend, **llama);
  st = run(behind, &given_back);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("reads block 0 (positions from 0), which it gave back"), std::string::npos) << st;
}

// builtin:gemma3-tiny: five local layers (window 40) to one global. With
// local blocks the local layers keep their K and V apart, in blocks named
// by the local table (kNoBlock wholly behind the first row's window),
// and the logits are bitwise those of a cache where every layer shares the
// blocks; a local table that does not fit is refused by name.
TEST_P(PagedKvTest, LocalLayersInBlocksOfTheirOwn) {
  std::string skip;
  auto backend = testing::BackendForTest(std::get<1>(GetParam()), &skip, kernels::MatmulDtype::kF32,
                                         std::get<0>(GetParam()));
  if (backend == nullptr) GTEST_SKIP() << skip;
  auto loaded = LoadModel("builtin:gemma3-tiny");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto model = testing::ModelOn(*backend, **loaded);
  const int max_seq = 160, V = model->info().vocab_size;
  KvCacheShape shared = model->CacheShape(KvCacheShape::BlocksFor(max_seq), max_seq);
  ASSERT_EQ(shared.window, 0);
  ASSERT_EQ(shared.local_window, 40);
  ASSERT_EQ(shared.local_layers, (std::vector<bool>{true, true, true, true, true, false}));
  KvCacheShape apart = shared;
  apart.local_blocks = 7;
  EXPECT_EQ(apart.bytes_per_block() * 6, shared.bytes_per_block());  // one global layer of six
  EXPECT_EQ(apart.bytes_per_local_block(), 5 * apart.bytes_per_block());
  std::vector<int32_t> tokens(max_seq);
  for (int i = 0; i < max_seq; ++i) tokens[i] = (i * 29 + 11) % V;
  const std::vector<int32_t> blocks = BlockRange(0, 5);
  // Local blocks in another order; at [120, 160) the first row reads from
  // 81 on: blocks 0 and 1 of the local table are behind its window.
  const std::vector<int32_t> local = {6, 2, 4, 0, 5};
  auto run = [&](const KvCacheShape& shape, const std::vector<int32_t>& second_local, std::vector<float>* logits) {
    auto cache = KvCache::Create(*backend, shape);
    EXPECT_TRUE(cache.ok()) << cache.status();
    ForwardBatch b;
    b.AddSequence(blocks, shape.local_blocks > 0 ? local : std::vector<int32_t>{}, 0,
                  absl::MakeConstSpan(tokens.data(), 120));
    EXPECT_TRUE(model->Forward(b, **cache, LogitsFor::kLastRowsOfEachSequence, logits).ok());
    b.Clear();
    b.AddSequence(blocks, second_local, 120, absl::MakeConstSpan(tokens.data() + 120, 40), 40);
    return model->Forward(b, **cache, LogitsFor::kLastRowsOfEachSequence, logits);
  };
  std::vector<float> want, got;
  ASSERT_TRUE(run(shared, {}, &want).ok());
  std::vector<int32_t> behind = local;
  behind[0] = behind[1] = kernels::KvLayer::kNoBlock;
  ASSERT_TRUE(run(apart, behind, &got).ok());
  ASSERT_EQ(got.size(), size_t(40) * V);
  EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0);
  std::vector<int32_t> read = local;
  read[2] = kernels::KvLayer::kNoBlock;
  absl::Status st = run(apart, read, &got);
  EXPECT_NE(st.message().find("reads local block 2 (positions from 64), which it gave back"), std::string::npos) << st;
  st = run(apart, {6, 2}, &got);
  EXPECT_NE(st.message().find("the local block table has 2 ids for a block table of 5"), std::string::npos) << st;
  st = run(apart, {6, 2, 4, 0, 7}, &got);
  EXPECT_NE(st.message().find("KV block 7 is outside the cache (7 local blocks)"), std::string::npos) << st;
}

// A position's bytes in each format, counted from ggml's block sizes (q8_0:
// 34 bytes per 32 values, q4_0: 18), with keys and values apart; a cache
// whose heads a quantized format cannot hold is refused naming the flag;
// layer i's K and V follow layer i - 1's, each as long as its format makes it.
TEST(KvCacheShapeTest, BytesPerTokenOfEachFormat) {
  using kernels::KvDtype;
  using kernels::KvFormat;
  KvCacheShape s;
  s.layers = 2;
  s.heads = 2;
  s.head_dim = 64;
  s.num_blocks = 3;
  s.max_seq = 96;
  const std::pair<KvFormat, int64_t> cases[] = {
      {KvDtype::kF32, 2 * 2 * 2 * 64 * 4}, {KvDtype::kBF16, 2 * 2 * 2 * 64 * 2},
      {KvDtype::kQ8_0, 2 * 2 * 2 * 68},    {KvDtype::kQ4_0, 2 * 2 * 2 * 36},
      {KvFormat(KvDtype::kQ8_0, KvDtype::kQ4_0), 2 * 2 * (68 + 36)}};
  for (const auto& [format, bytes] : cases) {
    s.format = format;
    EXPECT_EQ(s.bytes_per_token(), bytes) << kernels::KvFormatName(format);
    auto backend = testing::CpuBackend(kernels::MatmulDtype::kF32, format);
    auto cache = KvCache::Create(*backend, s);
    ASSERT_TRUE(cache.ok()) << cache.status();
    const kernels::KvLayer l0 = (*cache)->layer(0), l1 = (*cache)->layer(1);
    EXPECT_EQ(static_cast<char*>(l0.v) - static_cast<char*>(l0.k), l0.key_bytes());
    EXPECT_EQ(static_cast<char*>(l1.k) - static_cast<char*>(l0.k), bytes / 2 * 3 * KvCacheShape::kBlockSize);
    EXPECT_EQ(l0.key_bytes() + l0.value_bytes(), bytes / 2 * 3 * KvCacheShape::kBlockSize);
  }
  s.head_dim = 48;
  s.format = KvDtype::kQ4_0;
  auto backend = testing::CpuBackend(kernels::MatmulDtype::kF32, KvDtype::kQ4_0);
  auto refused = KvCache::Create(*backend, s);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--kv_dtype=q4_0 cannot hold this model's heads of 48 dims"),
            std::string::npos)
      << refused.status();
}

INSTANTIATE_TEST_SUITE_P(KvDtypesAndDevices, PagedKvTest,
                         ::testing::Combine(::testing::Values(kernels::KvDtype::kF32,
                                                              kernels::KvDtype::kBF16),
                                            ::testing::Values("cpu", "cuda")),
                         [](const auto& info) {
                           return std::string(kernels::KvDtypeName(std::get<0>(info.param))) +
                                  "_" + std::get<1>(info.param);
                         });

}  // namespace
}  // namespace flover
