#!/usr/bin/env python3
"""Writes golden fixtures for Google's Gemma 4 text models (transformers model_type "gemma4",
Gemma4ForConditionalGeneration, text under "gemma4_text"; llama.cpp general.architecture "gemma4").

  gemma4_tiny      a tiny random Gemma4ForConditionalGeneration (transformers 5.23.0, the independent
                   reference) with E2B's text features and 26B / 31B's V = K, as a Hugging Face directory:
                   config.json, model.safetensors (F32, the names save_pretrained writes: checked),
                   golden.json, golden_logits.safetensors
  gemma4_moe_tiny  the same for 26B-A4B's layout (a dense MLP beside a mixture of experts in every layer)
  gguf_gemma4, gguf_gemma4_moe  the same weights as llama.cpp's converter writes a Gemma 4 GGUF (F32),
                   model.gguf, with the same golden files (copied: the same weights, the same logits)

in make_hybrid_golden.py's format:

  golden.json                prompts of 1, 7, 20 and 62 tokens, a 32-step greedy continuation (full
                             recompute each step, no cache, float64) of prompts[1]
  golden_logits.safetensors  logits.{i}: every position of prompt i, float64, stored as float32;
                             logits_bf16.{i} / logits_bf16kv.{i}: transformers in float32 with Flover's
                             bf16 rounding emulated: every nn.Linear's weight and input, both operands of
                             every F.linear (the experts: no nn.Linear there); with kv also the keys
                             (after k_norm and rotary) and values (after v_norm) where they enter the
                             attention (what a K/V cache holds; the KV-shared layers read them rounded)

Layout as released (google/gemma-4-E2B(-it), -26B-A4B(-it), -31B(-it) are Gemma4ForConditionalGeneration):
the text model under model.language_model.*, tied head (no lm_head.weight), and a 1-layer vision tower
(model.vision_tower.*, model.embed_vision.*; hidden 16) beside it, plus, in gemma4_tiny as in E2B / E4B, a
1-layer audio tower (model.audio_tower.*, model.embed_audio.*): 86 / 16 tensors a text loader skips.
config.json is to_json_file's with text_config as released: global_head_dim and num_global_key_value_heads
(which transformers 5.23 pops in __post_init__ and turns into per_layer_config), no per_layer_config;
from_pretrained reads it to the same logits, bit for bit (checked).

The text models (config.json's text_config; both: vocabulary 331 = vocab_size_per_layer_input, hidden 64,
4 query heads, sliding layers: head_dim 16 on num_key_value_heads 2, full layers: global_head_dim 32 on
num_global_key_value_heads 1 with attention_k_eq_v true (no v_proj: V = K), sliding_window 8 (a query sees
itself and the 7 before it; the 62-token prompt and the 39-token greedy sequence cross it), rope_parameters
as released (sliding: default, theta 1e4; full: proportional, partial_rotary_factor 0.25, theta 1e6: 4 of
the 16 pairs rotate), final_logit_softcapping 30, rms_norm_eps 1e-6, gelu_pytorch_tanh, tied, bos 2, eos 1,
pad 0):
  gemma4_tiny      6 layers [S, S, F, S, S, F] (S sliding, F full), num_kv_shared_layers 3: layers 3-5 keep
                   no K/V (no k_proj / v_proj / k_norm), the sliding ones (3, 4) read layer 1's, the full
                   one (5) layer 2's; intermediate_size 96, use_double_wide_mlp: layers 3-5's MLPs are 192
                   wide; hidden_size_per_layer_input 16 (per-layer embeddings: a 331 x 96 table)
  gemma4_moe_tiny  4 layers [S, F, S, F], enable_moe_block: every layer has the dense MLP (intermediate_size
                   48) and 8 experts (moe_intermediate_size 32), top 2 (top_k_experts); no per-layer
                   embeddings (hidden_size_per_layer_input 0), no KV sharing

Weights: as make_hybrid_golden.py's make (initializer_range 0.2; + 0.3 randn on every norm weight, plain w
around 1 here), then embeddings N(0, 1) (logits up to 25, where the soft-cap 30 bends them by up to 11),
q_norm and k_norm weights x 0.35 (gemma4_tiny) / 0.7 (gemma4_moe_tiny) (with scaling 1.0 the scores are
q_norm(q) . k_norm(k): O(1-3), less sharp for bf16), layer_scalar U(0.2, 0.5) (as it scales the whole
residual, the input embedding fades and a random tied model does not just repeat its input), and in the
MoE: router.scale 1 + 0.3 randn, router.per_expert_scale U(0.5, 1.5), post_feedforward_layernorm_2 x 0.5
(a routing flip moves the layer less); the router weights then nudged (tune_routers: router.proj.weight +
0.003 randn, as run 1 nudge in each of the 4 layers) so that no token sits near a routing tie. Seeds 24
and 34 (picked among 20 and 40 for the bf16 floors, the greedy gap and a varied greedy run).

Checks (the script exits otherwise; printed as run):
  - float64 throughout: transformers 5.23 computes Gemma4RMSNorm in float32 (hidden_states.float(),
    weight.float()), the rotary in float32 (positions, inv_freq: also the proportional inv_freq's arange
    and zeros), eager attention's softmax and the router's softmax in float32; the float64 model runs those
    functions recompiled from transformers' own source with the casts edited (each edit counted). No aten
    op of the patched forward narrows below float64 (the unpatched float64 forward narrows in 374 / 388);
    patched minus unpatched float64 logits 1.5e-5 / 5.5e-5 (logits up to 25).
  - the 62-token prompt's full forward equals token by token with the cache and 30 + 20 then token by
    token, to 3e-15 / 7e-15 of the logit scale (the KV-shared layers read the producers' cache);
    config.json + model.safetensors through from_pretrained give the logits bit for bit; transformers' own
    float32 is 2.9e-6 / 4.1e-6 of the logit scale from logits.
  - the model written out in float64 from the formulas below, not from transformers' code, equals
    transformers on every prompt to 3.9e-15 / 8.8e-15 of the logit scale.
  - greedy: best two logits at least MIN_GAP = 1e-3 of the logit scale apart (0.0027 / 0.0068), 18 / 13
    distinct tokens of 32.
  - bf16: logits_bf16 / logits_bf16kv are up to 0.044 / 0.040 (gemma4_tiny) and 0.37 / 0.37
    (gemma4_moe_tiny: routing flips) of the logit scale from logits (medians 0.011 / 0.010, 0.017 / 0.018);
    the same roundings with float64 between them land up to 0.0075 / 0.010 and 0.014 / 0.013 from
    logits_bf16 / logits_bf16kv, the floor for an implementation that rounds where the emulation does.
  - routing (gemma4_moe_tiny): every expert used in every layer (11 to 57 uses of 258), 23 or more distinct
    expert pairs per layer; the 2nd and 3rd routing probabilities (softmax over all 8 router logits) at
    least MIN_MARGIN = 1e-4 apart in float64 (1.4e-4) and both bf16 emulations (2.1e-4, 1.5e-4), which
    route 3 and 2 of 516 token-layers otherwise than float64.
  - each of these changes the float64 logits (of the 62-token prompt) by more than 1e-6 (gemma4_tiny /
    gemma4_moe_tiny): the sliding window (4096 instead of 8: 32 / 36), the local theta (6.5 / 27), the
    global theta (19 / 29), the partial rotary factor (0.5: 7.9 / 27), the proportional exponent over
    head_dim (over the rotated dims instead: 27 / 39), the proportional layout (the first 2n dims rotated
    as NeoX partial rotary instead: 27 / 38), the attention scaling (1/sqrt(D) instead of 1: 25 / 32), v_norm
    (15 / 17), V = K from k_proj's raw output (V = k_norm(K) instead: 14 / 22), layer_scalar (44 / 39),
    the final soft-cap (11 / 9.5), the embedding scale (39 / 37), GELU tanh (erf instead: 0.023 / 0.034);
    gemma4_tiny: which layer the KV-shared sliding layers read (layer 0 instead of 1: 34), the double-wide
    MLP (its second half zeroed: 27), the per-layer token table (28), the projection path (33), the
    table's sqrt(16) (27), and, only through an RMSNorm's eps (a scale before a norm): the 2^-0.5 on the
    sum (9.5e-5) and the projection's hidden^-0.5 (1.3e-5); gemma4_moe_tiny: router.scale (27),
    per_expert_scale (15), the router's hidden^-0.5 (21), the router reading the residual, not the
    pre_feedforward_layernorm_2 output (23), gate / up as halves (interleaved instead: 30), the dense MLP
    beside the experts (35), and, only through post_feedforward_layernorm_2's eps, the renormalisation of
    the top-k weights (3.5e-4).

The model, as transformers 5.23 computes it (S: sliding layer, head dim Ds = head_dim; F: full layer, head
dim Df = global_head_dim), rms(x, w) = x / sqrt(mean(x^2) + eps) * w (PLAIN w, not Gemma 1-3's 1 + w),
rms0(x) the same without w:
    h = E[token] * sqrt(hidden)       (embed_scale: a float32 buffer, cast to the weights' dtype)
  per-layer embeddings (gemma4_tiny; P = hidden_size_per_layer_input, L layers):
    tok = E_ple[token] * sqrt(P)  -> [L, P];  proj = (h @ W_plm^T) * hidden^-0.5 -> [L, P]
    ple = (rms(proj, per_layer_projection_norm) + tok) * 2^-0.5;  ple_i = ple[i]
  per layer i (kind S or F, D its head dim):
    x = rms(h, input_layernorm)
    q = rope(rms(x Wq^T per head, q_norm))                                    [H, D]
    unless i is KV-shared: k0 = x Wk^T per head; v0 = x Wv^T per head, or k0 where there is no v_proj
      (attention_k_eq_v on F layers); k = rope(rms(k0, k_norm)); v = rms0(v0) (v_norm: no weight)
    KV-shared (i >= L - num_kv_shared_layers): k, v of the last non-shared layer of the same kind
    s = q . k (scaling 1.0: no 1/sqrt(D)), causal (S: key j > query t - sliding_window), softmax,
      o = p v, query head h on KV head h // (H / Hkv); h += rms(o Wo^T, post_attention_layernorm)
    y = rms(h, pre_feedforward_layernorm); f = down(gelu_tanh(gate(y)) * up(y))   (double width on the
      KV-shared layers with use_double_wide_mlp)
    MoE layers: f = rms(f, post_feedforward_layernorm_1) + rms(moe(h), post_feedforward_layernorm_2), h
      the residual after attention (not y):
        r = rms0(h) * router.scale * hidden^-0.5; p = softmax(r Wr^T) over all experts; top k of p;
        w = p_top / sum(p_top) * per_expert_scale[e];  x2 = rms(h, pre_feedforward_layernorm_2);
        expert e: [g | u] = gate_up_proj[e] x2 (gate rows first, then up: halves, not interleaved);
        moe(h) = sum_e w_e down_proj[e] (gelu_tanh(g) * u)
    h += rms(f, post_feedforward_layernorm)
    per-layer embeddings: h += rms(W_proj (gelu_tanh(W_gate h) * ple_i), post_per_layer_input_norm)
    h = h * layer_scalar
  logits = 30 tanh((rms(h, norm) @ E^T) / 30)
  rope (rotate-half, dim j with j + D/2, angle p * inv_freq_j): S: inv_freq_j = 1e4^(-2j/Ds), j < Ds/2;
  F ("proportional"): n = int(0.25 * Df // 2) pairs rotate, inv_freq_j = 1e6^(-2j/Df) for j < n (the
  exponent over Df, not over 2n), 0 for n <= j < Df/2 (those pairs do not rotate).

gguf_gemma4 / gguf_gemma4_moe, as llama.cpp/conversion/gemma.py Gemma4Model (over Gemma3Model and TextModel) of
llama.cpp (a tree with ggml 0.20.1, no git metadata) writes them. Checked against that converter (--outtype
f32, a stand-in vocabulary "none") run on gemma4_tiny / gemma4_moe_tiny: every key (type and value, in the
same order) and all 98 / 89 tensors byte for byte, in the same order; it adds general.name and
general.size_label; these files add tokenizer.ggml.bos_token_id 2 and eos_token_id 1 (from config.json; the
stand-in vocabulary has none).
  keys     general.architecture "gemma4", general.type "model", block_count, context_length 131072,
           embedding_length 64, feed_forward_length (gemma4_tiny: the ARRAY [96, 96, 96, 192, 192, 192],
           double width on the KV-shared layers; MoE: 48), attention.head_count 4,
           attention.head_count_kv ARRAY per layer (num_key_value_heads on sliding, num_global_key_value_
           heads on full layers), rope.freq_base 1e6 (full), rope.freq_base_swa 1e4, attention.
           layer_norm_rms_epsilon 1e-6, (MoE: expert_count 8, expert_used_count 2), attention.key_length /
           value_length 32 (the FULL layers' head dim), general.file_type 0, final_logit_softcapping 30,
           attention.sliding_window 8, attention.shared_kv_layers (3 / 0), embedding_length_per_layer_
           input (16 / 0), attention.sliding_window_pattern BOOL ARRAY (true = sliding), attention.
           key_length_swa / value_length_swa 16, (MoE: expert_feed_forward_length 32), rope.dimension_count
           32 (the whole full-layer head: rope_freqs stops the rest) and rope.dimension_count_swa 16,
           general.quantization_version 2, tokenizer.ggml.model "none" with vocab_size 331 (llama.cpp then
           makes 331 placeholder tokens and loads this very file).
  tensors  rope_freqs.weight [16] first: 1 for the 4 rotating pairs, 1e30 for the other 12 (ggml divides
           the angle by it: no rotation), read by the full layers only; then the checkpoint's tensors in its
           (sorted) order, the towers skipped, norms stored as they are (no + 1): token_embd,
           per_layer_token_embd [331, 96], per_layer_model_proj [96, 64], per_layer_proj_norm [16],
           output_norm; per layer attn_norm, attn_q, attn_k, attn_v (absent on full layers: V = K; k, v,
           k_norm absent on KV-shared layers), attn_output, attn_q_norm, attn_k_norm, post_attention_norm,
           ffn_norm (pre_feedforward_layernorm), ffn_gate / ffn_up / ffn_down, post_ffw_norm, inp_gate
           (per_layer_input_gate [16, 64]), proj (per_layer_projection [64, 16]), post_norm (post_per_layer_
           input_norm), layer_output_scale.weight [1] (layer_scalar); MoE: ffn_gate_up_exps.weight [8, 64,
           64] (experts.gate_up_proj as it is: gate rows first), ffn_down_exps.weight [8, 64, 32],
           ffn_down_exps.scale [8] (router.per_expert_scale), ffn_gate_inp.weight [8, 64] (router.proj),
           ffn_gate_inp.scale [64] (router.scale), pre_ffw_norm_2, post_ffw_norm_1, post_ffw_norm_2. No Q/K
           permutation (NeoX rotary). All F32.

llama.cpp (that tree; CPU, F32 K/V cache, flash attention off) on gguf_gemma4 / gguf_gemma4_moe, whole
prompts and token by token alike: up to 0.0062, 0.013, 0.023, 0.022 / 0.0054, 0.015, 0.027, 0.041 from
logits.{0..3} (logits up to 25), argmax agreement 1 everywhere, the same greedy tokens. The gap is
ggml-cpu's GELU (GGML_GELU_FP16: ggml_vec_gelu_f32 / ggml_vec_geglu_f32 round the input to fp16 and look the
result up in a table of fp16 values): the float64 model with that GELU is within 4.6e-6 / 5.9e-6 of
llama.cpp on the single-token prompt and at most positions of the others, up to 0.0087 / 0.0078 at a few
(a float32 activation a rounding away from an fp16 step, whose table entry then differs).

Run in the oracle venv (torch 2.15 CPU, transformers 5.23.0) with llama.cpp's gguf-py:
    PYTHONPATH=llama.cpp/gguf-py VENV/bin/python tests/golden/make_gemma4_golden.py [NAME...] [--gguf-only]
(NAME: gemma4_tiny, gemma4_moe_tiny; all by default; --gguf-only rewrites the GGUF twins from the HF
directories). Deterministic: a rerun writes the same bytes (checked). About three minutes on 2 cores.
"""
import json
import math
import os
import sys
import tempfile

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_hybrid_golden as mh  # noqa: E402
import transformers  # noqa: E402
import transformers.modeling_rope_utils as modeling_rope_utils  # noqa: E402
import transformers.models.gemma4.modeling_gemma4 as modeling_gemma4  # noqa: E402
from transformers import Gemma4Config, Gemma4ForConditionalGeneration  # noqa: E402

