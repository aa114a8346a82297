#include "model/llama/llama_family.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/llama/llama_architecture.h"

namespace flover {
namespace {

// A norm's weight, (1 + w) for Gemma's and Qwen3.5's (in GGUF files the
// one is already added).
WeightRecipe NormRecipe(const LlamaConfig& c, std::string name, int64_t n) {
  const bool plus_one =
      (c.arch().gemma_norms || c.arch().zero_centered_norms) && !c.arch().plain_norms && !c.norms_stored_plus_one;
  WeightRecipe w = Whole(std::move(name), {n});
  return plus_one ? PlusOne(std::move(w)) : w;
}

// An attention layer's: q/k/v (and the output gate), Q/K norms, o_proj.
void AttentionRecipes(const LlamaConfig& c, int l, const DecoderShard& sh, DecoderLayerWeights& L,
                      const DecoderRecipes::Visit& visit) {
  auto norm = [&](std::string name, int64_t n) { return NormRecipe(c, std::move(name), n); };
  // This layer's heads (Gemma 4's global layers differ from its local ones).
  const int64_t C = c.hidden, D = c.head_dim_of(l), Q = int64_t{c.n_head} * D, KV = int64_t{c.kv_heads_of(l)} * D;
  const DecoderShard::Band kv = DecoderShard::KvBand(c.kv_heads_of(l), sh.tp_size, sh.tp_rank);
  const bool fused = c.arch().fused_projections;
  const int64_t q0 = sh.q_head_begin * D, q1 = q0 + sh.q_heads * D;
  const int64_t k0 = int64_t{kv.begin} * D, k1 = k0 + int64_t{kv.count} * D;
  const std::string p = absl::StrCat("model.layers.", l, ".");
  if (c.kv_from(l) >= 0) {  // reads another layer's K and V: Q alone (Gemma 4)
    visit(RowSlice(p + "self_attn.q_proj.weight", {Q, C}, q0, q1), &L.qkv);
    if (c.arch().qk_norm) visit(norm(p + "self_attn.q_norm.weight", D), &L.q_norm);
    visit(ColSlice(p + "self_attn.o_proj.weight", {C, Q}, q0, q1), &L.o);
    return;
  }
  // V is K's projection where the layer has no v_proj (Gemma 4's global
  // layers with attention_k_eq_v): the same rows twice.
  const std::string v_proj = c.v_is_k(l) ? "self_attn.k_proj.weight" : "self_attn.v_proj.weight";
  // Q by query heads, K and V by key/value heads: whole GQA groups.
  if (c.arch().attn_output_gate) {
    // q_proj: [2Q, C], each head's Q rows then its gate's.
    std::vector<WeightRecipe> q, gate;
    for (int64_t h = sh.q_head_begin; h < sh.q_head_begin + sh.q_heads; ++h) {
      q.push_back(RowSlice(p + "self_attn.q_proj.weight", {2 * Q, C}, 2 * h * D, 2 * h * D + D));
      gate.push_back(RowSlice(p + "self_attn.q_proj.weight", {2 * Q, C}, 2 * h * D + D, 2 * h * D + 2 * D));
    }
    q.push_back(RowSlice(p + "self_attn.k_proj.weight", {KV, C}, k0, k1));
    q.push_back(RowSlice(p + "self_attn.v_proj.weight", {KV, C}, k0, k1));
    visit(Stack(WeightRecipe::kRows, std::move(q)), &L.qkv);
    visit(Stack(WeightRecipe::kRows, std::move(gate)), &L.attn_gate);
  } else if (fused) {
    visit(FusedRows(p + "self_attn.qkv_proj.weight", {Q, KV, KV}, C, {{q0, q1}, {k0, k1}, {k0, k1}}),
          &L.qkv);
  } else {
    visit(Stack(WeightRecipe::kRows, {RowSlice(p + "self_attn.q_proj.weight", {Q, C}, q0, q1),
                                      RowSlice(p + "self_attn.k_proj.weight", {KV, C}, k0, k1),
                                      RowSlice(p + v_proj, {KV, C}, k0, k1)}),
          &L.qkv);
  }
  if (c.qkv_bias) {  // one row of the q, k and v biases side by side
    visit(Stack(WeightRecipe::kCols, {ColSlice(p + "self_attn.q_proj.bias", {Q}, q0, q1),
                                      ColSlice(p + "self_attn.k_proj.bias", {KV}, k0, k1),
                                      ColSlice(p + "self_attn.v_proj.bias", {KV}, k0, k1)}),
          &L.qkv_b);
  }
  if (c.arch().qk_norm_whole) {  // [Q] and [KV], over all heads (one rank: ValidateDecoderShard)
    visit(norm(p + "self_attn.q_norm.weight", Q), &L.q_norm);
    visit(norm(p + "self_attn.k_norm.weight", KV), &L.k_norm);
  } else if (c.arch().qk_norm) {  // one [D] weight each, shared by the heads: every rank reads it whole
    visit(norm(p + "self_attn.q_norm.weight", D), &L.q_norm);
    visit(norm(p + "self_attn.k_norm.weight", D), &L.k_norm);
  }
  visit(ColSlice(p + "self_attn.o_proj.weight", {C, Q}, q0, q1), &L.o);
  if (c.o_bias) {  // added once: by rank 0
    visit(sh.adds_replicated_bias ? Whole(p + "self_attn.o_proj.bias", {C}) : Zeros(C), &L.o_b);
  }
  if (c.attention_sinks) {  // this rank's query heads'
    visit(ColSlice(p + "self_attn.sinks", {c.n_head}, sh.q_head_begin, sh.q_head_begin + sh.q_heads), &L.sinks);
  }
}

// A layer's MLP: dense, or the experts' (and the shared expert's).
// A layer's MLP: dense, or the experts' (and the shared expert's).
void MlpRecipes(const LlamaConfig& c, int l, const DecoderShard& sh, DecoderLayerWeights& L,
                const DecoderRecipes::Visit& visit) {
  const int64_t C = c.hidden, F = c.intermediate_of(l);
  const bool fused = c.arch().fused_projections;
  const int64_t f0 = sh.tp_rank * (F / sh.tp_size), f1 = f0 + F / sh.tp_size;
  const std::string p = absl::StrCat("model.layers.", l, ".");
  if (c.sparse(l)) {  // the router whole; each expert's band of its MLP, as a dense MLP's
    const LlamaArchitecture& a = c.arch();
    const int64_t E = c.experts, FE = c.expert_intermediate;
    const int64_t e0 = sh.expert_inner_begin, e1 = e0 + sh.expert_inner;
    visit(Whole(absl::StrCat(p, a.moe_router, ".weight"), {E, C}), &L.router);
    L.expert_up.resize(E);
    L.expert_down.resize(E);
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = absl::StrCat(p, a.moe_experts, ".", e, ".");
      visit(Stack(WeightRecipe::kRows, {RowSlice(absl::StrCat(x, a.moe_gate, ".weight"), {FE, C}, e0, e1),
                                        RowSlice(absl::StrCat(x, a.moe_up, ".weight"), {FE, C}, e0, e1)}),
            &L.expert_up[e]);
      visit(ColSlice(absl::StrCat(x, a.moe_down, ".weight"), {C, FE}, e0, e1), &L.expert_down[e]);
    }
    if (c.moe_biases) {  // the router's whole; each expert's band of gate and up; down's once (rank 0)
      const std::string x = absl::StrCat(p, a.moe_experts, ".");
      visit(Whole(absl::StrCat(p, a.moe_router, ".bias"), {E}), &L.router_b);
      visit(Stack(WeightRecipe::kCols, {ColSlice(x + "gate_bias", {E, FE}, e0, e1),
                                        ColSlice(x + "up_bias", {E, FE}, e0, e1)}),
            &L.expert_up_b);
      visit(sh.adds_replicated_bias ? Whole(x + "down_bias", {E, C}) : Zeros(E * C), &L.expert_down_b);
    }
    if (c.shared_expert_intermediate > 0) {  // Qwen2-MoE's: a band of it, and its gate whole
      const int64_t FS = c.shared_expert_intermediate;
      const int64_t s0 = sh.shared_inner_begin, s1 = s0 + sh.shared_inner;
      visit(Stack(WeightRecipe::kRows, {RowSlice(p + "mlp.shared_expert.gate_proj.weight", {FS, C}, s0, s1),
                                        RowSlice(p + "mlp.shared_expert.up_proj.weight", {FS, C}, s0, s1)}),
            &L.up);
      visit(ColSlice(p + "mlp.shared_expert.down_proj.weight", {C, FS}, s0, s1), &L.down);
      if (a.shared_expert_gated) visit(Whole(p + "mlp.shared_expert_gate.weight", {1, C}), &L.shared_gate);
    }
    return;
  }
  if (fused) {  // gate_up_proj: [2F, C], gate rows then up rows
    visit(FusedRows(p + "mlp.gate_up_proj.weight", {F, F}, C, {{f0, f1}, {f0, f1}}), &L.up);
  } else {
    visit(Stack(WeightRecipe::kRows, {RowSlice(p + "mlp.gate_proj.weight", {F, C}, f0, f1),
                                      RowSlice(p + "mlp.up_proj.weight", {F, C}, f0, f1)}),
          &L.up);
  }
  visit(ColSlice(p + "mlp.down_proj.weight", {C, F}, f0, f1), &L.down);
}

}  // namespace

