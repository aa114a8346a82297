// The engine's KV block bookkeeping: which blocks of the cache each
// sequence holds, in every pool the cache has. The shared pool holds every
// layer's K and V (the global layers' where the cache keeps the local
// layers' apart, KvCacheShape::local_blocks); the local pool holds the
// local layers'. Windows give blocks back: with `window` > 0 every layer's
// blocks wholly behind a sequence's next row's window, and the local
// layers' behind theirs. Prefix reuse goes through both pools at once: a
// cached prefix is usable only where the local blocks its window reads are
// cached too. Host bookkeeping only, on the engine's thread.
#ifndef FLOVER_ENGINE_KV_BLOCK_TABLES_H_
#define FLOVER_ENGINE_KV_BLOCK_TABLES_H_

#include <cstdint>
#include <list>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "engine/kv_blocks.h"
#include "kernels/kv_layer.h"
#include "engine/scheduler.h"
#include "model/kv_cache.h"

namespace flover {

// A sequence's part of the cache, as CacheManager hands it out: its blocks
// (the lists a forward names, ForwardBatch::AddSequence) and its state slot.
struct SequenceCache {
  static constexpr int32_t kNoSlot = -1;
  // Its recurrent state's slot while it runs (kNoSlot without recurrent
  // layers, or before admission), and while it verifies drafts a second
  // one the verify step writes (its state before them stays in `slot`).
  int32_t slot = kNoSlot;
  int32_t scratch = kNoSlot;
  // A prefix hit with recurrent state: its first step reads the cached
  // checkpoint's slot (pinned until that step ran), then its own.
  int32_t resume = kNoSlot;
  uint64_t resume_key = 0;
  std::vector<int32_t> ids;    // its blocks, in order of position
  std::vector<uint64_t> keys;  // prefix-cache keys of its full computed blocks
  // Its first blocks given back, behind its window (KvBlockPool::kNoBlock
  // in `ids`).
  int given_back = 0;
  // With local blocks: the local layers' blocks beside `ids` (as many),
  // their keys, and how many are given back.
  std::vector<int32_t> local_ids;
  std::vector<uint64_t> local_keys;
  int local_given_back = 0;
};

class CacheManager {
 public:
  // `window` > 0: blocks behind every layer's window are given back (0
  // where the cache's window is not to free them). The local pool has
  // shape.local_blocks blocks, and their window is shape.local_window.
  // With recurrent state and prefix caching, a sequence's state is kept as
  // a checkpoint every `checkpoint_interval` positions of its prompt (a
  // multiple of the block size; 0: none in between) and at its prompt's
  // last block boundary.
  CacheManager(const KvCacheShape& shape, int window, bool prefix_caching, int checkpoint_interval = 0);

  // The blocks a sequence of `positions` needs to run alone: all of them,
  // or with a window those one spans; and of the local blocks (0 without
  // them), those their window spans.
  int BlocksToRun(int64_t positions) const;
  int LocalBlocksToRun(int64_t positions) const;
  // The most of `max_seq_len` positions one sequence can reach: fewer where
  // the shared blocks hold fewer and no window gives blocks back, or the
  // local blocks hold less than their window.
  int MaxContext(int max_seq_len) const;

  int num_blocks() const { return pool_.num_blocks(); }
  // Whether sequences keep recurrent state (each running one holds a slot).
  bool has_state() const { return state_slots_ > 0; }
  // Slots for running sequences nobody holds; kNoStatePool without
  // recurrent state (the scheduler's convention).
  int free_state_slots() const;
  int64_t bytes_per_state_slot() const { return bytes_per_state_slot_; }
  int num_local_blocks() const { return local_pool_.num_blocks(); }
  // > 0: the local layers' blocks are kept apart, given back behind this.
  int local_window() const { return local_window_; }
  int64_t bytes_per_block() const { return bytes_per_block_; }

  // Scheduling. The cached prefix of `tokens` (at most `max_tokens`) that a
  // sequence can take: cut back to where the local blocks the window before
  // its first row to compute reads are cached too (*local_idle: how many of
  // those nobody holds).
  KvBlockPool::Hit UsableHit(absl::Span<const int32_t> tokens, int max_tokens, int* local_idle) const;
  // What releasing the sequence's blocks gives back, in each pool.
  int Exclusive(const SequenceCache& s) const { return pool_.Exclusive(s.ids); }
  int LocalExclusive(const SequenceCache& s) const { return local_pool_.Exclusive(s.local_ids); }
  int free_blocks() const { return pool_.free_blocks(); }
  // kNoLocalPool without local blocks (the scheduler's convention).
  int free_local_blocks() const;

  // Takes the usable cached prefix of an admitted sequence's `tokens` (all
  // but the last known one): returns the tokens taken.
  int TakeCachedPrefix(absl::Span<const int32_t> tokens, SequenceCache& s);
  // `need` more blocks in each pool, or none (false).
  bool Allocate(int need, SequenceCache& s);
  // A state slot for an admitted sequence, where the model keeps recurrent
  // state (true without: none needed); false when none is free (an idle
  // checkpoint, least recently used first, gives its slot up).
  bool AcquireState(SequenceCache& s);

