// Parameters of the backend ops that model families differ in, kept free of
// Abseil so that CUDA sources see the same definitions (kernels/backend.h
// has the ops).
#ifndef FLOVER_KERNELS_OP_PARAMS_H_
#define FLOVER_KERNELS_OP_PARAMS_H_

namespace flover::kernels {

// How Attention scores a row's query against its sequence's keys: what the
// model families differ in (Mistral's sliding window; Gemma 2's scale from
// query_pre_attn_scalar, score soft-capping and alternating local layers).
struct AttentionParams {
  // Multiplies q . k; 0 means 1 / sqrt(head_dim).
  float scale = 0.0f;
  // > 0: each scaled score s becomes softcap * tanh(s / softcap) before the
  // softmax.
  float softcap = 0.0f;
  // > 0: a row at position p attends positions [p - window + 1, p] only.
  int window = 0;
  // Attention sinks (gpt-oss): null, or one logit per query head (the
  // heads of `qkv`, in the backend's memory) that joins each row's softmax
  // as one more score with no value: its denominator grows by exp(sink).
  const float* sinks = nullptr;
  // qkv holds Q alone, [T, Hq * D], not [Q | K | V]: the layer reads the K
  // and V another layer appended (Gemma 4's shared KV).
  bool q_only = false;
};

// The activation of a gated MLP: out = act(gate) * up.
enum class GluKind {
  kSilu,      // SwiGLU (Llama, Qwen2, Mistral, Phi-3)
  kGeluTanh,  // GeGLU with gelu's tanh approximation (Gemma 2's gelu_pytorch_tanh)
  // gpt-oss's clamped SwiGLU: g = min(gate, 7), u = clamp(up, -7, 7),
  // out = g * sigmoid(1.702 g) * (u + 1).
  kSwigluOai,
};
// kSwigluOai's constants (transformers' GptOssExperts: alpha, and the
// config's swiglu_limit as every released checkpoint has it).
inline constexpr float kSwigluOaiAlpha = 1.702f;
inline constexpr float kSwigluOaiLimit = 7.0f;

// How a mixture-of-experts router turns a row's logits over E experts into
// k experts and their weights.
struct RouterParams {
  enum class Scoring {
    kSoftmaxTopK,  // softmax over all E, then the k largest (Mixtral, Qwen2/3-MoE, OLMoE)
    kTopKSoftmax,  // the k largest logits, then softmax over those k
  };
  Scoring scoring = Scoring::kSoftmaxTopK;
  int k = 2;
  // kSoftmaxTopK: the k weights divided by their sum (Mixtral, Qwen3-MoE;
  // Qwen2-MoE's and OLMoE's norm_topk_prob).
  bool renormalize = false;
  // Null, or a scale per expert (in the backend's memory) that multiplies
  // its weight last (Gemma 4's per_expert_scale).
  const float* expert_scale = nullptr;
};

// Which dims of a head rotary embeddings turn together.
enum class RopeStyle {
  kHalf,         // i with i + R/2 (Llama, NeoX, Qwen2, Mistral, Phi-3, Gemma)
  kInterleaved,  // 2i with 2i + 1 (GPT-J)
};

// The heads Rope turns and how; R = 2 * inv_freq.cols of each head's first
// dims turn (all of them, R = head_dim, but for partial rotary as GPT-J's).
struct RopeParams {
  int q_heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  RopeStyle style = RopeStyle::kHalf;
  // cos and sin are multiplied by this (LongRoPE's attention factor, as
  // transformers and llama.cpp apply it): the turned dims grow by it, the
  // others do not. 1: plain rotation, bitwise.
  float scale = 1.0f;
  // Multimodal rotary (Qwen2-VL's M-RoPE and after), read where positions
  // has 3 rows (temporal, height, width positions of each row; 1 row: all
  // three equal, plain rotary): how many of the inv_freq.cols frequencies
  // turn by each row, as consecutive sections (t first) or interleaved
  // (Qwen3-VL, Qwen3.5: frequency i by the height row where i % 3 == 1 and
  // i < 3 * h, by the width row where i % 3 == 2 and i < 3 * w, else by the
  // temporal row, as transformers slices them). Consecutive sections must
  // add up to inv_freq.cols.
  int mrope_t = 0, mrope_h = 0, mrope_w = 0;
  bool mrope_interleaved = false;
};

// Which row of a multimodal rotary's positions turns frequency i (see
// RopeParams::mrope_t): 0 temporal, 1 height, 2 width.
inline int MropeRow(const RopeParams& p, int i) {
  if (p.mrope_interleaved) {
    if (i % 3 == 1 && i < 3 * p.mrope_h) return 1;
    if (i % 3 == 2 && i < 3 * p.mrope_w) return 2;
    return 0;
  }
  return i < p.mrope_t ? 0 : i < p.mrope_t + p.mrope_h ? 1 : 2;
}

// out = x * act(gate), elementwise (Gate): Qwen3.5's attention output gate
// (sigmoid), a gated RMSNorm's gate (silu), LFM2's B * x and C * y
// (identity), Gemma 4's per-layer input times its gate (gelu's tanh form,
// as Glu's kGeluTanh computes it).
enum class GateKind {
  kIdentity,
  kSigmoid,
  kSilu,
  kGeluTanh,
};

// What follows a causal convolution (CausalConv): nothing (LFM2's short
// convolution) or SiLU (the gated delta net's and Mamba's).
enum class ConvActivation {
  kNone,
  kSilu,
};

// The longest causal convolution kernel (Qwen3.5's is 4, LFM2's 3).
inline constexpr int kMaxConvKernel = 16;
// The largest key and value head sizes of the gated delta rule.
inline constexpr int kMaxDeltaHeadDim = 256;

// The gated delta rule's heads (GatedDeltaRule), this rank's: value head h
// reads key head key_head(h).
struct DeltaRuleParams {
  int k_heads = 0;
  int v_heads = 0;  // a multiple of k_heads
  int k_dim = 0;
  int v_dim = 0;
  // How value heads share key heads: grouped, as Hugging Face's checkpoints
  // (value head h reads key head h / (v_heads / k_heads)), or tiled, as
  // llama.cpp writes GGUF files (h % k_heads).
  bool tiled = false;
#if defined(__CUDACC__)
  __host__ __device__
#endif
  int key_head(int h) const {
    return tiled ? h % k_heads : h / (v_heads / k_heads);
  }
};

// Mamba-2's selective scan (SelectiveScan), this rank's heads: `heads`
// heads of head_dim channels, in `groups` groups sharing B and C of
// state_size each (head h reads group h / (heads / groups)); dt after
// softplus is clamped to [dt_min, dt_max] (time_step_limit; 0 and +inf:
// no clamp).
struct ScanParams {
  int heads = 0;
  int head_dim = 0;
  int groups = 0;
  int state_size = 0;
  float dt_min = 0.0f;
  float dt_max = 3.402823466e38f;
};

// The largest Mamba-2 state size.
inline constexpr int kMaxScanStateSize = 256;

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_OP_PARAMS_H_
