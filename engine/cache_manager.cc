#include "engine/cache_manager.h"

#include <algorithm>

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

CacheManager::CacheManager(const KvCacheShape& shape, int window, bool prefix_caching)
    : window_(window), local_window_(shape.local_blocks > 0 ? shape.local_window : 0),
      bytes_per_block_(shape.bytes_per_block()), bytes_per_local_block_(shape.bytes_per_local_block()),
      pool_(shape.num_blocks, prefix_caching), local_pool_(shape.local_blocks, prefix_caching),
      state_slots_(shape.state_slots), bytes_per_state_slot_(shape.bytes_per_state_slot()) {
  // Taken from the back: slot 0 first.
  for (int32_t i = state_slots_ - 1; i >= 0; --i) slots_.push_back(i);
}

int CacheManager::free_state_slots() const {
  return state_slots_ > 0 ? static_cast<int>(slots_.size()) : kNoStatePool;
}

bool CacheManager::AcquireState(SequenceCache& s) {
  if (state_slots_ == 0 || s.slot != SequenceCache::kNoSlot) return true;
  if (slots_.empty()) return false;
  s.slot = slots_.back();
  slots_.pop_back();
  return true;
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
  // Recurrent state is not kept per block: a cached prefix of K/V alone
  // cannot resume it.
  if (has_state()) return {};
  KvBlockPool::Hit hit = pool_.Peek(tokens, max_tokens);
  if (const int usable = UsablePrefix(tokens, hit.tokens, local_idle); usable < hit.tokens) {
    hit = usable > 0 ? pool_.Peek(tokens, usable) : KvBlockPool::Hit{};
  }
  return hit;
}

int CacheManager::TakeCachedPrefix(absl::Span<const int32_t> tokens, SequenceCache& s) {
  if (has_state()) return 0;  // as UsableHit
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

int CacheManager::SettleDrafts(SequenceCache&, int accepted, int, int taken) { return accepted + taken; }

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
  if (s.slot != SequenceCache::kNoSlot) slots_.push_back(s.slot);
  s.slot = SequenceCache::kNoSlot;
}

int64_t CacheManager::bytes_in_use() const {
  return pool_.used_blocks() * bytes_per_block_ + local_pool_.used_blocks() * bytes_per_local_block_ +
         (state_slots_ - static_cast<int64_t>(slots_.size())) * bytes_per_state_slot_;
}

int64_t CacheManager::bytes_cached() const {
  return pool_.cached_blocks() * bytes_per_block_ + local_pool_.cached_blocks() * bytes_per_local_block_;
}

}  // namespace flover
