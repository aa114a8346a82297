#include "engine/tp_worker.h"

#include <cstdint>
#include <vector>

namespace flover {
namespace {

enum Command : int32_t { kRun = 1, kStop = 2 };

// Fixed-size header, then `words` int32 of payload: tokens x n_rows,
// positions x n_rows, seqs (blocks, pos, len, row) x n_seqs, the block
// table x n_block_ids, the local block table x n_local_block_ids, logit
// rows x n_seqs, state slots (read, write) x n_states (0 or n_seqs), state
// copies (from, to) x n_copies, given rows (row, count) x n_given,
// multimodal rotary positions x n_rope (0 or 3 n_rows), horizons x
// n_attend (0 or n_rows); then, where
// n_embeds > 0, a second message of n_embeds floats (the given rows'
// values) and n_given_layers more of as many (their additions after the
// first layers).
struct Header {
  int32_t command = kStop;
  int32_t n_rows = 0;
  int32_t n_seqs = 0;
  int32_t n_block_ids = 0;
  int32_t n_local_block_ids = 0;
  int32_t n_states = 0;
  int32_t n_copies = 0;
  int32_t n_given = 0;
  int32_t n_embeds = 0;
  int32_t n_rope = 0;
  int32_t n_given_layers = 0;
  int32_t n_attend = 0;
  int64_t words() const {
    return 2 * int64_t{n_rows} + 5 * int64_t{n_seqs} + int64_t{n_block_ids} + int64_t{n_local_block_ids} +
           2 * int64_t{n_states} + 2 * int64_t{n_copies} + 2 * int64_t{n_given} + int64_t{n_rope} +
           int64_t{n_attend};
  }
};

// Most int32 words a step may carry: far above any real step, low enough
// that a corrupt header cannot make a worker allocate without bound.
constexpr int64_t kMaxStepWords = int64_t{1} << 28;

}  // namespace

absl::Status BroadcastStep(ControlChannel& channel, const StepInput& step) {
  const ForwardBatch& batch = step.batch;
  Header h{kRun, batch.num_rows(), static_cast<int32_t>(batch.seqs.size()),
           static_cast<int32_t>(batch.block_ids.size()), static_cast<int32_t>(batch.local_block_ids.size()),
           static_cast<int32_t>(batch.states.size()), static_cast<int32_t>(batch.state_copies.size()),
           static_cast<int32_t>(batch.given.size()), static_cast<int32_t>(batch.embeds.size()),
           static_cast<int32_t>(batch.rope_positions.size()), static_cast<int32_t>(batch.given_layers.size()),
           static_cast<int32_t>(batch.attend_to.size())};
  if (batch.embeds.size() > static_cast<size_t>(kMaxStepWords)) {
    return absl::InvalidArgumentError("a step's given input rows are too many to send to the other ranks");
  }
  std::vector<int32_t> payload;
  payload.reserve(h.words());
  payload.insert(payload.end(), batch.tokens.begin(), batch.tokens.end());
  payload.insert(payload.end(), batch.positions.begin(), batch.positions.end());
  for (const kernels::SeqRows& s : batch.seqs) {
    payload.insert(payload.end(), {s.blocks, s.pos, s.len, s.row});
  }
  payload.insert(payload.end(), batch.block_ids.begin(), batch.block_ids.end());
  payload.insert(payload.end(), batch.local_block_ids.begin(), batch.local_block_ids.end());
  for (size_t i = 0; i < batch.seqs.size(); ++i) payload.push_back(batch.logit_rows_of(i));
  for (const kernels::SeqState& st : batch.states) payload.insert(payload.end(), {st.read, st.write});
  for (const auto& [from, to] : batch.state_copies) payload.insert(payload.end(), {from, to});
  for (const ForwardBatch::GivenRows& g : batch.given) payload.insert(payload.end(), {g.row, g.count});
  payload.insert(payload.end(), batch.rope_positions.begin(), batch.rope_positions.end());
  payload.insert(payload.end(), batch.attend_to.begin(), batch.attend_to.end());
  if (absl::Status st = channel.Broadcast(&h, sizeof(h), 0); !st.ok()) return st;
  if (absl::Status st = channel.Broadcast(payload.data(), payload.size() * sizeof(int32_t), 0); !st.ok()) return st;
  if (batch.embeds.empty()) return absl::OkStatus();
  if (absl::Status st =
          channel.Broadcast(const_cast<float*>(batch.embeds.data()), batch.embeds.size() * sizeof(float), 0);
      !st.ok()) {
    return st;
  }
  for (const std::vector<float>& layer : batch.given_layers) {
    if (layer.size() != batch.embeds.size()) {
      return absl::InternalError("a given rows' addition differs in size from the given rows");
    }
    if (absl::Status st = channel.Broadcast(const_cast<float*>(layer.data()), layer.size() * sizeof(float), 0);
        !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

absl::Status BroadcastStop(ControlChannel& channel) {
  Header h{kStop};
  return channel.Broadcast(&h, sizeof(h), 0);
}

absl::Status RunTensorParallelWorker(StepExecutor& executor, ControlChannel& channel) {
  std::vector<int32_t> payload;
  StepInput step;
  while (true) {
    Header h;
    if (absl::Status st = channel.Broadcast(&h, sizeof(h), 0); !st.ok()) return st;
    if (h.command == kStop) return absl::OkStatus();
    if (h.command != kRun || h.n_rows < 0 || h.n_seqs < 0 || h.n_block_ids < 0 || h.n_local_block_ids < 0 ||
        h.n_states < 0 || h.n_copies < 0 || h.n_given < 0 || h.n_embeds < 0 || h.words() > kMaxStepWords ||
        h.n_embeds > kMaxStepWords || (h.n_rope != 0 && h.n_rope != 3 * h.n_rows) ||
        (h.n_attend != 0 && h.n_attend != h.n_rows) || h.n_given_layers < 0 ||
        h.n_given_layers > 64 || (h.n_given_layers > 0 && h.n_embeds == 0)) {
      return absl::DataLossError("malformed step from rank 0");
    }
    payload.resize(h.words());
    if (absl::Status st = channel.Broadcast(payload.data(), payload.size() * sizeof(int32_t), 0);
        !st.ok()) {
      return st;
    }
    const int32_t* p = payload.data();
    ForwardBatch& batch = step.batch;
    batch.Clear();
    batch.tokens.assign(p, p + h.n_rows);
    p += h.n_rows;
    batch.positions.assign(p, p + h.n_rows);
    p += h.n_rows;
    for (int i = 0; i < h.n_seqs; ++i, p += 4) batch.seqs.push_back({p[0], p[1], p[2], p[3]});
    batch.block_ids.assign(p, p + h.n_block_ids);
    p += h.n_block_ids;
    batch.local_block_ids.assign(p, p + h.n_local_block_ids);
    p += h.n_local_block_ids;
    batch.logit_rows.assign(p, p + h.n_seqs);
    p += h.n_seqs;
    for (int i = 0; i < h.n_states; ++i, p += 2) batch.states.push_back({p[0], p[1]});
    for (int i = 0; i < h.n_copies; ++i, p += 2) batch.state_copies.push_back({p[0], p[1]});
    for (int i = 0; i < h.n_given; ++i, p += 2) batch.given.push_back({p[0], p[1]});
    batch.rope_positions.assign(p, p + h.n_rope);
    p += h.n_rope;
    batch.attend_to.assign(p, p + h.n_attend);
    p += h.n_attend;
    if (h.n_embeds > 0) {
      batch.embeds.resize(h.n_embeds);
      batch.given_layers.assign(h.n_given_layers, std::vector<float>(h.n_embeds));
      if (absl::Status st = channel.Broadcast(batch.embeds.data(), batch.embeds.size() * sizeof(float), 0);
          !st.ok()) {
        return st;
      }
      for (std::vector<float>& layer : batch.given_layers) {
        if (absl::Status st = channel.Broadcast(layer.data(), layer.size() * sizeof(float), 0); !st.ok()) return st;
      }
    }
    // The executor validates the step. An invalid one (InvalidArgument) is
    // refused alike on every rank, at the same point, so the ranks stay in
    // step and rank 0 fails only that step's requests; anything else ends
    // the job.
    auto ran = executor.Run(step);
    if (!ran.ok() && ran.status().code() != absl::StatusCode::kInvalidArgument) return ran.status();
  }
}

}  // namespace flover
