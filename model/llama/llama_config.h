// Llama-family hyper-parameters, parsed from a Hugging Face config.json
// (any model_type in llama_architecture.h's table; the keys the family
// shares here, each architecture's own through its entry) or given by a
// built-in model, checked before any memory is sized from them; and the
// rotary frequencies they imply.
#ifndef FLOVER_MODEL_LLAMA_LLAMA_CONFIG_H_
#define FLOVER_MODEL_LLAMA_LLAMA_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/struct.pb.h"
#include "model/model_info.h"

namespace flover {

struct RopeScaling {
  // kLongRope (Phi-3.5, Phi-4-mini; "su" in older configs): per-frequency
  // divisors, short_factor when the model serves up to
  // original_max_positions (the default) and long_factor at every position
  // when it serves more, up to long_max_positions (ServeLlamaContext), and
  // cos/sin scaled by sqrt(1 + ln(long_max / original) / ln(original)) in
  // both cases.
  // kYarn (gpt-oss): the frequencies below the ramp [low, high] between the
  // dims that turn beta_fast and beta_slow times over the original context
  // divided by the factor, those above kept, the ramp's between
  // interpolated; with truncate the ramp's ends floored and ceiled (as
  // transformers' default; gpt-oss's config turns it off); cos and sin
  // times attention_factor (0.1 ln(factor) + 1 unless the config says).
  enum class Type { kNone, kLinear, kLlama3, kLongRope, kYarn };
  Type type = Type::kNone;
  double factor = 1.0;
  // llama3 only:
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_positions = 8192;
  // longrope only:
  std::vector<float> short_factor, long_factor;
  double attention_factor = 1.0;  // the cos/sin scale (longrope, yarn)
  // yarn only (original_max_positions is its original context):
  double beta_fast = 32.0, beta_slow = 1.0;
  bool truncate = true;
  int long_max_positions = 0;     // max_position_embeddings: what the long factors reach
  bool use_long = false;          // the long factors (serving past original_max_positions)
};

struct LlamaArchitecture;

struct LlamaConfig {
  // model_type: "llama", "mistral", "phi3" (q/k/v and gate/up stored fused),
  // "qwen2" or "gemma2": one of LlamaArchitectures().
  std::string architecture = "llama";
  bool qkv_bias = false;               // q, k and v projections have biases (Qwen2)
  int n_layer = 0;
  int hidden = 0;          // hidden_size
  int n_head = 0;          // num_attention_heads
  int n_kv_head = 0;       // num_key_value_heads (= n_head without GQA)
  int head_dim = 0;        // head_dim, or hidden / n_head
  int intermediate = 0;    // intermediate_size (the SwiGLU width)
  int vocab_size = 0;
  int max_positions = 0;   // max_position_embeddings
  float rms_norm_eps = 1e-6f;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  // Phi-4-mini's partial rotary: only the first rotary_dim dims of each
  // head turn (config.json's partial_rotary_factor x head_dim, as
  // transformers rounds it; GGUF's rope.dimension_count). 0: all of them.
  double partial_rotary_factor = 1.0;
  int rotary_dim = 0;
  // > 0: every layer attends to the last sliding_window positions only
  // (Mistral's sliding_window; Gemma 2's even layers only).
  int sliding_window = 0;
  // Per layer, 1 where the window applies and 0 where the layer attends to
  // everything (gpt-oss's layer_types of sliding_attention and
  // full_attention); empty: the window applies to every layer.
  std::vector<int32_t> sliding_layers;
  // gpt-oss: a bias on attention's output projection (its attention_bias
  // puts biases on q, k, v and o), a learned sink logit per query head
  // (self_attn.sinks), and biases on the router and on each expert's gate,
  // up and down projections.
  bool o_bias = false;
  bool attention_sinks = false;
  bool moe_biases = false;
  // Gemma 2: > 0, attention scores are scaled by query_pre_attn_scalar^-1/2
  // (else head_dim^-1/2); > 0, scores and logits are soft-capped.
  double query_pre_attn_scalar = 0;
  float attn_logit_softcapping = 0;
  float final_logit_softcapping = 0;
  // Gemma 3: every sliding_window_pattern-th layer is global (rope_theta,
  // with rope_scaling), the others local: windowed, turning by
  // rope_local_base (no scaling).
  int sliding_window_pattern = 0;
  double rope_local_base = 0;
  // Per-frequency divisors of the rotary frequencies (head_dim / 2 of them,
  // or none): how GGUF files carry llama3 scaling (rope_freqs.weight).
  std::vector<float> rope_freq_factors;
  // A mixture of experts (experts > 0: Mixtral, Qwen3-MoE, OLMoE): the
  // MLP of each sparse layer is a router choosing experts_per_tok of
  // `experts` gated MLPs of width expert_intermediate, their weights a
  // softmax over all experts, renormalised over the chosen ones with
  // norm_topk_prob. Layer l is sparse when (l + 1) is a multiple of
  // sparse_step and l is not in dense_layers (Qwen's decoder_sparse_step
  // and mlp_only_layers); the others have the dense MLP of `intermediate`.
  int experts = 0, experts_per_tok = 0, expert_intermediate = 0;
  bool norm_topk_prob = false;
  // > 0: a shared expert of this width in every sparse layer, gated by a
  // sigmoid (Qwen2-MoE's shared_expert_intermediate_size).
  int shared_expert_intermediate = 0;
  int sparse_step = 1;
  std::vector<int32_t> dense_layers;
  bool tie_word_embeddings = false;
  // SmolLM3: per layer, 1 where it turns by rotary embeddings, 0 where it
  // does not (no_rope_layers; empty: every layer turns).
  std::vector<int32_t> rope_layers;
  // Without that list, > 0: every no_rope_interval-th layer goes without.
  int no_rope_interval = 0;
  // Gemma's (1 + w) norm weights stored with the one added (llama.cpp's
  // converter does so in GGUF files): read as they are.
  bool norms_stored_plus_one = false;
  std::vector<int32_t> eos_token_ids;  // may be empty
  int32_t bos_token_id = -1;

