#include "engine/tp_worker.h"

#include <cstdint>

namespace flover {
namespace {

enum Command : int32_t { kRun = 1, kStop = 2 };

// Fixed-size header, then `words` int32 of payload:
// moves (from, to, len) x n_moves, tokens x n_rows, positions x n_rows,
// seqs (slot, pos, len, row) x n_seqs.
struct Header {
  int32_t command = kStop;
  int32_t n_moves = 0;
  int32_t n_rows = 0;
  int32_t n_seqs = 0;
  int32_t words() const { return 3 * n_moves + 2 * n_rows + 4 * n_seqs; }
};

}  // namespace

absl::Status BroadcastStep(Communicator& comm, const std::vector<SlotMove>& moves,
                           const ForwardBatch& batch) {
  Header h{kRun, static_cast<int32_t>(moves.size()), batch.num_rows(),
           static_cast<int32_t>(batch.seqs.size())};
  std::vector<int32_t> payload;
  payload.reserve(h.words());
  for (const SlotMove& m : moves) payload.insert(payload.end(), {m.from, m.to, m.len});
  payload.insert(payload.end(), batch.tokens.begin(), batch.tokens.end());
  payload.insert(payload.end(), batch.positions.begin(), batch.positions.end());
  for (const kernels::SeqRows& s : batch.seqs) {
    payload.insert(payload.end(), {s.slot, s.pos, s.len, s.row});
  }
  if (absl::Status st = comm.Broadcast(&h, sizeof(h), 0); !st.ok()) return st;
  return comm.Broadcast(payload.data(), payload.size() * sizeof(int32_t), 0);
}

absl::Status BroadcastStop(Communicator& comm) {
  Header h{kStop};
  return comm.Broadcast(&h, sizeof(h), 0);
}

absl::Status RunTensorParallelWorker(GptModel& model, KvCache& cache, Communicator& comm) {
  std::vector<int32_t> payload;
  ForwardBatch batch;
  std::vector<float> logits;
  while (true) {
    Header h;
    if (absl::Status st = comm.Broadcast(&h, sizeof(h), 0); !st.ok()) return st;
    if (h.command == kStop) return absl::OkStatus();
    if (h.command != kRun || h.n_moves < 0 || h.n_rows < 0 || h.n_seqs < 0) {
      return absl::DataLossError("malformed step from rank 0");
    }
    payload.resize(h.words());
    if (absl::Status st = comm.Broadcast(payload.data(), payload.size() * sizeof(int32_t), 0);
        !st.ok()) {
      return st;
    }
    const int32_t* p = payload.data();
    for (int i = 0; i < h.n_moves; ++i, p += 3) {
      if (p[0] < 0 || p[1] < 0 || p[0] >= cache.shape().slots || p[1] >= cache.shape().slots ||
          p[2] < 0 || p[2] > cache.shape().max_seq) {
        return absl::DataLossError("malformed slot move from rank 0");
      }
      model.MoveSlot(cache, p[0], p[1], p[2]);
    }
    batch.Clear();
    batch.tokens.assign(p, p + h.n_rows);
    p += h.n_rows;
    batch.positions.assign(p, p + h.n_rows);
    p += h.n_rows;
    for (int i = 0; i < h.n_seqs; ++i, p += 4) batch.seqs.push_back({p[0], p[1], p[2], p[3]});
    if (batch.seqs.empty()) continue;  // a step of moves only
    // Forward validates the batch; it fails the same way on every rank.
    if (absl::Status st = model.Forward(batch, cache, LogitsFor::kLastRowOfEachSequence, &logits);
        !st.ok()) {
      return st;
    }
  }
}

}  // namespace flover
