#include "engine/kv_blocks.h"

#include <algorithm>

#include "util/split_mix64.h"

namespace flover {

uint64_t KvBlockPool::ChainHash(uint64_t parent, absl::Span<const int32_t> block_tokens) {
  // Each token is mixed into the state through SplitMix64's finalizer, so a
  // change anywhere changes every later bit.
  uint64_t h = parent ^ 0x5851f42d4c957f2dull;
  for (int32_t t : block_tokens) h = SplitMix64(h ^ static_cast<uint32_t>(t)).Next();
  return h == kNoParent ? 1 : h;
}

KvBlockPool::KvBlockPool(int num_blocks, bool prefix_caching)
    : prefix_caching_(prefix_caching), blocks_(num_blocks) {
  free_.reserve(num_blocks);
  // Taken from the back: block 0 first.
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

int32_t KvBlockPool::Find(uint64_t parent, absl::Span<const int32_t> block_tokens) const {
  const auto it = by_key_.find(ChainHash(parent, block_tokens));
  if (it == by_key_.end()) return -1;
  const Block& b = blocks_[it->second];
  const bool same = b.parent == parent &&
                    std::equal(b.tokens.begin(), b.tokens.end(), block_tokens.begin(), block_tokens.end());
  return same ? it->second : -1;
}

template <typename F>
int KvBlockPool::Walk(absl::Span<const int32_t> tokens, int max_tokens, F&& f) const {
  if (!prefix_caching_) return 0;
  const int limit = std::min<int>(max_tokens, static_cast<int>(tokens.size())) / kBlockSize;
  uint64_t parent = kNoParent;
  int n = 0;
  for (; n < limit; ++n) {
    const int32_t id = Find(parent, tokens.subspan(size_t(n) * kBlockSize, kBlockSize));
    if (id < 0) break;
    f(id);
    parent = blocks_[id].key;
  }
  return n * kBlockSize;
}

KvBlockPool::Hit KvBlockPool::Peek(absl::Span<const int32_t> tokens, int max_tokens) const {
  Hit hit;
  hit.tokens = Walk(tokens, max_tokens, [&](int32_t id) {
    if (blocks_[id].refs == 0) ++hit.idle_blocks;
  });
  return hit;
}

int KvBlockPool::Match(absl::Span<const int32_t> tokens, int max_tokens,
                       std::vector<int32_t>* blocks, std::vector<uint64_t>* keys, int take) {
  std::vector<int32_t> found;
  const int n = Walk(tokens, take >= 0 ? std::min(take, max_tokens) : max_tokens,
                     [&](int32_t id) { found.push_back(id); });
  for (int32_t id : found) {
    Block& b = blocks_[id];
    if (b.refs++ == 0) idle_.erase(b.idle_at);
    blocks->push_back(id);
    keys->push_back(b.key);
  }
  if (prefix_caching_) {
    query_tokens_ += std::min<int>(max_tokens, static_cast<int>(tokens.size()));
    hit_tokens_ += n;
  }
  return n;
}

std::vector<KvBlockPool::ChainBlock> KvBlockPool::Chain(absl::Span<const int32_t> tokens, int end) const {
  std::vector<ChainBlock> chain;
  const int whole = static_cast<int>(std::min<int64_t>(end, static_cast<int64_t>(tokens.size()) / kBlockSize));
  uint64_t parent = kNoParent;
  for (int i = 0; i < whole; ++i) {
    const absl::Span<const int32_t> block_tokens = tokens.subspan(size_t(i) * kBlockSize, kBlockSize);
    const int32_t id = prefix_caching_ ? Find(parent, block_tokens) : -1;
    parent = ChainHash(parent, block_tokens);
    chain.push_back({parent, id});
  }
  return chain;
}

std::vector<int> KvBlockPool::CachedStates(absl::Span<const int32_t> tokens, int end) const {
  std::vector<int> state(std::max(end, 0), -1);
  const std::vector<ChainBlock> chain = Chain(tokens, end);
  for (size_t i = 0; i < chain.size(); ++i) {
    if (chain[i].id >= 0) state[i] = blocks_[chain[i].id].refs == 0 ? 1 : 0;
  }
  return state;
}

bool KvBlockPool::MatchRange(absl::Span<const int32_t> tokens, int first, int end, std::vector<int32_t>* blocks,
                             std::vector<uint64_t>* keys) {
  if (end <= 0) return true;
  const std::vector<ChainBlock> chain = Chain(tokens, end);
  if (static_cast<int>(chain.size()) < end) return false;
  for (int i = std::max(first, 0); i < end; ++i) {
    if (chain[i].id < 0) return false;
  }
  for (int i = 0; i < end; ++i) {
    if (i < first) {
      blocks->push_back(kNoBlock);
    } else {
      Block& b = blocks_[chain[i].id];
      if (b.refs++ == 0) idle_.erase(b.idle_at);
      blocks->push_back(chain[i].id);
    }
    keys->push_back(chain[i].key);
  }
  return true;
}

bool KvBlockPool::Allocate(int n, std::vector<int32_t>* blocks) {
  if (n > free_blocks()) return false;
  for (int i = 0; i < n; ++i) {
    int32_t id;
    if (!free_.empty()) {
      id = free_.back();
      free_.pop_back();
    } else {
      // Evict the least recently used idle block: it is no longer a prefix.
      id = idle_.front();
      idle_.pop_front();
      Block& b = blocks_[id];
      by_key_.erase(b.key);
      b.registered = false;
      b.tokens.clear();
    }
    blocks_[id].refs = 1;
    blocks->push_back(id);
  }
  return true;
}

void KvBlockPool::Release(absl::Span<const int32_t> ids) {
  // Last block first: a prefix's later blocks then sit before its earlier
  // ones in the idle list, so eviction takes leaves before what they extend.
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
    const int32_t id = *it;
    if (id == kNoBlock) continue;  // given back already
    Block& b = blocks_[id];
    if (--b.refs > 0) continue;
    if (b.registered) {
      b.idle_at = idle_.insert(idle_.end(), id);  // the most recently used
    } else {
      free_.push_back(id);
    }
  }
}

void KvBlockPool::Register(absl::Span<const int32_t> tokens, absl::Span<const int32_t> ids,
                           int full_blocks, std::vector<uint64_t>* keys) {
  if (!prefix_caching_) return;
  for (int i = static_cast<int>(keys->size()); i < full_blocks; ++i) {
    const uint64_t parent = i == 0 ? kNoParent : (*keys)[i - 1];
    const absl::Span<const int32_t> block_tokens = tokens.subspan(size_t(i) * kBlockSize, kBlockSize);
    const uint64_t key = ChainHash(parent, block_tokens);
    keys->push_back(key);
    if (ids[i] == kNoBlock) continue;  // given back: its key still extends the chain
    Block& b = blocks_[ids[i]];
    if (b.registered || by_key_.contains(key)) continue;  // shared already, or a twin holds the key
    b.registered = true;
    b.key = key;
    b.parent = parent;
    b.tokens.assign(block_tokens.begin(), block_tokens.end());
    by_key_[key] = ids[i];
  }
}

int KvBlockPool::Exclusive(absl::Span<const int32_t> ids) const {
  int n = 0;
  for (int32_t id : ids) n += id != kNoBlock && blocks_[id].refs == 1;
  return n;
}

}  // namespace flover
