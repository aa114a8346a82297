// The plumbing of a forward pass, apart from its math (its one client is
// decoder/decoder_model, which every family runs on): checking a batch
// against the model and its cache, the step's one upload (tokens,
// positions, sequence table), activation buffers grown to the largest step
// and never shrunk, the residual add of a row-split layer over
// tensor-parallel ranks, running a decode step through the backend's
// recordings (RunOps: CUDA graphs, on one rank), and the logits back in
// host memory (the backend's own buffer on the CPU; stitched over the
// ranks' vocabulary ranges with tensor parallelism).
#ifndef FLOVER_MODEL_FORWARD_RUNTIME_H_
#define FLOVER_MODEL_FORWARD_RUNTIME_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/collectives.h"
#include "kernels/backend.h"
#include "model/forward_batch.h"
#include "model/kv_cache.h"

namespace flover {

class ForwardRuntime {
 public:
  struct BufferSpec {
    kernels::DType dtype;
    int64_t rows, cols;
  };
  // The model's activation buffers for steps of `rows` rows with
  // `logit_rows` rows of logits, indexed by the model's own ids.
  using Layout = std::function<std::vector<BufferSpec>(int rows, int logit_rows)>;
  // [vocab_begin, vocab_end) of the logits tensor-parallel rank r computes.
  using VocabRange = std::function<std::pair<int, int>(int rank)>;

  // `hidden` is the residual stream's width; `collectives` null for one rank.
  ForwardRuntime(kernels::Backend& backend, Collectives* collectives, int vocab_size,
                 int max_positions, int hidden, Layout layout, VocabRange vocab_range);

  kernels::Backend& backend() const { return backend_; }
  int tp_size() const { return tp_size_; }

  // InvalidArgument naming the problem when the batch does not fit the
  // model or the cache (`expected` is the cache shape the model needs; its
  // blocks and positions are the cache's own): block ids outside the cache,
  // a block table that does not cover a sequence's positions, a block that
  // two sequences would write, or a given-back block (KvLayer::kNoBlock) a
  // row would read or write (only blocks wholly behind the first row's
  // window in every layer, expected.window, may be given back).
  absl::Status CheckBatch(const ForwardBatch& batch, const KvCache& cache,
                          const KvCacheShape& expected);

  // Makes every buffer big enough for `rows` rows and `logit_rows` rows of
  // logits (allocating only when a step is larger than any before).
  absl::Status Reserve(int rows, int logit_rows);
  // Allocates the buffers again for the sizes reserved so far, after the
  // layout changed (a model that keeps more per row from now on).
  absl::Status Relayout();
  // Buffer `id` of the layout (its first rows serve smaller steps).
  const kernels::Tensor& buffer(int id) const { return buffers_[id].tensor(); }

  struct Step {
    kernels::Tensor tokens, positions;  // i32 [1, T]
    // The rotary's positions: `positions`, or i32 [3, T] (temporal, height,
    // width rows) where the batch gives multimodal ones
    // (ForwardBatch::rope_positions). A step with them is not recorded.
    kernels::Tensor rope_positions;
    // Where the batch gives horizons (ForwardBatch::attend_to), `seqs` and
    // the tables made from it carry them (SeqTable::horizon); such a step
    // is not recorded either.
    kernels::SeqTable seqs;
    // The rows whose logits the batch asks for are the last rows of its
    // entries, in order: `seqs` itself where each sequence asks for one.
    kernels::SeqTable gather;
    // `seqs` with the local layers' block table (ForwardBatch::
    // local_block_ids); `seqs` itself without local blocks.
    kernels::SeqTable local_seqs;
    // Each sequence's state slots (ForwardBatch::states), in host memory
    // and as i32 [num_seqs, 2] in the backend's; empty without recurrent
    // state.
    const kernels::SeqState* states = nullptr;
    kernels::Tensor states_device;
  };
  // The step's one upload. Call Reserve(T, ...) first.
  absl::StatusOr<Step> UploadStep(const ForwardBatch& batch);

