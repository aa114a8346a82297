// Memory for packed weights, in 2 MiB-aligned chunks marked for transparent
// huge pages (madvise; the kernel's default "madvise" mode backs only such
// regions with huge pages).
//
// A decode step at low load streams every weight once. On 4 KiB pages that
// is ~120,000 pages per step for GPT-2 124M, and the stream pays a TLB miss
// and a restarted hardware prefetch at each; on 2 MiB pages the panel
// kernels measured ~10% faster (on this machine, 494 MB of f32 weights, the
// same pass: 14.5 against 16.2-17.7 ms). Weights are packed one after another
// into shared chunks so small ones do not each round up to 2 MiB.
#ifndef FLOVER_KERNELS_CPU_WEIGHT_ARENA_H_
#define FLOVER_KERNELS_CPU_WEIGHT_ARENA_H_

#include <cstddef>
#include <memory>

namespace flover::kernels {

class WeightArena {
 public:
  static constexpr size_t kHugePage = size_t{2} << 20;
  static constexpr size_t kChunk = size_t{32} << 20;
  static constexpr size_t kAlign = 64;

  // `bytes` of kAlign-aligned memory; it stays valid while the returned
  // owner (shared with other allocations from the same chunk) lives, even
  // after the arena is gone. Requests over kChunk / 2 get a chunk of their
  // own. Null on allocation failure.
  struct Block {
    void* data = nullptr;
    std::shared_ptr<void> owner;
  };
  Block Allocate(size_t bytes);

 private:
  std::shared_ptr<void> chunk_;
  char* next_ = nullptr;
  size_t left_ = 0;
};

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_CPU_WEIGHT_ARENA_H_