DecoderSpec LlamaDecoderSpec(const LlamaConfig& c) {
  DecoderSpec s;
  s.n_layer = c.n_layer;
  s.hidden = c.hidden;
  s.n_head = c.n_head;
  s.n_kv_head = c.n_kv_head;
  s.head_dim = c.head_dim;
  s.intermediate = c.intermediate;
  s.vocab_size = c.vocab_size;
  s.max_positions = c.max_positions;
  s.norm = DecoderSpec::Norm::kRmsNorm;
  s.norm_eps = c.rms_norm_eps;
  s.block = DecoderSpec::Block::kSequential;
  s.mlp = DecoderSpec::Mlp::kGlu;
  s.glu = kernels::GluKind::kSilu;
  s.layout = kernels::WeightLayout::kOutIn;
  s.inv_freq = RopeInvFreq(c);
  s.rope_style = kernels::RopeStyle::kHalf;
  s.mrope_t = c.mrope[0];
  s.mrope_h = c.mrope[1];
  s.mrope_w = c.mrope[2];
  s.mrope_interleaved = c.mrope_interleaved;
  s.given_layers = c.given_layers;
  // LongRoPE scales cos and sin: the turned dims of q and k.
  if (c.rope_scaling.type == RopeScaling::Type::kLongRope || c.rope_scaling.type == RopeScaling::Type::kYarn) {
    s.rope_scale = static_cast<float>(c.rope_scaling.attention_factor);
  }
  for (int l = 0; l < c.n_layer; ++l) {
    kernels::AttentionParams a;
    if (c.query_pre_attn_scalar > 0) a.scale = static_cast<float>(1.0 / std::sqrt(c.query_pre_attn_scalar));
    a.softcap = c.attn_logit_softcapping;
    a.window = c.sliding_layers.empty() || c.sliding_layers[l] != 0 ? c.sliding_window : 0;
    s.attention.push_back(a);
  }
  s.final_softcap = c.final_logit_softcapping;
  for (int32_t v : c.rope_layers) s.rope_layers.push_back(v != 0);
  if (c.rope_layers.empty() && c.no_rope_interval > 0) {
    for (int l = 0; l < c.n_layer; ++l) s.rope_layers.push_back((l + 1) % c.no_rope_interval != 0);
  }
  // Layers whose heads, cache or MLP differ from the others' (Gemma 4).
  if (c.global_head_dim > 0 || c.global_kv_heads > 0 || c.kv_shared_layers > 0) {
    for (int l = 0; l < c.n_layer; ++l) s.layer_attention.push_back({c.kv_heads_of(l), c.head_dim_of(l), c.kv_from(l)});
  }
  if (c.double_wide_mlp) {
    for (int l = 0; l < c.n_layer; ++l) s.layer_intermediate.push_back(c.intermediate_of(l));
  }
  s.qk_norm = c.arch().qk_norm;
  s.qk_norm_whole = c.arch().qk_norm_whole;
  s.attention_sinks = c.attention_sinks;
  s.attn_output_gate = c.arch().attn_output_gate;
  for (LlamaConfig::LayerKind kind : c.layer_kinds) {
    using Kind = LlamaConfig::LayerKind;
    s.mixers.push_back(kind == Kind::kAttention         ? DecoderSpec::Mixer::kAttention
                       : kind == Kind::kLinearAttention ? DecoderSpec::Mixer::kGatedDeltaNet
                       : kind == Kind::kMamba2          ? DecoderSpec::Mixer::kMamba2
                                                        : DecoderSpec::Mixer::kShortConv);
  }
  s.recurrent = {c.conv_kernel, c.linear_k_heads, c.linear_v_heads, c.linear_k_dim, c.linear_v_dim,
                 c.linear_tiled, !c.decay_stored};
  s.recurrent.heads = c.mamba_heads;
  s.recurrent.head_dim = c.mamba_head_dim;
  s.recurrent.groups = c.mamba_groups;
  s.recurrent.state_size = c.mamba_state;
  s.recurrent.dt_min = static_cast<float>(c.dt_min);
  s.recurrent.dt_max = static_cast<float>(std::min(c.dt_max, 3.402823466e38));
  s.recurrent.conv_bias = c.mamba_conv_bias;
  // Granite's multipliers (1 elsewhere) and attention without rotary
  // embeddings; its logits' divisor is in the final norm's weights.
  s.embed_scale = static_cast<float>(c.embedding_multiplier);
  s.residual_scale = static_cast<float>(c.residual_multiplier);
  if (c.attention_multiplier > 0) {
    for (kernels::AttentionParams& a : s.attention) a.scale = static_cast<float>(c.attention_multiplier);
  }
  if (c.no_rope) s.inv_freq.clear();
  if (c.experts > 0) {
    s.moe.experts = c.experts;
    s.moe.intermediate = c.expert_intermediate;
    s.moe.shared_intermediate = c.shared_expert_intermediate;
    s.moe.shared_gated = c.arch().shared_expert_gated;
    s.moe.router.scoring = kernels::RouterParams::Scoring::kSoftmaxTopK;
    s.moe.router.k = c.experts_per_tok;
    s.moe.router.renormalize = c.norm_topk_prob;
    s.moe.biases = c.moe_biases;
    bool all = true;
    for (int l = 0; l < c.n_layer; ++l) all = all && c.sparse(l);
    if (!all) {
      for (int l = 0; l < c.n_layer; ++l) s.moe.layers.push_back(c.sparse(l));
    }
  }
  // What the architecture changes (Gemma 2's block, activation, scaled
  // embeddings and global layers).
  if (c.arch().spec != nullptr) c.arch().spec(c, &s);
  return s;
}

