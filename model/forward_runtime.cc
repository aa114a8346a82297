#include "model/forward_runtime.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "util/status_macros.h"

namespace flover {

using kernels::Tensor;

ForwardRuntime::ForwardRuntime(kernels::Backend& backend, Collectives* collectives, int vocab_size,
                               int max_positions, int hidden, Layout layout,
                               VocabRange vocab_range)
    : backend_(backend), collectives_(collectives), vocab_size_(vocab_size),
      max_positions_(max_positions), hidden_(hidden), layout_(std::move(layout)),
      vocab_range_(std::move(vocab_range)) {
  if (collectives_ != nullptr) tp_size_ = collectives_->world().tp_size;
}

absl::Status ForwardRuntime::CheckBatch(const ForwardBatch& b, const KvCache& cache,
                                        const KvCacheShape& expected) {
  const KvCacheShape& cs = cache.shape();
  if (&cache.backend() != &backend_) {
    return absl::InvalidArgumentError("the KV cache belongs to another backend than the model");
  }
  if (cs.layers != expected.layers || cs.heads != expected.heads ||
      cs.head_dim != expected.head_dim || cs.layer_heads != expected.layer_heads ||
      cs.layer_head_dim != expected.layer_head_dim || cs.state_layers != expected.state_layers ||
      cs.conv_state != expected.conv_state || cs.scan_state != expected.scan_state) {
    return absl::InvalidArgumentError("KV cache shape does not match the model");
  }
  if (cs.format != backend_.kv_format()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV cache holds ", kernels::KvFormatName(cs.format), " but the backend keeps K/V in ",
        kernels::KvFormatName(backend_.kv_format())));
  }
  if (b.seqs.empty()) return absl::InvalidArgumentError("empty batch");
  if (b.positions.size() != b.tokens.size()) {
    return absl::InvalidArgumentError("batch positions and tokens differ in length");
  }
  if (!b.rope_positions.empty() && b.rope_positions.size() != 3 * b.tokens.size()) {
    return absl::InvalidArgumentError("batch rotary positions are not three a token");
  }
  if (!b.attend_to.empty() && b.attend_to.size() != b.tokens.size()) {
    return absl::InvalidArgumentError("batch horizons are not one a token");
  }
  const int limit = std::min(cs.max_seq, max_positions_);
  const bool local = cs.local_blocks > 0;
  if (b.local_block_ids.size() != (local ? b.block_ids.size() : 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the local block table has %d ids for a block table of %d (%s)", b.local_block_ids.size(),
        b.block_ids.size(), local ? "the cache has local blocks: as many" : "the cache has no local blocks"));
  }
  for (auto [table, n] : {std::pair{&b.block_ids, cs.num_blocks}, {&b.local_block_ids, cs.local_blocks}}) {
    for (int32_t id : *table) {
      if ((id < 0 && id != kernels::KvLayer::kNoBlock) || id >= n) {
        return absl::InvalidArgumentError(absl::StrFormat("KV block %d is outside the cache (%d %sblocks)", id, n,
                                                          table == &b.block_ids ? "" : "local "));
      }
    }
  }
  // A block a step writes belongs to one sequence (others may only read
  // blocks they share, below the positions they compute).
  written_.assign(cs.num_blocks, false);
  written_local_.assign(cs.local_blocks, false);
  // Blocks a sequence's rows read (from its first row's window on) are
  // blocks of the cache; only those wholly behind a window every layer of
  // the table has may be kNoBlock (given back).
  auto check_blocks = [&](const std::vector<int32_t>& table, int window, std::vector<bool>& written,
                          const kernels::SeqRows& s, int64_t blocks) -> absl::Status {
    const char* kind = &table == &b.block_ids ? "block" : "local block";
    const int64_t first_read = window > 0 ? std::max(0, s.pos + 1 - window) : 0;
    for (int64_t k = first_read / KvCacheShape::kBlockSize; k < s.pos / KvCacheShape::kBlockSize; ++k) {
      if (table[s.blocks + k] == kernels::KvLayer::kNoBlock) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "a sequence at positions [%d, %d) reads %s %d (positions from %d), which it gave back", s.pos,
            s.pos + s.len, kind, k, k * KvCacheShape::kBlockSize));
      }
    }
    for (int64_t k = s.pos / KvCacheShape::kBlockSize; k < blocks; ++k) {
      const int32_t id = table[s.blocks + k];
      if (id == kernels::KvLayer::kNoBlock) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "a sequence at positions [%d, %d) writes %s %d, which it gave back", s.pos, s.pos + s.len, kind, k));
      }
      if (written[id]) {
        return absl::InvalidArgumentError(
            absl::StrFormat("KV %s %d is written by two sequences of one batch", kind, id));
      }
      written[id] = true;
    }
    return absl::OkStatus();
  };
  int32_t next_row = 0;
  int64_t next_block = 0;
  for (const kernels::SeqRows& s : b.seqs) {
    const int64_t blocks = KvCacheShape::BlocksFor(int64_t{s.pos} + s.len);
    if (s.blocks != next_block || s.blocks + blocks > static_cast<int64_t>(b.block_ids.size())) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "a sequence at positions [%d, %d) needs %d blocks from %d of a block table of %d",
          s.pos, s.pos + s.len, blocks, s.blocks, b.block_ids.size()));
    }
    next_block += blocks;
    FLOVER_RETURN_IF_ERROR(check_blocks(b.block_ids, expected.window, written_, s, blocks));
    if (local) FLOVER_RETURN_IF_ERROR(check_blocks(b.local_block_ids, cs.local_window, written_local_, s, blocks));
    if (s.len < 1 || s.row != next_row) {
      return absl::InvalidArgumentError("sequence rows must be non-empty and consecutive");
    }
    next_row += s.len;
    if (s.pos < 0 || int64_t{s.pos} + s.len > limit) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "positions [%d, %d) exceed the limit of %d", s.pos, s.pos + s.len, limit));
    }
    for (int i = 0; i < s.len; ++i) {
      if (b.positions[s.row + i] != s.pos + i) {
        return absl::InvalidArgumentError("batch positions do not follow their sequences");
      }
    }
  }
  if (next_row != b.num_rows()) {
    return absl::InvalidArgumentError("sequences do not cover the batch rows");
  }
  if (!b.logit_rows.empty() && b.logit_rows.size() != b.seqs.size()) {
    return absl::InvalidArgumentError("logit_rows must name one count per sequence");
  }
  for (size_t i = 0; i < b.logit_rows.size(); ++i) {
    if (b.logit_rows[i] < 1 || b.logit_rows[i] > b.seqs[i].len) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "sequence %d asks for the logits of %d rows of its %d", i, b.logit_rows[i], b.seqs[i].len));
    }
  }
  FLOVER_RETURN_IF_ERROR(CheckStates(b, cs));
  if (next_block != static_cast<int64_t>(b.block_ids.size())) {
    return absl::InvalidArgumentError("the block table has ids no sequence uses");
  }
  for (int32_t t : b.tokens) {
    if (t < 0 || t >= vocab_size_) {
      return absl::InvalidArgumentError(
          absl::StrFormat("token id %d is outside the vocabulary (%d)", t, vocab_size_));
    }
  }
  return absl::OkStatus();
}