  // Hybrid models (architectures with LlamaArchitecture::layer_types):
  // each layer's kind, from config.json's layer_types ("full_attention",
  // "linear_attention": Qwen3.5's gated delta net, "conv": LFM2's short
  // convolution, "mamba": Granite 4.0-H's Mamba-2); empty: attention in
  // every layer.
  enum class LayerKind : uint8_t { kAttention, kLinearAttention, kShortConv, kMamba2 };
  std::vector<LayerKind> layer_kinds;
  // The recurrent layers' causal convolution (linear_conv_kernel_dim,
  // LFM2's conv_L_cache), and the gated delta net's heads
  // (linear_num_key_heads, linear_num_value_heads, linear_key_head_dim,
  // linear_value_head_dim).
  int conv_kernel = 0;
  int linear_k_heads = 0, linear_v_heads = 0, linear_k_dim = 0, linear_v_dim = 0;
  // As llama.cpp's converter writes GGUF files: the delta net's value heads
  // tiled over its key heads (in transformers' checkpoints each key head's
  // value heads are together), and A stored as -exp(A_log).
  bool linear_tiled = false;
  bool decay_stored = false;
  // Qwen3-Next's checkpoints pack q, k, v and z per key head in
  // in_proj_qkvz (and b, a in in_proj_ba); llama.cpp's files keep q, k, v
  // and z apart as Qwen3.5's do.
  bool linear_qkvz_packed = false;
  // Its b and a projections in one tensor, each key head's [b | a] for the
  // value heads that read it (Qwen3-Next's in_proj_ba, llama.cpp's ssm_ba).
  bool linear_ba_packed = false;
  // Mamba-2 (Granite 4.0-H): mamba_heads heads of mamba_head_dim in
  // mamba_groups groups with states of mamba_state; its convolution's bias;
  // dt clamped to [dt_min, dt_max] (time_step_limit).
  int mamba_heads = 0, mamba_head_dim = 0, mamba_groups = 0, mamba_state = 0;
  bool mamba_conv_bias = false;
  double dt_min = 0.0, dt_max = 3.402823466e38;
  // Granite's multipliers: the embedding's rows, each branch's output
  // before it joins the residual stream, attention's scores (in place of
  // 1/sqrt(head_dim): 0), and the logits divided by logits_scaling; and
  // attention without rotary embeddings (position_embedding_type "nope").
  double embedding_multiplier = 1.0, residual_multiplier = 1.0, attention_multiplier = 0.0, logits_scaling = 1.0;
  bool no_rope = false;
  // The experts stored as 3-D tensors (the architecture's moe_packed_*
  // names: transformers 5's Qwen3.5-MoE, Granite), not one set per expert.
  bool experts_packed = false;
  // What the text model's tensor names start with in place of "model.":
  // Qwen3.5's released image-text checkpoints keep it under
  // "model.language_model." (its vision tower, "model.visual.", is not read);
  // a base model saved alone (Qwen3-Embedding) has none ("").
  std::string text_prefix = "model.";
  // Qwen3.5's multi-token-prediction layers (mtp_num_hidden_layers; GGUF:
  // nextn_predict_layers, appended after the model's block_count - these
  // blocks): a drafter's, not part of the model's forward (n_layer excludes
  // them).
  int mtp_layers = 0;
  LayerKind layer_kind(int l) const { return layer_kinds.empty() ? LayerKind::kAttention : layer_kinds[l]; }

