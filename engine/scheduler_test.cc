// Table tests of the pure step scheduler: given queue and active sequences,
// the exact plan of each step.
#include "engine/scheduler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

namespace flover {

namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

const absl::Time kT0 = absl::FromUnixSeconds(1000);
constexpr int kPlenty = 1000;  // free blocks when memory is not the question

SchedulerOptions Fusion(int max_batch = 4, int budget = 64) {
  SchedulerOptions o;
  o.policy = SchedulerPolicy::kFusion;
  o.max_batch = max_batch;
  o.max_tokens_per_step = budget;
  o.block_size = 32;
  return o;
}

// A running sequence holding the blocks its computed tokens fill, none shared.
ActiveSequence Running(RequestId id, int computed, int known) {
  const int blocks = (computed + 31) / 32;
  return {id, computed, known, blocks, blocks};
}

// (id, pos, len) of each scheduled sequence.
std::vector<std::tuple<RequestId, int, int>> Seqs(const StepPlan& p) {
  std::vector<std::tuple<RequestId, int, int>> out;
  for (const auto& s : p.seqs) out.emplace_back(s.id, s.pos, s.len);
  return out;
}

TEST(SchedulerTest, JoinsMidStreamInTheSameForwardAsDecodes) {
  // Two sequences decoding (one known token not yet computed), one arrives.
  const std::vector<ActiveSequence> active = {Running(1, 10, 11), Running(2, 5, 6)};
  const std::vector<QueuedRequest> queue = {{3, 7, kT0}};
  const StepPlan p = Schedule(queue, active, kPlenty, Fusion(), kT0);
  EXPECT_THAT(p.admitted, ElementsAre(3));
  EXPECT_THAT(p.preempted, IsEmpty());
  EXPECT_THAT(Seqs(p), ElementsAre(std::make_tuple(1, 10, 1), std::make_tuple(2, 5, 1),
                                   std::make_tuple(3, 0, 7)));
}

TEST(SchedulerTest, DraftsGoWithTheirDecodeBeforePromptChunks) {
  // An older prompt in chunks, a newer decode with 4 drafts: the decode and
  // its drafts come first (5 rows), the prompt gets the rest of the budget.
  ActiveSequence drafting = Running(2, 10, 15);
  drafting.drafts = 4;
  const std::vector<ActiveSequence> active = {Running(1, 0, 100), drafting};
  const StepPlan p = Schedule({}, active, kPlenty, Fusion(4, /*budget=*/8), kT0);
  EXPECT_THAT(Seqs(p), ElementsAre(std::make_tuple(2, 10, 5), std::make_tuple(1, 0, 3)));
  // A budget that cannot take every draft verifies those it can.
  const StepPlan q = Schedule({}, {drafting}, kPlenty, Fusion(4, /*budget=*/3), kT0);
  EXPECT_THAT(Seqs(q), ElementsAre(std::make_tuple(2, 10, 3)));
}

TEST(SchedulerTest, MaxBatchCapsRunningSequences) {
  const std::vector<QueuedRequest> queue = {{1, 3, kT0}, {2, 4, kT0}, {3, 5, kT0}, {4, 1, kT0},
                                            {5, 2, kT0}};
  const StepPlan p = Schedule(queue, {}, kPlenty, Fusion(/*max_batch=*/4), kT0);
  EXPECT_THAT(p.admitted, ElementsAre(1, 2, 3, 4));  // 5 waits: four are running
  EXPECT_THAT(Seqs(p), ElementsAre(std::make_tuple(1, 0, 3), std::make_tuple(2, 0, 4),
                                   std::make_tuple(3, 0, 5), std::make_tuple(4, 0, 1)));
}

TEST(SchedulerTest, RecurrentStateSlotsCapAdmissions) {
  // Two free state slots (a hybrid model): two of three are admitted; with
  // none free, nobody, while running sequences go on.
  const std::vector<QueuedRequest> queue = {{1, 3, kT0}, {2, 4, kT0}, {3, 5, kT0}};
  StepPlan p = Schedule(queue, {}, kPlenty, Fusion(8), kT0, kNoLocalPool, /*free_state_slots=*/2);
  EXPECT_THAT(p.admitted, ElementsAre(1, 2));
  p = Schedule(queue, {Running(9, 10, 11)}, kPlenty, Fusion(8), kT0, kNoLocalPool, 0);
  EXPECT_THAT(p.admitted, IsEmpty());
  EXPECT_THAT(Seqs(p), ElementsAre(std::make_tuple(9, 10, 1)));
  // The batching policies' batches and the sequential one take slots too.
  SchedulerOptions o = Fusion(8);
  o.policy = SchedulerPolicy::kDynamic;
  o.batch_delay = absl::ZeroDuration();
  EXPECT_THAT(Schedule(queue, {}, kPlenty, o, kT0, kNoLocalPool, 1).admitted, ElementsAre(1));
  o.policy = SchedulerPolicy::kSequential;
  EXPECT_THAT(Schedule(queue, {}, kPlenty, o, kT0, kNoLocalPool, 0).admitted, IsEmpty());
}

TEST(SchedulerTest, AdmissionChecksTheBlocksThePromptNeeds) {
  // Three free blocks: a 40-token prompt needs two, so the second one waits,
  // and so does the one-block prompt behind it (arrival order is kept).
  const std::vector<QueuedRequest> queue = {{1, 40, kT0}, {2, 40, kT0}, {3, 5, kT0}};
  StepPlan p = Schedule(queue, {}, 3, Fusion(8, 256), kT0);
  EXPECT_THAT(p.admitted, ElementsAre(1));
  EXPECT_THAT(Seqs(p), ElementsAre(std::make_tuple(1, 0, 40)));
  // The whole prompt must fit, not only the chunk this step computes.
  p = Schedule({{1, 100, kT0}}, {}, 3, Fusion(8, 16), kT0);
  EXPECT_THAT(p.admitted, IsEmpty());
  p = Schedule({{1, 96, kT0}}, {}, 3, Fusion(8, 16), kT0);
  EXPECT_THAT(Seqs(p), ElementsAre(std::make_tuple(1, 0, 16)));
}

TEST(SchedulerTest, AWindowLetsInAPromptLongerThanTheFreeBlocks) {
  // Window 40: a sequence holds at most WindowBlocks(40) = 3 blocks between
  // steps (40 positions straddling 3 blocks), so a 300-token prompt is
  // admitted with 3 free blocks, its first chunk within them (96 tokens).
  SchedulerOptions o = Fusion(8, 256);
  EXPECT_EQ(WindowBlocks(40, 32), 3);
  EXPECT_EQ(WindowBlocks(32, 32), 2);
  EXPECT_EQ(WindowBlocks(1, 32), 1);
  EXPECT_THAT(Schedule({{1, 300, kT0}}, {}, 3, o, kT0).admitted, IsEmpty());
  o.window = 40;
  StepPlan p = Schedule({{1, 300, kT0}}, {}, 3, o, kT0);
  EXPECT_THAT(Seqs(p), ElementsAre(std::make_tuple(1, 0, 96)));
  EXPECT_THAT(Schedule({{1, 300, kT0}}, {}, 2, o, kT0).admitted, IsEmpty());
  // A short prompt still needs only its own blocks, and the budget bounds the chunk.
  p = Schedule({{1, 20, kT0}, {2, 300, kT0}}, {}, 4, Fusion(8, 64), kT0);
  EXPECT_THAT(p.admitted, ElementsAre(1));  // without the window, 300 tokens need 10
  o.max_tokens_per_step = 64;
  p = Schedule({{1, 20, kT0}, {2, 300, kT0}}, {}, 4, o, kT0);
  EXPECT_THAT(Seqs(p), ElementsAre(std::make_tuple(1, 0, 20), std::make_tuple(2, 0, 44)));
  // Running on, its list still counts given-back blocks (they cover
  // positions): at 96 computed it holds 3 entries, 1 given back, and grows
  // into the free ones.
  ActiveSequence a{1, 96, 300, /*blocks=*/3, /*exclusive=*/2};
  p = Schedule({}, {a}, 1, o, kT0);
  EXPECT_THAT(Seqs(p), ElementsAre(std::make_tuple(1, 96, 32)));
}

TEST(SchedulerTest, LocalBlocksAreASecondBound) {
  // Local layers with a window of 40 in a pool of their own: a sequence's
  // list grows in both pools alike; a prompt is admitted with the local
  // blocks one window spans (3), all its global ones.
  SchedulerOptions o = Fusion(8, 256);
  o.local_window = 40;
  EXPECT_THAT(Seqs(Schedule({{1, 300, kT0}}, {}, 10, o, kT0, /*free_local_blocks=*/3)),
              ElementsAre(std::make_tuple(1, 0, 96)));
  EXPECT_THAT(Schedule({{1, 300, kT0}}, {}, 10, o, kT0, 2).admitted, IsEmpty());
  EXPECT_THAT(Schedule({{1, 300, kT0}}, {}, 9, o, kT0, 30).admitted, IsEmpty());  // global: all 10
  // Growing: the fewer free of the two pools bounds it.
  ActiveSequence a{1, 96, 300, /*blocks=*/3, /*exclusive=*/3};
  EXPECT_THAT(Seqs(Schedule({}, {a}, 5, o, kT0, 1)), ElementsAre(std::make_tuple(1, 96, 32)));
  // No local block free: the newest sequence, which needs one, is
  // preempted, and its local blocks let the older one grow.
  ActiveSequence b{2, 64, 65, 2, 2, 0, /*local_exclusive=*/2};
  const StepPlan p = Schedule({}, {a, b}, 5, o, kT0, 0);
  EXPECT_THAT(p.preempted, ElementsAre(2));
  EXPECT_THAT(Seqs(p), ElementsAre(std::make_tuple(1, 96, 64)));
}

TEST(SchedulerTest, ACachedPrefixIsNotComputedAgain) {
  // 64 of 70 tokens are cached in two blocks nobody holds (they count
  // against the free blocks when taken): one more block is needed.
  const std::vector<QueuedRequest> idle = {{1, 70, kT0, /*cached=*/64, /*cached_idle=*/2}};
  EXPECT_THAT(Seqs(Schedule(idle, {}, 3, Fusion(), kT0)), ElementsAre(std::make_tuple(1, 64, 6)));
  EXPECT_THAT(Schedule(idle, {}, 2, Fusion(), kT0).admitted, IsEmpty());
  // Blocks a running sequence holds cost nothing more to share.
  const std::vector<QueuedRequest> held = {{1, 70, kT0, 64, 0}};
  EXPECT_THAT(Seqs(Schedule(held, {}, 1, Fusion(), kT0)), ElementsAre(std::make_tuple(1, 64, 6)));
}

TEST(SchedulerTest, PromptChunkingAcrossSteps) {
  // Budget 32: a 70-token prompt runs as 31 + 31 + 8, while a decoding
  // sequence keeps getting its token first every step.
  SchedulerOptions o = Fusion(4, 32);
  std::vector<ActiveSequence> active = {Running(1, 9, 10)};
  StepPlan p = Schedule({{2, 70, kT0}}, active, kPlenty, o, kT0);
  EXPECT_THAT(Seqs(p), ElementsAre(std::make_tuple(1, 9, 1), std::make_tuple(2, 0, 31)));
  active = {Running(1, 10, 11), Running(2, 31, 70)};
  p = Schedule({}, active, kPlenty, o, kT0);
  EXPECT_THAT(Seqs(p), ElementsAre(std::make_tuple(1, 10, 1), std::make_tuple(2, 31, 31)));
  active = {Running(1, 11, 12), Running(2, 62, 70)};
  p = Schedule({}, active, kPlenty, o, kT0);
  EXPECT_THAT(Seqs(p), ElementsAre(std::make_tuple(1, 11, 1), std::make_tuple(2, 62, 8)));
}

TEST(SchedulerTest, AChunkDoesNotEndInsideAWholeSpan) {
  // A 70-token prompt with an image at [20, 45): budget 32 cuts the first
  // chunk back to the image's start, and the next takes the image whole.
  SchedulerOptions o = Fusion(4, 32);
  const std::vector<WholeSpan> image = {{20, 45}};
  QueuedRequest q{2, 70, kT0};
  q.whole = image;
  StepPlan p = Schedule({q}, {}, kPlenty, o, kT0);
  EXPECT_THAT(Seqs(p), ElementsAre(std::make_tuple(2, 0, 20)));
  ActiveSequence a = Running(2, 20, 70);
  a.whole = image;
  p = Schedule({}, {a}, kPlenty, o, kT0);
  EXPECT_THAT(Seqs(p), ElementsAre(std::make_tuple(2, 20, 32)));  // the image and 7 after it
  // With two decodes before it, 30 tokens of budget are left: the image
  // and 5 after it.
  p = Schedule({}, {Running(1, 9, 10), Running(3, 4, 5), a}, kPlenty, o, kT0);
  EXPECT_THAT(Seqs(p), ElementsAre(std::make_tuple(1, 9, 1), std::make_tuple(3, 4, 1), std::make_tuple(2, 20, 30)));
  // Starting inside the image (a cached prefix ended there), the chunk
  // takes the rest of it, 24 rows, whole: after the decode where the
  // budget holds both, and just those rows before the decodes where it
  // holds them only without (the decodes that no longer fit are late one
  // step, and go first again then): decodes never starve an image.
  ActiveSequence inside = Running(2, 21, 70);
  inside.whole = image;
  p = Schedule({}, {Running(1, 9, 10), inside}, kPlenty, Fusion(4, 25), kT0);
  EXPECT_THAT(Seqs(p), ElementsAre(std::make_tuple(1, 9, 1), std::make_tuple(2, 21, 24)));
  p = Schedule({}, {Running(1, 9, 10), inside}, kPlenty, Fusion(4, 24), kT0);
  EXPECT_THAT(Seqs(p), ElementsAre(std::make_tuple(2, 21, 24)));
  p = Schedule({}, {Running(1, 9, 10), inside, Running(3, 4, 5)}, kPlenty, Fusion(4, 25), kT0);
  EXPECT_THAT(Seqs(p), ElementsAre(std::make_tuple(2, 21, 24), std::make_tuple(1, 9, 1)));
  // Memory short of the rest of the image (its block has room for 11 of
  // its 24 positions, none free): the newest sequence (a prompt not yet
  // scheduled) gives its blocks back, and the chunk takes the rest of the
  // prompt.
  ActiveSequence held = Running(2, 21, 70);
  held.whole = image;
  p = Schedule({}, {held, Running(4, 40, 60)}, 0, Fusion(4, 64), kT0);
  EXPECT_THAT(p.preempted, ElementsAre(4));
  EXPECT_THAT(Seqs(p), ElementsAre(std::make_tuple(2, 21, 49)));
}

TEST(SchedulerTest, NoAdmissionWithoutBudgetUnderFusion) {
  SchedulerOptions o = Fusion(4, 2);
  const std::vector<ActiveSequence> active = {Running(1, 3, 4), Running(2, 3, 4)};
  const StepPlan p = Schedule({{3, 5, kT0}}, active, kPlenty, o, kT0);
  EXPECT_THAT(p.admitted, IsEmpty());
  EXPECT_EQ(p.seqs.size(), 2u);
}

TEST(SchedulerTest, SequencesGrowIntoFreeBlocks) {
  // At a block boundary a decode takes a new block; inside one it does not.
  const std::vector<ActiveSequence> active = {Running(1, 32, 33), Running(2, 40, 41)};
  StepPlan p = Schedule({}, active, 1, Fusion(), kT0);
  EXPECT_THAT(p.preempted, IsEmpty());
  EXPECT_THAT(Seqs(p), ElementsAre(std::make_tuple(1, 32, 1), std::make_tuple(2, 40, 1)));
  // A prompt chunk shrinks to the room its blocks and the free ones leave.
  p = Schedule({}, {Running(1, 20, 200)}, 2, Fusion(4, 256), kT0);
  EXPECT_THAT(Seqs(p), ElementsAre(std::make_tuple(1, 20, 76)));
}

TEST(SchedulerTest, FullCachePreemptsTheNewestSequence) {
  // Sequence 1 needs a block and none is free: the newest (3) gives its
  // blocks back; 2 still has room in its own.
  const std::vector<ActiveSequence> active = {Running(1, 32, 33), Running(2, 40, 41),
                                              Running(3, 10, 11)};
  const StepPlan p = Schedule({{4, 1, kT0}}, active, 0, Fusion(), kT0);
  EXPECT_THAT(p.preempted, ElementsAre(3));
  EXPECT_THAT(Seqs(p), ElementsAre(std::make_tuple(1, 32, 1), std::make_tuple(2, 40, 1)));
  // Nobody is admitted in a step that preempted, even with the freed block.
  EXPECT_THAT(p.admitted, IsEmpty());
}

TEST(SchedulerTest, TheNewestPreemptsItselfAndSharedBlocksFreeNothing) {
  // The newest is the one that needs a block: it steps back itself.
  StepPlan p = Schedule({}, {Running(1, 10, 11), Running(2, 64, 65)}, 0, Fusion(), kT0);
  EXPECT_THAT(p.preempted, ElementsAre(2));
  EXPECT_THAT(Seqs(p), ElementsAre(std::make_tuple(1, 10, 1)));
  // Preempting a sequence frees only the blocks nobody else holds: 3 shares
  // its only block, so 2 must go too before 1 can grow.
  const std::vector<ActiveSequence> active = {Running(1, 32, 33), {2, 40, 41, 2, 1},
                                              {3, 20, 21, 1, 0}};
  p = Schedule({}, active, 0, Fusion(), kT0);
  EXPECT_THAT(p.preempted, ElementsAre(3, 2));
  EXPECT_THAT(Seqs(p), ElementsAre(std::make_tuple(1, 32, 1)));
}

TEST(SchedulerTest, DecodesGoBeforePromptChunksWhenMemoryIsShort) {
  // The prompt (oldest) and a decode both need a block; one is free. The
  // decode is served first, and the prompt, still with room in its block,
  // takes what remains of it.
  const std::vector<ActiveSequence> active = {Running(1, 20, 100), Running(2, 64, 65)};
  const StepPlan p = Schedule({}, active, 1, Fusion(4, 256), kT0);
  EXPECT_THAT(p.preempted, IsEmpty());
  EXPECT_THAT(Seqs(p), ElementsAre(std::make_tuple(2, 64, 1), std::make_tuple(1, 20, 12)));
}

TEST(SchedulerTest, DynamicGathersThenRunsTheBatchToCompletion) {
  SchedulerOptions o = Fusion(3, 64);
  o.policy = SchedulerPolicy::kDynamic;
  o.batch_delay = absl::Milliseconds(10);
  const std::vector<QueuedRequest> two = {{1, 2, kT0}, {2, 2, kT0 + absl::Milliseconds(4)}};
  EXPECT_TRUE(Schedule(two, {}, kPlenty, o, kT0 + absl::Milliseconds(5)).empty());  // gathering
  StepPlan p = Schedule(two, {}, kPlenty, o, kT0 + absl::Milliseconds(10));      // delay expired
  EXPECT_THAT(p.admitted, ElementsAre(1, 2));
  // A full batch starts at once.
  const std::vector<QueuedRequest> four = {{1, 2, kT0}, {2, 2, kT0}, {3, 2, kT0}, {4, 2, kT0}};
  p = Schedule(four, {}, kPlenty, o, kT0);
  EXPECT_THAT(p.admitted, ElementsAre(1, 2, 3));
  // Nobody joins a running batch, even with room.
  p = Schedule({{5, 2, kT0}}, {Running(1, 2, 3)}, kPlenty, o, kT0 + absl::Seconds(5));
  EXPECT_THAT(p.admitted, IsEmpty());
  EXPECT_THAT(Seqs(p), ElementsAre(std::make_tuple(1, 2, 1)));
}

TEST(SchedulerTest, BatchingPoliciesAdmitTheWholeBatchBeyondTheBudget) {
  SchedulerOptions o = Fusion(3, 10);
  o.policy = SchedulerPolicy::kDynamic;
  const std::vector<QueuedRequest> q = {{1, 8, kT0}, {2, 8, kT0}, {3, 8, kT0}};
  const StepPlan p = Schedule(q, {}, kPlenty, o, kT0);
  EXPECT_THAT(p.admitted, ElementsAre(1, 2, 3));
  EXPECT_THAT(Seqs(p), ElementsAre(std::make_tuple(1, 0, 8), std::make_tuple(2, 0, 2)));
}

TEST(SchedulerTest, StaticWaitsForAFullBatchOrTheFlush) {
  SchedulerOptions o = Fusion(3, 64);
  o.policy = SchedulerPolicy::kStatic;
  o.static_flush = absl::Seconds(1);
  const std::vector<QueuedRequest> two = {{1, 2, kT0}, {2, 2, kT0}};
  EXPECT_TRUE(Schedule(two, {}, kPlenty, o, kT0 + absl::Milliseconds(500)).empty());
  EXPECT_THAT(Schedule(two, {}, kPlenty, o, kT0 + absl::Seconds(1)).admitted, ElementsAre(1, 2));
  const std::vector<QueuedRequest> three = {{1, 2, kT0}, {2, 2, kT0}, {3, 2, kT0}};
  EXPECT_THAT(Schedule(three, {}, kPlenty, o, kT0).admitted, ElementsAre(1, 2, 3));
}

TEST(SchedulerTest, SequentialRunsOneAtATime) {
  SchedulerOptions o = Fusion(4, 64);
  o.policy = SchedulerPolicy::kSequential;
  const std::vector<QueuedRequest> q = {{1, 2, kT0}, {2, 2, kT0}};
  EXPECT_THAT(Schedule(q, {}, kPlenty, o, kT0).admitted, ElementsAre(1));
  EXPECT_THAT(Schedule({{2, 2, kT0}}, {Running(1, 2, 3)}, kPlenty, o, kT0).admitted, IsEmpty());
}

// Random states, every policy: a plan stays within MaxRowsPerStep (the
// engine sizes a step's buffers by it) and max_batch, never hands out more
// blocks than are free plus those its preemptions give back, and schedules
// every running sequence that is not preempted and has room, or runs out of
// budget.
TEST(SchedulerTest, PlansStayWithinRowsBatchAndBlocks) {
  std::mt19937 rng(7);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int largest = 0, preempting = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    SchedulerOptions o = Fusion(uniform(1, 12), uniform(1, 300));
    o.policy = static_cast<SchedulerPolicy>(uniform(0, 3));
    if (uniform(0, 3) == 0) o.window = uniform(1, 100);  // prompts admitted with fewer blocks
    if (o.window == 0 && uniform(0, 3) == 0) o.local_window = uniform(1, 100);  // a second pool
    const int max_seq = uniform(2, 200);
    std::vector<ActiveSequence> active;
    const int n_active = uniform(0, o.max_batch);
    for (int i = 0; i < n_active; ++i) {
      const int known = uniform(1, max_seq);
      ActiveSequence a = Running(RequestId(100 + i), uniform(0, known - 1), known);
      a.exclusive = uniform(0, a.blocks);
      a.local_exclusive = uniform(0, a.blocks);
      active.push_back(a);
    }
    std::vector<QueuedRequest> queue;
    for (int i = uniform(0, 20); i > 0; --i) {
      const int known = uniform(1, max_seq - 1);
      const int cached = uniform(0, (known - 1) / 32) * 32;
      queue.push_back({RequestId(1000 + i), known, kT0 - absl::Seconds(5), cached,
                       uniform(0, cached / 32), uniform(0, cached / 32)});
    }
    const int free_blocks = uniform(0, 12);
    const int free_local = o.local_window > 0 ? uniform(0, 12) : kNoLocalPool;
    const StepPlan plan = Schedule(queue, active, free_blocks, o, kT0, free_local);
    int rows = 0;
    for (const ScheduledSequence& seq : plan.seqs) rows += seq.len;
    ASSERT_LE(rows, MaxRowsPerStep(o, max_seq)) << "trial " << trial;
    ASSERT_LE(active.size() - plan.preempted.size() + plan.admitted.size(), size_t(o.max_batch));
    // Blocks: what the scheduled sequences take beyond what they hold (the
    // same count from the local pool, where there is one).
    int available = free_blocks, taken = 0, available_local = free_local, taken_local = 0;
    for (RequestId id : plan.preempted) {
      for (const ActiveSequence& a : active) {
        available += a.id == id ? a.exclusive : 0;
        available_local += a.id == id ? a.local_exclusive : 0;
      }
    }
    for (const ScheduledSequence& seq : plan.seqs) {
      int held = 0;
      for (const ActiveSequence& a : active) held = a.id == seq.id ? a.blocks : held;
      for (const QueuedRequest& q : queue) {
        if (q.id == seq.id) {
          held = q.cached / 32;
          taken += q.cached_idle;
          taken_local += q.local_cached_idle;
        }
      }
      taken += std::max(0, (seq.pos + seq.len + 31) / 32 - held);
      taken_local += std::max(0, (seq.pos + seq.len + 31) / 32 - held);
    }
    ASSERT_LE(taken, available) << "trial " << trial;
    if (o.local_window > 0) {
      ASSERT_LE(taken_local, available_local) << "trial " << trial;
    }
    if (!plan.preempted.empty()) {
      ++preempting;
      ASSERT_THAT(plan.admitted, IsEmpty());
    }
    largest = std::max(largest, rows);
  }
  EXPECT_GT(largest, 250);  // the bound was approached, not only met trivially
  EXPECT_GT(preempting, 100);
  SchedulerOptions o = Fusion(32, 256);
  EXPECT_EQ(MaxRowsPerStep(o, 1024), 256);
  o.max_tokens_per_step = 100000;
  EXPECT_EQ(MaxRowsPerStep(o, 64), 32 * 64);
}

TEST(SchedulerTest, PolicyNamesRoundTrip) {
  for (const char* name : {"fusion", "dynamic", "static", "sequential"}) {
    auto p = ParseSchedulerPolicy(name);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(SchedulerPolicyName(*p), name);
  }
  EXPECT_FALSE(ParseSchedulerPolicy("fifo").ok());
}

}  // namespace
}  // namespace flover
