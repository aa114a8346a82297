// The rows of one forward call over a ragged token batch: any number of
// sequences, each contributing one or more tokens at its own positions (a
// prompt, a chunk of one, a single decode token, or a decode token with the
// drafts to verify after it), its KV blocks, and how many of its last rows
// need logits. Prefill and decode are the same call.
#ifndef FLOVER_MODEL_FORWARD_BATCH_H_
#define FLOVER_MODEL_FORWARD_BATCH_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "kernels/kv_layer.h"

namespace flover {

struct ForwardBatch {
  std::vector<int32_t> tokens;     // [T]
  std::vector<int32_t> positions;  // [T]
  std::vector<kernels::SeqRows> seqs;
  std::vector<int32_t> block_ids;  // the block table: each sequence's blocks in turn
  // With a cache of local blocks (KvCacheShape::local_blocks): the local
  // layers' block table, entry for entry beside block_ids (the same
  // positions; kNoBlock behind a sequence's window). Else empty.
  std::vector<int32_t> local_block_ids;
  // Per sequence, how many of its last rows need logits (1..len): 1 for a
  // decode token or a prompt's last chunk, more for draft tokens being
  // verified (each row's logits then say what follows it). Empty: 1 each.
  std::vector<int32_t> logit_rows;
  // With a cache of recurrent state (KvCacheShape::state_slots > 0): each
  // sequence's state slots, entry for entry beside `seqs` (StateOf gives
  // the usual one). Else empty.
  std::vector<kernels::SeqState> states;
  // Copied before the forward: every recurrent layer's state in slot
  // `first` into slot `second` (a prefix checkpoint of a sequence's state at
  // a block boundary, from the slot it was computed into).
  std::vector<std::pair<int32_t, int32_t>> state_copies;
  // A multi-token-prediction model's second input (DecoderSpec::mtp_input):
  // a row of the main model's final hidden state beside each token, [T,
  // hidden] in host memory, row for row with `tokens`. Else empty.
  std::vector<float> hidden;
  // Rows whose input embedding is given instead of looked up in the token
  // table (an image's features in place of its placeholder tokens): spans
  // of rows, in order and apart, their values [sum of counts, hidden] in
  // host memory in `embeds`, span after span. The token at such a row
  // stays (the cache's blocks and prefix keys name it); its table row is
  // not read. The given rows replace the whole input embedding (no
  // embedding scale applies). Else empty.
  struct GivenRows {
    int32_t row = 0;
    int32_t count = 0;
  };
  std::vector<GivenRows> given;
  std::vector<float> embeds;
  // Additions to the given rows' residual stream after the first layers
  // (Qwen3-VL's deepstack: features of the vision tower's middle layers):
  // given_layers[l] is added after layer l, [sum of counts, hidden] span
  // after span as `embeds`. Else empty.
  std::vector<std::vector<float>> given_layers;
  // A multimodal rotary's positions (DecoderSpec::mrope): each row's
  // temporal, height and width position, [T, 3]. Only the rotary reads them
  // (the cache's places stay `positions`). Empty: every row's three are its
  // `positions` (text), as for a model without one.
  std::vector<int32_t> rope_positions;
  // Rows that attend past their own position (SeqTable::horizon): each
  // row's last attended position, [T]; its own position, or up to the last
  // of its sequence's rows in this batch (Gemma 3's image rows see the
  // whole image, which must then be in one chunk). Empty: causal.
  std::vector<int32_t> attend_to;

  // Appends `new_tokens` of a sequence, the first at position `pos`, whose
  // KV blocks are `blocks` in order of position (the first
  // ceil((pos + len) / kBlockSize) of them are kept: those its positions
  // reach), asking for the logits of its last `logit_rows` rows.
  void AddSequence(absl::Span<const int32_t> blocks, int32_t pos,
                   absl::Span<const int32_t> new_tokens, int32_t logit_rows = 1);
  // The same, with the local layers' blocks (as many).
  void AddSequence(absl::Span<const int32_t> blocks, absl::Span<const int32_t> local_blocks, int32_t pos,
                   absl::Span<const int32_t> new_tokens, int32_t logit_rows = 1);
  // Gives rows first_row .. first_row + values.size() / width - 1 their
  // input embeddings, `width` values a row (see `given`).
  void GiveRows(int32_t first_row, absl::Span<const float> values, int width);
  // Appends the last given span's addition after layer `layer` (see
  // given_layers); every layer below it gets one first.
  void AddToGivenRows(int layer, absl::Span<const float> values);
  // Row `row`'s multimodal rotary positions (see rope_positions); the
  // others keep theirs.
  void SetRopePositions(int row, int32_t t, int32_t h, int32_t w);
  // Rows [first_row, first_row + count) attend up to position `last` (see
  // attend_to); the others keep their own.
  void AttendTo(int first_row, int count, int32_t last);
  void Clear();
  int num_rows() const { return static_cast<int>(tokens.size()); }
  int num_logit_rows() const;            // the sum of logit_rows
  int32_t logit_rows_of(size_t i) const { return logit_rows.empty() ? 1 : logit_rows[i]; }
};

// A sequence's state in `slot` carried on: read from it (from zeros at
// position 0, where nothing is in it yet) and written back to it.
inline kernels::SeqState StateOf(int32_t slot, int32_t pos) {
  return {pos == 0 ? kernels::SeqState::kNoSlot : slot, slot};
}

enum class LogitsFor {
  kLastRowsOfEachSequence,  // [num_logit_rows, V]: each sequence's last logit_rows rows, in order
  kEveryRow,                // [T, V]: for tests and scoring
};

}  // namespace flover

#endif  // FLOVER_MODEL_FORWARD_BATCH_H_
