// The parts of a decoder layer as strategies the one skeleton (DecoderModel)
// composes: a token mixer (what mixes a row with the rows before it:
// attention over the paged KV cache, or a recurrent layer over its state)
// and an MLP (dense, or a mixture of experts). A layer is its norms, one
// mixer and one MLP, chosen per layer from the DecoderSpec (`mixers`,
// `moe`), as llama.cpp's models pick build_layer_attn or its linear form
// per layer. The parts run with a LayerContext: the backend, the step's
// activation buffers and the model's GEMM and residual helpers.
#ifndef FLOVER_MODEL_DECODER_LAYER_PARTS_H_
#define FLOVER_MODEL_DECODER_LAYER_PARTS_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "model/decoder/decoder_spec.h"
#include "model/decoder/decoder_weights.h"
#include "model/forward_runtime.h"
#include "model/kv_cache.h"

namespace flover {

// One GEMM of the forward pass: its weight, bias and epilogue fixed at upload.
struct LinearSite {
  std::unique_ptr<kernels::Weight> w;
  kernels::Buffer bias;  // empty: none
  kernels::Epilogue epilogue = kernels::Epilogue::kBias;
};

// Activation buffers (ForwardRuntime ids), for T rows and R logit rows.
enum Activation {
  kX,       // f32 [T, C]: the residual stream, replicated on every rank
  kH,       // act [max(T, R), C]: a norm's output
  kQkv,     // f32 [T, (Hq + 2 Hkv)_local * D]
  kAttn,    // act [T, Hq_local * D]
  kUp,      // f32 [T, 2 F_local] (kGlu: gate and up)
  kMlp,     // act [T, F_local]: the MLP's activation
  kBranch,  // f32 [T, C] (kSandwich, residual_scale): a branch's output before its norm or scale
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
  // Attention with an output gate (spec.attn_output_gate):
  kGateIn,  // f32 [T, Hq_local * D]: the gate's logits
  kGated,   // f32 [T, Hq_local * D]: attention's output, gated in place
  // Recurrent layers (Ch: their convolution's channels; Hv value heads of dv):
  kRecIn,    // f32 [T, Ch]: the convolution's input
  kRecConv,  // f32 [T, Ch]: its output
  kRecGate,  // f32 [T, Hv dv | C]: the delta net's z, the short convolution's C
  kRecB,     // f32 [T, Hv | C]: the delta net's beta logits, the short convolution's B
  kRecA,     // f32 [T, Hv]: the delta net's decay logits, Mamba-2's dt
  kRecOut,   // f32 [T, Hv dv]: the delta rule's output (Mamba-2's scan's)
  kHiddenIn,   // f32 [T, C] (spec.mtp_input): the main model's hidden rows, uploaded
  kHiddenOut,  // f32 [T, C] (KeepFinalHidden): every row after the final norm
  // Per-layer inputs (spec.per_layer_input P):
  kEmbed0,   // f32 [T, C]: the model's embedding of each row
  kPleIn,    // f32 [T, P]: the layer's input
  kPleTok,   // f32 [T, P]: its table's rows
  kPleGate,  // f32 [T, P]: its gate
  kNumActivations,
};

// What a layer's parts run with; DecoderModel provides it.
class LayerContext {
 public:
  virtual kernels::Backend& backend() const = 0;
  virtual const DecoderSpec& spec() const = 0;
  virtual const DecoderShard& shard() const = 0;
  // The first `rows` rows of activation buffer `id`.
  virtual kernels::Tensor buffer(Activation id, int rows) const = 0;
  // The rotary frequencies (f32 [1, R / 2]; empty: none), the local
  // layers' where `local` (DecoderSpec::local_rope).
  virtual const kernels::Buffer& inv_freq(bool local) const = 0;
  // out = in @ site (+ bias, with the site's epilogue).
  virtual absl::Status Apply(const LinearSite& site, const kernels::Tensor& in,
                             const kernels::Tensor& out) = 0;
  // x += in @ site (all-reduced over ranks): a row-split GEMM into the
  // residual stream; with kSandwich through the branch's norm `post`.
  virtual absl::Status Residual(const LinearSite& site, const kernels::Tensor& in,
                                const kernels::Buffer& post, int T) = 0;
  // Sums x over tensor-parallel ranks (nothing on one rank).
  virtual absl::Status AllReduce(const kernels::Tensor& x) = 0;

