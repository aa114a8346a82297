// What a model family configures in the one decoder skeleton (DecoderModel):
// the shapes, the block's wiring, its norms, MLP and attention, the
// embedding and the head. A family is a config parser, a function from its
// config to a DecoderSpec, and a recipe table (decoder_weights.h); the
// forward pass, the upload and the tensor-parallel split are shared.
#ifndef FLOVER_MODEL_DECODER_DECODER_SPEC_H_
#define FLOVER_MODEL_DECODER_DECODER_SPEC_H_

#include <vector>

#include "absl/status/status.h"
#include "kernels/backend.h"
#include "model/shard_spec.h"

namespace flover {

struct DecoderSpec {
  // Shapes. Query head h reads key/value head h / (n_head / n_kv_head).
  int n_layer = 0, hidden = 0, n_head = 0, n_kv_head = 0, head_dim = 0;
  int intermediate = 0;  // the MLP's width (each half of a gated MLP)
  int vocab_size = 0, max_positions = 0;
  // Each layer's MLP width where the layers differ (Gemma 4's double-wide
  // MLPs in its KV-sharing layers), n_layer entries, or empty: every layer's
  // is `intermediate`.
  std::vector<int> layer_intermediate;
  int intermediate_of(int l) const { return layer_intermediate.empty() ? intermediate : layer_intermediate[l]; }

  // Every norm's kind: LayerNorm has a bias, RMSNorm none. A (1 + w)
  // weight (Gemma) is folded in by the family's recipe, not here.
  enum class Norm { kLayerNorm, kRmsNorm };
  Norm norm = Norm::kRmsNorm;
  float norm_eps = 1e-5f;

  // How a block adds attention and MLP to the residual stream x:
  //   kSequential  x += attn(norm1(x)); x += mlp(norm2(x))        GPT-2, Llama
  //   kParallel    x += attn(norm1(x)) + mlp(norm1(x))            GPT-J
  //   kSandwich    x += post_attn_norm(attn(norm1(x)));
  //                x += post_mlp_norm(mlp(norm2(x)))              Gemma 2
  enum class Block { kSequential, kParallel, kSandwich };
  Block block = Block::kSequential;

  // The MLP: kGelu is up -> gelu_new -> down (the up weight [C, F]); kGlu
  // is act(gate) * up -> down (gate rows then up rows, [C, 2F]).
  enum class Mlp { kGelu, kGlu };
  Mlp mlp = Mlp::kGlu;
  kernels::GluKind glu = kernels::GluKind::kSilu;

  // Each layer's token mixer: what mixes a row with the rows before it in
  // its sequence (layer_parts.h). A layer is its norms, its mixer and its MLP.
  //   kAttention     the fused q/k/v GEMM, rotary embeddings, attention over
  //                  the paged KV cache (the settings below)
  //   kGatedDeltaNet Qwen3.5's linear attention: q/k/v through a causal
  //                  convolution and SiLU, the gated delta rule over a state
  //                  per sequence, an RMSNorm of each head gated by silu(z),
  //                  the output projection (`recurrent`)
  //   kShortConv     LFM2's: B, C and x projections, y = C * conv(B * x),
  //                  the output projection (`recurrent.conv_kernel`)
  //   kMamba2        Mamba-2 (Granite 4.0-H): x, B and C through a causal
  //                  convolution (with a bias) and SiLU, the selective
  //                  scan, times silu(z), an RMSNorm per group, the output
  //                  projection (`recurrent`)
  // The recurrent kinds keep a state per sequence (KvCacheShape's state
  // slots), not K and V; a model's recurrent layers are all of one kind.
  enum class Mixer { kAttention, kGatedDeltaNet, kShortConv, kMamba2 };
  // n_layer entries, or empty: attention in every layer.
  std::vector<Mixer> mixers;
  Mixer mixer(int l) const { return mixers.empty() ? Mixer::kAttention : mixers[l]; }
  // The layers that keep K and V in the KV cache (the attention layers),
  // and layer l's index among them (l must be one).
  // A layer that reads another's K and V (kv_from) keeps none: it is not
  // counted, and KvLayerOf gives the index of the layer it reads.
  int KvLayerCount() const;
  int KvLayerOf(int l) const;
  // The recurrent layers (those of another kind), and layer l's index among
  // them: its state in the cache's slots.
  int StateLayerCount() const;
  int StateLayerOf(int l) const;

