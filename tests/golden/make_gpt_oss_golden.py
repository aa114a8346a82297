#!/usr/bin/env python3
"""Writes golden fixtures for OpenAI's gpt-oss (transformers model_type "gpt_oss",
GptOssForCausalLM; llama.cpp general.architecture "gpt-oss", LLM_ARCH_OPENAI_MOE).

  gpt_oss_tiny   a tiny random GptOssForCausalLM (transformers 5.23.0, the independent
                 reference) as a Hugging Face directory: config.json, model.safetensors (F32, the
                 names save_pretrained writes: checked), golden.json, golden_logits.safetensors
  gguf_gpt_oss   the same weights as llama.cpp's converter writes a gpt-oss GGUF (the experts
                 in MXFP4, GGML type 39), model.gguf, with the same golden files (copied: the
                 same weights, so the same logits)

in make_hybrid_golden.py's format:

  golden.json                prompts of 1, 7, 20 and 62 tokens, a 32-step greedy continuation
                             (full recompute each step, no cache, float64) of prompts[1]
  golden_logits.safetensors  logits.{i}: every position of prompt i, float64, stored as float32;
                             logits_native.{i}: float64 with the MXFP4 experts' inputs
                             rounded per 32 values to 8 bits as --dtype=native does;
                             logits_bf16.{i} / logits_bf16kv.{i}: transformers in float32 with
                             Flover's bf16 rounding emulated: every nn.Linear's weight and input,
                             the router's F.linear operands, both operands of the experts'
                             matmuls (x @ gate_up_proj[e], act @ down_proj[e]: no F.linear in
                             transformers 5; the MXFP4 weights are bf16 values already); with kv
                             also the keys after rotary and the values (v_proj's output)

The model (config.json has the released gpt-oss-20b / -120b config.json's keys, values tiny):
hidden 64, 4 layers, layer_types [sliding, full, sliding, full] (as released: even layers slide;
llama.cpp's default pattern, period 2), sliding_window 8 (a query sees itself and the 7 tokens
before it; the 62-token prompt and the 39-token greedy sequence cross it), 4 query heads of
head_dim 32 on 2 KV heads (q_proj 64 -> 128: heads x head_dim is not hidden, as 64 x 64 is not
2880), attention_bias true (q, k, v, o), per-head sinks, 8 experts (num_local_experts) of
intermediate_size 64, top 4 (num_experts_per_tok), router with a bias, expert biases,
swiglu_limit 7.0 (alpha 1.702, transformers' default; not in the released config.json), RoPE
theta 150000 with rope_scaling exactly as released: yarn, factor 32, beta_fast 32, beta_slow 1,
original_max_position_embeddings 4096, truncate false; max_position_embeddings 131072 (released;
factor x 4096, so transformers' consistency warning stays quiet), rms_norm_eps 1e-5, untied
lm_head, vocabulary 331 (no tokenizer), eos 2, pad null. config.json is written with the released
layout: rope_scaling and rope_theta (not transformers 5's rope_parameters), OpenAI's
experts_per_token and initial_context_length beside the transformers keys, no swiglu_alpha; no
quantization_config (F32). from_pretrained reads it to the same logits, bit for bit (checked).

Weights: as make_hybrid_golden.py's make (initializer_range 0.2; + 0.3 randn on the norms and on
the q/k/v/o and router biases), then embeddings N(0, 1), q_proj and k_proj (weights and biases)
x 0.6 (scores O(1-3): less sharp, so less bf16-sensitive), sinks N(2, 1.5^2) (a query gives the
sink a median 18% of its attention, quartiles 6% and 47%), expert biases N(0, 0.5^2) (gate_up)
and N(0, 0.3^2) (down), and the experts' weights N(0, 0.5^2) (gate_up_proj: wide, so the clamp
bites: 5% of the routed gates are above 7, 5% below -7, 10% of the ups beyond +-7) and
N(0, 0.06^2) (down_proj), both ROUNDED TO MXFP4 along their input dimension: blocks of 32
consecutive input values (hidden for gate_up_proj [E, 64, 128], intermediate for down_proj
[E, 64, 64]) with ggml's quantize_row_mxfp4 rule (e8m0 e = floor(log2(amax)) - 2 + 127, each value
the nearest of kvalues_mxfp4 {0, +-1, +-2, +-3, +-4, +-6, +-8, +-12} x 2^(e - 128), the first on a
tie), then dequantized: the F32 checkpoint holds exactly MXFP4 values, quantizing them again gives
the same codes and exponents (checked; the rounded blocks' amax is 8 or 12 times 2^(e - 128), far
from an exponent boundary), no -0. So gguf_gpt_oss's MXFP4 bytes hold the very same weights
(gguf-py's quants.dequantize of every expert tensor equals the F32 one bit for bit, and its
quants.quantize gives the bytes written here: checked), and so does the released checkpoint's
packing (*_blocks / *_scales, transformers' nibble order): transformers' own
convert_moe_packed_tensors reads it back bit for bit (checked). Finally the router biases are
nudged (tune_routers; as run, 4 nudges of layers 0, 1 and 2 in two sweeps) so that no token
sits near a routing tie.
Seed 11.

Checks (the script exits otherwise; printed as run):
  - float64 throughout: transformers 5.23 computes GptOssRMSNorm in float32
    (hidden_states.to(torch.float32)) and the rotary in float32 (positions and inv_freq; YaRN's
    frequencies and ramp in float32 in _compute_yarn_parameters); the float64 model runs those
    functions recompiled from transformers' own source with the casts edited (each edit counted).
    No aten op of the patched forward narrows below float64 (the unpatched float64 forward
    narrows in 61); patched minus unpatched float64 logits 1.0e-5 (logits up to 7). The sinks'
    softmax and the router's softmax run in the input's dtype already (no float32 upcast in
    eager_attention_forward or GptOssTopKRouter).
  - the 62-token prompt's full forward equals token by token with the cache (sliding-window
    layers keep the last 8) and 30 + 20 then token by token, to 5e-15 of the logit scale;
    config.json + model.safetensors through from_pretrained give the logits bit for bit;
    transformers' own float32 is 4.6e-6 of the logit scale from logits.
  - the model written out in float64 from the formulas below, not from transformers' code (YaRN
    from its definition, sinks, window, biases, MoE token by token), equals transformers on
    every prompt to 4.3e-15 of the logit scale; the MoE block alone to 4.4e-16.
  - routing: every expert used in every layer (38 to 100 uses of 516), 46 or more distinct
    expert sets per layer; over the prompts and the greedy sequence the 4th and 5th routing
    probabilities (softmax over all 8 router logits, bias included) at least MIN_MARGIN = 1e-4
    apart in float64 (1.9e-4) and in both bf16 emulations (1.7e-4, 1.6e-4), which route 11 and 6
    of 516 token-layers otherwise than float64; the greedy run's best two logits at least
    MIN_GAP = 1e-3 of the logit scale apart (0.0012), 29 distinct tokens of 32.
  - bf16: logits_bf16 / logits_bf16kv are up to 0.21 / 0.26 of the logit scale from logits
    (medians 0.019 / 0.019); the same roundings with float64 between them land up to 0.0058 /
    0.0094 from logits_bf16 / logits_bf16kv (medians 0.0017 / 0.0037), the floor for an
    implementation that rounds where the emulation does.
  - each of these changes the float64 logits (of the 62-token prompt) by more than 1e-6: sinks
    zeroed (7.9) or removed (7.0), the sliding window (4096 instead of 8: 9.0), the layer pattern
    (full first: 8.4), YaRN (plain RoPE instead: 7.8), YaRN's attention factor (1: 7.7), YaRN's
    truncate false (true, ggml's floor / ceil: 0.033), YaRN's factor (16: 4.4), rotate-half
    pairs (interleaved instead: 7.6), the q/k/v/o biases (8.5), the router's bias (4.9), softmax
    over the top 4 only (over all 8 instead: 2.7), the experts' gate_up bias (4.5) and down bias
    (2.4), the gate/up interleave (read as halves: 9.9), the clamp (none: 6.7), its one-sidedness
    for the gate (clamped below at -7 too: 7.6e-5: silu(-7) is ~0 either way), alpha (1 instead
    of 1.702: 1.4), the + 1 on up (5.4).

The model, as transformers 5.23 computes it, residual h = E[token] (unscaled), per layer:
    x = rms(h, input_layernorm);  h += o_proj(attn(x)) (o_proj has a bias)
    x = rms(h, post_attention_layernorm);  h += moe(x)
  logits = rms(h, model.norm) @ lm_head^T;  rms(x, w) = x / sqrt(mean(x^2) + 1e-5) * w (plain w).
  attn: q = x Wq^T + bq [T, 4, 32], k, v likewise [T, 2, 32]; q and k rotated (rotate-half:
    dim j with j + 16, angle p * inv_freq_j, cos and sin both TIMES the attention factor, so
    scores carry its square); query head h on KV head h // 2; s = q.k / sqrt(32) (+ causal mask,
    and in sliding layers key j > query i - 8); per head a sink logit: p = softmax([s_i0 ..
    s_ii, sink_h]) with the sink's share dropped (no value), o = sum_j p_j v_j.
  YaRN (truncate false): corr(r) = D ln(4096 / (2 pi r)) / (2 ln 150000), D = head_dim;
    low = max(corr(beta_fast 32), 0), high = min(corr(beta_slow 1), D - 1) (no floor / ceil);
    ramp_i = clamp((i - low) / (high - low), 0, 1); theta_i = 150000^(-2i / D);
    inv_freq_i = theta_i (1 - ramp_i) + theta_i / 32 ramp_i; attention factor 0.1 ln 32 + 1 =
    1.3465736. Here D = 32: low 4.046, high 8.699, inv_freq / theta_i = 1 for i <= 4, then
    0.801, 0.593, 0.385, 0.177 (i = 5..8), 1/32 from i = 9.
  moe: l = x Wr^T + br [8]; the 4 largest l_e; w = softmax over those 4 logits; expert e:
    g = x @ gate_up_proj[e] + gate_up_proj_bias[e] [128], gate = g[0::2], up = g[1::2]
    (INTERLEAVED); gate = min(gate, 7); up = clamp(up, -7, 7);
    act = (up + 1) * gate * sigmoid(1.702 gate); y_e = act @ down_proj[e] + down_proj_bias[e];
    moe(x) = sum_e w_e y_e (the down bias inside the weighting).

gguf_gpt_oss, as llama.cpp/conversion/gpt_oss.py GptOssModel (+ base TextModel) of llama.cpp (a tree with
ggml 0.20.1, no git metadata) writes the released checkpoint. Checked against that converter
(--outtype f32, a stand-in vocabulary "none") run on a copy of gpt_oss_tiny packed as released
(experts as *_blocks / *_scales in transformers' nibble order, hf_mxfp4 below; config.json with
quantization_config mxfp4): every key and all 79 tensors byte for byte, in the same order (it
adds general.name and general.size_label; no eos_token_id from the stand-in vocabulary); run on
gpt_oss_tiny itself it takes its non-MXFP4 path, experts F32 ("not in MXFP4" warnings), file_type
0, tensors written in HF order: equal in value. And ggml's own quantizer (ggml_quantize_chunk,
GGML_TYPE_MXFP4, libggml-base) turns the F32 experts into exactly these MXFP4 bytes.
  keys     general.architecture "gpt-oss", general.type "model", block_count 4,
           context_length 131072, embedding_length 64, feed_forward_length 64,
           attention.head_count 4, attention.head_count_kv 2, rope.scaling.type "yarn",
           rope.scaling.factor 32, rope.scaling.original_context_length 4096,
           rope.scaling.yarn_beta_fast 32, rope.scaling.yarn_beta_slow 1, rope.freq_base 150000,
           attention.layer_norm_rms_epsilon 1e-5, expert_count 8, expert_used_count 4,
           attention.key_length 32, attention.value_length 32, general.file_type 38
           (MOSTLY_MXFP4_MOE, as for the MXFP4 release), attention.sliding_window 8,
           expert_feed_forward_length 64 (intermediate_size), general.quantization_version 2;
           no truncate (llama.cpp always floors / ceils: see below), no sliding-window pattern
           (llama.cpp defaults to period 2, even layers sliding: the script exits on other
           layer_types), no swiglu alpha / limit (hard-wired 1.702 / 7 in llama.cpp). No
           vocabulary:
           tokenizer.ggml.model "none" with vocab_size 331 (llama.cpp then makes 331 placeholder
           tokens, so llama.cpp loads this very file; there is no tokenizer.ggml.tokens, for
           which Flover's ReadGgufVocab answers NotFound) and eos_token_id 2.
  tensors  token_embd, output_norm, output (untied); per layer attn_norm (input_layernorm),
           post_attention_norm (post_attention_layernorm: NOT ffn_norm), attn_q / attn_k /
           attn_v / attn_output .weight and .bias (no Q/K permutation: llama.cpp's gpt-oss rope
           is NEOX, rotate-half, as transformers), attn_sinks.weight [4], ffn_gate_inp .weight
           [8, 64] and .bias (the router), ffn_gate_exps / ffn_up_exps .weight MXFP4 [8, 64, 64]
           (GGUF shape (64, 64, 8): the even / odd columns of gate_up_proj, transposed to rows of
           the hidden input) and .bias [8, 64] (gate_up_proj_bias[:, 0::2] / [:, 1::2]),
           ffn_down_exps .weight MXFP4 [8, 64, 64] (down_proj transposed: rows of the
           intermediate input) and .bias [8, 64]; all else F32. The MXFP4 bytes are ggml's
           block_mxfp4: per 32 input values 17 bytes, e (e8m0) then 16 bytes, byte j holding value
           j in its low nibble and value j + 16 in its high nibble (the released checkpoint:
           scales apart, byte j holding values 2j (low) and 2j + 1 (high); the converter's
           transform_nibble_layout moves them); the codes and exponents are the same.

llama.cpp (that tree; CPU, F32 K/V cache, flash attention off) on gguf_gpt_oss: up to 0.26,
0.55, 1.28, 0.83 from logits.{0..3} (logits up to 7), argmax agreement 1, 0.857, 0.95, 0.952, the
greedy run differing from its first token; whole prompts and token by token alike. Two causes,
both llama.cpp's, neither bent into the fixtures:
  - YaRN: ggml_rope_yarn_corr_dims always floors low and ceils high (truncate true), where
    gpt-oss's config says truncate false (OpenAI's reference implementation does not truncate
    either): here ramp over [4, 9] instead of [4.046, 8.699]; for gpt-oss-20b (D 64) [8, 18]
    instead of [8.093, 17.398], inv_freq off by up to +76% at i = 17. The converter's F32 GGUF of
    gpt_oss_tiny (F32 experts) under llama.cpp is 0.0088 / 0.014 / 0.033 from logits.{1..3}
    (2e-6 at the single-token prompt, where all angles are 0) and within 1.3e-5 of transformers
    float64 with truncate true, every prompt, the same greedy tokens.
  - MXFP4 on ggml's CPU: the matmul quantizes the activations to Q8_0 (vec_dot_type), so the
    experts see x and act rounded to 8 bits per block of 32. With truncate true and that
    rounding emulated in float64 (ggml-cpu's quantize_row_q8_0: d = amax / 127 stored as f16,
    q = round(x * 127 / amax), ties to even), llama.cpp on gguf_gpt_oss agrees to 3.5e-6 on
    prompts 0 and 1 and to 3e-5 on prompts 2 and 3 but at 5 of their 82 positions (whole
    prompts; 3 token by token), up to 0.018 (a float32 activation a rounding away from a Q8_0
    step, whose code then flips): the MXFP4 bytes hold exactly the reference's weights.

Run in the oracle venv (torch 2.15 CPU, transformers 5.23.0) with llama.cpp's gguf-py:
    PYTHONPATH=llama.cpp/gguf-py VENV/bin/python tests/golden/make_gpt_oss_golden.py [--gguf-only]
(--gguf-only rewrites gguf_gpt_oss from gpt_oss_tiny's files). Deterministic: a rerun writes the
same bytes (checked). About a minute on 2 cores.
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
import transformers.modeling_rope_utils as modeling_rope_utils  # noqa: E402
import transformers.models.gpt_oss.modeling_gpt_oss as modeling_gpt_oss  # noqa: E402
from transformers import GptOssConfig, GptOssForCausalLM  # noqa: E402
from transformers.integrations.mxfp4 import convert_moe_packed_tensors  # noqa: E402

HERE = mh.HERE
NAME, GGUF_NAME = "gpt_oss_tiny", "gguf_gpt_oss"
SEED = 11
LAYER_TYPES = ["sliding_attention", "full_attention"] * 2  # as released: layer i slides when i is even
# rope_scaling exactly as the released gpt-oss-20b / -120b config.json (with rope_theta beside it)
ROPE_SCALING = {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0, "original_max_position_embeddings": 4096,
                "rope_type": "yarn", "truncate": False}
ROPE_THETA = 150000
GATE_UP_STD, DOWN_STD = 0.5, 0.06  # the experts' draws before MXFP4 rounding (gate_up wide: the clamp bites)
GATE_UP_BIAS, DOWN_BIAS = 0.5, 0.3
SINK_MEAN, SINK_STD = 2.0, 1.5
QK_SCALE = 0.6  # q_proj and k_proj (weights and biases) scaled: scores O(1-3), less sharp for bf16
EMBED_STD = 1.0
TOP_K = 4
ROUTER_NUDGE, ROUTER_CLEAR = 0.02, 1.25  # see tune_routers

m = modeling_gpt_oss


def config():
    c = GptOssConfig(vocab_size=331, hidden_size=64, intermediate_size=64, num_hidden_layers=len(LAYER_TYPES),
                     layer_types=list(LAYER_TYPES), num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                     sliding_window=8, num_local_experts=8, num_experts_per_tok=TOP_K,
                     max_position_embeddings=131072, rope_parameters={**ROPE_SCALING, "rope_theta": float(ROPE_THETA)},
                     rms_norm_eps=1e-5, attention_bias=True, swiglu_limit=7.0, initializer_range=0.2,
                     router_aux_loss_coef=0.9, tie_word_embeddings=False, eos_token_id=2, pad_token_id=None)
    c.architectures = ["GptOssForCausalLM"]
    c._attn_implementation = "eager"
    c._experts_implementation = "eager"
    return c


def released_config(d):
    """config.json with the released files' keys (gpt-oss-20b / -120b, written by transformers 4.55):
    rope_scaling and rope_theta instead of transformers 5's rope_parameters, OpenAI's own
    experts_per_token and initial_context_length beside the transformers keys, no swiglu_alpha (1.702
    is hard-wired in 4.55; transformers 5.23 reads its default) and no quantization_config (F32 here)."""
    rope = d.pop("rope_parameters")
    if rope != {**ROPE_SCALING, "rope_theta": float(ROPE_THETA)}:
        sys.exit(f"rope_parameters {rope}")
    if d.pop("swiglu_alpha") != 1.702:
        sys.exit("swiglu_alpha is not 1.702")
    d["rope_scaling"] = dict(ROPE_SCALING)
    d["rope_theta"] = ROPE_THETA
    d["experts_per_token"] = d["num_experts_per_tok"]
    d["initial_context_length"] = ROPE_SCALING["original_max_position_embeddings"]
    for k in ("bos_token_id", "dtype"):  # not in the released files
        d.pop(k, None)
    return d


# ---------------------------------------------------------------------------
# MXFP4 (OCP microscaling, ggml's block_mxfp4): 32 consecutive input values
# share an e8m0 exponent e; each value is one of the e2m1 codes, ggml's
# kvalues_mxfp4 (e2m1 doubled) times 2^(e - 128).

KVALUES = torch.tensor([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=torch.float32)


def mxfp4_codes(rows):
    """ggml's quantize_row_mxfp4_ref on float32 rows [..., K] (K a multiple of 32): per block of 32,
    e = floor(log2(amax)) - 2 + 127 (0 for an all-zero block), d = 2^(e - 128), each value the
    first code minimising |kvalue * d - x| in float32. Returns (codes uint8 [..., K], e uint8 [..., K/32]).
    floor(log2) from frexp (exact); ggml's floorf(log2f()) may differ within an ulp or so below a power
    of two, which could only change how a random draw is first rounded (that defines the weights): the
    rounded blocks' amax is 8 d or 12 d, far from a boundary, so ggml quantizes them to these bytes."""
    blocks = rows.reshape(*rows.shape[:-1], -1, 32)
    amax = blocks.abs().amax(-1)
    _, ex = torch.frexp(amax)
    e = torch.where(amax > 0, ex - 1 - 2 + 127, torch.zeros_like(ex))
    if (e < 2).any() or (e > 254).any():
        sys.exit("mxfp4: exponent out of range")
    d = torch.ldexp(torch.ones_like(amax), (e - 128).to(torch.int32))
    err = (d[..., None, None] * KVALUES - blocks[..., None]).abs()  # [..., nb, 32, 16]
    codes = err.argmin(-1)  # the first of equal errors, as ggml's strict < and numpy's argmin
    return codes.reshape(rows.shape).to(torch.uint8), e.to(torch.uint8)