  // Steps of up to this many rows, at most kMaxRecordedRowsPerSeq of each
  // sequence, are recorded and replayed: decode steps (a row per sequence)
  // and speculation's verify steps (a row and its drafts).
  static constexpr int kMaxRecordedRows = 512;
  static constexpr int kMaxRecordedRowsPerSeq = 16;
  // Runs `ops` (the step's ops after UploadStep, ending with the logits).
  // Such a step on one rank runs through the backend's recordings (CUDA
  // graphs), keyed by all that its launches depend on: this runtime's
  // buffers, the cache, the row count, the sequence count, the logit rows
  // and `variant` (which logits); where the rows fall among the sequences
  // is read from the device's tables. Its sequence table then claims the
  // longest context a sequence may have (the cache's max_seq), so the
  // launches do not depend on the batch's lengths; each row still reads only
  // its own.
  absl::Status RunOps(Step* step, const KvCache& cache, int variant,
                      const std::function<absl::Status()>& ops);
  // Steps whose ops wait for the device midway (a mixture of experts whose
  // rows are grouped by expert on the host: Backend::LinearByIdWaits)
  // cannot be recorded: RunOps then always runs them plainly.
  void DisableRecording() { recordable_ = false; }

  // The epilogue a row-split layer's GEMM runs with: the fused residual on
  // one rank; a plain product (summed over ranks, then added) otherwise.
  kernels::Epilogue row_split_epilogue() const {
    return tp_size_ == 1 ? kernels::Epilogue::kBiasResidual : kernels::Epilogue::kBias;
  }
  // x: [T, C] += rows @ w + bias, all-reduced over tensor-parallel ranks.
  absl::Status RowSplitResidual(const kernels::Tensor& rows, const kernels::Weight& w,
                                const kernels::Tensor* bias, const kernels::Tensor& x);
  // All-reduces x over tensor-parallel ranks (the embedding of a vocabulary
  // shard); nothing on one rank.
  absl::Status AllReduce(const kernels::Tensor& x);

  // Ends a forward: waits for the backend (its own errors first: a fault
  // inside a kernel explains a failed op better than the op), then returns
  // `run`'s error or the first R rows of `logits` ([R, V_local], this
  // rank's vocabulary range) as host memory, [R, V] on rank 0 and empty on
  // other ranks with tensor parallelism.
  absl::StatusOr<absl::Span<float>> Finish(const absl::Status& run, const kernels::Tensor& logits,
                                           int R);
  // Finish for greedy decoding: each of the R rows' best token (the
  // backend's ArgmaxRows on one rank; with tensor parallelism rank 0 picks
  // from the gathered logits), as host memory; empty on other ranks.
  absl::StatusOr<absl::Span<const int32_t>> FinishGreedy(const absl::Status& run,
                                                         const kernels::Tensor& logits, int R);

 private:
  // Words of the step table per row at most: a token, a position, a
  // sequence's 4 and state's 2, a gathered row's 4, 3 rotary positions and
  // a horizon.
  static constexpr int kStepWordsPerRow = 16;
  absl::Status CheckStates(const ForwardBatch& b, const KvCacheShape& cs);

  kernels::Backend& backend_;
  Collectives* collectives_;
  int tp_size_ = 1;
  bool recordable_ = true;
  int vocab_size_, max_positions_, hidden_;
  Layout layout_;
  VocabRange vocab_range_;
  int rows_ = 0, logit_rows_ = 0;
  std::vector<kernels::Buffer> buffers_;
  kernels::Buffer step_;     // i32: tokens, positions, sequences, block table
  std::vector<bool> written_, written_local_;  // CheckBatch's scratch: blocks a step writes
  kernels::Buffer partial_;  // f32 [rows, hidden] (tp > 1): a row-split GEMM's part
  std::vector<int32_t> step_host_;
  std::vector<kernels::SeqRows> gather_host_;  // the step's gather table, where it has one
  std::vector<bool> written_slots_, read_slots_;  // CheckStates' scratch
  int64_t generation_ = 0;  // bumped whenever the buffers move (recording keys name them)
  // Where logits come back to when the backend's memory is not host memory
  // (one rank): the backend's staging memory for logit_rows_ x vocabulary
  // (page-locked on CUDA) when it has some, else logits_host_.
  struct StagingFree {
    kernels::Backend* backend;
    void operator()(float* p) const { backend->FreeStaging(p); }
  };
  std::unique_ptr<float[], StagingFree> staging_{nullptr, StagingFree{nullptr}};
  std::vector<float> logits_host_;
  kernels::Buffer best_;            // i32 [1, logit_rows] (one rank): FinishGreedy's ids
  std::vector<int32_t> best_host_;  // ... as they come back
  std::vector<float> gathered_;     // tp > 1: every rank's logits, rank after rank
};

}  // namespace flover

#endif  // FLOVER_MODEL_FORWARD_RUNTIME_H_
