#include "engine/step_executor.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/scheduler.h"
#include "util/status_macros.h"

namespace flover {

int LocalBlocksFor(int seqs, int window, int max_rows) {
  return seqs * (WindowBlocks(window, KvCacheShape::kBlockSize) + 1) + KvCacheShape::BlocksFor(max_rows);
}

absl::StatusOr<std::unique_ptr<StepExecutor>> StepExecutor::Create(CausalLm& model,
                                                                   const KvCacheOptions& kv,
                                                                   int max_seqs, int max_seq_len,
                                                                   int max_rows, int max_logit_rows,
                                                                   ControlChannel* channel, int states_per_seq,
                                                                   int extra_states) {
  // Compile kernels and size buffers for every step size now, not mid-serving
  // (and before the cache, which takes what memory is left on a device).
  FLOVER_RETURN_IF_ERROR(model.PrepareForBatches(max_rows, max_logit_rows));
  KvCacheShape unit = model.CacheShape(1, max_seq_len);
  // Local layers beside global ones keep blocks of their own, given back
  // behind their window: as many as max_seqs sequences hold at once.
  const bool local = kv.free_behind_window && !unit.local_layers.empty();
  int64_t local_blocks = 0;
  if (local) {
    unit.local_blocks = 1;  // so the sizes per block split the layers
    local_blocks = LocalBlocksFor(max_seqs, unit.local_window, max_rows);
  }
  int64_t bytes = kv.bytes;
  if (bytes < 0) return absl::InvalidArgumentError("the KV cache's memory must be >= 0");
  if (bytes == 0) {
    // What max_seqs sequences can hold at once: their whole contexts, or
    // with blocks given back behind a window, one window each and a step's
    // rows beyond it.
    int64_t seq_blocks = KvCacheShape::BlocksFor(max_seq_len), step_blocks = 0;
    if (kv.free_behind_window && unit.window > 0 &&
        WindowBlocks(unit.window, KvCacheShape::kBlockSize) < seq_blocks) {
      seq_blocks = WindowBlocks(unit.window, KvCacheShape::kBlockSize);
      step_blocks = KvCacheShape::BlocksFor(max_rows);
    }
    const int64_t most = (int64_t{max_seqs} * seq_blocks + step_blocks) * unit.bytes_per_block() +
                         local_blocks * unit.bytes_per_local_block() +
                         (int64_t{max_seqs} * states_per_seq + extra_states) * unit.bytes_per_state_slot();
    const kernels::DeviceInfo device = model.backend().Device();
    if (kv.device_memory_fraction <= 0 || kv.device_memory_fraction > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the device memory fraction must be in (0, 1], got ", kv.device_memory_fraction));
    }
    bytes = device.free_bytes > 0
                ? static_cast<int64_t>(kv.device_memory_fraction * static_cast<double>(device.free_bytes))
                : kDefaultCpuKvCacheBytes;
    bytes = std::min(bytes, most);
  }
  // Recurrent state (hybrid models): a slot for each sequence that may run,
  // from at most half the budget (fewer slots let fewer sequences run at
  // once, never fewer positions each); the blocks take the rest.
  int64_t state_slots = 0;
  if (unit.state_layers > 0) {
    state_slots = std::min<int64_t>(int64_t{max_seqs} * states_per_seq + extra_states,
                                    bytes / 2 / unit.bytes_per_state_slot());
    if (state_slots < 1) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "a KV cache of %d bytes holds no sequence's recurrent state: one takes %d bytes (its half of the "
          "cache's memory must hold one)",
          bytes, unit.bytes_per_state_slot()));
    }
    bytes -= state_slots * unit.bytes_per_state_slot();
  }
  if (local) {
    // No more local blocks than the cache would hold with every layer in
    // the same blocks, so the global layers get at least as many as then:
    // never fewer positions or sequences than keeping them together.
    const int64_t together = bytes / (unit.bytes_per_block() + unit.bytes_per_local_block());
    local_blocks = std::max<int64_t>(1, std::min(local_blocks, together));
    bytes -= local_blocks * unit.bytes_per_local_block();
  }
  int64_t blocks = std::min<int64_t>(bytes / unit.bytes_per_block(), std::numeric_limits<int32_t>::max());
  if (blocks < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a KV cache of %d bytes holds no block: one block (%d positions) takes %d bytes",
        bytes, KvCacheShape::kBlockSize, unit.bytes_per_block()));
  }
  if (channel != nullptr && channel->world().tp_size > 1) {
    // Rank 0 plans block ids for every rank: all take its counts.
    int64_t leader[3] = {blocks, local_blocks, state_slots};
    FLOVER_RETURN_IF_ERROR(channel->Broadcast(leader, sizeof(leader), 0));
    if (leader[0] > blocks || leader[1] > local_blocks || leader[2] > state_slots) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "rank %d has room for %d KV blocks (%d local, %d state slots) but rank 0 plans with %d (%d, %d); set "
          "the KV cache's memory explicitly",
          channel->world().rank, blocks, local_blocks, state_slots, leader[0], leader[1], leader[2]));
    }
    blocks = leader[0];
    local_blocks = leader[1];
    state_slots = leader[2];
  }
  KvCacheShape shape = model.CacheShape(static_cast<int>(blocks), max_seq_len);
  shape.local_blocks = static_cast<int>(local_blocks);
  shape.state_slots = static_cast<int>(state_slots);
  auto cache = KvCache::Create(model.backend(), shape);
  if (!cache.ok()) return cache.status();
  return std::unique_ptr<StepExecutor>(new StepExecutor(model, std::move(*cache)));
}

absl::StatusOr<StepResult> StepExecutor::Run(const StepInput& step, StepOutput want) {
  StepResult out;
  if (step.batch.seqs.empty()) return out;
  if (want == StepOutput::kBestTokens) {
    auto best = model_.ForwardGreedy(step.batch, *cache_);
    if (!best.ok()) return best.status();
    out.best = *best;
  } else {
    auto logits = model_.Forward(step.batch, *cache_, LogitsFor::kLastRowsOfEachSequence);
    if (!logits.ok()) return logits.status();
    out.logits = *logits;
  }
  return out;
}

}  // namespace flover