  // Each attention layer's geometry where the layers differ (Gemma 4's
  // global layers have wider heads and fewer key/value heads than its local
  // ones), n_layer entries, or empty: every layer has n_kv_head key/value
  // heads of head_dim (and n_head query heads of it, always).
  //   kv_from  -1: the layer writes its own K and V; else an earlier
  //            attention layer of the same geometry whose cached K and V it
  //            reads (Gemma 4's shared KV: the layer projects Q alone)
  struct LayerAttention {
    int kv_heads = 0, head_dim = 0;
    int kv_from = -1;
  };
  std::vector<LayerAttention> layer_attention;
  int kv_heads_of(int l) const { return layer_attention.empty() ? n_kv_head : layer_attention[l].kv_heads; }
  int head_dim_of(int l) const { return layer_attention.empty() ? head_dim : layer_attention[l].head_dim; }
  // The layer whose K and V layer l reads: l itself unless it shares.
  int kv_owner(int l) const {
    return layer_attention.empty() || layer_attention[l].kv_from < 0 ? l : layer_attention[l].kv_from;
  }
  // The widest head of any attention layer, and the widest [Q | K | V] row.
  int MaxHeadDim() const;
  int MaxQkvWidth(int q_heads, int tp_size) const;
  // The recurrent layers' kind (kAttention where there are none).
  Mixer RecurrentKind() const;

  // The recurrent layers' shapes. A causal convolution of conv_kernel taps
  // (both kinds); the gated delta net's heads: v_heads value heads of v_dim
  // over k_heads key heads of k_dim (grouped, or tiled as GGUF files keep
  // them: kernels::DeltaRuleParams), so its convolution runs over
  // 2 k_heads k_dim + v_heads v_dim channels.
  struct Recurrent {
    int conv_kernel = 0;
    int k_heads = 0, v_heads = 0, k_dim = 0, v_dim = 0;
    bool tiled = false;
    // The delta net's and Mamba-2's A as transformers stores it, A_log (the
    // decay's factor is -exp(A_log)); false: as GGUF files store it,
    // -exp(A_log).
    bool a_log = true;
    // Mamba-2: `heads` heads of head_dim channels, in `groups` groups whose
    // heads share B and C of state_size values; dt clamped to [dt_min,
    // dt_max]; its convolution has a bias where conv_bias.
    int heads = 0, head_dim = 0, groups = 0, state_size = 0;
    float dt_min = 0.0f, dt_max = 3.402823466e38f;
    bool conv_bias = false;
    int conv_channels(int hidden) const;
  };
  Recurrent recurrent;

  // How the layers' matrices are stored: kInOut (GPT-2's Conv1D) or kOutIn
  // (nn.Linear). A separate head is [V, C] (kOutIn) in every family.
  kernels::WeightLayout layout = kernels::WeightLayout::kOutIn;

  // A learned position table [max_positions, C] added to the embedding.
  bool position_table = false;
  // The embedding's rows are multiplied by this as they are uploaded
  // (Gemma's sqrt(hidden)); a tied head keeps the stored rows.
  float embed_scale = 1.0f;

  // Rotary embeddings: empty inv_freq means none. 2 * inv_freq.size()
  // dims of each head turn (partial rotary when fewer than head_dim).
  std::vector<float> inv_freq;
  kernels::RopeStyle rope_style = kernels::RopeStyle::kHalf;
  // cos and sin are multiplied by this (LongRoPE's attention factor).
  float rope_scale = 1.0f;
  // A multimodal rotary's sections (kernels::RopeParams::mrope_t; all 0:
  // none): the frequencies that turn by an image row's temporal, height
  // and width positions (ForwardBatch::rope_positions). Text rows' three
  // positions are equal, and turn as plain rotary.
  int mrope_t = 0, mrope_h = 0, mrope_w = 0;
  bool mrope_interleaved = false;
  // Given rows (an image's) take additions after this many first layers
  // (ForwardBatch::given_layers; Qwen3-VL's deepstack); 0: none.
  int given_layers = 0;
  // A second rotary table (as many frequencies) for the layers marked in
  // local_rope (n_layer entries, or empty: none): Gemma 3's local layers
  // turn by their own base, its global ones by inv_freq.
  std::vector<float> inv_freq_local;
  std::vector<bool> local_rope;
  // The layers that turn by rotary embeddings (n_layer entries, or empty:
  // every layer): SmolLM3 leaves every fourth layer without (NoPE).
  std::vector<bool> rope_layers;