TRANSFORMERS_VERSION = "5.23.0"
HERE = mh.HERE
m = modeling_gemma4
S, G = "sliding_attention", "full_attention"

# name: the fixture's shape. Both are Gemma4ForConditionalGeneration as released (the text model under
# model.language_model.*, tied head), with tiny vision (and, as E2B, audio) towers whose weights a text
# loader skips.
FIXTURES = {
    # E2B's features (per-layer embeddings, KV shared by the last layers, double-wide MLP on those) with the
    # 26B / 31B ones (V = K on the global layers, their own KV head count)
    "gemma4_tiny": dict(
        layer_types=[S, S, G, S, S, G], num_kv_shared_layers=3, hidden_size_per_layer_input=16,
        use_double_wide_mlp=True, attention_k_eq_v=True, num_global_key_value_heads=1, enable_moe_block=False,
        audio=True, gguf="gguf_gemma4", qk_norm=0.35),
    # 26B-A4B's layout: every layer a dense MLP beside a mixture of experts, V = K on the global layers, no
    # per-layer embeddings, no KV sharing
    "gemma4_moe_tiny": dict(
        layer_types=[S, G, S, G], num_kv_shared_layers=0, hidden_size_per_layer_input=0,
        use_double_wide_mlp=False, attention_k_eq_v=True, num_global_key_value_heads=1, enable_moe_block=True,
        audio=False, gguf="gguf_gemma4_moe", qk_norm=0.7),
}
SEEDS = {"gemma4_tiny": 24, "gemma4_moe_tiny": 34}
EMBED_STD = 1.0  # the token embeddings (and the tied head): logits up to ~25, where the soft-cap 30 bites
LAYER_SCALAR = (0.2, 0.5)  # layer_scalar drawn from U(LAYER_SCALAR)
MOE_NORM2 = 0.5  # post_feedforward_layernorm_2 (after the experts) scaled: a routing flip moves less
PER_EXPERT_SCALE = (0.5, 1.5)  # router.per_expert_scale drawn from U(PER_EXPERT_SCALE)
ROUTER_NUDGE, ROUTER_CLEAR = 0.003, 1.25  # see tune_routers