def mxfp4_values(codes, e):
    d = torch.ldexp(torch.ones(e.shape), (e.to(torch.int32) - 128))
    v = KVALUES[codes.long()].reshape(*e.shape, 32) * d[..., None]
    return v.reshape(codes.shape)


def mxfp4_round(rows):
    """The rows (float32, [..., K]) quantized and dequantized: exactly MXFP4-representable along K, and
    quantizing them again gives the same codes and exponents (checked), so ggml, gguf-py and transformers'
    dequantizer all read these very values from the MXFP4 bytes."""
    codes, e = mxfp4_codes(rows)
    out = mxfp4_values(codes, e)
    again_codes, again_e = mxfp4_codes(out)
    if not (torch.equal(again_codes, codes) and torch.equal(again_e, e)):
        sys.exit("mxfp4: quantizing the rounded weights again changes them")
    if (codes == 8).any():  # -0: never chosen (0 comes first), so the values carry no negative zeros
        sys.exit("mxfp4: a -0 code")
    return out


def expert_rows(t):
    """The experts' weights as rows of their input (K) dimension, the layout the MXFP4 blocks run along:
    gate_up_proj [E, H, 2I] -> [E, 2I, H] (row 2j is gate unit j, row 2j+1 up unit j: interleaved);
    down_proj [E, I, H] -> [E, H, I]. transformers computes x @ gate_up_proj[e] and act @ down_proj[e]."""
    return t.transpose(1, 2).contiguous()