 protected:
  ~LayerContext() = default;
};

// A layer's step: the rows of the batch as uploaded, the cache, which layer.
struct LayerStep {
  const ForwardRuntime::Step& step;
  KvCache& cache;
  int layer;  // of the model
  int T;      // rows
  kernels::StateTable states() const { return {step.states, step.states_device}; }
};

// What mixes each row with the rows before it in its sequence. Forward
// adds the mixer's output for the normed rows h ([T, C]) to the residual
// stream (through `post` with kSandwich); Prepare readies its GEMMs for
// steps of up to T rows.
class TokenMixer {
 public:
  virtual ~TokenMixer() = default;
  virtual absl::Status Forward(LayerContext& m, const kernels::Tensor& h, const LayerStep& step,
                               const kernels::Buffer& post) const = 0;
  virtual absl::Status Prepare(kernels::Backend& backend, int T) const = 0;
};

// A layer's MLP: Forward adds its output for the normed rows h to the
// residual stream (through `post` with kSandwich).
class MlpStrategy {
 public:
  virtual ~MlpStrategy() = default;
  virtual absl::Status Forward(LayerContext& m, const kernels::Tensor& h, const kernels::Buffer& post,
                               int T) const = 0;
  virtual absl::Status Prepare(kernels::Backend& backend, int T) const = 0;
  // Whether Forward waits for the device midway (a mixture of experts
  // grouped on the host: Backend::LinearByIdWaits), so steps cannot be
  // recorded.
  virtual bool WaitsForDevice(const kernels::Backend&) const { return false; }
};

// Gemma 4's per-layer input (DecoderSpec::per_layer_input): Forward adds
// the layer's to the residual stream (kX), from the rows' tokens and their
// embedding (kEmbed0).
class PerLayerInput {
 public:
  virtual ~PerLayerInput() = default;
  virtual absl::Status Forward(LayerContext& m, const kernels::Tensor& tokens, const kernels::Tensor& positions,
                               int T) const = 0;
  virtual absl::Status Prepare(kernels::Backend& backend, int T) const = 0;
};

// Puts one layer's host weights on the backend, releasing each host tensor
// once it is there, so the host copy shrinks as the backend's grows.
class LayerUploader {
 public:
  // `into_x`: the epilogue of a GEMM that adds into the residual stream.
  LayerUploader(kernels::Backend& backend, const DecoderSpec& spec, kernels::Epilogue into_x)
      : backend_(backend), spec_(spec), into_x_(into_x) {}

  const DecoderSpec& spec() const { return spec_; }
  kernels::Backend& backend() const { return backend_; }
  kernels::Epilogue into_x() const { return into_x_; }
  // host as f32 [rows, cols] (empty host: an empty buffer).
  absl::Status Values(std::vector<float>& host, int64_t rows, int64_t cols, kernels::Buffer* out);
  // A norm of the hidden width: its weight, and with LayerNorm its bias;
  // InvalidArgument when they are missing.
  absl::Status Norm(std::vector<float>& g, std::vector<float>& b, kernels::Buffer* g_out,
                    kernels::Buffer* b_out);
  // A GEMM [K -> N] in the spec's layout, with its bias (empty: none).
  absl::Status Site(StoredValues& host, std::vector<float>& bias, int K, int N, kernels::Epilogue epilogue,
                    LinearSite* out);

 private:
  kernels::Backend& backend_;
  const DecoderSpec& spec_;
  kernels::Epilogue into_x_;
};

// The parts of layer `layer` from its weights (this rank's shard): the
// mixer of its kind (DecoderSpec::mixer), the MLP the spec gives it.
absl::StatusOr<std::unique_ptr<TokenMixer>> MakeMixer(LayerUploader& up, const DecoderShard& shard,
                                                      int layer, DecoderLayerWeights& w);
absl::StatusOr<std::unique_ptr<MlpStrategy>> MakeMlp(LayerUploader& up, const DecoderShard& shard, int layer,
                                                     DecoderLayerWeights& w);
// `table`: its band of the per-layer table, f32 times sqrt(P), or `blocks`
// as the file stores them.
absl::StatusOr<std::unique_ptr<PerLayerInput>> MakePerLayerInput(LayerUploader& up, int layer,
                                                                  DecoderLayerWeights& w, kernels::Buffer table,
                                                                  std::unique_ptr<kernels::BlockRows> blocks);

// Each mixer kind's own (one file each). Attention's K and V in the cache
// are those of the layer's kv_owner (DecoderSpec::KvLayerOf).
absl::StatusOr<std::unique_ptr<TokenMixer>> MakeAttentionMixer(LayerUploader& up, const DecoderShard& shard,
                                                               int layer, DecoderLayerWeights& w);
// `state_layer`: the layer's state in the cache's slots (its index among
// the recurrent layers).
absl::StatusOr<std::unique_ptr<TokenMixer>> MakeGatedDeltaNetMixer(LayerUploader& up, const DecoderShard& shard,
                                                                   int state_layer, DecoderLayerWeights& w);
absl::StatusOr<std::unique_ptr<TokenMixer>> MakeShortConvMixer(LayerUploader& up, const DecoderShard& shard,
                                                               int state_layer, DecoderLayerWeights& w);
absl::StatusOr<std::unique_ptr<TokenMixer>> MakeMamba2Mixer(LayerUploader& up, const DecoderShard& shard,
                                                            int state_layer, DecoderLayerWeights& w);

}  // namespace flover

#endif  // FLOVER_MODEL_DECODER_LAYER_PARTS_H_
