// Which tensor-parallel rank of how many a model instance is, and the pieces
// of a split every family shares (vocabulary ranges).
#ifndef FLOVER_MODEL_SHARD_SPEC_H_
#define FLOVER_MODEL_SHARD_SPEC_H_

#include <algorithm>
#include <utility>

#include "kernels/collectives.h"

namespace flover {

struct ShardSpec {
  int tp_size = 1;
  int tp_rank = 0;
};

inline ShardSpec SpecOf(const Collectives* collectives) {
  if (collectives == nullptr) return ShardSpec{};
  return ShardSpec{collectives->world().tp_size, collectives->world().tp_rank};
}

// Rank `rank`'s rows [begin, end) of a `vocab`-row embedding or LM head:
// contiguous ranges of ceil(vocab / tp) (the last may be shorter).
inline std::pair<int, int> VocabRange(int vocab, const ShardSpec& spec) {
  const int chunk = (vocab + spec.tp_size - 1) / spec.tp_size;
  const int begin = std::min(vocab, spec.tp_rank * chunk);
  return {begin, std::min(vocab, begin + chunk)};
}

}  // namespace flover

#endif  // FLOVER_MODEL_SHARD_SPEC_H_