absl::Status ForwardRuntime::CheckStates(const ForwardBatch& b, const KvCacheShape& cs) {
  if (cs.state_slots == 0) {
    if (b.states.empty() && b.state_copies.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError("the batch names state slots but the cache keeps no recurrent state");
  }
  if (b.states.size() != b.seqs.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the batch names state slots for %d of its %d sequences (the model keeps recurrent state: every "
        "sequence needs them)", b.states.size(), b.seqs.size()));
  }
  written_slots_.assign(cs.state_slots, false);
  read_slots_.assign(cs.state_slots, false);
  for (size_t i = 0; i < b.states.size(); ++i) {
    const kernels::SeqState& st = b.states[i];
    if (st.read < kernels::SeqState::kNoSlot || st.read >= cs.state_slots || st.write < 0 ||
        st.write >= cs.state_slots) {
      return absl::InvalidArgumentError(absl::StrFormat("state slots (read %d, write %d) are outside the cache (%d)",
                                                        st.read, st.write, cs.state_slots));
    }
    if (st.read == kernels::SeqState::kNoSlot && b.seqs[i].pos != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "a sequence starting at position %d reads no recurrent state (only position 0 starts from zeros)",
          b.seqs[i].pos));
    }
    if (written_slots_[st.write]) {
      return absl::InvalidArgumentError(absl::StrFormat("state slot %d is written by two sequences of one batch",
                                                        st.write));
    }
    written_slots_[st.write] = true;
    if (st.read >= 0) read_slots_[st.read] = true;
  }
  for (const auto& [from, to] : b.state_copies) {
    if (from < 0 || from >= cs.state_slots || to < 0 || to >= cs.state_slots || from == to) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "a state copy from slot %d to %d is outside the cache's %d slots (or one slot)", from, to, cs.state_slots));
    }
    if (written_slots_[to]) {
      return absl::InvalidArgumentError(absl::StrFormat("state slot %d is copied into and written by the batch", to));
    }
  }
  for (size_t i = 0; i < b.states.size(); ++i) {
    const kernels::SeqState& st = b.states[i];
    if (read_slots_[st.write] && st.read != st.write) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "state slot %d is written by one sequence of the batch and read by another", st.write));
    }
  }
  return absl::OkStatus();
}