def text_kwargs(spec):
    kw = dict(vocab_size=331, vocab_size_per_layer_input=331, hidden_size=64, intermediate_size=96,
              num_hidden_layers=len(spec["layer_types"]), layer_types=list(spec["layer_types"]),
              num_attention_heads=4, num_key_value_heads=2, head_dim=16, global_head_dim=32,
              num_global_key_value_heads=spec["num_global_key_value_heads"], attention_k_eq_v=spec["attention_k_eq_v"],
              sliding_window=8, hidden_size_per_layer_input=spec["hidden_size_per_layer_input"],
              num_kv_shared_layers=spec["num_kv_shared_layers"], use_double_wide_mlp=spec["use_double_wide_mlp"],
              final_logit_softcapping=30.0, max_position_embeddings=131072, initializer_range=0.2, rms_norm_eps=1e-6,
              hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True, pad_token_id=0, eos_token_id=1,
              bos_token_id=2, attention_bias=False,
              rope_parameters={S: {"rope_type": "default", "rope_theta": 10000.0},
                               G: {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0}})
    if spec["enable_moe_block"]:
        kw.update(enable_moe_block=True, intermediate_size=48, num_experts=8, top_k_experts=2, moe_intermediate_size=32)
    return kw


VISION = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
              head_dim=8, position_embedding_size=64, patch_size=4, pooling_kernel_size=2)