DecoderRecipes LlamaRecipes(const LlamaConfig& c) {
  DecoderRecipes r;
  const int64_t C = c.hidden, V = c.vocab_size;
  const bool gemma2 = c.arch().gemma_norms;
  auto norm = [c](std::string name, int64_t n) { return NormRecipe(c, std::move(name), n); };
  r.embedding = [=](const DecoderShard& sh) {
    return RowSlice("model.embed_tokens.weight", {V, C}, sh.vocab_begin, sh.vocab_end);
  };
  r.globals = [=](const DecoderShard& sh, DecoderWeights& w, const DecoderRecipes::Visit& visit) {
    // Granite's logits divided by logits_scaling: the final norm's weights.
    visit(c.logits_scaling != 1.0 ? Scaled(norm("model.norm.weight", C), static_cast<float>(1.0 / c.logits_scaling))
                                  : norm("model.norm.weight", C),
          &w.norm);
    if (!c.tie_word_embeddings) {
      visit(RowSlice("lm_head.weight", {V, C}, sh.vocab_begin, sh.vocab_end), &w.lm_head);
    }
  };
  if (c.ple_dim > 0) {  // Gemma 4's per-layer embeddings
    r.per_layer_table = [=] {
      return Whole("model.embed_tokens_per_layer.weight", {c.ple_vocab, int64_t{c.n_layer} * c.ple_dim});
    };
  }
  r.layer = [=](int l, const DecoderShard& sh, DecoderLayerWeights& L,
                const DecoderRecipes::Visit& visit) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    visit(norm(p + "input_layernorm.weight", C), &L.norm1);
    if (gemma2) {  // post_attention_layernorm is Gemma's norm of the attention's output
      visit(norm(p + "post_attention_layernorm.weight", C), &L.post_attn_norm);
      visit(norm(p + "pre_feedforward_layernorm.weight", C), &L.norm2);
      visit(norm(p + "post_feedforward_layernorm.weight", C), &L.post_mlp_norm);
    } else {       // and Llama's norm before the MLP
      visit(norm(p + "post_attention_layernorm.weight", C), &L.norm2);
    }
    if (c.layer_kind(l) != LlamaConfig::LayerKind::kAttention) {
      RecurrentLayerRecipes(c, l, sh, L, visit);
    } else {
      AttentionRecipes(c, l, sh, L, visit);
    }
    MlpRecipes(c, l, sh, L, visit);
    if (c.arch().layer_recipes != nullptr) c.arch().layer_recipes(c, l, sh, L, visit);
  };
  return r;
}

