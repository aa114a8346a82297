// The engine's block bookkeeping over both pools: what a sequence needs to
// run alone, blocks given back behind windows, allocations that take from
// both pools or neither, and prefix hits cut back to where the local
// layers' window is cached too.
#include "engine/cache_manager.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace flover {
namespace {

using ::testing::ElementsAre;

constexpr int B = KvCacheShape::kBlockSize;
constexpr int32_t kNo = KvBlockPool::kNoBlock;

std::vector<int32_t> Tokens(int n) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), 100);
  return t;
}

// Two layers of one head; `local_blocks` > 0 keeps the second layer's K
// and V in blocks of its own, with a window of `local_window`.
KvCacheShape Shape(int num_blocks, int window = 0, int local_blocks = 0, int local_window = 0) {
  KvCacheShape s;
  s.layers = 2;
  s.heads = 1;
  s.head_dim = 4;
  s.num_blocks = num_blocks;
  s.max_seq = 1024;
  s.window = window;
  if (local_blocks > 0) {
    s.local_layers = {false, true};
    s.local_window = local_window;
    s.local_blocks = local_blocks;
  }
  return s;
}

TEST(CacheManagerTest, WhatASequenceNeedsToRunAlone) {
  const CacheManager whole(Shape(8), 0, true);
  EXPECT_EQ(whole.BlocksToRun(100), 4);
  EXPECT_EQ(whole.LocalBlocksToRun(100), 0);
  EXPECT_EQ(whole.MaxContext(1024), 8 * B);  // the whole cache
  EXPECT_EQ(whole.free_local_blocks(), kNoLocalPool);
  // A window of 40 that gives blocks back spans at most 3 blocks.
  const CacheManager windowed(Shape(8, 40), 40, true);
  EXPECT_EQ(windowed.BlocksToRun(1000), 3);
  EXPECT_EQ(windowed.MaxContext(1024), 1024);
  // The same cache whose window is not to free blocks.
  EXPECT_EQ(CacheManager(Shape(8, 40), 0, true).MaxContext(1024), 8 * B);
  // Local blocks: their window needs 3, and 2 hold only 64 positions.
  const CacheManager local(Shape(64, 0, 2, 40), 0, true);
  EXPECT_EQ(local.LocalBlocksToRun(1000), 3);
  EXPECT_EQ(local.LocalBlocksToRun(20), 1);
  EXPECT_EQ(local.MaxContext(1024), 2 * B);
  EXPECT_EQ(CacheManager(Shape(64, 0, 3, 40), 0, true).MaxContext(1024), 1024);
}

TEST(CacheManagerTest, AWindowGivesBackTheBlocksBehindIt) {
  const KvCacheShape shape = Shape(8, 40);
  CacheManager kv(shape, 40, true);
  const std::vector<int32_t> tokens = Tokens(128);
  SequenceCache s;
  ASSERT_TRUE(kv.Allocate(4, s));
  const std::vector<int32_t> held = s.ids;
  EXPECT_EQ(kv.bytes_in_use(), 4 * shape.bytes_per_block());
  // The row at 100 attends [61, 100]: block 0 ([0, 32)) is behind it.
  kv.Register(tokens, 100, s);
  kv.GiveBackBehindWindow(100, s);
  EXPECT_THAT(s.ids, ElementsAre(kNo, held[1], held[2], held[3]));
  EXPECT_EQ(s.given_back, 1);
  EXPECT_EQ(kv.bytes_in_use(), 3 * shape.bytes_per_block());
  EXPECT_EQ(kv.bytes_cached(), 1 * shape.bytes_per_block());  // registered: kept for reuse
  kv.GiveBackBehindWindow(100, s);  // nothing more
  EXPECT_EQ(s.given_back, 1);
  kv.GiveBackBehindWindow(127, s);  // [88, 127]: block 1 too
  EXPECT_THAT(s.ids, ElementsAre(kNo, kNo, held[2], held[3]));
  kv.Release(s);
  EXPECT_TRUE(s.ids.empty());
  EXPECT_EQ(s.given_back, 0);
  EXPECT_EQ(kv.bytes_in_use(), 0);
  EXPECT_EQ(kv.free_blocks(), 8);
}

TEST(CacheManagerTest, AllocationsTakeFromBothPoolsOrNeither) {
  const KvCacheShape shape = Shape(8, 0, 2, 40);
  CacheManager kv(shape, 0, true);
  SequenceCache s;
  EXPECT_FALSE(kv.Allocate(3, s));  // the local pool has 2
  EXPECT_TRUE(s.ids.empty());
  EXPECT_TRUE(s.local_ids.empty());
  EXPECT_EQ(kv.free_blocks(), 8);
  EXPECT_EQ(kv.free_local_blocks(), 2);
  ASSERT_TRUE(kv.Allocate(2, s));
  EXPECT_EQ(s.ids.size(), 2u);
  EXPECT_EQ(s.local_ids.size(), 2u);
  EXPECT_EQ(kv.bytes_in_use(), 2 * shape.bytes_per_block() + 2 * shape.bytes_per_local_block());
  EXPECT_EQ(kv.Exclusive(s), 2);
  EXPECT_EQ(kv.LocalExclusive(s), 2);
  EXPECT_TRUE(kv.Allocate(0, s));
  kv.Release(s);
  EXPECT_EQ(kv.free_blocks(), 8);
  EXPECT_EQ(kv.free_local_blocks(), 2);
}