AUDIO = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, subsampling_conv_channels=[4, 4],
             output_proj_dims=16, conv_kernel_size=3)


def config(spec, text_overrides=None):
    kw = {**text_kwargs(spec), **(text_overrides or {})}
    c = Gemma4Config(text_config=kw, vision_config=dict(VISION), audio_config=dict(AUDIO) if spec["audio"] else None)
    c.architectures = ["Gemma4ForConditionalGeneration"]
    for sub in (c, c.text_config, c.vision_config, c.audio_config):
        if sub is not None:
            sub._attn_implementation = "eager"
            sub._experts_implementation = "eager"
    return c


def released_config(d, spec):
    """config.json's text_config as the released files have it: global_head_dim and num_global_key_value_heads
    (which transformers 5.23 pops in __post_init__ and turns into per_layer_config), no per_layer_config."""
    t = d["text_config"]
    plc = t.pop("per_layer_config")
    want = {str(i): {"head_dim": 32, "num_key_value_heads": spec["num_global_key_value_heads"]}
            for i, k in enumerate(spec["layer_types"]) if k == G}
    if {str(int(k)): v for k, v in plc.items()} != want:
        sys.exit(f"per_layer_config {plc}, expected {want}")
    t["global_head_dim"] = 32
    t["num_global_key_value_heads"] = spec["num_global_key_value_heads"]
    for k in ("dtype",):
        d.pop(k, None)
        t.pop(k, None)
    return d


def text_model(model):
    return model.model.language_model


def layers(model):
    return text_model(model).layers


# ---------------------------------------------------------------------------
# float64 throughout. transformers 5.23 computes Gemma4RMSNorm in float32
# (hidden_states.float(), weight.float()), the rotary in float32 (positions
# and inv_freq; inv_freq itself from a float32 arange, for "proportional" too),
# eager attention's softmax in float32 and the router's softmax in float32.

_DEFAULT64 = mh.retyped(m.Gemma4TextRotaryEmbedding.compute_default_rope_parameters,
                        [("dtype=torch.float)", "dtype=torch.float64)", 1)])
_PROPORTIONAL64 = mh.retyped(modeling_rope_utils._compute_proportional_rope_parameters, [
    ("dtype=torch.int64).to(device=device, dtype=torch.float)", "dtype=torch.int64).to(device=device, dtype=torch.float64)", 1),
    ("dtype=torch.float32, device=device)", "dtype=torch.float64, device=device)", 1)])


def _rope_float64(rot, layer_type):
    """The inverse frequencies of `layer_type` in float64, computed as transformers computes them."""
    kind = rot.rope_type[layer_type]
    cfg = rot.config.per_layer_config[layer_type]
    fn = {"default": _DEFAULT64, "proportional": _PROPORTIONAL64}[kind]
    return fn(cfg, None, layer_type=layer_type)[0]


m._rope_float64 = _rope_float64  # read by the patched Gemma4TextRotaryEmbedding.forward


def gemma4_patches():
    rot = m.Gemma4TextRotaryEmbedding
    return [
        mh.eager_patch(m),
        (m.Gemma4RMSNorm, "forward", mh.retyped(m.Gemma4RMSNorm.forward, [
            ("self._norm(hidden_states.float())", "self._norm(hidden_states)", 1),
            ("self.weight.float()", "self.weight", 1)])),
        (rot, "forward", mh.retyped(rot.forward, [
            ("inv_freq = getattr(self, f\"{layer_type}_inv_freq\")", "inv_freq = _rope_float64(self, layer_type)", 1),
            (".float() * inv_freq.to(device=x.device, dtype=torch.float)", ".double() * inv_freq.to(device=x.device)", 1)],
            [torch.no_grad(), m.dynamic_rope_update])),
        (m.Gemma4TextRouter, "forward", mh.retyped(m.Gemma4TextRouter.forward, [
            ("dim=-1, dtype=torch.float32)", "dim=-1, dtype=expert_scores.dtype)", 1)])),
    ]


def kv_rounding():
    """Flover's bf16 K/V cache: the keys (after k_norm and rotary) and values (after v_norm) rounded where they
    enter the attention (which is where the cache hands them over; the KV-shared layers read them rounded)."""
    inner = m.eager_attention_forward

    def attention(module, query, key, value, *args, **kwargs):
        return inner(module, query, mh.bf16(key), mh.bf16(value), *args, **kwargs)
    return [(m, "eager_attention_forward", attention)]


def emulated_logits(model, prompts, kv):
    """make_hybrid_golden.py's emulation: every nn.Linear's weight and input, every F.linear's operands (the
    experts); with kv the keys after rotary and the values after v_norm."""
    with mh.patched(kv_rounding() if kv else []):
        return mh.emulated_logits(model, None, prompts, False, lambda model: [], functional=True)


def perturb(model, spec, seed):
    """As make_hybrid_golden.py's make (+ 0.3 randn on every norm weight: plain w here, around 1), then the
    embeddings N(0, EMBED_STD^2), layer_scalar U(LAYER_SCALAR), router.scale 1 + 0.3 randn,
    router.per_expert_scale U(PER_EXPERT_SCALE)."""
    g = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "norm" in pname or pname.endswith(".bias"):
                p.add_(0.3 * torch.randn_like(p))
        model.get_input_embeddings().weight.normal_(0.0, EMBED_STD, generator=g)
        lo, hi = LAYER_SCALAR
        for layer in layers(model):
            a = layer.self_attn
            for norm in (a.q_norm, getattr(a, "k_norm", None)):
                if norm is not None:
                    norm.weight.mul_(spec["qk_norm"])
            layer.layer_scalar.copy_(lo + (hi - lo) * torch.rand(layer.layer_scalar.shape, generator=g))
            if spec["enable_moe_block"]:
                layer.post_feedforward_layernorm_2.weight.mul_(MOE_NORM2)
                layer.router.scale.copy_(1.0 + 0.3 * torch.randn(layer.router.scale.shape, generator=g))
                lo2, hi2 = PER_EXPERT_SCALE
                s = layer.router.per_expert_scale
                s.copy_(lo2 + (hi2 - lo2) * torch.rand(s.shape, generator=g))


def routers(model):
    return [l.router.proj for l in layers(model) if l.enable_moe_block]