namespace {

// The config with the multi-token-prediction layer as one more attention
// layer after the model's (its index n_layer, as llama.cpp's files keep it).
LlamaConfig WithMtpLayer(const LlamaConfig& c) {
  LlamaConfig m = c;
  m.n_layer = c.n_layer + 1;
  if (!m.layer_kinds.empty()) m.layer_kinds.push_back(LlamaConfig::LayerKind::kAttention);
  return m;
}

template <typename T>
void KeepLast(std::vector<T>* v) {
  if (!v->empty()) v->erase(v->begin(), v->end() - 1);
}

}  // namespace

DecoderSpec LlamaMtpSpec(const LlamaConfig& c) {
  const LlamaConfig m = WithMtpLayer(c);
  DecoderSpec s = LlamaDecoderSpec(m);
  s.n_layer = 1;
  KeepLast(&s.mixers);
  KeepLast(&s.attention);
  KeepLast(&s.moe.layers);
  KeepLast(&s.rope_layers);
  KeepLast(&s.local_rope);
  s.mtp_input = true;
  return s;
}

DecoderRecipes LlamaMtpRecipes(const LlamaConfig& c) {
  const LlamaConfig m = WithMtpLayer(c);
  const DecoderRecipes base = LlamaRecipes(m);
  const int n = c.n_layer;
  const int64_t C = c.hidden;
  DecoderRecipes r;
  r.embedding = base.embedding;
  r.layer = [base, n](int l, const DecoderShard& sh, DecoderLayerWeights& L, const DecoderRecipes::Visit& visit) {
    base.layer(n + l, sh, L, visit);
  };
  // Its own norms and projection under llama.cpp's nextn names (the
  // checkpoint's mtp.* through StoredLlamaName); the embedding and head are
  // the model's.
  r.globals = [m, n, C](const DecoderShard&, DecoderWeights& w, const DecoderRecipes::Visit& visit) {
    const std::string p = absl::StrCat("model.layers.", n, ".nextn.");
    visit(NormRecipe(m, p + "shared_head_norm.weight", C), &w.norm);
    visit(NormRecipe(m, p + "enorm.weight", C), &w.mtp_enorm);
    visit(NormRecipe(m, p + "hnorm.weight", C), &w.mtp_hnorm);
    visit(ColSlice(p + "eh_proj.weight", {C, 2 * C}, 0, C), &w.mtp_eh_e);
    visit(ColSlice(p + "eh_proj.weight", {C, 2 * C}, C, 2 * C), &w.mtp_eh_h);
  };
  return r;
}