  // Prefix checkpoints (recurrent state). A cached prefix is usable only up
  // to a block boundary where a checkpoint of the state is kept, whose
  // tokens are the prefix's (compared, not only hashed). Checkpoints hold
  // slots nobody runs in: they count as free, and are evicted least
  // recently used first when a slot is wanted.
  // Where a sequence of `known` tokens with `computed` computed should stop
  // a chunk to leave a checkpoint: the next checkpoint position, or 0.
  int NextCheckpoint(int computed, int known) const;
  // After a step left the sequence at a checkpoint position (`computed`
  // computed, its full blocks registered): keeps its state there, by a copy
  // of its slot (pending until the next step, PendingCopies) into a slot of
  // its own, if one is free or idle; a checkpoint of that prefix kept
  // already is touched instead.
  void Checkpoint(absl::Span<const int32_t> tokens, int computed, SequenceCache& s);
  // The state copies the next step applies before its forward; cleared.
  std::vector<std::pair<int32_t, int32_t>> TakePendingCopies();
  // After the step that read a resumed checkpoint: unpinned.
  void StepDone(SequenceCache& s);
  int checkpoints() const { return static_cast<int>(checkpoints_.size()); }
  // Whether the sequence may verify drafts: true without recurrent state;
  // with it, once it holds a second slot (taken here if one is free) for
  // the verify step to write.
  bool ReadyToVerify(SequenceCache& s);
  // The state slots a step of the sequence reads and writes for its rows
  // from position `pos`: its slot (zeros at 0), or into its second slot
  // where the rows verify drafts.
  kernels::SeqState StepState(const SequenceCache& s, int pos, bool verifies) const;
  // After a step verified `verified` drafts of a sequence with `accepted`
  // tokens (its last one computed in that step too) and `taken` of them
  // stood: how many of its tokens (the accepted ones, then those drafts)
  // are computed. The refused drafts' K/V stay in their blocks until
  // written over, unread. Recurrent state cannot be cut back so: where every
  // verified draft stood, the state the step wrote (its second slot) is the
  // sequence's; where one was refused, the state before the step (its slot)
  // is, and the sequence computes its last accepted token and the drafts
  // taken again (accepted - 1 are computed).
  int SettleDrafts(SequenceCache& s, int accepted, int verified, int taken);
  // Gives back the blocks wholly behind the window of a sequence's next row
  // (`computed` positions are computed): every layer's where every layer
  // has a window, the local layers' where the cache keeps them apart.
  void GiveBackBehindWindow(int computed, SequenceCache& s);
  // Its full computed blocks (local ones too) into the prefix cache.
  void Register(absl::Span<const int32_t> tokens, int computed, SequenceCache& s);
  // Every block and the slot the sequence holds back to the pools; `s` is
  // then empty.
  void Release(SequenceCache& s);

  // Bytes of the blocks and state slots sequences hold, and of the idle
  // cached blocks and state checkpoints.
  int64_t bytes_in_use() const;
  int64_t bytes_cached() const;
  // Prefix queries and hits in tokens (the shared pool's), since creation.
  int64_t query_tokens() const { return pool_.query_tokens(); }
  int64_t hit_tokens() const { return pool_.hit_tokens(); }

 private:
  // The longest prefix of `cached` tokens (whole blocks) whose local blocks
  // the window before it reads are cached as well.
  int UsablePrefix(absl::Span<const int32_t> tokens, int cached, int* local_idle) const;

  const int window_;
  const int local_window_;
  const int64_t bytes_per_block_;
  const int64_t bytes_per_local_block_;
  KvBlockPool pool_;
  KvBlockPool local_pool_;  // the local layers' blocks (none unless the cache has them)
  // A free slot, or an idle checkpoint's (evicted); kNoSlot when neither.
  int32_t TakeSlot();
  // The longest prefix of at most `max_tokens` of `tokens`' whole blocks
  // whose state a checkpoint keeps (0: none), and that checkpoint's key.
  int CheckpointedPrefix(absl::Span<const int32_t> tokens, int max_tokens, uint64_t* key) const;

  const int state_slots_;
  const int64_t bytes_per_state_slot_;
  const int checkpoint_interval_;
  std::vector<int32_t> slots_;  // free state slots, taken from the back
  struct KeptState {
    int32_t slot;
    std::vector<int32_t> tokens;  // the prefix whose state it is
    int pins = 0;                 // sequences whose first step reads it
    std::list<uint64_t>::iterator idle_at;  // in idle_checkpoints_ while pins == 0
  };
  absl::flat_hash_map<uint64_t, KeptState> checkpoints_;  // by the prefix's chain key
  std::list<uint64_t> idle_checkpoints_;                   // least recently used first
  std::vector<std::pair<int32_t, int32_t>> pending_copies_;
};

}  // namespace flover

#endif  // FLOVER_ENGINE_KV_BLOCK_TABLES_H_