def tune_routers(name, model, seed, prompts, k):
    """make_hybrid_golden.py's tune_routers; Gemma 4's router has no bias: its proj weight gets the nudges."""
    mh.tune_routers(name, model, seed, prompts, k, routers, lambda r: r.weight, gemma4_patches(), emulated_logits,
                    ROUTER_NUDGE, ROUTER_CLEAR, "weight")


def make(name, spec, seed):
    cfg = config(spec)
    torch.manual_seed(seed)
    model = Gemma4ForConditionalGeneration(cfg).eval()
    perturb(model, spec, seed)
    text = cfg.text_config
    g = torch.Generator().manual_seed(seed + 1)
    prompts = [torch.randint(0, text.vocab_size, (n,), generator=g).tolist() for n in (1, 7, 20, 62)]
    if spec["enable_moe_block"]:
        tune_routers(name, model, seed, prompts, text.top_k_experts)
    out_dir = os.path.join(HERE, name)
    os.makedirs(out_dir, exist_ok=True)
    tensors = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    tensors.pop("lm_head.weight")  # tied: saved once, as transformers saves it
    with tempfile.TemporaryDirectory() as tmp:  # the names transformers saves
        model.save_pretrained(tmp)
        with safe_open(os.path.join(tmp, "model.safetensors"), "pt") as f:
            if set(f.keys()) != set(tensors):
                sys.exit(f"{name}: save_pretrained writes {sorted(set(f.keys()) ^ set(tensors))} differently")
            for k in f.keys():
                if not torch.equal(f.get_tensor(k), tensors[k]):
                    sys.exit(f"{name}: save_pretrained writes {k} otherwise")
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    os.chmod(os.path.join(out_dir, "model.safetensors"), 0o644)
    mh.write_config(out_dir, cfg, lambda d: released_config(d, spec))

    patches = gemma4_patches()
    logits = {}
    double = mh.double_of(model)
    with torch.no_grad():
        for i, p in enumerate(prompts):
            logits[f"logits.{i}"] = mh.logits64(double, patches, p).float().contiguous()
        seq = mh.greedy(double, patches, prompts[1])
    for kind, kv in (("bf16", False), ("bf16kv", True)):
        for i, l in enumerate(emulated_logits(model, prompts, kv)):
            logits[f"logits_{kind}.{i}"] = l
    mh.write_goldens(out_dir, name, prompts, logits, seq)
    return model, double, prompts, logits, patches


# ---------------------------------------------------------------------------
# Checks of the float64 reference.

def check_reference(name, double, patches, prompts, logits):
    """make_hybrid_golden.py's: nothing narrower than float64, and the cached runs (prefill 30 + 20:
    the long prompt is 62 tokens) equal the full forward."""
    mh.check_reference(name, double, patches, prompts, logits, prefill=(30, 20))


def rounding_sensitivity(name, double, patches, prompts, logits):
    """make_hybrid_golden.py's with this family's bf16 emulation."""
    mh.rounding_sensitivity(name, double, m, patches, prompts, None, logits, emulate=emulated_logits)


