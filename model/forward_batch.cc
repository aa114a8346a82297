#include "model/forward_batch.h"

#include <algorithm>

namespace flover {

void ForwardBatch::AddSequence(absl::Span<const int32_t> blocks, int32_t pos,
                               absl::Span<const int32_t> new_tokens, int32_t logit_rows_wanted) {
  AddSequence(blocks, {}, pos, new_tokens, logit_rows_wanted);
}

void ForwardBatch::AddSequence(absl::Span<const int32_t> blocks, absl::Span<const int32_t> local_blocks,
                               int32_t pos, absl::Span<const int32_t> new_tokens, int32_t logit_rows_wanted) {
  const int64_t len = static_cast<int64_t>(new_tokens.size());
  const size_t used = std::min<size_t>(blocks.size(), kernels::KvLayer::BlocksFor(pos + len));
  seqs.push_back({static_cast<int32_t>(block_ids.size()), pos, static_cast<int32_t>(len),
                  static_cast<int32_t>(tokens.size())});
  block_ids.insert(block_ids.end(), blocks.begin(), blocks.begin() + used);
  local_block_ids.insert(local_block_ids.end(), local_blocks.begin(),
                         local_blocks.begin() + std::min(used, local_blocks.size()));
  logit_rows.push_back(logit_rows_wanted);
  for (int64_t i = 0; i < len; ++i) {
    tokens.push_back(new_tokens[i]);
    positions.push_back(pos + static_cast<int32_t>(i));
    if (!rope_positions.empty()) rope_positions.insert(rope_positions.end(), 3, pos + static_cast<int32_t>(i));
    if (!attend_to.empty()) attend_to.push_back(pos + static_cast<int32_t>(i));
  }
}

void ForwardBatch::Clear() {
  tokens.clear();
  positions.clear();
  seqs.clear();
  block_ids.clear();
  local_block_ids.clear();
  logit_rows.clear();
  states.clear();
  state_copies.clear();
  hidden.clear();
  given.clear();
  embeds.clear();
  given_layers.clear();
  rope_positions.clear();
  attend_to.clear();
}

void ForwardBatch::GiveRows(int32_t first_row, absl::Span<const float> values, int width) {
  given.push_back({first_row, static_cast<int32_t>(values.size() / width)});
  embeds.insert(embeds.end(), values.begin(), values.end());
}

void ForwardBatch::AddToGivenRows(int layer, absl::Span<const float> values) {
  if (given_layers.size() <= static_cast<size_t>(layer)) given_layers.resize(layer + 1);
  given_layers[layer].insert(given_layers[layer].end(), values.begin(), values.end());
}

void ForwardBatch::SetRopePositions(int row, int32_t t, int32_t h, int32_t w) {
  if (rope_positions.empty()) {
    rope_positions.reserve(3 * positions.size());
    for (int32_t p : positions) rope_positions.insert(rope_positions.end(), 3, p);
  }
  rope_positions[3 * row] = t;
  rope_positions[3 * row + 1] = h;
  rope_positions[3 * row + 2] = w;
}

void ForwardBatch::AttendTo(int first_row, int count, int32_t last) {
  if (attend_to.empty()) attend_to = positions;
  for (int r = first_row; r < first_row + count; ++r) attend_to[r] = std::max(attend_to[r], last);
}

int ForwardBatch::num_logit_rows() const {
  if (logit_rows.empty()) return static_cast<int>(seqs.size());
  int n = 0;
  for (int32_t r : logit_rows) n += r;
  return n;
}

}  // namespace flover