absl::Status ForwardRuntime::Relayout() {
  const int rows = rows_, logit_rows = logit_rows_;
  rows_ = logit_rows_ = 0;
  return rows > 0 ? Reserve(rows, logit_rows) : absl::OkStatus();
}

absl::Status ForwardRuntime::Reserve(int rows, int logit_rows) {
  if (rows <= rows_ && logit_rows <= logit_rows_) return absl::OkStatus();
  // Grow to at least what was there, so alternating shapes never reallocate.
  rows = std::max(rows, rows_);
  logit_rows = std::max(logit_rows, logit_rows_);
  // Free the old buffers first: a device may not hold both. Recordings
  // that name them go first.
  backend_.ForgetRecorded();
  ++generation_;
  buffers_.clear();
  step_.Reset();
  partial_.Reset();
  rows_ = logit_rows_ = 0;
  auto alloc = [&](kernels::DType dtype, int64_t r, int64_t c) -> absl::StatusOr<kernels::Buffer> {
    return backend_.Allocate(dtype, r, c);
  };
  for (const BufferSpec& spec : layout_(rows, logit_rows)) {
    auto b = alloc(spec.dtype, spec.rows, spec.cols);
    if (!b.ok()) {
      buffers_.clear();
      return b.status();
    }
    buffers_.push_back(std::move(*b));
  }
  // Tokens, positions, the sequence table, the gather table, the state
  // slots and the multimodal rotary positions (15 words a row at most), then
  // the block table: every sequence (one logit row each at least) at the
  // model's longest context.
  auto step = alloc(kernels::DType::kI32, 1,
                    kStepWordsPerRow * int64_t{rows} +
                        2 * int64_t{logit_rows} * KvCacheShape::BlocksFor(max_positions_));
  if (!step.ok()) return step.status();
  step_ = std::move(*step);
  if (tp_size_ > 1) {
    auto partial = alloc(kernels::DType::kF32, rows, hidden_);
    if (!partial.ok()) return partial.status();
    partial_ = std::move(*partial);
  }
  // Where one rank's logits come back to: the backend's staging memory
  // (page-locked on CUDA), sized here with the buffers rather than on a
  // step; null where the backend has none (logits_host_ serves then).
  staging_.reset();
  best_.Reset();
  if (tp_size_ == 1) {
    auto best = alloc(kernels::DType::kI32, 1, logit_rows);
    if (!best.ok()) return best.status();
    best_ = std::move(*best);
    void* p = backend_.AllocateStaging(size_t(logit_rows) * vocab_size_ * sizeof(float));
    staging_ = std::unique_ptr<float[], StagingFree>(static_cast<float*>(p), StagingFree{&backend_});
  }
  rows_ = rows;
  logit_rows_ = logit_rows;
  return absl::OkStatus();
}

