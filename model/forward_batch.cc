#include "model/forward_batch.h"

namespace flover {

void ForwardBatch::AddSequence(int32_t slot, int32_t pos, absl::Span<const int32_t> new_tokens) {
  seqs.push_back({slot, pos, static_cast<int32_t>(new_tokens.size()),
                  static_cast<int32_t>(tokens.size())});
  for (size_t i = 0; i < new_tokens.size(); ++i) {
    tokens.push_back(new_tokens[i]);
    positions.push_back(pos + static_cast<int32_t>(i));
  }
}

void ForwardBatch::Clear() {
  tokens.clear();
  positions.clear();
  seqs.clear();
}

}  // namespace flover
