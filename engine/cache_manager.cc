#include "engine/cache_manager.h"

#include <algorithm>
#include <utility>

#include "model/forward_batch.h"

namespace flover {
namespace {

static_assert(KvBlockPool::kBlockSize == KvCacheShape::kBlockSize, "the pool's blocks are the cache's");
static_assert(KvBlockPool::kNoBlock == kernels::KvLayer::kNoBlock, "a given-back block is the kernels' kNoBlock");

constexpr int kBlock = KvCacheShape::kBlockSize;

// Gives back the blocks of `blocks` from *given_back on that are wholly
// behind the window of a row at position `computed`: it attends
// [computed + 1 - window, computed], and later rows later positions, so
// the blocks before are never read again.
void GiveBack(KvBlockPool& pool, int window, int computed, std::vector<int32_t>& blocks, int* given_back) {
  if (window <= 0) return;
  const int behind = std::min(std::max(0, computed + 1 - window) / kBlock, static_cast<int>(blocks.size()));
  for (; *given_back < behind; ++*given_back) {
    int32_t& id = blocks[*given_back];
    if (id == KvBlockPool::kNoBlock) continue;
    pool.Release({&id, 1});
    id = KvBlockPool::kNoBlock;
  }
}

}  // namespace

CacheManager::CacheManager(const KvCacheShape& shape, int window, bool prefix_caching, int checkpoint_interval)
    : window_(window), local_window_(shape.local_blocks > 0 ? shape.local_window : 0),
      bytes_per_block_(shape.bytes_per_block()), bytes_per_local_block_(shape.bytes_per_local_block()),
      pool_(shape.num_blocks, prefix_caching), local_pool_(shape.local_blocks, prefix_caching),
      state_slots_(shape.state_slots), bytes_per_state_slot_(shape.bytes_per_state_slot()),
      checkpoint_interval_(prefix_caching ? checkpoint_interval / kBlock * kBlock : 0) {
  // Taken from the back: slot 0 first.
  for (int32_t i = state_slots_ - 1; i >= 0; --i) slots_.push_back(i);
}

int CacheManager::free_state_slots() const {
  return state_slots_ > 0 ? static_cast<int>(slots_.size() + idle_checkpoints_.size()) : kNoStatePool;
}

int32_t CacheManager::TakeSlot() {
  if (!slots_.empty()) {
    const int32_t slot = slots_.back();
    slots_.pop_back();
    return slot;
  }
  if (idle_checkpoints_.empty()) return SequenceCache::kNoSlot;
  auto it = checkpoints_.find(idle_checkpoints_.front());
  const int32_t slot = it->second.slot;
  idle_checkpoints_.pop_front();
  checkpoints_.erase(it);
  // A copy into it still pending is one nobody will read.
  pending_copies_.erase(std::remove_if(pending_copies_.begin(), pending_copies_.end(),
                                       [slot](const auto& c) { return c.second == slot; }),
                        pending_copies_.end());
  return slot;
}

bool CacheManager::AcquireState(SequenceCache& s) {
  if (state_slots_ == 0 || s.slot != SequenceCache::kNoSlot) return true;
  s.slot = TakeSlot();
  return s.slot != SequenceCache::kNoSlot;
}

int CacheManager::NextCheckpoint(int computed, int known) const {
  if (state_slots_ == 0 || !pool_.prefix_caching()) return 0;
  // The last whole block before the last known token (a prefix hit never
  // takes that token: it must run to give logits).
  const int last = (known - 1) / kBlock * kBlock;
  if (computed >= last) return 0;
  if (checkpoint_interval_ > 0) {
    const int next = (computed / checkpoint_interval_ + 1) * checkpoint_interval_;
    if (next < last) return next;
  }
  return last;
}

void CacheManager::Checkpoint(absl::Span<const int32_t> tokens, int computed, SequenceCache& s) {
  const int blocks = computed / kBlock;
  if (state_slots_ == 0 || computed % kBlock != 0 || blocks < 1 || static_cast<int>(s.keys.size()) < blocks ||
      s.slot == SequenceCache::kNoSlot) {
    return;
  }
  const uint64_t key = s.keys[blocks - 1];
  if (auto it = checkpoints_.find(key); it != checkpoints_.end()) {
    if (it->second.pins == 0) idle_checkpoints_.splice(idle_checkpoints_.end(), idle_checkpoints_, it->second.idle_at);
    return;
  }
  if (slots_.empty()) return;  // only a free slot: never evict one checkpoint for another
  const int32_t slot = TakeSlot();
  KeptState checkpoint{slot, std::vector<int32_t>(tokens.begin(), tokens.begin() + computed)};
  idle_checkpoints_.push_back(key);
  checkpoint.idle_at = std::prev(idle_checkpoints_.end());
  checkpoints_.emplace(key, std::move(checkpoint));
  pending_copies_.push_back({s.slot, slot});
}

std::vector<std::pair<int32_t, int32_t>> CacheManager::TakePendingCopies() {
  return std::exchange(pending_copies_, {});
}

int CacheManager::CheckpointedPrefix(absl::Span<const int32_t> tokens, int max_tokens, uint64_t* key) const {
  uint64_t parent = KvBlockPool::kNoParent;
  int best = 0;
  for (int b = 0; (b + 1) * kBlock <= max_tokens; ++b) {
    parent = KvBlockPool::ChainHash(parent, tokens.subspan(size_t(b) * kBlock, kBlock));
    auto it = checkpoints_.find(parent);
    if (it == checkpoints_.end()) continue;
    const std::vector<int32_t>& kept = it->second.tokens;
    if (static_cast<int>(kept.size()) == (b + 1) * kBlock && std::equal(kept.begin(), kept.end(), tokens.begin())) {
      best = (b + 1) * kBlock;
      *key = parent;
    }
  }
  return best;
}

void CacheManager::StepDone(SequenceCache& s) {
  if (s.resume == SequenceCache::kNoSlot) return;
  if (auto it = checkpoints_.find(s.resume_key); it != checkpoints_.end() && --it->second.pins == 0) {
    idle_checkpoints_.push_back(s.resume_key);
    it->second.idle_at = std::prev(idle_checkpoints_.end());
  }
  s.resume = SequenceCache::kNoSlot;
}

int CacheManager::BlocksToRun(int64_t positions) const {
  const int all = KvCacheShape::BlocksFor(positions);
  return window_ > 0 ? std::min(all, WindowBlocks(window_, kBlock)) : all;
}

int CacheManager::LocalBlocksToRun(int64_t positions) const {
  if (local_window_ <= 0) return 0;
  return std::min(KvCacheShape::BlocksFor(positions), WindowBlocks(local_window_, kBlock));
}

int CacheManager::MaxContext(int max_seq_len) const {
  int64_t most = max_seq_len;
  if (BlocksToRun(most) > num_blocks()) most = std::min<int64_t>(most, int64_t{num_blocks()} * kBlock);
  if (LocalBlocksToRun(most) > num_local_blocks()) {
    most = std::min<int64_t>(most, int64_t{num_local_blocks()} * kBlock);
  }
  return static_cast<int>(most);
}

int CacheManager::free_local_blocks() const {
  return local_window_ > 0 ? local_pool_.free_blocks() : kNoLocalPool;
}

int CacheManager::UsablePrefix(absl::Span<const int32_t> tokens, int cached, int* local_idle) const {
  // The local layers read the window before the first row to compute
  // (position `cached`): their blocks must be cached too, or the prefix
  // is cut back to where they are.
  if (local_idle != nullptr) *local_idle = 0;
  if (local_window_ <= 0 || cached <= 0) return cached;
  // Which of the prefix's local blocks are cached (-1: not; else whether
  // idle), found in one walk of the key chain.
  const std::vector<int> state = local_pool_.CachedStates(tokens, cached / kBlock);
  for (; cached > 0; cached -= kBlock) {
    const int first = std::max(0, cached + 1 - local_window_) / kBlock;
    const int end = cached / kBlock;
    int idle = 0;
    bool all = true;
    for (int b = first; b < end && all; ++b) {
      all = state[b] >= 0;
      idle += state[b] > 0;
    }
    if (all) {
      if (local_idle != nullptr) *local_idle = idle;
      break;
    }
  }
  return cached;
}

KvBlockPool::Hit CacheManager::UsableHit(absl::Span<const int32_t> tokens, int max_tokens, int* local_idle) const {
  if (local_idle != nullptr) *local_idle = 0;
  KvBlockPool::Hit hit = pool_.Peek(tokens, max_tokens);
  if (has_state()) {
    // Recurrent state resumes only from a checkpoint: cut back to one.
    uint64_t key = 0;
    const int usable = CheckpointedPrefix(tokens, hit.tokens, &key);
    return usable < hit.tokens ? (usable > 0 ? pool_.Peek(tokens, usable) : KvBlockPool::Hit{}) : hit;
  }
  if (const int usable = UsablePrefix(tokens, hit.tokens, local_idle); usable < hit.tokens) {
    hit = usable > 0 ? pool_.Peek(tokens, usable) : KvBlockPool::Hit{};
  }
  return hit;
}

int CacheManager::TakeCachedPrefix(absl::Span<const int32_t> tokens, SequenceCache& s) {
  if (has_state()) {
    const int known = static_cast<int>(tokens.size());
    uint64_t key = 0;
    const int usable = CheckpointedPrefix(tokens, pool_.Peek(tokens, known - 1).tokens, &key);
    const int taken = pool_.Match(tokens, known - 1, &s.ids, &s.keys, usable);
    if (taken > 0) {  // the first step reads the checkpoint's state, which stays until then
      KeptState& c = checkpoints_.at(key);
      if (c.pins++ == 0) idle_checkpoints_.erase(c.idle_at);
      s.resume = c.slot;
      s.resume_key = key;
    }
    return taken;
  }
  const int known = static_cast<int>(tokens.size());
  const int usable = local_window_ > 0 ? UsablePrefix(tokens, pool_.Peek(tokens, known - 1).tokens, nullptr) : -1;
  const int taken = pool_.Match(tokens, known - 1, &s.ids, &s.keys, usable);
  if (local_window_ > 0 && taken > 0) {
    const int first = std::max(0, taken + 1 - local_window_) / kBlock;
    const bool ok = local_pool_.MatchRange(tokens, first, taken / kBlock, &s.local_ids, &s.local_keys);
    s.local_given_back = first;
    if (!ok) {  // not expected: UsablePrefix found them
      Release(s);
      return 0;
    }
  }
  return taken;
}

bool CacheManager::Allocate(int need, SequenceCache& s) {
  if (need <= 0) return true;
  if (!pool_.Allocate(need, &s.ids)) return false;
  if (local_window_ > 0 && !local_pool_.Allocate(need, &s.local_ids)) {
    pool_.Release(absl::MakeConstSpan(s.ids).last(need));
    s.ids.resize(s.ids.size() - need);
    return false;
  }
  return true;
}

bool CacheManager::ReadyToVerify(SequenceCache& s) {
  if (state_slots_ == 0 || s.scratch != SequenceCache::kNoSlot) return true;
  if (slots_.empty()) return false;
  s.scratch = slots_.back();
  slots_.pop_back();
  return true;
}

kernels::SeqState CacheManager::StepState(const SequenceCache& s, int pos, bool verifies) const {
  kernels::SeqState st = StateOf(s.slot, pos);
  if (s.resume != SequenceCache::kNoSlot) st.read = s.resume;
  if (verifies) st.write = s.scratch;
  return st;
}

int CacheManager::SettleDrafts(SequenceCache& s, int accepted, int verified, int taken) {
  if (state_slots_ == 0) return accepted + taken;
  if (taken == verified) {
    std::swap(s.slot, s.scratch);
    return accepted + taken;
  }
  return accepted - 1;
}

void CacheManager::GiveBackBehindWindow(int computed, SequenceCache& s) {
  GiveBack(pool_, window_, computed, s.ids, &s.given_back);
  GiveBack(local_pool_, local_window_, computed, s.local_ids, &s.local_given_back);
}

void CacheManager::Register(absl::Span<const int32_t> tokens, int computed, SequenceCache& s) {
  const int full = computed / kBlock;
  pool_.Register(tokens, s.ids, full, &s.keys);
  if (local_window_ > 0) local_pool_.Register(tokens, s.local_ids, full, &s.local_keys);
}

void CacheManager::Release(SequenceCache& s) {
  pool_.Release(s.ids);
  local_pool_.Release(s.local_ids);
  s.ids.clear();
  s.keys.clear();
  s.local_ids.clear();
  s.local_keys.clear();
  s.given_back = s.local_given_back = 0;
  StepDone(s);
  for (int32_t* slot : {&s.slot, &s.scratch}) {
    if (*slot != SequenceCache::kNoSlot) slots_.push_back(*slot);
    *slot = SequenceCache::kNoSlot;
  }
}

int64_t CacheManager::bytes_in_use() const {
  return pool_.used_blocks() * bytes_per_block_ + local_pool_.used_blocks() * bytes_per_local_block_ +
         (state_slots_ - static_cast<int64_t>(slots_.size() + idle_checkpoints_.size())) * bytes_per_state_slot_;
}

int64_t CacheManager::bytes_cached() const {
  return pool_.cached_blocks() * bytes_per_block_ + local_pool_.cached_blocks() * bytes_per_local_block_ +
         static_cast<int64_t>(idle_checkpoints_.size()) * bytes_per_state_slot_;
}

}  // namespace flover