def hf_mxfp4(rows):
    """The released checkpoint's packing of rows [E, N, K] (*_blocks [E, N, K/32, 16] uint8, *_scales
    [E, N, K/32] uint8): byte j of a block holds value 2j in its low nibble and 2j+1 in its high nibble
    (transformers' integrations/mxfp4.py: lut[blk & 0x0F] to even, lut[blk >> 4] to odd positions), the
    scale is the e8m0 exponent (value = FP4_VALUES[code] * 2^(scale - 127), FP4_VALUES = kvalues / 2)."""
    codes, e = mxfp4_codes(rows)
    c = codes.reshape(*e.shape, 16, 2)
    return (c[..., 0] | (c[..., 1] << 4)).contiguous(), e.contiguous()


def check_hf_dequantizer(model):
    """transformers' own dequantizer (convert_moe_packed_tensors, what from_pretrained runs on the
    released *_blocks / *_scales) reads the HF packing of these weights back to them bit for bit."""
    n = 0
    for name, p in model.named_parameters():
        if name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            blocks, scales = hf_mxfp4(expert_rows(p.detach()))
            back = convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)
            if not torch.equal(back.view(torch.int32), p.detach().view(torch.int32)):
                sys.exit(f"{name}: transformers' MXFP4 dequantizer reads other values")
            n += 1
    print(f"  {NAME}: transformers' convert_moe_packed_tensors reads the HF MXFP4 packing of all {n} expert "
          f"tensors back bit for bit")