  // Each branch's output (a mixer's, an MLP's) times this before it joins
  // the residual stream (Granite's residual_multiplier); 1: none.
  float residual_scale = 1.0f;

  // Attention's output times sigmoid(gate), gate a projection of the
  // layer's input (Qwen3.5: [Hq * D, C], each head's rows beside its Q's in
  // the checkpoint), before the output projection.
  bool attn_output_gate = false;

  // Per-head RMSNorm of Q and K (weights q_norm, k_norm: [head_dim], shared
  // by the heads) after the projection, before rotary (Qwen3, Gemma 3).
  bool qk_norm = false;
  // V RMS-normed per head without a weight, after the projection (Gemma 4).
  bool v_norm = false;
  // A learned sink logit per query head in every attention layer's softmax
  // (gpt-oss; the weight `sinks`: [n_head]; kernels::AttentionParams).
  bool attention_sinks = false;
  // With qk_norm: one RMSNorm over all of Q and one over all of K instead
  // (q_norm: [n_head * head_dim], k_norm: [n_kv_head * head_dim]; OLMoE).
  // A norm across heads needs every head on one rank: tensor parallelism is
  // refused.
  bool qk_norm_whole = false;

  // A mixture of experts (experts > 0): the MLP of each layer marked in
  // `layers` (n_layer entries; empty: every layer) is a router [E, C] that
  // picks router.k of `experts` gated MLPs (act(gate) * up -> down, with
  // `glu`) of width `intermediate` for each row, their outputs summed with
  // the router's weights (kernels::RouterParams says how it scores). Every
  // row gets its k experts: nothing is dropped. The other layers have the
  // dense MLP of the spec's `intermediate`. With shared_intermediate > 0 a
  // sparse layer also has a shared expert, a gated MLP of that width that
  // every row goes through, scaled by sigmoid(x . shared_gate) (Qwen2-MoE).
  // Tensor parallelism splits each expert's MLP (the shared one's too) as a
  // dense one is split.
  struct Moe {
    int experts = 0;
    int intermediate = 0;
    int shared_intermediate = 0;
    // The shared expert's output scaled by sigmoid(x . shared_gate)
    // (Qwen2-MoE, Qwen3.5-MoE), or added as it is (Granite's shared MLP).
    bool shared_gated = true;
    // The router and every expert's gate/up and down have biases (gpt-oss).
    bool biases = false;
    // Gemma 4's (26B-A4B): beside the experts, the dense MLP of the spec's
    // `intermediate` on the MLP's normed input h. The router reads the
    // residual stream x normed by router_scale (times C^-1/2), each expert's
    // weight times its per-expert scale; the experts read x through a norm of
    // their own; the block's post-MLP norm takes dense_norm(dense(h)) +
    // experts_norm(experts) (DecoderLayerWeights' moe_*). Sandwich blocks.
    bool beside_dense = false;
    kernels::RouterParams router;
    std::vector<bool> layers;
    bool sparse(int l) const { return experts > 0 && (layers.empty() || layers[l]); }
  };
  Moe moe;
  // Each layer's attention (scale, soft-cap, window); n_layer entries
  // (read for the attention layers only).
  std::vector<kernels::AttentionParams> attention;

  // > 0: logits = cap * tanh(logits / cap) (Gemma 2).
  float final_softcap = 0.0f;