def reload_pretrained(name, patches, prompts, logits):
    """config.json (the released layout) and model.safetensors alone, read by from_pretrained, reproduce the
    references bit for bit."""
    d = os.path.join(HERE, name)
    model, info = Gemma4ForConditionalGeneration.from_pretrained(
        d, dtype=torch.float32, attn_implementation="eager", experts_implementation="eager", output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    if problems:
        sys.exit(f"{name}: from_pretrained: {problems}")
    model = model.eval().double()
    worst = max((mh.logits64(model, patches, p).float() - logits[f"logits.{i}"]).abs().max().item()
                for i, p in enumerate(prompts))
    print(f"  {name}: from_pretrained(config.json + model.safetensors): max |logit - golden| {worst:.3g}")
    if worst != 0.0:
        sys.exit(f"{name}: the files do not reproduce the references")


# ---------------------------------------------------------------------------
# The model written out in float64 from the formulas (the docstring's), not
# from transformers' code.

def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def rms0(x, eps):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def inv_freq(tc, kind):
    """Per layer kind: head dim D and the D/2 inverse frequencies (pair j with j + D/2, rotate-half)."""
    r = tc.rope_parameters[kind]
    if kind == S:
        D = 16
        return D, r["rope_theta"] ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    D = 32
    n = int(r["partial_rotary_factor"] * D // 2)  # rotated pairs: the first n of D/2
    f = torch.zeros(D // 2, dtype=torch.float64)
    f[:n] = r["rope_theta"] ** (-torch.arange(0, 2 * n, 2, dtype=torch.float64) / D)  # over D, not over 2n
    return D, f


def moe_reference(layer, x, eps, k):
    """The expert half of a MoE layer on x = the residual after attention (per token)."""
    r, ex = layer.router, layer.experts
    logits = (rms0(x, eps) * r.scale * x.shape[-1] ** -0.5) @ r.proj.weight.T
    p = torch.softmax(logits, -1)
    top, idx = p.topk(k, -1)
    w = top / top.sum(-1, keepdim=True) * r.per_expert_scale[idx]
    x2 = mh.rms(x, layer.pre_feedforward_layernorm_2.weight, eps)
    out = torch.zeros_like(x)
    I = ex.down_proj.shape[-1]
    for t in range(x.shape[0]):
        for wj, e in zip(w[t], idx[t]):
            gu = ex.gate_up_proj[e] @ x2[t]  # [2I]: gate rows first, then up rows (halves, not interleaved)
            out[t] += wj * (ex.down_proj[e] @ (gelu_tanh(gu[:I]) * gu[I:]))
    return out


def gemma4_reference(model, prompt):
    tm = model.model.language_model
    tc = model.config.text_config
    eps, H, T, L = tc.rms_norm_eps, tc.num_attention_heads, len(prompt), tc.num_hidden_layers
    kinds = tc.layer_types
    P = tc.hidden_size_per_layer_input
    pos = torch.arange(T, dtype=torch.float64)[:, None]
    tables = {}
    for kind in (S, G):
        D, f = inv_freq(tc, kind)
        ang = pos * f[None]
        tables[kind] = (D, ang.cos()[:, None], ang.sin()[:, None])

    def rope(x, kind):
        D, cos, sin = tables[kind]
        a, b = x[..., :D // 2], x[..., D // 2:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], -1)

    E = tm.embed_tokens.weight
    h = E[prompt] * math.sqrt(tc.hidden_size)
    if P:
        tok = (tm.embed_tokens_per_layer.weight[prompt] * math.sqrt(P)).view(T, L, P)
        proj = (h @ tm.per_layer_model_projection.weight.T * tc.hidden_size ** -0.5).view(T, L, P)
        ple = (mh.rms(proj, tm.per_layer_projection_norm.weight, eps) + tok) * 2 ** -0.5
    first_shared = L - tc.num_kv_shared_layers
    producer = {kind: max(i for i in range(first_shared) if kinds[i] == kind) for kind in (S, G)}
    kv = {}
    t_idx, s_idx = torch.arange(T)[:, None], torch.arange(T)[None]
    for i, layer in enumerate(tm.layers):
        a, kind = layer.self_attn, kinds[i]
        D = tables[kind][0]
        x = mh.rms(h, layer.input_layernorm.weight, eps)
        q = rope(mh.rms((x @ a.q_proj.weight.T).view(T, H, D), a.q_norm.weight, eps), kind)
        if i < first_shared:
            kraw = (x @ a.k_proj.weight.T).view(T, -1, D)
            vraw = kraw if a.v_proj is None else (x @ a.v_proj.weight.T).view(T, -1, D)  # V = K: k_proj's raw output
            kv[i] = (rope(mh.rms(kraw, a.k_norm.weight, eps), kind), rms0(vraw, eps))  # v_norm: no weight
        k, v = kv[i] if i < first_shared else kv[producer[kind]]
        grp = torch.arange(H) // (H // k.shape[1])
        s = torch.einsum("thd,shd->hts", q, k[:, grp])  # scaling 1.0: no 1/sqrt(D)
        allowed = s_idx <= t_idx
        if kind == S:
            allowed = allowed & (t_idx - s_idx < tc.sliding_window)
        p = torch.softmax(s.masked_fill(~allowed, float("-inf")), -1)
        o = torch.einsum("hts,shd->thd", p, v[:, grp]).reshape(T, H * D)
        h = h + mh.rms(o @ a.o_proj.weight.T, layer.post_attention_layernorm.weight, eps)
        mlp = layer.mlp
        y = mh.rms(h, layer.pre_feedforward_layernorm.weight, eps)
        f = (gelu_tanh(y @ mlp.gate_proj.weight.T) * (y @ mlp.up_proj.weight.T)) @ mlp.down_proj.weight.T
        if layer.enable_moe_block:
            f = (mh.rms(f, layer.post_feedforward_layernorm_1.weight, eps)
                 + mh.rms(moe_reference(layer, h, eps, tc.top_k_experts), layer.post_feedforward_layernorm_2.weight, eps))
        h = h + mh.rms(f, layer.post_feedforward_layernorm.weight, eps)
        if P:
            gsig = gelu_tanh(h @ layer.per_layer_input_gate.weight.T) * ple[:, i]
            h = h + mh.rms(gsig @ layer.per_layer_projection.weight.T, layer.post_per_layer_input_norm.weight, eps)
        h = h * layer.layer_scalar
    logits = mh.rms(h, tm.norm.weight, eps) @ E.T
    c = tc.final_logit_softcapping
    return torch.tanh(logits / c) * c


def formula_checks(name, double, patches, prompts):
    with torch.no_grad():
        worst = max(((gemma4_reference(double, p) - mh.logits64(double, patches, p)).abs().max()
                     / mh.logits64(double, patches, p).abs().max()).item() for p in prompts)
    print(f"  {name}: the whole model written out (float64, from the docstring's formulas) vs transformers: "
          f"max |diff| / max |logit| = {worst:.3g}")
    if worst > 1e-12:
        sys.exit(f"{name}: the written-out model is not what transformers computes")


def check_routing(name, double, patches, prompts, k):
    """make_hybrid_golden.py's check_routing with this family's bf16 emulation: every expert used in every
    layer, at least 8 distinct expert sets, the k-th and (k+1)-th routing probabilities (softmax over all router
    logits: router.proj's output) at least MIN_MARGIN apart in float64 and both bf16 emulations."""
    mh.check_routing(name, double, m, patches, prompts, routers, k, None, emulate=emulated_logits)


def must_matter_checks(name, spec, double, patches, long):
    def mm(what, change=None, alter=None):
        def text_change(c):
            change(c.text_config)
        mh.must_matter(name, double, patches, long, what, change=text_change if change else None, alter=alter)

    def with_layers(fn):
        def alter(model):
            with torch.no_grad():
                for i, layer in enumerate(layers(model)):
                    fn(i, layer)
            return None
        return alter

    def edit(fn):  # a weight edit (under no_grad), no patches
        def alter(model):
            with torch.no_grad():
                fn(model)
            return None
        return alter

    def rope(kind, **kw):
        def change(c):
            c.rope_parameters = {**c.rope_parameters, kind: {**c.rope_parameters[kind], **kw}}
        return change

    def retype(owner, attr, edits):
        return lambda model: [(owner, attr, mh.retyped(getattr(owner, attr), edits))]

    tc = double.config.text_config
    mm("the sliding window (8; 4096 instead)", change=lambda c: setattr(c, "sliding_window", 4096))
    mm("the local rope_theta (1e4; 1e6 instead)", change=rope(S, rope_theta=1e6))
    mm("the global rope_theta (1e6; 1e4 instead)", change=rope(G, rope_theta=1e4))
    mm("the global layers' partial rotary (0.25; 0.5 instead)", change=rope(G, partial_rotary_factor=0.5))

    # _PROPORTIONAL64 is what the float64 forward calls: swap it for the over-rotated one while this runs
    mm("proportional RoPE's exponent over head_dim (over the rotated dims instead)",
       alter=lambda model: [(m, "_rope_float64", _swapped_rope(mh.retyped(
           modeling_rope_utils._compute_proportional_rope_parameters, [
               ("dtype=torch.int64).to(device=device, dtype=torch.float)",
                "dtype=torch.int64).to(device=device, dtype=torch.float64)", 1),
               ("dtype=torch.float32, device=device)", "dtype=torch.float64, device=device)", 1),
               ("/ head_dim)", "/ (2 * rope_angles))", 1)])))])
    def neox_partial(model):  # the rotated pairs as the first 2n dims of the head (j with j + n), rest untouched
        orig = m.apply_rotary_pos_emb
        n = int(tc.rope_parameters[G]["partial_rotary_factor"] * 32 // 2)

        def rope_fn(x, cos, sin, unsqueeze_dim=1):
            if x.shape[-1] != 32:  # the sliding layers' heads: as they are
                return orig(x, cos, sin, unsqueeze_dim)
            c = torch.cat([cos[..., :n], cos[..., :n]], -1)
            s_ = torch.cat([sin[..., :n], sin[..., :n]], -1)
            return torch.cat([orig(x[..., :2 * n], c, s_, unsqueeze_dim), x[..., 2 * n:]], -1)
        return [(m, "apply_rotary_pos_emb", rope_fn)]
    mm("proportional RoPE's layout (pairs j, j + D/2 for j < n; the first 2n dims, pairs j, j + n, instead)",
       alter=neox_partial)
    mm("the attention scaling (1.0; 1/sqrt(head_dim) instead)",
       alter=with_layers(lambda i, l: setattr(l.self_attn, "scaling", l.self_attn.head_dim ** -0.5)))
    mm("v_norm (RMS without weight; none instead)",
       alter=with_layers(lambda i, l: setattr(l.self_attn, "v_norm", torch.nn.Identity())
                         if hasattr(l.self_attn, "v_norm") else None))
    if spec["attention_k_eq_v"]:
        mm("V = K on the global layers taken from k_proj's raw output (V = k_norm(K) instead)", alter=retype(
            m.Gemma4TextAttention, "forward", [
                ("value_states = self.v_proj(hidden_states).view(hidden_shape) if self.v_proj is not None else key_states",
                 "value_states = self.v_proj(hidden_states).view(hidden_shape) if self.v_proj is not None "
                 "else self.k_norm(key_states)", 1)]))
    mm("layer_scalar (ones instead)", alter=with_layers(lambda i, l: l.layer_scalar.fill_(1.0)))
    mm("the final soft-cap (30; none instead)", change=lambda c: setattr(c, "final_logit_softcapping", None))
    mm("the embedding scale (sqrt(64); 1 instead)",
       alter=edit(lambda model: text_model(model).embed_tokens.embed_scale.fill_(1.0)))
    mm("GELU tanh (erf GELU instead)", change=lambda c: setattr(c, "hidden_activation", "gelu"))
    if spec["num_kv_shared_layers"]:
        first = tc.num_hidden_layers - tc.num_kv_shared_layers
        prod = max(i for i in range(first) if tc.layer_types[i] == S)
        other = max(i for i in range(prod) if tc.layer_types[i] == S)

        def move_store(model):
            ls = layers(model)
            ls[prod].self_attn.store_full_length_kv = False
            ls[other].self_attn.store_full_length_kv = True
        mm(f"the KV-shared sliding layers reading layer {prod}'s K/V (layer {other}'s instead)", alter=edit(move_store))
    if spec["use_double_wide_mlp"]:
        def halve(i, l):
            if l.mlp.down_proj.weight.shape[1] == 2 * tc.intermediate_size:
                l.mlp.down_proj.weight[:, tc.intermediate_size:] = 0
        mm("the double-wide MLP of the KV-shared layers (the second half of its units zeroed)", alter=with_layers(halve))
    if spec["hidden_size_per_layer_input"]:
        mm("the per-layer token embeddings (zeroed)",
           alter=edit(lambda model: text_model(model).embed_tokens_per_layer.weight.zero_()))
        mm("the per-layer embeddings' projection of the scaled embedding (zeroed)",
           alter=edit(lambda model: text_model(model).per_layer_model_projection.weight.zero_()))
        mm("the per-layer embeddings' scale sqrt(16) (1 instead)",
           alter=edit(lambda model: text_model(model).embed_tokens_per_layer.embed_scale.fill_(1.0)))
        mm("the per-layer input scale 2^-0.5 (1 instead)",
           alter=edit(lambda model: setattr(text_model(model), "per_layer_input_scale", 1.0)))
        mm("the projection's scale hidden^-0.5 (1 instead)",
           alter=edit(lambda model: setattr(text_model(model), "per_layer_model_projection_scale", 1.0)))
    if spec["enable_moe_block"]:
        mm("router.scale (ones instead)", alter=with_layers(lambda i, l: l.router.scale.fill_(1.0)))
        mm("router.per_expert_scale (ones instead)", alter=with_layers(lambda i, l: l.router.per_expert_scale.fill_(1.0)))
        mm("the router's hidden^-0.5 (1 instead)", alter=with_layers(lambda i, l: setattr(l.router, "scalar_root_size", 1.0)))
        mm("the top-k renormalisation (none instead)", alter=retype(m.Gemma4TextRouter, "forward", [
            ("top_k_weights /= top_k_weights.sum(dim=-1, keepdim=True)", "pass", 1),
            ("dim=-1, dtype=torch.float32)", "dim=-1, dtype=expert_scores.dtype)", 1)]))
        mm("the router reading the residual (the pre_feedforward_layernorm_2 output instead)",
           alter=retype(m.Gemma4TextDecoderLayer, "forward", [
               ("_, top_k_weights, top_k_index = self.router(hidden_states_flat)",
                "_, top_k_weights, top_k_index = self.router(self.pre_feedforward_layernorm_2(hidden_states_flat))", 1)]))
        mm("the experts' gate / up halves (interleaved instead)", alter=retype(m.Gemma4TextExperts, "forward", [
            ("gate, up = nn.functional.linear(current_state, self.gate_up_proj[expert_idx]).chunk(2, dim=-1)",
             "gu = nn.functional.linear(current_state, self.gate_up_proj[expert_idx]); gate, up = gu[..., 0::2], gu[..., 1::2]",
             1)]))
        mm("the dense MLP beside the experts (zeroed)", alter=with_layers(lambda i, l: l.mlp.down_proj.weight.zero_()))


def _swapped_rope(proportional):
    def fn(rot, layer_type):
        kind = rot.rope_type[layer_type]
        cfg = rot.config.per_layer_config[layer_type]
        f = {"default": _DEFAULT64, "proportional": proportional}[kind]
        return f(cfg, None, layer_type=layer_type)[0]
    return fn


def checks(name, spec, model, double, prompts, logits, patches):
    check_reference(name, double, patches, prompts, logits)
    reload_pretrained(name, patches, prompts, logits)
    rounding_sensitivity(name, double, patches, prompts, logits)
    formula_checks(name, double, patches, prompts)
    mh.check_greedy_gap(name, double, patches)
    if spec["enable_moe_block"]:
        check_routing(name, double, patches, prompts, double.config.text_config.top_k_experts)
    must_matter_checks(name, spec, double, patches, prompts[3])


# ---------------------------------------------------------------------------
# The GGUF twins, as llama.cpp's converter (llama.cpp/conversion/gemma.py Gemma4Model,
# over Gemma3Model and TextModel) writes the released checkpoints, F32.

GGUF_GLOBAL = {"embed_tokens.weight": "token_embd.weight", "embed_tokens_per_layer.weight": "per_layer_token_embd.weight",
               "norm.weight": "output_norm.weight", "per_layer_model_projection.weight": "per_layer_model_proj.weight",
               "per_layer_projection_norm.weight": "per_layer_proj_norm.weight"}
GGUF_LAYER = {
    "input_layernorm.weight": "attn_norm.weight", "layer_scalar": "layer_output_scale.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
    "per_layer_input_gate.weight": "inp_gate.weight", "per_layer_projection.weight": "proj.weight",
    "post_attention_layernorm.weight": "post_attention_norm.weight", "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
    "post_feedforward_layernorm_1.weight": "post_ffw_norm_1.weight", "post_feedforward_layernorm_2.weight": "post_ffw_norm_2.weight",
    "post_per_layer_input_norm.weight": "post_norm.weight", "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "pre_feedforward_layernorm_2.weight": "pre_ffw_norm_2.weight",
    "router.per_expert_scale": "ffn_down_exps.scale", "router.proj.weight": "ffn_gate_inp.weight", "router.scale": "ffn_gate_inp.scale",
    "experts.gate_up_proj": "ffn_gate_up_exps.weight", "experts.down_proj": "ffn_down_exps.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
}
PREFIX = "model.language_model."


def write_gguf(name, spec, gguf):
    src = os.path.join(HERE, name)
    out_dir = os.path.join(HERE, spec["gguf"])
    cfg = json.load(open(os.path.join(src, "config.json")))
    t = cfg["text_config"]
    L = t["num_hidden_layers"]
    swa = [k == S for k in t["layer_types"]]
    path = os.path.join(out_dir, "model.gguf")
    os.makedirs(out_dir, exist_ok=True)
    w = gguf.GGUFWriter(path, arch="gemma4")
    w.add_type(gguf.GGUFType.MODEL)
    # the keys in the order the converter first writes them (TextModel, Gemma3Model, Gemma4Model
    # set_gguf_parameters; a key written again keeps its place and takes the later value)
    w.add_block_count(L)
    w.add_context_length(t["max_position_embeddings"])
    w.add_embedding_length(t["hidden_size"])
    first_shared = L - t["num_kv_shared_layers"]
    if t["use_double_wide_mlp"]:  # the KV-shared layers' MLPs are twice as wide: an array
        w.add_feed_forward_length([t["intermediate_size"] * (2 if i >= first_shared else 1) for i in range(L)])
    else:
        w.add_feed_forward_length(t["intermediate_size"])
    w.add_head_count(t["num_attention_heads"])
    # per layer: num_key_value_heads on sliding layers, num_global_key_value_heads on full ones (the converter
    # writes the array whenever num_global_key_value_heads is set, whatever attention_k_eq_v says)
    w.add_head_count_kv([t["num_key_value_heads"] if s else t["num_global_key_value_heads"] for s in swa])
    w.add_rope_freq_base(t["rope_parameters"][G]["rope_theta"])
    w.add_rope_freq_base_swa(t["rope_parameters"][S]["rope_theta"])
    w.add_layer_norm_rms_eps(t["rms_norm_eps"])
    if t.get("enable_moe_block"):
        w.add_expert_count(t["num_experts"])
        w.add_expert_used_count(t["top_k_experts"])
    w.add_key_length(t["global_head_dim"])  # the full-attention layers' head dim
    w.add_value_length(t["global_head_dim"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_final_logit_softcapping(t["final_logit_softcapping"])
    w.add_sliding_window(t["sliding_window"])
    w.add_shared_kv_layers(t["num_kv_shared_layers"])
    w.add_embedding_length_per_layer_input(t["hidden_size_per_layer_input"] or 0)
    w.add_sliding_window_pattern(swa)  # true: sliding
    w.add_key_length_swa(t["head_dim"])
    w.add_value_length_swa(t["head_dim"])
    if t.get("enable_moe_block"):
        w.add_expert_feed_forward_length(t["moe_intermediate_size"])
    w.add_rope_dimension_count(t["global_head_dim"])  # all of it: the unrotated pairs come from rope_freqs
    w.add_rope_dimension_count_swa(int(t["head_dim"] * 1.0))
    # rope_freqs (first, as generate_extra_tensors yields it): per pair of the full-attention head, 1 for the
    # rotated pairs and 1e30 (theta / 1e30: no rotation) for the rest; read by the full-attention layers only
    rot = int(t["global_head_dim"] * t["rope_parameters"][G]["partial_rotary_factor"] / 2)
    freqs = np.array([1.0] * rot + [1e30] * (t["global_head_dim"] // 2 - rot), dtype=np.float32)
    w.add_tensor("rope_freqs.weight", freqs)
    state = load_file(os.path.join(src, "model.safetensors"))
    n = 0
    for hf in sorted(state):  # the checkpoint's (sorted) order, the towers skipped
        if not hf.startswith(PREFIX):
            continue
        tail = hf[len(PREFIX):]
        arr = np.ascontiguousarray(state[hf].numpy())
        if tail in GGUF_GLOBAL:
            w.add_tensor(GGUF_GLOBAL[tail], arr)
        else:
            layer, _, rest = tail[len("layers."):].partition(".")
            w.add_tensor(f"blk.{layer}.{GGUF_LAYER[rest]}", arr)
        n += 1
    # no tokenizer (the fixture has none): tokenizer.ggml.model "none" and vocab_size, with which llama.cpp
    # makes vocab_size placeholder tokens; bos / eos as config.json has them
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_tokenizer_model("none")
    w.add_vocab_size(t["vocab_size"])
    w.add_bos_token_id(t["bos_token_id"])
    w.add_eos_token_id(t["eos_token_id"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.chmod(path, 0o644)
    for fname in ("golden.json", "golden_logits.safetensors"):
        with open(os.path.join(src, fname), "rb") as f, open(os.path.join(out_dir, fname), "wb") as g:
            g.write(f.read())
    print(f"wrote {path}: {n + 1} tensors")


def main(argv):
    if transformers.__version__ != TRANSFORMERS_VERSION:
        sys.exit(f"transformers {transformers.__version__}: run with {TRANSFORMERS_VERSION}")
    torch.set_num_threads(max(1, min(8, os.cpu_count() or 1)))
    try:
        import gguf
    except ImportError:
        sys.exit("no gguf-py: PYTHONPATH=llama.cpp/gguf-py")
    if not hasattr(gguf.MODEL_ARCH, "GEMMA4"):
        sys.exit("this gguf-py has no gemma4")
    names = [a for a in argv if not a.startswith("--")] or list(FIXTURES)
    for name in names:
        spec = FIXTURES[name]
        if "--gguf-only" not in argv:
            model, double, prompts, logits, patches = make(name, spec, SEEDS[name])
            checks(name, spec, model, double, prompts, logits, patches)
        write_gguf(name, spec, gguf)


if __name__ == "__main__":
    main(sys.argv[1:])
