#include "kernels/cpu/weight_arena.h"

#include <sys/mman.h>

#include <cstdlib>

namespace flover::kernels {
namespace {

// A 2 MiB-aligned region of at least `bytes`, advised for huge pages (the
// advice is a hint: where THP is off it changes nothing).
std::shared_ptr<void> HugeRegion(size_t bytes) {
  const size_t size = (bytes + WeightArena::kHugePage - 1) / WeightArena::kHugePage *
                      WeightArena::kHugePage;
  void* p = std::aligned_alloc(WeightArena::kHugePage, size);
  if (p == nullptr) return nullptr;
  madvise(p, size, MADV_HUGEPAGE);
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

}  // namespace

WeightArena::Block WeightArena::Allocate(size_t bytes) {
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  if (rounded > kChunk / 2) {
    std::shared_ptr<void> own = HugeRegion(rounded);
    return Block{own.get(), own};
  }
  if (rounded > left_) {
    chunk_ = HugeRegion(kChunk);
    if (chunk_ == nullptr) {
      left_ = 0;
      return Block{};
    }
    next_ = static_cast<char*>(chunk_.get());
    left_ = kChunk;
  }
  Block block{next_, chunk_};
  next_ += rounded;
  left_ -= rounded;
  return block;
}

}  // namespace flover::kernels