absl::StatusOr<ForwardRuntime::Step> ForwardRuntime::UploadStep(const ForwardBatch& b) {
  const int T = b.num_rows(), S = static_cast<int>(b.seqs.size());
  const int64_t B = static_cast<int64_t>(b.block_ids.size()), L = static_cast<int64_t>(b.local_block_ids.size());
  if (T > rows_ || kStepWordsPerRow * int64_t{T} + B + L > step_.tensor().cols) {
    return absl::InternalError("UploadStep before Reserve");
  }
  step_host_.clear();
  step_host_.insert(step_host_.end(), b.tokens.begin(), b.tokens.end());
  step_host_.insert(step_host_.end(), b.positions.begin(), b.positions.end());
  int max_context = 0;
  for (const kernels::SeqRows& s : b.seqs) {
    step_host_.insert(step_host_.end(), {s.blocks, s.pos, s.len, s.row});
    max_context = std::max(max_context, s.pos + s.len);
  }
  // The state slots and the gather table before the block table (whose
  // length follows the sequences' lengths), so a recorded step's tables
  // stay where its recording reads them: where they start depends only on
  // the rows, the sequences and the logit rows, which key a recording.
  const int64_t states_at = static_cast<int64_t>(step_host_.size());
  for (const kernels::SeqState& st : b.states) step_host_.insert(step_host_.end(), {st.read, st.write});
  // Where a sequence asks for more than its last row's logits, the rows
  // are gathered through a table of one-row entries (GatherLastRows of
  // entry {row r, len 1} is row r).
  gather_host_.clear();
  const bool gathers = b.num_logit_rows() != S;
  if (gathers) {
    for (int i = 0; i < S; ++i) {
      const kernels::SeqRows& s = b.seqs[i];
      for (int r = s.len - b.logit_rows_of(i); r < s.len; ++r) gather_host_.push_back({0, 0, 1, s.row + r});
    }
  }
  const int64_t gather_at = static_cast<int64_t>(step_host_.size());
  for (const kernels::SeqRows& g : gather_host_) step_host_.insert(step_host_.end(), {g.blocks, g.pos, g.len, g.row});
  const int64_t blocks_at = static_cast<int64_t>(step_host_.size());
  step_host_.insert(step_host_.end(), b.block_ids.begin(), b.block_ids.end());
  step_host_.insert(step_host_.end(), b.local_block_ids.begin(), b.local_block_ids.end());
  // Multimodal rotary positions last, as [3, T]: temporal, height, width.
  const int64_t rope_at = static_cast<int64_t>(step_host_.size());
  if (!b.rope_positions.empty()) {
    for (int k = 0; k < 3; ++k) {
      for (int t = 0; t < T; ++t) step_host_.push_back(b.rope_positions[3 * t + k]);
    }
  }
  // Horizons after them.
  const int64_t horizon_at = static_cast<int64_t>(step_host_.size());
  step_host_.insert(step_host_.end(), b.attend_to.begin(), b.attend_to.end());
  const Tensor all = step_.tensor().View(0, 1, static_cast<int64_t>(step_host_.size()));
  FLOVER_RETURN_IF_ERROR(backend_.Upload(step_host_.data(), all));
  kernels::SeqTable seqs{b.seqs.data(), S, all.View(2 * int64_t{T}, S, 4), T, max_context};
  seqs.block_ids = b.block_ids.data();
  seqs.num_block_ids = static_cast<int>(B);
  seqs.block_ids_device = all.View(blocks_at, 1, B);
  if (!b.attend_to.empty()) {
    seqs.horizon = b.attend_to.data();
    seqs.horizon_device = all.View(horizon_at, 1, T);
  }
  kernels::SeqTable gather = seqs;
  if (gathers) {
    const int R = static_cast<int>(gather_host_.size());
    gather = kernels::SeqTable{gather_host_.data(), R, all.View(gather_at, R, 4), T, max_context};
  }
  kernels::SeqTable local = seqs;
  if (L > 0) {
    local.block_ids = b.local_block_ids.data();
    local.block_ids_device = all.View(blocks_at + B, 1, L);
  }
  Step step{all.View(0, 1, T), all.View(T, 1, T), all.View(T, 1, T), seqs, gather, local};
  if (!b.rope_positions.empty()) step.rope_positions = all.View(rope_at, 3, T);
  if (!b.states.empty()) {
    step.states = b.states.data();
    step.states_device = all.View(states_at, S, 2);
  }
  return step;
}

absl::Status ForwardRuntime::RunOps(Step* step, const KvCache& cache, int variant,
                                    const std::function<absl::Status()>& ops) {
  const kernels::SeqTable& seqs = step->seqs;
  bool few_rows_each = true;
  for (int s = 0; s < seqs.num_seqs; ++s) few_rows_each = few_rows_each && seqs.host[s].len <= kMaxRecordedRowsPerSeq;
  if (!recordable_ || tp_size_ > 1 || !few_rows_each || step->rope_positions.rows == 3 ||
      seqs.horizon != nullptr ||
      seqs.num_rows > kMaxRecordedRows || cache.shape().local_blocks > 0) {
    // Collectives between ops, a prompt's rows, or a local block table
    // (uploaded where its length puts it): plainly.
    return ops();
  }
  step->seqs.max_context = std::max(step->seqs.max_context, cache.shape().max_seq);
  const kernels::KvLayer layer0 = cache.layer(0);
  const std::string key = absl::StrCat(
      "runtime ", reinterpret_cast<uintptr_t>(this), " generation ", generation_, " cache ",
      reinterpret_cast<uintptr_t>(layer0.k), " ", cache.shape().num_blocks, "x",
      cache.shape().max_seq, " rows ", seqs.num_rows, " seqs ", seqs.num_seqs, " logit rows ",
      step->gather.num_seqs, " variant ", variant);
  return backend_.RunRecorded(key, ops);
}