# ---------------------------------------------------------------------------
# float64 throughout (transformers: RMSNorm in float32, the rotary's
# positions and inv_freq in float32, YaRN's frequencies and ramp in float32).

_YARN64 = mh.retyped(modeling_rope_utils._compute_yarn_parameters, [
    ("torch.arange(dim, dtype=torch.float32)", "torch.arange(dim, dtype=torch.float64)", 1),
    ("dtype=torch.float)", "dtype=torch.float64)", 2)])
_DEFAULT64 = mh.retyped(m.GptOssRotaryEmbedding.compute_default_rope_parameters,
                        [("dtype=torch.float)", "dtype=torch.float64)", 1)])


def _rope_float64(config):
    """The rotary's inverse frequencies in float64 (YaRN, or plain RoPE for a check that swaps it in)."""
    kind = config.rope_parameters["rope_type"]
    return {"yarn": _YARN64, "default": _DEFAULT64}[kind](config)[0]


m._rope_float64 = _rope_float64  # read by the patched GptOssRotaryEmbedding.forward


def gpt_oss_patches():
    rot = m.GptOssRotaryEmbedding
    return [
        (m.GptOssRMSNorm, "forward", mh.retyped(m.GptOssRMSNorm.forward, [("hidden_states.to(torch.float32)", "hidden_states", 1)])),
        (rot, "forward", mh.retyped(rot.forward, [
            (".float()", ".double()", 1),
            ("self.inv_freq.to(device=x.device, dtype=torch.float)", "_rope_float64(self.config).to(x.device)", 1)],
            [torch.no_grad(), m.dynamic_rope_update])),
    ]


# Flover's bf16 rounding of the experts' matmuls: transformers computes them
# as x @ gate_up_proj[e] and act @ down_proj[e] (no F.linear), so the
# emulation rounds both operands there (the MXFP4 weights are bf16 values
# already: 3 significant bits).
EXPERTS_BF16 = mh.retyped(m.GptOssExperts.forward, [
    ("current_state @ self.gate_up_proj[expert_idx]",
     "current_state.to(torch.bfloat16).to(current_state.dtype) @ "
     "self.gate_up_proj[expert_idx].to(torch.bfloat16).to(current_state.dtype)", 1),
    ("gated_output @ self.down_proj[expert_idx]",
     "gated_output.to(torch.bfloat16).to(gated_output.dtype) @ "
     "self.down_proj[expert_idx].to(torch.bfloat16).to(gated_output.dtype)", 1)])


