#include "model/causal_lm.h"

namespace flover {

absl::Status CausalLm::Forward(const ForwardBatch& batch, KvCache& cache, LogitsFor which,
                               std::vector<float>* logits) {
  auto view = Forward(batch, cache, which);
  if (!view.ok()) return view.status();
  logits->assign(view->begin(), view->end());
  return absl::OkStatus();
}

}  // namespace flover