absl::Status ForwardRuntime::RowSplitResidual(const Tensor& rows, const kernels::Weight& w,
                                              const Tensor* bias, const Tensor& x) {
  if (tp_size_ == 1) return backend_.Linear(rows, w, bias, row_split_epilogue(), x);
  const Tensor partial = partial_.Rows(0, x.rows);
  FLOVER_RETURN_IF_ERROR(backend_.Linear(rows, w, bias, row_split_epilogue(), partial));
  FLOVER_RETURN_IF_ERROR(collectives_->AllReduceSum(partial));
  return backend_.Add(partial, x);
}

absl::Status ForwardRuntime::AllReduce(const Tensor& x) {
  return tp_size_ > 1 ? collectives_->AllReduceSum(x) : absl::OkStatus();
}

absl::StatusOr<absl::Span<float>> ForwardRuntime::Finish(const absl::Status& run,
                                                         const Tensor& logits, int R) {
  if (absl::Status sync = backend_.Synchronize(); !sync.ok()) return sync;
  if (!run.ok()) return run;
  const Tensor local = logits.Rows(0, R);
  if (tp_size_ == 1) {
    if (void* host = backend_.HostAddress(local); host != nullptr) {
      return absl::MakeSpan(static_cast<float*>(host), local.elements());
    }
    const size_t n = static_cast<size_t>(local.elements());  // R <= logit_rows_ (Reserve)
    float* host = staging_.get();
    if (host == nullptr) {
      logits_host_.resize(n);
      host = logits_host_.data();
    }
    FLOVER_RETURN_IF_ERROR(backend_.Download(local, host));
    return absl::MakeSpan(host, n);
  }
  // Each rank scores its vocabulary range; rank 0 stitches the columns.
  FLOVER_RETURN_IF_ERROR(collectives_->GatherToLeader(local, &gathered_));
  if (!collectives_->world().is_leader()) return absl::Span<float>();
  const int V = vocab_size_;
  logits_host_.resize(size_t(R) * V);
  size_t offset = 0;
  for (int r = 0; r < tp_size_; ++r) {
    const auto [begin, end] = vocab_range_(r);
    const int n = end - begin;
    for (int row = 0; row < R; ++row) {
      std::memcpy(&logits_host_[size_t(row) * V + begin], &gathered_[offset + size_t(row) * n],
                  n * sizeof(float));
    }
    offset += size_t(R) * n;
  }
  return absl::MakeSpan(logits_host_);
}

absl::StatusOr<absl::Span<const int32_t>> ForwardRuntime::FinishGreedy(const absl::Status& run,
                                                                      const Tensor& logits, int R) {
  if (tp_size_ > 1) {
    // Each rank holds a vocabulary range: the leader picks from the
    // stitched rows, as Forward's caller would.
    auto rows = Finish(run, logits, R);
    if (!rows.ok()) return rows.status();
    best_host_.clear();
    if (rows->empty()) return absl::Span<const int32_t>();
    const int V = vocab_size_;
    for (int r = 0; r < R; ++r) {
      const float* row = rows->data() + size_t(r) * V;
      best_host_.push_back(static_cast<int32_t>(std::max_element(row, row + V) - row));
    }
    return absl::MakeConstSpan(best_host_);
  }
  const Tensor best = best_.tensor().View(0, 1, R);
  const absl::Status argmax = run.ok() ? backend_.ArgmaxRows(logits.Rows(0, R), best) : run;
  if (absl::Status sync = backend_.Synchronize(); !sync.ok()) return sync;
  if (!argmax.ok()) return argmax;
  best_host_.resize(R);
  FLOVER_RETURN_IF_ERROR(backend_.Download(best, best_host_.data()));
  return absl::MakeConstSpan(best_host_);
}

}  // namespace flover
