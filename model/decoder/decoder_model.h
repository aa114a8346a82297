// The one decoder forward pass (a CausalLm) every family runs, configured by
// a DecoderSpec: over a ragged token batch (any number of sequences, each
// one or more rows at its own positions: prompts, chunks of them and decode
// tokens in one call), embedding, then per layer a norm, the fused q/k/v
// GEMM, rotary embeddings, the KV append and attention, the output
// projection, the MLP, wired as the spec's block says, then the final norm
// and the head on the rows whose logits are wanted.
//
// Every GEMM is a LinearSite: its weight, bias and epilogue fixed at upload.
// Run applies the sites; PrepareForBatches prepares the same sites, so the
// two cannot disagree on a GEMM's shape or epilogue.
#ifndef FLOVER_MODEL_DECODER_DECODER_MODEL_H_
#define FLOVER_MODEL_DECODER_DECODER_MODEL_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/collectives.h"
#include "kernels/backend.h"
#include "model/causal_lm.h"
#include "model/decoder/decoder_spec.h"
#include "model/decoder/decoder_weights.h"
#include "model/forward_runtime.h"
#include "model/loader/gguf_quants.h"

namespace flover {

class DecoderModel final : public CausalLm {
 public:
  // Reads this rank's weights from `source` through `recipes` one layer at
  // a time and puts them on `backend` (which must outlive the model),
  // releasing each host tensor once it is there. With collectives of
  // tp_size > 1 every rank must call Forward with the same batch.
  static absl::StatusOr<std::unique_ptr<DecoderModel>> Create(const DecoderSpec& spec,
                                                              const DecoderRecipes& recipes,
                                                              const ModelInfo& info,
                                                              const WeightSource& source,
                                                              kernels::Backend& backend,
                                                              Collectives* collectives = nullptr);

  const ModelInfo& info() const override { return info_; }
  kernels::Backend& backend() const override { return backend_; }
  KvCacheShape CacheShape(int num_blocks, int max_seq) const override;
  // On the CPU the logits view is the backend's own buffer: no copy.
  absl::StatusOr<absl::Span<float>> Forward(const ForwardBatch& batch, KvCache& cache,
                                            LogitsFor which) override;
  using CausalLm::Forward;
  absl::StatusOr<absl::Span<const int32_t>> ForwardGreedy(const ForwardBatch& batch,
                                                          KvCache& cache) override;
  absl::Status PrepareForBatches(int max_rows, int max_logit_rows) override;

 private:
  // One GEMM of the forward pass.
  struct LinearSite {
    std::unique_ptr<kernels::Weight> w;
    kernels::Buffer bias;  // empty: none
    kernels::Epilogue epilogue = kernels::Epilogue::kBias;
  };
  // A layer's MLP, as a strategy: the dense MLP (gelu or gated,
  // DenseMlp) or a mixture of experts (MoeMlp). Forward adds its output for
  // the normed rows h to the residual stream (through post_mlp_norm with
  // kSandwich); Prepare readies its GEMMs for steps of up to T rows.
  class MlpStrategy {
   public:
    virtual ~MlpStrategy() = default;
    virtual absl::Status Forward(DecoderModel& m, const kernels::Tensor& h,
                                 const kernels::Buffer& post, int T) const = 0;
    virtual absl::Status Prepare(kernels::Backend& backend, int T) const = 0;
  };
  class DenseMlp;
  class MoeMlp;
  struct LayerParams {
    kernels::Buffer norm1, norm1_b, norm2, norm2_b, post_attn_norm, post_mlp_norm;
    kernels::Buffer q_norm, k_norm;  // spec_.qk_norm
    LinearSite qkv, o;
    std::unique_ptr<MlpStrategy> mlp;
  };
  // Activation buffers (ForwardRuntime ids), for T rows and R logit rows.
  enum Activation {
    kX,       // f32 [T, C]: the residual stream, replicated on every rank
    kH,       // act [max(T, R), C]: a norm's output
    kQkv,     // f32 [T, (Hq + 2 Hkv)_local * D]
    kAttn,    // act [T, Hq_local * D]
    kUp,      // f32 [T, 2 F_local] (kGlu: gate and up)
    kMlp,     // act [T, F_local]: the MLP's activation
    kBranch,  // f32 [T, C] (kSandwich): a branch's output before its norm
    kNormed,  // f32 [T, C] (kSandwich): the branch normed
    kLast,    // f32 [R, C]: the rows whose logits are wanted
    kLogits,  // f32 [max(T, R), V_local]
    // A mixture of experts (spec.moe), E experts, k per row:
    kRouter,         // f32 [T, E]: the router's logits
    kExpertIds,      // i32 [T, k]
    kExpertWeights,  // f32 [T, k]
    kExpertUp,       // f32 [T * k, 2 Fe_local]: each route's gate and up
    kExpertAct,      // act [T * k, Fe_local]
    kExpertOut,      // f32 [T * k, C]: each route's expert output
    kSharedOut,      // f32 [T, C]: the shared expert's output (moe.shared_intermediate)
    kSharedGate,     // f32 [T, 1]: its sigmoid gate
    kNumActivations,
  };

  DecoderModel(const DecoderSpec& spec, const ModelInfo& info, kernels::Backend& backend,
               Collectives* collectives);
  // Puts a part of the weights (its layers, then, with `globals`, the
  // final norm, head and position table, and the embedding read from
  // `source` a block of rows at a time) on the backend, releasing each host
  // tensor as it goes.
  absl::Status Upload(DecoderWeights& part, const WeightSource& source, const WeightRecipe& embed,
                      bool globals);
  absl::Status Norm(const kernels::Tensor& x, const kernels::Buffer& g, const kernels::Buffer& b,
                    const kernels::Tensor& out);
  absl::Status Apply(const LinearSite& site, const kernels::Tensor& in, const kernels::Tensor& out);
  // x += in @ site (all-reduced over ranks): a row-split GEMM into the
  // residual stream; with kSandwich through the branch's norm `post`.
  absl::Status Residual(const LinearSite& site, const kernels::Tensor& in,
                        const kernels::Buffer& post, int T);
  absl::Status Run(const ForwardBatch& b, KvCache& cache, LogitsFor which, int* R);

  DecoderSpec spec_;
  ModelInfo info_;
  kernels::Backend& backend_;
  ShardSpec shard_spec_;
  DecoderShard shard_;
  ForwardRuntime runtime_;
  std::vector<LayerParams> layers_;
  kernels::Buffer embed_;     // f32 [V_local, C], times spec.embed_scale; empty with:
  // --dtype=native and an embedding stored in blocks: its V_local rows as
  // the file stores them, on the backend (EmbedBlocks looks up a step's rows).
  std::unique_ptr<kernels::BlockRows> embed_rows_;
  kernels::Buffer positions_;  // f32 [P, C]; empty: none, or another rank adds it
  kernels::Buffer norm_, norm_b_;
  kernels::Buffer inv_freq_;  // f32 [1, R / 2]; empty: no rotary embeddings
  kernels::Buffer inv_freq_local_;  // the local layers' (spec_.local_rope); empty: none
  LinearSite head_;           // [V_local, C]
};

}  // namespace flover

#endif  // FLOVER_MODEL_DECODER_DECODER_MODEL_H_