  // Gemma 4's per-layer inputs (per_layer_input P > 0): layer l adds, after
  // its MLP, post_norm(proj(gelu_tanh(x gate) * in_l)) to the residual
  // stream x, where in_l = (rms(e0 model_proj_l * C^-1/2, proj_norm) +
  // table_l[token] * sqrt(P)) * 2^-1/2, e0 being the model's scaled
  // embedding of the row's token (DecoderLayerWeights' ple_*: the layer's P
  // columns of the per-layer table and rows of the model's projection). Every
  // rank computes them whole.
  int per_layer_input = 0;
  // Every layer's output, the whole residual stream, times a scalar of its
  // own (Gemma 4's layer_scalar).
  bool layer_scale = false;

  // A multi-token-prediction layer (Qwen3.5's MTP; the model is its one
  // layer): each row's input is a pair, its token and a row of the main
  // model's final hidden state (ForwardBatch::hidden, after the main
  // model's final norm), x = eh_e enorm(embed(token)) + eh_h hnorm(hidden)
  // (the halves of its [C, 2C] projection over [embedding | hidden]); the
  // final norm is the layer's own, the embedding and head the main model's.
  bool mtp_input = false;

  // The window every attention layer attends within (the largest of
  // theirs), or 0 if some layer attends the whole context: positions a row
  // reads back.
  int KvWindow() const;

  // OK, or InvalidArgument naming what does not fit.
  absl::Status Validate() const;
};

// What one tensor-parallel rank holds: whole groups of query heads with
// their key/value heads, a band of the MLP, a vocabulary range (embedding
// and head); the row-split layers' biases are added by rank 0 alone.
struct DecoderShard {
  int tp_size = 1, tp_rank = 0;
  int q_heads = 0, q_head_begin = 0;
  int kv_heads = 0, kv_head_begin = 0;  // of n_kv_head; a layer's own: kv_heads_of
  int inner = 0, inner_begin = 0;       // of intermediate; a layer's own: inner_of
  int expert_inner = 0, expert_inner_begin = 0;  // each expert's band (moe)
  int shared_inner = 0, shared_inner_begin = 0;  // the shared expert's band (moe)
  int vocab_begin = 0, vocab_end = 0;
  bool adds_replicated_bias = true;
  // Recurrent layers: the gated delta net's key and value heads (whole
  // groups), and the short convolution's band of channels.
  int dn_k_heads = 0, dn_k_head_begin = 0;
  int dn_v_heads = 0, dn_v_head_begin = 0;
  int conv_channels = 0, conv_channel_begin = 0;
  // Mamba-2: whole groups with their heads.
  int mamba_groups = 0, mamba_group_begin = 0;
  int mamba_heads = 0, mamba_head_begin = 0;

  // A rank's key/value heads of `kv_heads`: a band of kv_heads / tp whole
  // heads, or, with fewer heads than ranks (tp a multiple of them: Gemma 4's
  // one head), the one head its query heads read, kept on every rank that
  // reads it (replicated, as vLLM does).
  struct Band {
    int begin = 0, count = 0;
  };
  static Band KvBand(int kv_heads, int tp, int rank) {
    if (kv_heads >= tp) return {rank * (kv_heads / tp), kv_heads / tp};
    return {rank * kv_heads / tp, 1};
  }
  // Layer l's key/value heads on this rank, and the first's index; its
  // dense MLP's band.
  int kv_heads_of(const DecoderSpec& c, int l) const { return KvBand(c.kv_heads_of(l), tp_size, tp_rank).count; }
  int kv_head_begin_of(const DecoderSpec& c, int l) const {
    return KvBand(c.kv_heads_of(l), tp_size, tp_rank).begin;
  }
  int inner_of(const DecoderSpec& c, int l) const { return c.intermediate_of(l) / tp_size; }
  int inner_begin_of(const DecoderSpec& c, int l) const { return tp_rank * inner_of(c, l); }
};

// OK when `spec.tp_size` divides the key/value heads (and so the query
// heads), the MLP width and the experts' width, the gated delta net's key
// heads or the short convolution's channels, and the model has no norm
// across heads (qk_norm_whole) with tp > 1; InvalidArgument naming what
// does not fit.
absl::Status ValidateDecoderShard(const DecoderSpec& model, const ShardSpec& spec);
DecoderShard DecoderShardOf(const DecoderSpec& model, const ShardSpec& spec);

}  // namespace flover

#endif  // FLOVER_MODEL_DECODER_DECODER_SPEC_H_
