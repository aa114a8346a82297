// One tensor-parallel rank's decoder weights as DecoderModel uses them,
// whatever the family: norms, biases and the position table in float32,
// the GEMM weights in the dtype the checkpoint stores them in (a backend
// prepares them from that), laid out as the spec's `layout` says. A family
// fills them through its recipe table: every parameter of the rank, the
// regions of checkpoint tensors it is cut from (weight_source.h), and which
// field it goes to. Only this rank's regions of each tensor are read.
#ifndef FLOVER_MODEL_DECODER_DECODER_WEIGHTS_H_
#define FLOVER_MODEL_DECODER_DECODER_WEIGHTS_H_

#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "model/decoder/decoder_spec.h"
#include "model/loader/weight_source.h"

namespace flover {

struct DecoderLayerWeights {
  std::vector<float> norm1, norm1_b;  // [C]; _b: LayerNorm only
  StoredValues qkv;                   // this rank's q heads, then k, then v heads
  std::vector<float> qkv_b;           // the same columns; empty: no bias
  StoredValues o;                     // this rank's q-head rows of the [Q, C] product
  std::vector<float> o_b;             // [C] (zeros on ranks > 0); empty: none
  std::vector<float> norm2, norm2_b;  // before the MLP (kParallel: unused)
  std::vector<float> post_attn_norm, post_mlp_norm;  // kSandwich only
  std::vector<float> q_norm, k_norm;  // [head_dim]: qk_norm only
  std::vector<float> sinks;           // [Hq_local]: attention_sinks only
  StoredValues attn_gate;             // [Hq_local * D, C]: attn_output_gate only
  // A recurrent layer (DecoderSpec::Mixer): `o` is its output projection
  // ([channels_local of the [channels, C] product]).
  //   gated delta net: in_x = q, k and v ([conv channels_local, C]); in_gate
  //   = z ([Hv_local * dv, C]); in_b, in_a: beta's and the decay's
  //   ([Hv_local, C]); conv [conv channels_local, K]; decay_a = -exp(A_log)
  //   and dt_bias [Hv_local]; mixer_norm [dv] (the gated norm's weight)
  //   short convolution: in_b = B, in_gate = C, in_x = x ([C_local, C]
  //   each); conv [C_local, K]
  //   Mamba-2: in_x = x, B and C ([conv channels_local, C]); in_gate = z
  //   ([Hl * P, C]); in_a = dt's ([Hl, C]); conv, conv_b; decay_a (A_log),
  //   dt_bias, d_skip (D) [Hl]; mixer_norm [Hl * P] (each group's own)
  StoredValues in_x, in_gate, in_b, in_a;
  std::vector<float> conv, conv_b, decay_a, dt_bias, d_skip, mixer_norm;
  StoredValues up;                    // kGelu: [C, F_local]; kGlu: gate then up
  std::vector<float> up_b;            // empty: none
  StoredValues down;                  // [F_local, C]
  std::vector<float> down_b;          // [C] (zeros on ranks > 0); empty: none
  // A mixture-of-experts layer (DecoderSpec::Moe); up and down then hold
  // its shared expert (gate then up, [2 Fs_local, C]; [Fs_local, C]), if any:
  StoredValues router;                    // [E, C], whole on every rank
  StoredValues shared_gate;               // [1, C], whole on every rank (shared expert)
  std::vector<StoredValues> expert_up;    // per expert: gate then up, [2 Fe_local, C]
  std::vector<StoredValues> expert_down;  // per expert: [Fe_local, C] of the [C, Fe] product
  // moe.biases: the router's [E]; each expert's gate then up band [E, 2 Fe_local];
  // each expert's down [E, C] (zeros on ranks > 0).
  std::vector<float> router_b, expert_up_b, expert_down_b;
  // moe.beside_dense (Gemma 4): the router's norm weight [C] (router.scale),
  // each expert's scale [E], the experts' input norm [C], the dense MLP's and
  // the experts' output norms [C] (the dense MLP in up and down).
  std::vector<float> moe_router_norm, moe_expert_scale, moe_pre_norm, moe_dense_norm, moe_experts_norm;
  // DecoderSpec::layer_scale: [1].
  std::vector<float> layer_scale;
  // DecoderSpec::per_layer_input (P), whole on every rank: this layer's
  // [P, C] rows of the model's projection, the projection's norm [P], the
  // gate [P, C], the projection back [C, P] and its norm [C] (its band of the
  // per-layer table: DecoderRecipes::per_layer_table).
  StoredValues ple_model_proj, ple_gate, ple_proj;
  std::vector<float> ple_proj_norm, ple_post_norm;
};

struct DecoderWeights {
  std::vector<float> embed;           // [V_local, C] (WeightPart.embedding)
  std::vector<float> position_table;  // [P, C], rank 0 only; empty: none
  std::vector<DecoderLayerWeights> layers;  // the part's layers
  std::vector<float> norm, norm_b;    // the final norm
  StoredValues lm_head;               // [V_local, C]; empty: tied to the embedding
  std::vector<float> lm_head_b;       // [V_local]; empty: none
  // DecoderSpec::mtp_input: the pair's norms ([C]) and the two halves of
  // its projection ([C, C] each: the embedding's columns, the hidden's).
  std::vector<float> mtp_enorm, mtp_hnorm;
  StoredValues mtp_eh_e, mtp_eh_h;
};

// A family's recipe table.
struct DecoderRecipes {
  using Visit = std::function<void(const WeightRecipe&, ParamDest)>;
  // This rank's embedding rows (the tied head's too).
  std::function<WeightRecipe(const DecoderShard&)> embedding;
  // Visits layer `l`'s parameters with their destinations in `out`.
  std::function<void(int l, const DecoderShard&, DecoderLayerWeights& out, const Visit&)> layer;
  // Visits the parameters outside the layers but the embedding: the
  // position table, final norm, head (absent when tied), head bias.
  std::function<void(const DecoderShard&, DecoderWeights& out, const Visit&)> globals;
  // DecoderSpec::per_layer_input: the per-layer embedding table [V_ple,
  // n_layer * P], whole (DecoderModel splits it by layer as it reads it).
  std::function<WeightRecipe()> per_layer_table;
};

// Reads this rank's part of the weights; a missing tensor or one whose
// shape disagrees with the recipe is an error naming the tensor.
absl::StatusOr<DecoderWeights> LoadDecoderWeights(const WeightSource& source,
                                                  const DecoderSpec& model,
                                                  const DecoderRecipes& recipes,
                                                  const ShardSpec& spec, WeightPart part = {});

// Checks that every tensor of the recipes is in `source` with its shape and
// a float dtype, reading no data.
absl::Status CheckDecoderWeights(const WeightSource& source, const DecoderSpec& model,
                                 const DecoderRecipes& recipes);

// Rows [begin, end) of each of `parts` (e.g. q, k, v) of a fused [sum, C]
// tensor whose parts are `sizes` rows, stacked: a fused projection's slice.
WeightRecipe FusedRows(const std::string& tensor, const std::vector<int64_t>& sizes, int64_t cols,
                       const std::vector<std::pair<int64_t, int64_t>>& ranges);

}  // namespace flover

#endif  // FLOVER_MODEL_DECODER_DECODER_WEIGHTS_H_