absl::StatusOr<DecoderWeights> LoadLlamaWeights(const WeightSource& source,
                                                const LlamaConfig& config, const ShardSpec& spec,
                                                WeightPart part) {
  if (absl::Status st = config.Validate(); !st.ok()) return st;
  return LoadDecoderWeights(source, LlamaDecoderSpec(config), LlamaRecipes(config), spec, part);
}

std::unique_ptr<WeightSource> GeneratedLlamaSource(const LlamaConfig& config, uint64_t seed,
                                                   std::optional<kernels::BlockFormat> blocks) {
  const bool tied = config.tie_word_embeddings;
  return std::make_unique<GeneratedSource>(
      seed,
      [tied](absl::string_view name) {
        using Fill = GeneratedSource::Fill;
        if (name == "lm_head.weight" && tied) return Fill::kAbsent;
        if (absl::EndsWith(name, ".bias")) return Fill::kZeros;
        if (absl::EndsWith(name, "norm.weight") || absl::EndsWith(name, ".layer_scalar")) return Fill::kOnes;
        // The linear layers (blocks when a format is given; the embedding
        // stays float, as a GGUF file's may).
        if (absl::EndsWith(name, "_proj.weight") || name == "lm_head.weight" ||
            absl::StrContains(name, ".experts.") || absl::StrContains(name, ".in_proj_")) {
          return Fill::kBlocks;
        }
        return Fill::kRandom;
      },
      blocks);
}

}  // namespace flover