# Flover's --dtype=native on the MXFP4 experts (kernels/cpu/block_linear.h):
# each input row quantized per 32 values in float32 (d = amax / 127, q =
# round-half-even(x * (127 / amax)), clamped to +-127), times the blocks'
# exact values, summed exactly (float64 here: Flover's int32 block sums
# are exact, its float32 accumulation over blocks is the only difference).
def _native_input(x):
    x32 = x.float()
    shape = x32.shape
    v = x32.reshape(-1, shape[-1] // 32, 32)
    amax = v.abs().amax(dim=-1, keepdim=True)
    inv = torch.where(amax > 0, torch.tensor(127.0) / amax, torch.zeros_like(amax))
    q = torch.clamp(torch.round(v * inv), -127, 127)
    d = amax / torch.tensor(127.0)
    return (q.double() * d.double()).reshape(shape).to(x.dtype)


m._native_input = _native_input
EXPERTS_NATIVE = mh.retyped(m.GptOssExperts.forward, [
    ("current_state @ self.gate_up_proj[expert_idx]", "_native_input(current_state) @ self.gate_up_proj[expert_idx]", 1),
    ("gated_output @ self.down_proj[expert_idx]", "_native_input(gated_output) @ self.down_proj[expert_idx]", 1)])


def layers(model):
    return model.model.layers


def emulated_logits(model, prompts, kv):
    """make_hybrid_golden.py's emulation (every nn.Linear's weight and input; the router's F.linear;
    with kv the keys after rotary and the values) and the experts' matmuls' operands."""
    with mh.patched([(m.GptOssExperts, "forward", EXPERTS_BF16)]):
        return mh.emulated_logits(model, m, prompts, kv, mh.attention_values(layers), functional=True)


def perturb(model, seed):
    """Norms and biases as make_hybrid_golden.py's make (+ 0.3 randn: q/k/v/o biases, the router's
    bias), then embeddings, q / k scaled, sinks, the experts (MXFP4-rounded along their input) and their
    biases."""
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "norm" in pname or pname.endswith(".bias"):
                p.add_(0.3 * torch.randn_like(p))
        g = torch.Generator().manual_seed(seed + 100)
        model.get_input_embeddings().weight.normal_(0.0, EMBED_STD, generator=g)
        for layer in layers(model):
            a, ex = layer.self_attn, layer.mlp.experts
            for proj in (a.q_proj, a.k_proj):
                proj.weight.mul_(QK_SCALE)
                proj.bias.mul_(QK_SCALE)
            a.sinks.copy_(SINK_MEAN + SINK_STD * torch.randn(a.sinks.shape, generator=g))
            gu = GATE_UP_STD * torch.randn(ex.gate_up_proj.shape, generator=g)
            down = DOWN_STD * torch.randn(ex.down_proj.shape, generator=g)
            ex.gate_up_proj.copy_(mxfp4_round(expert_rows(gu)).transpose(1, 2))
            ex.down_proj.copy_(mxfp4_round(expert_rows(down)).transpose(1, 2))
            ex.gate_up_proj_bias.copy_(GATE_UP_BIAS * torch.randn(ex.gate_up_proj_bias.shape, generator=g))
            ex.down_proj_bias.copy_(DOWN_BIAS * torch.randn(ex.down_proj_bias.shape, generator=g))


def routers(model):
    return [l.mlp.router for l in layers(model)]


def tune_routers(model, seed, prompts):
    """With 8 experts, top 4, the 4th and 5th routing probabilities are the middle two, the closest: over
    the 129 tokens of the prompts and the greedy sequence, times 4 layers, times float64 and the two bf16
    emulations, a random draw leaves some token within MIN_MARGIN of a tie (in none of 32 seeds tried
    with an earlier setting of these weights was every token clear). So the routers' biases get
    make_hybrid_golden.py's tune_routers nudges."""
    mh.tune_routers(NAME, model, seed, prompts, TOP_K, routers, lambda r: r.bias, gpt_oss_patches(), emulated_logits,
                    ROUTER_NUDGE, ROUTER_CLEAR, "bias")


def make(seed):
    """make_hybrid_golden.py's make for gpt-oss (its own float64 patches and bf16 emulation)."""
    cfg = config()
    torch.manual_seed(seed)
    model = GptOssForCausalLM(cfg).eval()
    perturb(model, seed)
    g = torch.Generator().manual_seed(seed + 1)
    prompts = [torch.randint(0, cfg.vocab_size, (n,), generator=g).tolist() for n in (1, 7, 20, 62)]
    tune_routers(model, seed, prompts)
    out_dir = os.path.join(HERE, NAME)
    os.makedirs(out_dir, exist_ok=True)
    tensors = {k: v.detach().contiguous() for k, v in model.state_dict().items() if "rotary_emb" not in k}
    with tempfile.TemporaryDirectory() as tmp:  # the names transformers saves
        model.save_pretrained(tmp)
        with safe_open(os.path.join(tmp, "model.safetensors"), "pt") as f:
            if set(f.keys()) != set(tensors):
                sys.exit(f"{NAME}: save_pretrained writes {sorted(set(f.keys()) ^ set(tensors))} differently")
            for k in f.keys():
                if not torch.equal(f.get_tensor(k), tensors[k]):
                    sys.exit(f"{NAME}: save_pretrained writes {k} otherwise")
    save_file(tensors, os.path.join(out_dir, "model.safetensors"))
    os.chmod(os.path.join(out_dir, "model.safetensors"), 0o644)
    mh.write_config(out_dir, cfg, released_config)

    patches = gpt_oss_patches()
    logits = {}
    double = mh.double_of(model)
    with torch.no_grad():
        for i, p in enumerate(prompts):
            logits[f"logits.{i}"] = mh.logits64(double, patches, p).float().contiguous()
    seq = mh.greedy(double, patches, prompts[1])
    for kind, kv in (("bf16", False), ("bf16kv", True)):
        for i, l in enumerate(emulated_logits(model, prompts, kv)):
            logits[f"logits_{kind}.{i}"] = l
    # --dtype=native's rounding of the experts' inputs, in float64 otherwise
    # (the GGUF twin's experts are the MXFP4 blocks: the same values).
    with torch.no_grad(), mh.patched([(m.GptOssExperts, "forward", EXPERTS_NATIVE)]):
        for i, p in enumerate(prompts):
            logits[f"logits_native.{i}"] = mh.logits64(double, patches, p).float().contiguous()
    mh.write_goldens(out_dir, NAME, prompts, logits, seq)
    return model, double, prompts, logits, patches


# ---------------------------------------------------------------------------
# Checks of the float64 reference.

def check_reference(double, patches, prompts, logits):
    """make_hybrid_golden.py's: nothing narrower than float64, and the cached runs (prefill 30 + 20:
    the long prompt is 62 tokens) equal the full forward."""
    mh.check_reference(NAME, double, patches, prompts, logits, prefill=(30, 20))


def rounding_sensitivity(double, patches, prompts, logits):
    """make_hybrid_golden.py's with this family's bf16 emulation."""
    mh.rounding_sensitivity(NAME, double, m, patches, prompts, None, logits, emulate=emulated_logits)


def check_routing(double, patches, prompts):
    """make_hybrid_golden.py's check_routing with this family's bf16 emulation: every expert used in
    every layer, at least 8 distinct expert sets, the 4th and 5th routing probabilities (softmax over
    all 8 router logits, biases included) at least MIN_MARGIN apart in float64 and both bf16
    emulations."""
    mh.check_routing(NAME, double, m, patches, prompts, lambda model: [l.mlp.router for l in layers(model)],
                     TOP_K, None, emulate=emulated_logits)


# ---------------------------------------------------------------------------
# The model written out in float64 from the formulas (the docstring's), not
# from transformers' code.

def yarn(c):
    """inv_freq [D/2] and attention factor of YaRN with truncate false (no floor / ceil)."""
    r = c.rope_parameters
    D, base, factor, orig = c.head_dim, r["rope_theta"], r["factor"], r["original_max_position_embeddings"]
    corr = lambda rot: D * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))  # noqa: E731
    low, high = max(corr(r["beta_fast"]), 0.0), min(corr(r["beta_slow"]), D - 1.0)
    if r.get("truncate", True):
        low, high = max(math.floor(corr(r["beta_fast"])), 0), min(math.ceil(corr(r["beta_slow"])), D - 1)
    i = torch.arange(D // 2, dtype=torch.float64)
    theta = base ** (-2 * i / D)
    ramp = ((i - low) / (high - low)).clamp(0, 1)  # 0: keep theta (fast dims), 1: theta / factor (slow dims)
    return theta * (1 - ramp) + theta / factor * ramp, 0.1 * math.log(factor) + 1.0


def moe_reference(mlp, x):
    """GptOssMLP: router logits with bias, top 4, softmax over those 4; clamped SwiGLU experts."""
    r, ex = mlp.router, mlp.experts
    top, idx = (x @ r.weight.T + r.bias).topk(r.top_k, -1)
    w = torch.softmax(top, -1)
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for wj, e in zip(w[t], idx[t]):
            gu = x[t] @ ex.gate_up_proj[e] + ex.gate_up_proj_bias[e]  # [2I]: gate, up interleaved
            gate, up = gu[0::2].clamp(max=ex.limit), gu[1::2].clamp(-ex.limit, ex.limit)
            act = (up + 1) * gate * torch.sigmoid(ex.alpha * gate)
            out[t] += wj * (act @ ex.down_proj[e] + ex.down_proj_bias[e])
    return out


def gpt_oss_reference(model, prompt):
    c, body = model.config, model.model
    T, H, Hkv, D = len(prompt), c.num_attention_heads, c.num_key_value_heads, c.head_dim
    inv_freq, att = yarn(c)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None]
    cos, sin = (ang.cos() * att)[:, None], (ang.sin() * att)[:, None]

    def rope(x):  # rotate-half (NEOX): dim j pairs with j + D/2
        a, b = x[..., :D // 2], x[..., D // 2:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], -1)

    t_idx, s_idx = torch.arange(T)[:, None], torch.arange(T)[None]
    h = body.embed_tokens.weight[prompt]
    for i, layer in enumerate(body.layers):
        a = layer.self_attn
        x = mh.rms(h, layer.input_layernorm.weight, c.rms_norm_eps)
        q = rope((x @ a.q_proj.weight.T + a.q_proj.bias).view(T, H, D))
        k = rope((x @ a.k_proj.weight.T + a.k_proj.bias).view(T, Hkv, D))
        v = (x @ a.v_proj.weight.T + a.v_proj.bias).view(T, Hkv, D)
        kv = torch.arange(H) // (H // Hkv)
        s = torch.einsum("thd,shd->hts", q, k[:, kv]) / math.sqrt(D)
        allowed = s_idx <= t_idx
        if c.layer_types[i] == "sliding_attention":
            allowed = allowed & (t_idx - s_idx < c.sliding_window)
        s = s.masked_fill(~allowed, float("-inf"))
        p = torch.softmax(torch.cat([s, a.sinks[:, None, None].expand(H, T, 1)], -1), -1)[..., :-1]
        o = torch.einsum("hts,shd->thd", p, v[:, kv]).reshape(T, H * D)
        h = h + o @ a.o_proj.weight.T + a.o_proj.bias
        x = mh.rms(h, layer.post_attention_layernorm.weight, c.rms_norm_eps)
        h = h + moe_reference(layer.mlp, x)
    return mh.rms(h, body.norm.weight, c.rms_norm_eps) @ model.lm_head.weight.T


def checks(model, double, prompts, patches):
    long = prompts[3]
    check_hf_dequantizer(model)
    mh.formula_check(NAME, "the MoE block (router bias, top 4, softmax over them; clamped SwiGLU, interleaved "
                     "gate/up, biases)", double, patches, long, [l.mlp for l in layers(double)],
                     lambda mod, x: moe_reference(mod, x))
    with torch.no_grad():
        worst = max(((gpt_oss_reference(double, p) - mh.logits64(double, patches, p)).abs().max()
                     / mh.logits64(double, patches, p).abs().max()).item() for p in prompts)
    print(f"  {NAME}: the whole model written out (YaRN truncate false, sinks, sliding window, biases, MoE) vs "
          f"transformers: max |diff| / max |logit| = {worst:.3g}")
    if worst > 1e-12:
        sys.exit(f"{NAME}: the written-out model is not what transformers computes")
    inv, att = yarn(double.config)
    print(f"  {NAME}: YaRN head_dim {double.config.head_dim}: attention factor {att:.6f}, inv_freq / plain "
          f"{[round(v, 4) for v in (inv / (ROPE_THETA ** (-2 * torch.arange(len(inv), dtype=torch.float64) / double.config.head_dim))).tolist()]}")
    mh.check_greedy_gap(NAME, double, patches)
    check_routing(double, patches, prompts)
    clamp_stats(double, patches, prompts)
    sink_stats(double, patches, long)
    must_matter_checks(double, patches, long)


def clamp_stats(double, patches, prompts):
    """How many of the routed experts' gate / up pre-activations the clamp at 7 changes."""
    seen = []

    def hook(mod, args, kwargs, out):
        x = kwargs.get("hidden_states", args[0] if args else None)
        idx = kwargs.get("router_indices", args[1] if len(args) > 1 else None)
        for t in range(x.shape[0]):
            for e in idx[t].tolist():
                seen.append(x[t] @ mod.gate_up_proj[e] + mod.gate_up_proj_bias[e])
    hooks = [l.mlp.experts.register_forward_hook(hook, with_kwargs=True) for l in layers(double)]
    try:
        for p in prompts + [mh.greedy_sequence(NAME)]:
            mh.logits64(double, patches, p)
    finally:
        for h in hooks:
            h.remove()
    gu = torch.stack(seen)
    gate, up, lim = gu[:, 0::2], gu[:, 1::2], double.config.swiglu_limit
    n = gate.numel()
    print(f"  {NAME}: of {n} routed gate and {n} up pre-activations: gate > {lim:g}: {int((gate > lim).sum())} "
          f"(clamped), gate < -{lim:g}: {int((gate < -lim).sum())} (not clamped), |up| > {lim:g}: "
          f"{int((up.abs() > lim).sum())} (clamped); gate range [{gate.min().item():.3g}, {gate.max().item():.3g}]")
    if (gate > lim).sum() < 20 or (up.abs() > lim).sum() < 20 or (gate < -lim).sum() < 20:
        sys.exit(f"{NAME}: the clamp is hardly exercised")


def sink_stats(double, patches, long):
    """The share of attention the sinks take (softmax mass of the sink column)."""
    shares = []
    orig = m.eager_attention_forward

    def watch(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        k = m.repeat_kv(key, module.num_key_value_groups)
        s = torch.matmul(query, k.transpose(2, 3)) * scaling
        if attention_mask is not None:
            s = s + attention_mask
        sinks = module.sinks.reshape(1, -1, 1, 1).expand(query.shape[0], -1, query.shape[-2], -1)
        shares.append(torch.softmax(torch.cat([s, sinks], -1), -1)[..., -1].flatten())
        return orig(module, query, key, value, attention_mask, scaling, dropout, **kwargs)
    mh.logits64(double, patches + [(m, "eager_attention_forward", watch)], long)
    sh = torch.cat(shares)
    qs = torch.tensor([0.0, .25, .5, .75, 1.0], dtype=sh.dtype)
    print(f"  {NAME}: the sink's share of each query's attention, quartiles "
          f"{[round(v, 3) for v in sh.quantile(qs).tolist()]}")


def must_matter_checks(double, patches, long):
    mm = lambda what, **kw: mh.must_matter(NAME, double, patches, long, what, **kw)  # noqa: E731

    def with_params(fn):
        def alter(model):
            with torch.no_grad():
                for layer in layers(model):
                    fn(layer)
            return None
        return alter

    mm("the sinks (zeroed)", alter=with_params(lambda l: l.self_attn.sinks.zero_()))
    mm("the sinks (none: -inf)", alter=with_params(lambda l: l.self_attn.sinks.fill_(float("-inf"))))
    mm("the sliding window (8; 4096 instead)", change=lambda c: setattr(c, "sliding_window", 4096))
    mm("the layer pattern (full, sliding, ... instead of sliding, full, ...)",
       change=lambda c: setattr(c, "layer_types", ["full_attention", "sliding_attention"] * 2))

    def rope(**kw):
        def change(c):
            c.rope_parameters = {**c.rope_parameters, **kw}
        return change
    mm("YaRN (plain RoPE, theta 150000, instead)", change=lambda c: setattr(c, "rope_parameters",
                                                                         {"rope_type": "default", "rope_theta": 150000.0}))
    mm("YaRN's attention factor (1 instead of 0.1 ln 32 + 1)", change=rope(attention_factor=1.0))
    mm("YaRN's truncate false (true: floor / ceil of the correction range, as ggml)", change=rope(truncate=True))
    mm("YaRN's factor (32; 16 instead)", change=rope(factor=16.0))
    mm("the rotary pairs (rotate-half; interleaved pairs instead)",
       alter=lambda model: [(m, "_apply_rotary_emb", lambda x, cos, sin: torch.stack(
           [x[..., 0::2] * cos - x[..., 1::2] * sin, x[..., 1::2] * cos + x[..., 0::2] * sin], -1).flatten(-2))])
    mm("the attention biases (q, k, v, o zeroed)", alter=with_params(lambda l: [
        getattr(l.self_attn, p).bias.zero_() for p in ("q_proj", "k_proj", "v_proj", "o_proj")]))
    mm("the router's bias (zeroed)", alter=with_params(lambda l: l.mlp.router.bias.zero_()))

    def softmax_all(model):  # softmax over all experts, the top k's share not renormalised
        return [(m.GptOssTopKRouter, "forward", mh.retyped(m.GptOssTopKRouter.forward, [
            ("router_scores = torch.nn.functional.softmax(router_top_value, dim=1, dtype=router_top_value.dtype)",
             "router_scores = torch.softmax(router_logits, -1).gather(-1, router_indices)", 1)]))]
    mm("the softmax over the top 4 only (softmax over all 8 instead)", alter=softmax_all)
    mm("the experts' gate_up_proj bias (zeroed)", alter=with_params(lambda l: l.mlp.experts.gate_up_proj_bias.zero_()))
    mm("the experts' down_proj bias (zeroed)", alter=with_params(lambda l: l.mlp.experts.down_proj_bias.zero_()))

    def gate(edits):
        return lambda model: [(m.GptOssExperts, "_apply_gate", mh.retyped(m.GptOssExperts._apply_gate, edits))]
    mm("the gate / up interleave (read as [gate | up] halves)", alter=gate([
        ("gate, up = gate_up[..., ::2], gate_up[..., 1::2]", "gate, up = gate_up.chunk(2, dim=-1)", 1)]))
    mm("the clamp (swiglu_limit 7; none instead)", change=lambda c: setattr(c, "swiglu_limit", 1e9))
    mm("the gate's one-sided clamp (clamped below at -7 too instead)", alter=gate([
        ("gate = gate.clamp(min=None, max=self.limit)", "gate = gate.clamp(min=-self.limit, max=self.limit)", 1)]))
    mm("swiglu alpha (1.702; 1 instead)", change=lambda c: setattr(c, "swiglu_alpha", 1.0))
    mm("the + 1 on up ((up + 1) * glu; up * glu instead)", alter=gate([("(up + 1) * glu", "up * glu", 1)]))


# ---------------------------------------------------------------------------
# The GGUF twin, as llama.cpp's converter (llama.cpp/conversion/gpt_oss.py GptOssModel
# on the released MXFP4 checkpoint) writes it.

GGUF_LAYER = {
    "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "post_attention_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight", "self_attn.o_proj.bias": "attn_output.bias",
    "self_attn.sinks": "attn_sinks.weight",
    "mlp.router.weight": "ffn_gate_inp.weight", "mlp.router.bias": "ffn_gate_inp.bias",
    "mlp.experts.down_proj_bias": "ffn_down_exps.bias",
}
GGUF_GLOBAL = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
               "lm_head.weight": "output.weight"}


def ggml_mxfp4_bytes(rows):
    """ggml's block_mxfp4 bytes of rows [..., K]: per block of 32, e (1 byte), then 16 bytes, byte j
    holding value j in its low nibble and value j + 16 in its high nibble."""
    codes, e = mxfp4_codes(torch.from_numpy(rows))
    c = codes.reshape(*e.shape, 2, 16)
    qs = c[..., 0, :] | (c[..., 1, :] << 4)
    return torch.cat([e[..., None], qs], -1).reshape(*rows.shape[:-1], -1).numpy()


def write_gguf(gguf):
    src = os.path.join(HERE, NAME)
    cfg = json.load(open(os.path.join(src, "config.json")))
    if cfg["layer_types"] != ["sliding_attention" if i % 2 == 0 else "full_attention"
                              for i in range(cfg["num_hidden_layers"])]:
        sys.exit(f"{NAME}: layer_types {cfg['layer_types']}: llama.cpp's gpt-oss slides on even layers only")
    path = os.path.join(HERE, GGUF_NAME, "model.gguf")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    w = gguf.GGUFWriter(path, arch="gpt-oss")
    w.add_type(gguf.GGUFType.MODEL)
    # TextModel.set_gguf_parameters, in its order
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    rope = cfg["rope_scaling"]
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(rope["factor"])
    w.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
    w.add_rope_scaling_yarn_beta_fast(rope["beta_fast"])
    w.add_rope_scaling_yarn_beta_slow(rope["beta_slow"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_expert_count(cfg["num_local_experts"])
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_MXFP4_MOE)  # as for the released (MXFP4) checkpoint
    # GptOssModel.set_gguf_parameters
    w.add_sliding_window(cfg["sliding_window"])
    w.add_expert_feed_forward_length(cfg["intermediate_size"])

    state = load_file(os.path.join(src, "model.safetensors"))
    n_mx = 0
    # The converter writes the repacked MXFP4 experts first (GptOssModel.generate_extra_tensors, in
    # the checkpoint's order: per layer down, then gate and up), then the other tensors.
    experts = [hf for hf in sorted(state) if hf.endswith(("mlp.experts.gate_up_proj", "mlp.experts.down_proj"))]
    for hf in experts + [hf for hf in sorted(state) if hf not in experts]:
        t = state[hf].numpy()
        if hf in GGUF_GLOBAL:
            w.add_tensor(GGUF_GLOBAL[hf], np.ascontiguousarray(t))
            continue
        layer, _, tail = hf[len("model.layers."):].partition(".")
        blk = f"blk.{layer}."
        if tail in ("mlp.experts.gate_up_proj", "mlp.experts.down_proj"):
            rows = expert_rows(torch.from_numpy(t)).numpy()  # [E, N, K], K the MXFP4 axis
            parts = ({"ffn_down_exps": rows} if tail.endswith("down_proj")
                     else {"ffn_gate_exps": rows[:, 0::2], "ffn_up_exps": rows[:, 1::2]})
            for kind, r in parts.items():
                r = np.ascontiguousarray(r)
                q = gguf.quants.quantize(r, gguf.GGMLQuantizationType.MXFP4)
                if not np.array_equal(q, ggml_mxfp4_bytes(r)):
                    sys.exit(f"{hf}: gguf-py's MXFP4 bytes are not ggml's block layout as written here")
                back = gguf.quants.dequantize(q, gguf.GGMLQuantizationType.MXFP4)
                if not np.array_equal(back.view(np.uint32), r.view(np.uint32)):
                    sys.exit(f"{hf}: the MXFP4 bytes do not dequantize to the F32 experts bit for bit")
                w.add_tensor(f"{blk}{kind}.weight", q, raw_dtype=gguf.GGMLQuantizationType.MXFP4)
                n_mx += 1
            continue
        if tail == "mlp.experts.gate_up_proj_bias":  # [E, 2I], interleaved
            w.add_tensor(f"{blk}ffn_gate_exps.bias", np.ascontiguousarray(t[:, 0::2]))
            w.add_tensor(f"{blk}ffn_up_exps.bias", np.ascontiguousarray(t[:, 1::2]))
            continue
        w.add_tensor(blk + GGUF_LAYER[tail], np.ascontiguousarray(t))
    # no tokenizer (the fixture has none): tokenizer.ggml.model "none" and vocab_size, with which
    # llama.cpp makes vocab_size placeholder tokens (Flover reads no vocabulary: no tokenizer.ggml.tokens)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_vocab_size(cfg["vocab_size"])
    w.add_tokenizer_model("none")
    if cfg.get("eos_token_id") is not None:
        w.add_eos_token_id(cfg["eos_token_id"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    for name in ("golden.json", "golden_logits.safetensors"):
        with open(os.path.join(src, name), "rb") as f, open(os.path.join(HERE, GGUF_NAME, name), "wb") as g:
            g.write(f.read())
    print(f"wrote {path}: {n_mx} MXFP4 expert tensors, each dequantizing (gguf-py) to the F32 experts bit for bit")


def main(argv):
    torch.set_num_threads(max(1, min(8, os.cpu_count() or 1)))
    try:
        import gguf
    except ImportError:
        sys.exit("no gguf-py: PYTHONPATH=llama.cpp/gguf-py")
    if not hasattr(gguf.GGMLQuantizationType, "MXFP4") or not hasattr(gguf.MODEL_ARCH, "GPT_OSS"):
        sys.exit("this gguf-py has no MXFP4 / gpt-oss")
    if argv != ["--gguf-only"]:
        model, double, prompts, logits, patches = make(SEED)
        check_reference(double, patches, prompts, logits)
        mh.reload_pretrained(NAME, GptOssForCausalLM, patches, prompts, logits)
        rounding_sensitivity(double, patches, prompts, logits)
        checks(model, double, prompts, patches)
    write_gguf(gguf)


if __name__ == "__main__":
    main(sys.argv[1:])