TEST(CacheManagerTest, APrefixIsCutBackToWhereItsLocalWindowIsCached) {
  // Six local blocks, all held by one sequence of 192 computed tokens.
  CacheManager kv(Shape(16, 0, 6, 40), 0, true);
  std::vector<int32_t> tokens = Tokens(192);
  SequenceCache a;
  ASSERT_TRUE(kv.Allocate(6, a));
  kv.Register(tokens, 192, a);
  const std::vector<int32_t> local = a.local_ids;
  tokens.push_back(7);  // a new prompt: the same 192 tokens, and one more
  int local_idle = -1;
  // Still held: the whole prefix is usable, none of it idle.
  EXPECT_EQ(kv.UsableHit(tokens, 192, &local_idle).tokens, 192);
  EXPECT_EQ(local_idle, 0);
  // Released last first: local block 5 is the least recently used, and the
  // next allocation evicts it. Position 192's window reads blocks 4 and 5,
  // position 160's blocks 3 and 4: the hit is cut back to 160 tokens.
  kv.Release(a);
  SequenceCache other;
  ASSERT_TRUE(kv.Allocate(1, other));
  EXPECT_EQ(other.local_ids[0], local[5]);
  const KvBlockPool::Hit hit = kv.UsableHit(tokens, 192, &local_idle);
  EXPECT_EQ(hit.tokens, 160);
  EXPECT_EQ(hit.idle_blocks, 5);
  EXPECT_EQ(local_idle, 2);
  // Taken: the local blocks behind the window are not.
  SequenceCache b;
  EXPECT_EQ(kv.TakeCachedPrefix(tokens, b), 160);
  EXPECT_EQ(b.ids.size(), 5u);
  EXPECT_THAT(b.local_ids, ElementsAre(kNo, kNo, kNo, local[3], local[4]));
  EXPECT_EQ(b.local_given_back, 3);
  EXPECT_EQ(b.keys.size(), 5u);
  EXPECT_EQ(b.local_keys.size(), 5u);
  EXPECT_EQ(kv.query_tokens(), 192);
  EXPECT_EQ(kv.hit_tokens(), 160);
  // Without prefix caching nothing is found.
  CacheManager off(Shape(16, 0, 6, 40), 0, false);
  SequenceCache c;
  ASSERT_TRUE(off.Allocate(6, c));
  off.Register(tokens, 192, c);
  off.Release(c);
  EXPECT_EQ(off.UsableHit(tokens, 192, &local_idle).tokens, 0);
  EXPECT_EQ(off.TakeCachedPrefix(tokens, c), 0);
}

TEST(CacheManagerTest, RecurrentStateTakesASlotPerRunningSequence) {
  KvCacheShape shape = Shape(16);
  shape.state_layers = 3;
  shape.conv_state = 10;
  shape.scan_state = 40;
  shape.state_slots = 2;
  CacheManager cache(shape, 0, true);
  ASSERT_TRUE(cache.has_state());
  EXPECT_FALSE(CacheManager(Shape(16), 0, true).has_state());
  EXPECT_EQ(CacheManager(Shape(16), 0, true).free_state_slots(), kNoStatePool);
  EXPECT_EQ(cache.free_state_slots(), 2);
  SequenceCache a, b, c;
  ASSERT_TRUE(cache.AcquireState(a));
  ASSERT_TRUE(cache.AcquireState(a));  // holds one already
  ASSERT_TRUE(cache.AcquireState(b));
  EXPECT_NE(a.slot, b.slot);
  EXPECT_EQ(cache.free_state_slots(), 0);
  EXPECT_FALSE(cache.AcquireState(c));
  EXPECT_EQ(c.slot, SequenceCache::kNoSlot);
  // A slot is 3 layers x (10 + 40) floats, counted while held.
  EXPECT_EQ(cache.bytes_per_state_slot(), 3 * 50 * 4);
  EXPECT_EQ(cache.bytes_in_use(), 2 * 600);
  ASSERT_TRUE(cache.Allocate(2, a));
  EXPECT_EQ(cache.bytes_in_use(), 2 * 600 + 2 * shape.bytes_per_block());
  const int32_t slot = a.slot;
  cache.Release(a);
  EXPECT_EQ(a.slot, SequenceCache::kNoSlot);
  EXPECT_EQ(cache.free_state_slots(), 1);
  EXPECT_EQ(cache.bytes_in_use(), 600);
  ASSERT_TRUE(cache.AcquireState(c));
  EXPECT_EQ(c.slot, slot);
  // K/V blocks alone cannot resume recurrent state: no prefix hits without
  // a checkpoint (CheckpointsResumeRecurrentState).
  const std::vector<int32_t> tokens = Tokens(100);
  ASSERT_TRUE(cache.Allocate(4, b));
  cache.Register(tokens, 96, b);
  cache.Release(b);
  int local_idle = -1;
  EXPECT_EQ(cache.UsableHit(tokens, 99, &local_idle).tokens, 0);
  EXPECT_EQ(local_idle, 0);
  SequenceCache d;
  EXPECT_EQ(cache.TakeCachedPrefix(tokens, d), 0);
  EXPECT_TRUE(d.ids.empty());
}

