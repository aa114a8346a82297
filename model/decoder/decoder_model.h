// The one decoder forward pass (a CausalLm) every family runs, configured by
// a DecoderSpec: over a ragged token batch (any number of sequences, each
// one or more rows at its own positions: prompts, chunks of them and decode
// tokens in one call), embedding, then per layer a norm, the layer's token
// mixer (attention over the KV cache; layer_parts.h) and its MLP, wired as
// the spec's block says, then the final norm and the head on the rows whose
// logits are wanted.
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
#include "model/decoder/layer_parts.h"
#include "model/forward_runtime.h"
#include "model/weight_upload.h"
#include "model/loader/gguf_quants.h"

namespace flover {

class DecoderModel final : public CausalLm, private LayerContext {
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
  // A multi-token-prediction layer (spec.mtp_input) of `main`, on main's
  // backend and one rank: its embedding and head are main's own buffers
  // (the recipes name neither), never a second copy.
  static absl::StatusOr<std::unique_ptr<DecoderModel>> CreateMtp(const DecoderSpec& spec,
                                                                 const DecoderRecipes& recipes,
                                                                 const ModelInfo& info,
                                                                 const WeightSource& source,
                                                                 const CausalLm& main);

  const ModelInfo& info() const override { return info_; }
  kernels::Backend& backend() const override { return backend_; }
  KvCacheShape CacheShape(int num_blocks, int max_seq, int state_slots = 1) const override;
  // On the CPU the logits view is the backend's own buffer: no copy.
  absl::StatusOr<absl::Span<float>> Forward(const ForwardBatch& batch, KvCache& cache,
                                            LogitsFor which) override;
  using CausalLm::Forward;
  absl::StatusOr<absl::Span<const int32_t>> ForwardGreedy(const ForwardBatch& batch,
                                                          KvCache& cache) override;
  absl::Status PrepareForBatches(int max_rows, int max_logit_rows) override;
  absl::Status KeepFinalHidden(bool on) override;
  absl::Span<const float> FinalHidden() const override { return hidden_; }

 private:
  // A layer: its norms, its token mixer and its MLP.
  struct LayerParams {
    kernels::Buffer norm1, norm1_b, norm2, norm2_b, post_attn_norm, post_mlp_norm;
    std::unique_ptr<TokenMixer> mixer;
    std::unique_ptr<MlpStrategy> mlp;
    std::unique_ptr<PerLayerInput> ple;  // spec.per_layer_input; null: none
    float scale = 1.0f;                  // spec.layer_scale
  };

  struct Tables;
  static absl::StatusOr<std::unique_ptr<DecoderModel>> Build(const DecoderSpec& spec, const DecoderRecipes& recipes,
                                                             const ModelInfo& info, const WeightSource& source,
                                                             kernels::Backend& backend, Collectives* collectives,
                                                             std::shared_ptr<Tables> shared);
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
  absl::Status Run(const ForwardBatch& b, KvCache& cache, LogitsFor which, int* R);
  // After a forward's Finish: FinalHidden's rows of a T-row batch, where kept.
  absl::Status FetchHidden(int T);
  // The widest dense MLP band of any layer on this rank.
  int MaxInner() const;

  // LayerContext: what the layers' parts run with.
  const DecoderSpec& spec() const override { return spec_; }
  const DecoderShard& shard() const override { return shard_; }
  kernels::Tensor buffer(Activation id, int rows) const override { return runtime_.buffer(id).Rows(0, rows); }
  const kernels::Buffer& inv_freq(bool local) const override { return local ? inv_freq_local_ : inv_freq_; }
  absl::Status Apply(const LinearSite& site, const kernels::Tensor& in, const kernels::Tensor& out) override;
  absl::Status Residual(const LinearSite& site, const kernels::Tensor& in, const kernels::Buffer& post,
                        int T) override;
  absl::Status AllReduce(const kernels::Tensor& x) override { return runtime_.AllReduce(x); }

  DecoderSpec spec_;
  ModelInfo info_;
  kernels::Backend& backend_;
  ShardSpec shard_spec_;
  DecoderShard shard_;
  ForwardRuntime runtime_;
  std::vector<LayerParams> layers_;
  // The embedding and the head, which a multi-token-prediction layer shares
  // with its main model (CreateMtp).
  struct Tables {
    kernels::Buffer embed;  // f32 [V_local, C], times spec.embed_scale; empty with:
    // --dtype=native and an embedding stored in blocks: its V_local rows as
    // the file stores them, on the backend (EmbedBlocks looks up a step's rows).
    std::unique_ptr<kernels::BlockRows> embed_rows;
    LinearSite head;  // [V_local, C]
  };
  std::shared_ptr<Tables> tables_ = std::make_shared<Tables>();
  bool shared_tables_ = false;  // tables_ are another model's (CreateMtp)
  kernels::Buffer positions_;  // f32 [P, C]; empty: none, or another rank adds it
  kernels::Buffer norm_, norm_b_;
  kernels::Buffer inv_freq_;  // f32 [1, R / 2]; empty: no rotary embeddings
  kernels::Buffer inv_freq_local_;  // the local layers' (spec_.local_rope); empty: none
  // spec.mtp_input: the pair's norms and the halves of its projection.
  kernels::Buffer mtp_enorm_, mtp_hnorm_;
  LinearSite mtp_eh_e_, mtp_eh_h_;
  // spec.per_layer_input: each layer's band of the per-layer table, until
  // the layer's part takes it.
  ColumnBands ple_tables_;
  bool keep_hidden_ = false;         // KeepFinalHidden
  std::vector<float> hidden_host_;   // FetchHidden's copy where the backend's memory is not the host's
  absl::Span<const float> hidden_;   // FinalHidden
};

}  // namespace flover

#endif  // FLOVER_MODEL_DECODER_DECODER_MODEL_H_