  // Gemma 4. Its global layers (0 in sliding_layers) have heads of
  // global_head_dim (0: head_dim) and global_kv_heads key/value heads (0:
  // n_kv_head), with V the raw output of K's projection where k_eq_v; they
  // turn by global_rope_theta, only their first global_rope_angles
  // frequencies of global_head_dim / 2 (transformers' "proportional" rope:
  // the others stand still). The local ones turn by rope_local_base. The
  // last kv_shared_layers layers read the K and V of the last earlier layer
  // of their kind and keep none; with double_wide_mlp their MLPs are twice
  // intermediate wide. Per-layer inputs of ple_dim values (0: none), from a
  // table of ple_vocab rows; every layer's output times a scalar of its own
  // where layer_scalars.
  int global_head_dim = 0, global_kv_heads = 0;
  bool k_eq_v = false;
  double global_rope_theta = 0;
  int global_rope_angles = 0;
  int kv_shared_layers = 0;
  bool double_wide_mlp = false;
  int ple_dim = 0, ple_vocab = 0;
  bool layer_scalars = false;
  // Layer l is global (sliding_layers marks it 0).
  bool global_layer(int l) const { return !sliding_layers.empty() && sliding_layers[l] == 0; }
  int head_dim_of(int l) const { return global_head_dim > 0 && global_layer(l) ? global_head_dim : head_dim; }
  int kv_heads_of(int l) const { return global_kv_heads > 0 && global_layer(l) ? global_kv_heads : n_kv_head; }
  bool v_is_k(int l) const { return k_eq_v && global_layer(l); }
  // The layer whose K and V layer l reads (-1: its own).
  int kv_from(int l) const;
  int intermediate_of(int l) const {
    return double_wide_mlp && kv_from(l) >= 0 ? 2 * intermediate : intermediate;
  }