// Prefix reuse with recurrent state: a chunk stops where a checkpoint is
// due (every 64 positions, and the prompt's last block boundary); the state
// there is copied into a slot of its own (at the next step); a later prompt
// with that prefix takes the blocks up to the longest checkpoint and reads
// its first step's state from it, pinned until that step ran; idle
// checkpoints count as free slots and go least recently used first.
TEST(CacheManagerTest, CheckpointsResumeRecurrentState) {
  KvCacheShape shape = Shape(16);
  shape.state_layers = 1;
  shape.conv_state = 4;
  shape.scan_state = 12;
  shape.state_slots = 3;
  CacheManager cache(shape, 0, true, /*checkpoint_interval=*/64);
  EXPECT_EQ(cache.NextCheckpoint(0, 200), 64);
  EXPECT_EQ(cache.NextCheckpoint(64, 200), 128);
  EXPECT_EQ(cache.NextCheckpoint(128, 200), 192);  // (200 - 1) / 32 * 32
  EXPECT_EQ(cache.NextCheckpoint(0, 100), 64);
  EXPECT_EQ(cache.NextCheckpoint(64, 100), 96);    // the last boundary
  EXPECT_EQ(cache.NextCheckpoint(96, 100), 0);
  EXPECT_EQ(CacheManager(shape, 0, false, 64).NextCheckpoint(0, 200), 0);  // no prefix caching: none
  EXPECT_EQ(CacheManager(Shape(16), 0, true, 64).NextCheckpoint(0, 200), 0);  // no state: none

  const std::vector<int32_t> tokens = Tokens(100);
  SequenceCache a;
  ASSERT_TRUE(cache.AcquireState(a));
  ASSERT_TRUE(cache.Allocate(3, a));
  cache.Register(tokens, 96, a);
  cache.Checkpoint(tokens, 64, a);
  cache.Checkpoint(tokens, 96, a);
  EXPECT_EQ(cache.checkpoints(), 2);
  const auto copies = cache.TakePendingCopies();
  ASSERT_EQ(copies.size(), 2u);
  EXPECT_EQ(copies[0].first, a.slot);
  EXPECT_NE(copies[0].second, copies[1].second);
  EXPECT_TRUE(cache.TakePendingCopies().empty());
  // Idle checkpoints count as free (nobody runs in them), and as cached bytes.
  EXPECT_EQ(cache.free_state_slots(), 2);
  EXPECT_EQ(cache.bytes_cached(), 2 * shape.bytes_per_state_slot());
  cache.Release(a);

  // A prompt sharing 80 tokens: the K/V of two blocks are cached, and the
  // state at 64 is: a hit of 64.
  std::vector<int32_t> other(tokens.begin(), tokens.begin() + 80);
  for (int i = 0; i < 30; ++i) other.push_back(7000 + i);
  int local_idle = -1;
  EXPECT_EQ(cache.UsableHit(other, 109, &local_idle).tokens, 64);
  SequenceCache b;
  ASSERT_TRUE(cache.AcquireState(b));
  EXPECT_EQ(cache.TakeCachedPrefix(other, b), 64);
  EXPECT_EQ(b.ids.size(), 2u);
  ASSERT_NE(b.resume, SequenceCache::kNoSlot);
  const kernels::SeqState first = cache.StepState(b, 64, false);
  EXPECT_EQ(first.read, b.resume);
  EXPECT_EQ(first.write, b.slot);
  // Pinned: the only other slot is a checkpoint's (96), taken by the next
  // sequence; 64's stays.
  SequenceCache c;
  ASSERT_TRUE(cache.AcquireState(c));
  EXPECT_EQ(cache.checkpoints(), 1);
  SequenceCache d;
  EXPECT_FALSE(cache.AcquireState(d));
  cache.StepDone(b);
  EXPECT_EQ(b.resume, SequenceCache::kNoSlot);
  EXPECT_EQ(cache.StepState(b, 96, false).read, b.slot);
  ASSERT_TRUE(cache.AcquireState(d));  // now the idle checkpoint's slot
  EXPECT_EQ(cache.checkpoints(), 0);
  // The same tokens under another prefix are not that checkpoint.
  std::vector<int32_t> shifted(tokens.begin() + 1, tokens.end());
  EXPECT_EQ(cache.UsableHit(shifted, 98, &local_idle).tokens, 0);
}

}  // namespace
}  // namespace flover
