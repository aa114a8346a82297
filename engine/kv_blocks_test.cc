// The block pool's bookkeeping: allocation and release, reference counts of
// shared prefixes, prefix lookups that verify tokens, LRU eviction of idle
// cached blocks, and the hit/query counters.
#include "engine/kv_blocks.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace flover {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr int B = KvBlockPool::kBlockSize;

std::vector<int32_t> Tokens(int n, int32_t first) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// A sequence as the engine keeps one: its blocks and its prefix keys.
struct Seq {
  std::vector<int32_t> tokens, blocks;
  std::vector<uint64_t> keys;
};

// Admits `tokens` as the engine does: the cached prefix, then new blocks for
// the rest; computes everything and registers its full blocks.
Seq Admit(KvBlockPool& pool, std::vector<int32_t> tokens) {
  Seq s;
  s.tokens = std::move(tokens);
  const int n = static_cast<int>(s.tokens.size());
  pool.Match(s.tokens, n - 1, &s.blocks, &s.keys);
  EXPECT_TRUE(pool.Allocate((n + B - 1) / B - static_cast<int>(s.blocks.size()), &s.blocks));
  pool.Register(s.tokens, s.blocks, n / B, &s.keys);
  return s;
}

TEST(KvBlockPoolTest, GivenBackEntriesArePassedOver) {
  // A sequence that gave back its first two blocks (behind its window)
  // keeps kNoBlock in their place: registering still extends its key
  // chain over them, and releasing or counting skips them.
  KvBlockPool pool(6, /*prefix_caching=*/true);
  Seq s = Admit(pool, Tokens(100, 0));  // 4 blocks, 3 full and registered
  ASSERT_EQ(s.blocks.size(), 4u);
  ASSERT_EQ(s.keys.size(), 3u);
  const int32_t first = s.blocks[0], second = s.blocks[1];
  pool.Release({&s.blocks[0], 2});
  s.blocks[0] = s.blocks[1] = KvBlockPool::kNoBlock;
  EXPECT_EQ(pool.used_blocks(), 2);
  EXPECT_EQ(pool.cached_blocks(), 2);  // registered: kept for prefix reuse
  EXPECT_EQ(pool.Exclusive(s.blocks), 2);
  s.tokens.resize(128, 7);
  pool.Register(s.tokens, s.blocks, 4, &s.keys);
  EXPECT_EQ(s.keys.size(), 4u);
  // A new prompt with the same 128 tokens finds all four blocks: the two
  // given back (idle) and the two still held.
  std::vector<int32_t> blocks;
  std::vector<uint64_t> keys;
  EXPECT_EQ(pool.Match(s.tokens, 128, &blocks, &keys), 128);
  EXPECT_EQ(blocks[0], first);
  EXPECT_EQ(blocks[1], second);
  pool.Release(blocks);
  pool.Release(s.blocks);
  EXPECT_EQ(pool.used_blocks(), 0);
  EXPECT_EQ(pool.free_blocks(), 6);
}

TEST(KvBlockPoolTest, AWindowsPartOfAPrefix) {
  // Local layers' blocks: a prefix hit needs only those of the window
  // before its end; the chain's keys come from the tokens alone.
  KvBlockPool pool(8, /*prefix_caching=*/true);
  Seq s = Admit(pool, Tokens(100, 0));  // blocks 0..3, the first 3 registered
  const std::vector<int32_t> ids = s.blocks;
  pool.Release({&s.blocks[0], 2});  // blocks 0 and 1 given back: idle
  s.blocks[0] = s.blocks[1] = KvBlockPool::kNoBlock;
  EXPECT_THAT(pool.CachedStates(s.tokens, 3), ElementsAre(1, 1, 0));
  std::vector<int32_t> blocks;
  std::vector<uint64_t> keys;
  ASSERT_TRUE(pool.MatchRange(s.tokens, 1, 3, &blocks, &keys));
  EXPECT_THAT(blocks, ElementsAre(KvBlockPool::kNoBlock, ids[1], ids[2]));
  EXPECT_THAT(keys, ElementsAre(s.keys[0], s.keys[1], s.keys[2]));
  EXPECT_EQ(pool.cached_blocks(), 1);  // block 0 still idle; block 1 taken
  // Another prompt sharing only the first block: the second is missing,
  // and nothing is taken.
  std::vector<int32_t> other = s.tokens;
  other[40] = 999;
  EXPECT_THAT(pool.CachedStates(other, 3), ElementsAre(1, -1, -1));
  const int used = pool.used_blocks();
  std::vector<int32_t> none;
  std::vector<uint64_t> none_keys;
  EXPECT_FALSE(pool.MatchRange(other, 0, 2, &none, &none_keys));
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(pool.used_blocks(), used);
}

