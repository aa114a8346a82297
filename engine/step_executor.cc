#include "engine/step_executor.h"

#include "util/status_macros.h"

namespace flover {

absl::StatusOr<std::unique_ptr<StepExecutor>> StepExecutor::Create(CausalLm& model, int slots,
                                                                   int max_seq_len,
                                                                   int max_rows) {
  auto cache = KvCache::Create(model.backend(), model.CacheShape(slots, max_seq_len));
  if (!cache.ok()) return cache.status();
  // Compile kernels and size buffers for every step size now, not mid-serving.
  FLOVER_RETURN_IF_ERROR(model.PrepareForBatches(max_rows, slots));
  return std::unique_ptr<StepExecutor>(new StepExecutor(model, std::move(*cache)));
}

absl::StatusOr<absl::Span<float>> StepExecutor::Run(const StepInput& step) {
  for (const SlotMove& m : step.moves) {
    FLOVER_RETURN_IF_ERROR(model_.MoveSlot(*cache_, m.from, m.to, m.len));
  }
  if (step.batch.seqs.empty()) return absl::Span<float>();
  return model_.Forward(step.batch, *cache_, LogitsFor::kLastRowOfEachSequence);
}

}  // namespace flover
