// The KV cache's blocks as the engine hands them out: a pool of fixed-size
// blocks (KvCacheShape::kBlockSize positions each, every layer; a second
// pool holds the local layers' where the cache keeps them apart), reference
// counted, with a prefix cache on top. Host bookkeeping only: the model reads
// a sequence's block list from its ForwardBatch.
//
// Prefix reuse: a block whose positions a sequence has all computed can be
// registered under the hash of every token up to its end (a chain: the hash
// of the previous block's key and this block's tokens). A later prompt that
// starts with the same tokens takes the registered blocks instead of
// computing them again. A registered block nobody holds stays cached (idle)
// until a new block is needed and it is the least recently used: idle blocks
// count as free. Keys are checked against the tokens and the previous block's
// key they were made from, so a hash collision is a miss, never wrong K/V.
#ifndef FLOVER_ENGINE_KV_BLOCKS_H_
#define FLOVER_ENGINE_KV_BLOCKS_H_

#include <cstdint>
#include <list>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"

namespace flover {

class KvBlockPool {
 public:
  static constexpr int kBlockSize = 32;  // positions per block (kernels::KvLayer::kBlockSize)
  // In a block list, a block the sequence gave back (behind its window;
  // kernels::KvLayer::kNoBlock): Release, Register and Exclusive pass over it.
  static constexpr int32_t kNoBlock = -1;

  // The key a full block is registered under: the hash of all tokens up to
  // the block's end. The first block's parent is kNoParent.
  static constexpr uint64_t kNoParent = 0;
  static uint64_t ChainHash(uint64_t parent, absl::Span<const int32_t> block_tokens);

  KvBlockPool(int num_blocks, bool prefix_caching);

  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  bool prefix_caching() const { return prefix_caching_; }
  // Blocks a new allocation may take: never used, or cached and idle.
  int free_blocks() const { return static_cast<int>(free_.size() + idle_.size()); }
  // Blocks some sequence holds.
  int used_blocks() const { return num_blocks() - free_blocks(); }
  // Idle blocks kept for prefix reuse.
  int cached_blocks() const { return static_cast<int>(idle_.size()); }

  struct Hit {
    int tokens = 0;       // prefix tokens whose K/V are cached (whole blocks)
    int idle_blocks = 0;  // of their blocks, those nobody holds now
  };
  // The cached prefix of `tokens`, at most `max_tokens` of them, without
  // taking it. Zero with prefix caching off.
  Hit Peek(absl::Span<const int32_t> tokens, int max_tokens) const;
  // Takes the cached prefix of `tokens` (at most `max_tokens`, and at most
  // `take` where that is >= 0): a reference on each of its blocks, appended
  // to *blocks, their keys to *keys. Returns the tokens taken, and counts
  // the query (max_tokens) and the hit.
  int Match(absl::Span<const int32_t> tokens, int max_tokens, std::vector<int32_t>* blocks,
            std::vector<uint64_t>* keys, int take = -1);

  // A window's part of a prefix (the local layers' blocks, those behind
  // their window given back): for each of the first `end` blocks of the
  // chain of `tokens` (its keys worked out from the tokens, whatever is
  // cached), -1 if it is not cached, 1 if cached and idle, 0 if held.
  std::vector<int> CachedStates(absl::Span<const int32_t> tokens, int end) const;
  // Takes them: kNoBlock for blocks [0, first) and a reference on each of
  // [first, end) appended to *blocks, the keys of all `end` to *keys. False
  // (nothing taken) when one is missing.
  bool MatchRange(absl::Span<const int32_t> tokens, int first, int end, std::vector<int32_t>* blocks,
                  std::vector<uint64_t>* keys);

  // Appends n new blocks to *blocks, evicting the least recently used idle
  // ones if no block was never used. False (and nothing taken) when fewer
  // than n are free.
  bool Allocate(int n, std::vector<int32_t>* blocks);

  // Drops one reference on each block (kNoBlock entries are passed over),
  // last first. A block nobody holds is cached (idle) if registered, else
  // free.
  void Release(absl::Span<const int32_t> blocks);

  // Registers the sequence's full blocks from keys->size() up to
  // `full_blocks` (its first full_blocks * kBlockSize tokens are computed),
  // extending its key chain in *keys. A block whose key another block
  // already holds stays unregistered (it is freed when released).
  void Register(absl::Span<const int32_t> tokens, absl::Span<const int32_t> blocks,
                int full_blocks, std::vector<uint64_t>* keys);

  // How many of `blocks` only one sequence holds: what releasing them gives
  // back (as free or idle blocks).
  int Exclusive(absl::Span<const int32_t> blocks) const;

  // Prefix queries and hits, in tokens, since the pool was made.
  int64_t query_tokens() const { return query_tokens_; }
  int64_t hit_tokens() const { return hit_tokens_; }

 private:
  struct Block {
    int refs = 0;
    bool registered = false;
    uint64_t key = 0, parent = 0;
    std::vector<int32_t> tokens;  // registered: its tokens, to check a lookup
    std::list<int32_t>::iterator idle_at;  // registered and refs == 0
  };

  // The registered block for (parent, block_tokens), or -1.
  int32_t Find(uint64_t parent, absl::Span<const int32_t> block_tokens) const;
  // Walks the cached prefix; calls f(block id) for each block.
  template <typename F>
  int Walk(absl::Span<const int32_t> tokens, int max_tokens, F&& f) const;
  // The first `end` whole blocks of the chain of `tokens`: each one's key
  // (worked out from the tokens) and the registered block holding it (-1:
  // none, or prefix caching off).
  struct ChainBlock {
    uint64_t key;
    int32_t id;
  };
  std::vector<ChainBlock> Chain(absl::Span<const int32_t> tokens, int end) const;

  bool prefix_caching_;
  std::vector<Block> blocks_;
  std::vector<int32_t> free_;    // never used (or freed unregistered), taken from the back
  std::list<int32_t> idle_;      // registered, refs == 0: least recently used first
  absl::flat_hash_map<uint64_t, int32_t> by_key_;
  int64_t query_tokens_ = 0, hit_tokens_ = 0;
};

}  // namespace flover

#endif  // FLOVER_ENGINE_KV_BLOCKS_H_