TEST(KvBlockPoolTest, AllocatesAndReleasesWithoutPrefixCaching) {
  KvBlockPool pool(4, /*prefix_caching=*/false);
  std::vector<int32_t> a, b;
  ASSERT_TRUE(pool.Allocate(3, &a));
  EXPECT_THAT(a, ElementsAre(0, 1, 2));
  EXPECT_EQ(pool.free_blocks(), 1);
  EXPECT_FALSE(pool.Allocate(2, &b));  // all or nothing
  EXPECT_THAT(b, IsEmpty());
  EXPECT_EQ(pool.Exclusive(a), 3);
  pool.Release(a);
  EXPECT_EQ(pool.free_blocks(), 4);
  EXPECT_EQ(pool.cached_blocks(), 0);
  // Registering and matching do nothing when prefix caching is off.
  Seq s = Admit(pool, Tokens(70, 0));
  EXPECT_THAT(s.keys, IsEmpty());
  pool.Release(s.blocks);
  Seq t = Admit(pool, Tokens(70, 0));
  EXPECT_EQ(pool.hit_tokens(), 0);
  EXPECT_EQ(pool.query_tokens(), 0);
}

TEST(KvBlockPoolTest, AFinishedPromptsWholeBlocksServeTheNextOne) {
  KvBlockPool pool(8, true);
  Seq first = Admit(pool, Tokens(70, 0));  // blocks 0, 1 full; 2 partial
  ASSERT_EQ(first.keys.size(), 2u);
  pool.Release(first.blocks);
  EXPECT_EQ(pool.cached_blocks(), 2);    // the partial block is simply free
  EXPECT_EQ(pool.free_blocks(), 8);      // idle cached blocks count as free
  // A prompt with the same first 64 tokens and a different tail.
  std::vector<int32_t> tokens = Tokens(64, 0);
  for (int i = 0; i < 10; ++i) tokens.push_back(1000 + i);
  EXPECT_EQ(pool.Peek(tokens, 73).tokens, 64);
  EXPECT_EQ(pool.Peek(tokens, 73).idle_blocks, 2);
  Seq second = Admit(pool, tokens);
  EXPECT_THAT(std::vector<int32_t>(second.blocks.begin(), second.blocks.begin() + 2),
              ElementsAre(first.blocks[0], first.blocks[1]));
  EXPECT_EQ(pool.hit_tokens(), 64);
  EXPECT_EQ(pool.query_tokens(), 69 + 73);
  EXPECT_EQ(pool.cached_blocks(), 0);  // held again
}

TEST(KvBlockPoolTest, TheLastTokenIsNeverTakenFromTheCache) {
  KvBlockPool pool(8, true);
  Seq first = Admit(pool, Tokens(64, 0));
  pool.Release(first.blocks);
  // The same 64 tokens: the last must be computed to give logits, so only
  // the first block (32 tokens) is reused.
  EXPECT_EQ(pool.Peek(Tokens(64, 0), 63).tokens, 32);
  EXPECT_EQ(pool.Peek(Tokens(65, 0), 64).tokens, 64);
}

TEST(KvBlockPoolTest, RunningSequencesShareBlocksByReference) {
  KvBlockPool pool(8, true);
  Seq a = Admit(pool, Tokens(40, 0));
  Seq b = Admit(pool, Tokens(40, 0));  // shares a's first block while a runs
  EXPECT_EQ(b.blocks[0], a.blocks[0]);
  EXPECT_NE(b.blocks[1], a.blocks[1]);
  EXPECT_EQ(pool.Exclusive(a.blocks), 1);
  EXPECT_EQ(pool.Exclusive(b.blocks), 1);
  EXPECT_EQ(pool.Peek(Tokens(40, 0), 39).idle_blocks, 0);  // held: costs nothing to share
  pool.Release(a.blocks);
  EXPECT_EQ(pool.Exclusive(b.blocks), 2);
  EXPECT_EQ(pool.cached_blocks(), 0);  // b still holds the shared block
  pool.Release(b.blocks);
  EXPECT_EQ(pool.cached_blocks(), 1);
  EXPECT_EQ(pool.free_blocks(), 8);
}