  // The entry of `architecture` (llama's for a name not in the table,
  // which Validate refuses).
  const LlamaArchitecture& arch() const;
  int rotary() const { return rotary_dim > 0 ? rotary_dim : head_dim; }
  // A multimodal rotary (rope_parameters' mrope_section and
  // mrope_interleaved; DecoderSpec::mrope_t): all 0 without one.
  int mrope[3] = {0, 0, 0};
  bool mrope_interleaved = false;
  // Image rows take the vision tower's middle layers' features after this
  // many first layers (Qwen3-VL's deepstack: vision_config's
  // deepstack_visual_indexes); 0: none.
  int given_layers = 0;
  int q_dim() const { return n_head * head_dim; }
  int kv_dim() const { return n_kv_head * head_dim; }
  // Whether layer l's MLP is a mixture of experts.
  bool sparse(int l) const;
  int64_t num_parameters() const;
  absl::Status Validate() const;
};

// The model_types this family reads from config.json (its architectures:
// model/llama/llama_architecture.h).
const std::vector<std::string>& LlamaFamilyTypes();
bool IsLlamaFamily(absl::string_view model_type);

// `s`'s rope_scaling (absent or null: none) into *out: linear, llama3,
// longrope or yarn.
absl::Status ParseRopeScaling(const google::protobuf::Struct& s, absl::string_view what, RopeScaling* out);
// config.json's sliding_window into c->sliding_window, for the
// architectures that apply it: null turns it off, an absent key gives
// `absent`, anything else is 1..kMaxPositions.
absl::Status ParseSlidingWindow(const google::protobuf::Struct& s, absl::string_view what, int absent,
                                LlamaConfig* c);
// A mixture of experts' keys: the number of experts (`experts_key`:
// num_local_experts or num_experts), num_experts_per_tok, the experts'
// width (`width_key`), norm_topk_prob (absent: `renormalize`), and, where
// present, decoder_sparse_step and mlp_only_layers.
absl::Status ParseMoe(const google::protobuf::Struct& s, absl::string_view what, const char* experts_key,
                      const char* width_key, bool renormalize, LlamaConfig* c);
// config.json's layer_types into c->layer_kinds (names other than
// full_attention, linear_attention and conv refused); where absent, LFM2's
// full_attn_idxs or, with a gated delta net, full_attention_interval (4
// when absent). Needs c->n_layer.
absl::Status ParseLayerTypes(const google::protobuf::Struct& s, absl::string_view what, LlamaConfig* c);
// The refusal of a sliding window the architecture does not apply as
// transformers' default path does.
absl::Status SlidingWindowRefused(absl::string_view what, absl::string_view model_type);

// `what` names the file in errors. The family is config.json's model_type
// (llama when absent). Refuses what Flover does not run (other biases, an
// activation other than silu, unknown rope scaling, Qwen2's and Llama's
// sliding windows), naming it.
absl::StatusOr<LlamaConfig> ParseLlamaConfig(absl::string_view json, absl::string_view what);

// The family-independent description.
ModelInfo InfoOf(const LlamaConfig& config);

// YaRN's scale of cos and sin for a context stretched `factor` times, as
// transformers and llama.cpp compute it: 0.1 ln(factor) + 1 (1 for no
// stretch).
double YarnAttentionFactor(double factor);

// inv_freq[i] for i < R / 2 (R = rotary(): head_dim, or the partial
// rotary dims): 1 / theta^(2i / R), with the
// config's rope scaling applied as Hugging Face's transformers applies it
// (linear: divided by the factor; llama3: low frequencies divided by the
// factor, high ones kept, the band between interpolated), and divided by
// rope_freq_factors[i] where the config has them, as llama.cpp does.
std::vector<float> RopeInvFreq(const LlamaConfig& config);

// Makes `config` serve sequences of up to `positions` (LoadedModel::
// ServeContext): a LongRoPE model takes its long factors, and
// max_positions becomes long_max_positions, when `positions` is past
// original_max_positions (as llama.cpp does for a context past it:
// transformers switches to them per forward, where its positions pass the
// original); its short factors and original_max_positions otherwise. Other
// configs are unchanged.
void ServeLlamaContext(LlamaConfig* config, int positions);

}  // namespace flover

#endif  // FLOVER_MODEL_LLAMA_LLAMA_CONFIG_H_