TEST(KvBlockPoolTest, EvictsTheLeastRecentlyUsedIdleBlocksLeavesFirst) {
  KvBlockPool pool(4, true);
  Seq x = Admit(pool, Tokens(64, 0));    // 2 blocks
  pool.Release(x.blocks);
  Seq y = Admit(pool, Tokens(64, 500));  // 2 blocks, used later
  pool.Release(y.blocks);
  EXPECT_EQ(pool.cached_blocks(), 4);
  // A new sequence needs 1 block: x's second block (least recently used,
  // and released before its first) goes; x keeps a 32-token prefix.
  std::vector<int32_t> fresh;
  ASSERT_TRUE(pool.Allocate(1, &fresh));
  EXPECT_EQ(fresh[0], x.blocks[1]);
  EXPECT_EQ(pool.Peek(Tokens(65, 0), 64).tokens, 32);
  EXPECT_EQ(pool.Peek(Tokens(65, 500), 64).tokens, 64);
  // Using y's prefix makes it the most recently used: x's first block goes next.
  std::vector<int32_t> taken;
  std::vector<uint64_t> keys;
  EXPECT_EQ(pool.Match(Tokens(65, 500), 64, &taken, &keys), 64);
  pool.Release(taken);
  ASSERT_TRUE(pool.Allocate(1, &fresh));
  EXPECT_EQ(fresh[1], x.blocks[0]);
  EXPECT_EQ(pool.Peek(Tokens(65, 0), 64).tokens, 0);
  EXPECT_EQ(pool.Peek(Tokens(65, 500), 64).tokens, 64);
}

TEST(KvBlockPoolTest, AMatchNeedsEveryEarlierTokenToBeTheSame) {
  KvBlockPool pool(8, true);
  Seq a = Admit(pool, Tokens(96, 0));
  pool.Release(a.blocks);
  // Same second block, different first: no hit (the key chains the prefix).
  std::vector<int32_t> tokens = Tokens(96, 0);
  tokens[3] = 999;
  EXPECT_EQ(pool.Peek(tokens, 95).tokens, 0);
  // Different second block: only the first is reused.
  tokens = Tokens(96, 0);
  tokens[40] = 999;
  EXPECT_EQ(pool.Peek(tokens, 95).tokens, 32);
}

TEST(KvBlockPoolTest, TwinBlocksAreNotRegisteredTwice) {
  KvBlockPool pool(8, true);
  // Two sequences computed the same first block side by side (neither found
  // the other's in the cache): one key, one registered block.
  Seq a, b;
  a.tokens = b.tokens = Tokens(40, 0);
  ASSERT_TRUE(pool.Allocate(2, &a.blocks));
  ASSERT_TRUE(pool.Allocate(2, &b.blocks));
  pool.Register(a.tokens, a.blocks, 1, &a.keys);
  pool.Register(b.tokens, b.blocks, 1, &b.keys);
  EXPECT_EQ(a.keys, b.keys);
  pool.Release(a.blocks);
  pool.Release(b.blocks);
  EXPECT_EQ(pool.cached_blocks(), 1);  // b's twin went back to the free list
  EXPECT_EQ(pool.free_blocks(), 8);
}

TEST(KvBlockPoolTest, ChainHashDependsOnParentAndEveryToken) {
  const std::vector<int32_t> t = Tokens(B, 7);
  const uint64_t h = KvBlockPool::ChainHash(KvBlockPool::kNoParent, t);
  EXPECT_NE(h, KvBlockPool::kNoParent);
  EXPECT_NE(KvBlockPool::ChainHash(h, t), h);
  for (int i = 0; i < B; ++i) {
    std::vector<int32_t> u = t;
    u[i] += 1;
    EXPECT_NE(KvBlockPool::ChainHash(KvBlockPool::kNoParent, u), h) << i;
  }
}

}  // namespace
}  // namespace flover
