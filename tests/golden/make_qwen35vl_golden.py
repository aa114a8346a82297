#!/usr/bin/env python
"""Regenerate the tiny Qwen3.5 image-text model (Qwen3_5ForConditionalGeneration) and its float64 goldens.

The sibling of make_qwen3vl_golden.py (imported here as `vl`): the same vision tower (minus DeepStack, which Qwen3.5
does not have), the same images, processor settings, chat cases, checks and output layout, so that the C++ tests can
be parameterised over qwen3vl_tiny and qwen35vl_tiny. The language model is Qwen3.5's hybrid (qwen3_5_text): three
gated delta-net (linear attention) layers and one gated full-attention layer with partial (1/4) interleaved M-RoPE,
zero-centred RMSNorms, tied embeddings, no MTP layers.

Usage (from the repository root, in a venv with torch, transformers 5.x, pillow, tokenizers, numpy, safetensors):
    python tests/golden/make_qwen35vl_golden.py [--scratch DIR]

Writes
  tests/golden/qwen35vl_tiny/        save_pretrained() checkpoint (float32 safetensors) + tokenizer + processor
                                     (processor_config.json, preprocessor_config.json, chat_template.jinja = Qwen3.5's
                                     template, chat_templates/templates.json["qwen3.5"]), the four input images (the
                                     same files as qwen3vl_tiny's) and the goldens: golden.safetensors and golden.json,
                                     with the tensor names and json keys of qwen3vl_tiny (no tower.*.deepstack.*)
  DIR/goldens/*.npy, index.json      every array at full precision (float64) with checksums (default DIR
                                     /tmp/qwen35vl_golden; not committed)

Reused from make_qwen3vl_golden.py (not copied): images, BPE corpus and tokenizer construction, image processor,
video-less processor class, dtype audit, vision-tower float64 patches (rope table, apply_rotary_pos_emb_vision,
eager softmax, interpolation weights: the Qwen3.5 functions have the same source, asserted below), the tower /
chat-case runners, the independent preprocessing, vision-tower and rope-index references, and the chat cases.
New here: the Qwen3.5 tokenizer details (Qwen3.5's pre-tokenizer pattern, <think> </think>), the Qwen3.5 config and
init, the Qwen3.5 float64 patches, and an independent float64 reference of the hybrid language model (gated
delta rule written token by token, which transformers computes chunk-wise in the prefill).

"True float64": with model.double(), stock transformers still computes these Qwen3.5 steps in float32 (beyond the
ones the Qwen3-VL script patches): Qwen3_5RMSNorm (x.float(), weight.float()), the text M-RoPE table (float32
inv_freq and angles), Qwen3_5RMSNormGated (to(float32) of the input and the gate), the gated delta-net decay
g = -exp(A_log.float()) * softplus(a.float() + dt_bias), and both delta-rule kernels (torch_chunk_gated_delta_rule,
torch_recurrent_gated_delta_rule cast q, k, v, beta, g to float32). The norm and rope are replaced by float64
functions; the gated norm, the decay and the two kernels are transformers' own source with only the float32 casts
edited (SOURCE_EDITS, each asserted to match exactly), so the chunked UT-transform algorithm is the one that runs.
The dtype audit, the independent reference and the stock-vs-patched differences are in golden.json["checks"].
"""

import argparse
import hashlib
import inspect
import json
import math
import os
import shutil
import sys
import textwrap
import types
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import make_qwen3vl_golden as vl  # noqa: E402  (also sets torch to 1 thread)
from make_qwen3vl_golden import (  # noqa: E402
    CASES,
    IMAGES,
    DtypeAudit,
    _rot_half,
    build_image_processor,
    maxdiff,
    npy,
    reference_preprocess,
    reference_rope_index,
    sha256,
)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from PIL import Image  # noqa: E402
from tokenizers import AddedToken, Regex, pre_tokenizers  # noqa: E402

import transformers  # noqa: E402
from transformers import (  # noqa: E402
    AutoImageProcessor,
    AutoTokenizer,
    GenerationConfig,
    Qwen3_5Config,
    Qwen3_5ForConditionalGeneration,
)
from transformers.models.qwen3_5 import modeling_qwen3_5 as m35  # noqa: E402
from transformers.models.qwen3_5.tokenization_qwen3_5 import PRETOKENIZE_REGEX as QWEN35_SPLIT  # noqa: E402

SEED = vl.SEED
MERGE = vl.MERGE
VOCAB_MODEL = vl.VOCAB_MODEL  # 400

# ----------------------------------------------------------------------------- configuration
# The Qwen3-VL fixture's tower; Qwen3.5's has no DeepStack mergers.
VISION = {k: v for k, v in vl.VISION.items() if k != "deepstack_visual_indexes"}
TEXT = dict(
    vocab_size=VOCAB_MODEL,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=4,
    layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    hidden_act="silu",
    max_position_embeddings=2048,
    rms_norm_eps=1e-6,
    # rotary over head_dim * 1/4 = 8 dims = 4 frequencies, interleaved T H W T (real Qwen3.5: theta 1e7,
    # mrope_section [11, 11, 10] over 64 of 256 dims)
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                     "mrope_section": [2, 1, 1], "mrope_interleaved": True},
    attention_bias=False,
    linear_conv_kernel_dim=4,
    linear_key_head_dim=16,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_value_head_dim=16,
    tie_word_embeddings=True,
)
ROTARY_DIM = int(TEXT["head_dim"] * TEXT["rope_parameters"]["partial_rotary_factor"])  # 8

# Qwen3.5's chat template, byte for byte, from the repository's copy of the real ones.
TEMPLATES_JSON = os.path.join(HERE, "chat_templates", "templates.json")
with open(TEMPLATES_JSON, encoding="utf-8") as _f:
    CHAT_TEMPLATE = json.load(_f)["qwen3.5"]

# Qwen3.5's added tokens used here, in the real tokenizer's relative order (real ids: <|endoftext|>=248044,
# <|im_start|>=248045, <|im_end|>=248046, <|vision_start|>=248053, <|vision_end|>=248054, <|image_pad|>=248056,
# <|video_pad|>=248057, <think>=248068, </think>=248069). <think> and </think> are plain added tokens
# ("special": false, as in Qwen3's tokenizer), so decode(skip_special_tokens=True) keeps them.
THINK = ["<think>", "</think>"]
SPECIALS = vl.SPECIALS + THINK


def build_tokenizer():
    """make_qwen3vl_golden's tokenizer (same corpus, same 384-entry byte-level BPE, the same 7 special tokens at
    384..390), with Qwen3.5's pre-tokenizer pattern (combining marks \\p{M} kept in letter runs) and <think>,
    </think> added at 391, 392. The corpus is ASCII, so training under either pattern gives the same merges."""
    assert all(s.isascii() for s in vl.CORPUS)
    tok = vl.build_tokenizer()
    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN35_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in THINK])
    return tok


# ----------------------------------------------------------------------------- model
def build_model(ids):
    text = dict(TEXT, bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
                pad_token_id=ids["<|endoftext|>"])
    config = Qwen3_5Config(
        vision_config=dict(VISION),
        text_config=text,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True,
    )
    torch.manual_seed(SEED)
    model = Qwen3_5ForConditionalGeneration(config).float().eval()
    # Deterministic, deliberately "large" init so that every op matters in the goldens.
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):  # lm_head.weight is tied: not listed
            if name.endswith("linear_attn.A_log"):  # decay rate A in [0.05, 0.5]: state half-lives ~2..20 tokens
                v = torch.log(0.05 + 0.45 * torch.rand(p.shape, generator=g))
            elif name.endswith("linear_attn.dt_bias"):
                v = 0.5 * torch.randn(p.shape, generator=g)
            elif name.startswith("model.language_model.") and name.endswith("norm.weight") \
                    and not name.endswith("linear_attn.norm.weight"):
                v = 0.1 * torch.randn(p.shape, generator=g)  # Qwen3_5RMSNorm scales by (1 + weight)
            elif p.ndim == 1 and name.endswith("weight"):  # gated RMSNorm (scales by weight), vision LayerNorms
                v = 1.0 + 0.1 * torch.randn(p.shape, generator=g)
            elif p.ndim == 1:  # biases (vision linears, conv, LayerNorm shifts)
                v = 0.1 * torch.randn(p.shape, generator=g)
            elif "embed_tokens" in name or "pos_embed" in name:
                v = 0.5 * torch.randn(p.shape, generator=g)  # also the (tied) LM head
            else:
                fan_in = int(np.prod(p.shape[1:]))
                v = torch.randn(p.shape, generator=g) / math.sqrt(fan_in)
            p.copy_(v.to(p.dtype))
    assert model.lm_head.weight is model.model.language_model.embed_tokens.weight
    model.generation_config = GenerationConfig(
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]],
        pad_token_id=ids["<|endoftext|>"],
    )
    return model


# ----------------------------------------------------------------------------- float64 patches
def _source(fn):
    return inspect.getsource(inspect.unwrap(fn))


def _same_source(a, b):
    """Qwen3-VL's and Qwen3.5's copies of a function are the same code (up to the class-name prefix)."""
    return _source(a).replace("Qwen3VL", "#") == _source(b).replace("Qwen3_5", "#")


def _edit_source(fn, edits):
    """fn (unwrapped, decorators dropped) recompiled from its own source with exact text edits, in its module."""
    fn = inspect.unwrap(fn)
    lines = textwrap.dedent(inspect.getsource(fn)).splitlines(True)
    while not lines[0].startswith("def "):
        lines.pop(0)  # decorators (kernel-hub / accelerate-hook wrappers, inert without those packages)
    src = "".join(lines)
    for old, new in edits:
        assert src.count(old) == 1, (fn.__qualname__, old, src.count(old))
        src = src.replace(old, new)
    ns = {}
    exec(compile(src, f"<float64 edit of {fn.__module__}.{fn.__qualname__}>", "exec"), fn.__globals__, ns)
    return ns[fn.__name__]


# transformers' own code for these, with only the float32 casts changed (recorded in golden.json)
SOURCE_EDITS = {
    "torch_chunk_gated_delta_rule": [
        ("x.transpose(1, 2).to(torch.float32, memory_format=torch.contiguous_format)",
         "x.transpose(1, 2).to(torch.float64, memory_format=torch.contiguous_format)")],
    "torch_recurrent_gated_delta_rule": [
        ("x.transpose(1, 2).to(torch.float32, memory_format=torch.contiguous_format)",
         "x.transpose(1, 2).to(torch.float64, memory_format=torch.contiguous_format)")],
    "Qwen3_5GatedDeltaNet.forward": [
        ("g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias)",
         "g = -self.A_log.exp() * F.softplus(a + self.dt_bias)")],
    "Qwen3_5RMSNormGated.forward": [
        ("hidden_states = hidden_states.to(torch.float32)", "hidden_states = hidden_states.to(torch.float64)"),
        ("ACT2FN[self.activation](gate.to(torch.float32))", "ACT2FN[self.activation](gate.to(torch.float64))")],
}


def patch_true_float64(enable):
    """Keep float64 where stock transformers computes Qwen3.5 in float32 even for a float64 model."""
    vl.patch_true_float64(enable)  # the shared pos-embed interpolation weights, and the Qwen3-VL functions below
    if not hasattr(patch_true_float64, "orig"):
        patch_true_float64.orig = (
            m35.Qwen3_5RMSNorm.forward,
            m35.Qwen3_5TextRotaryEmbedding.forward,
            m35.Qwen3_5VisionRotaryEmbedding.forward,
            m35.apply_rotary_pos_emb_vision,
            m35.eager_attention_forward,
            m35.Qwen3_5RMSNormGated.forward,
            m35.Qwen3_5GatedDeltaNet.forward,
            m35.torch_chunk_gated_delta_rule,
            m35.torch_recurrent_gated_delta_rule,
        )
        # The vision tower's rope, rope application and eager attention are the Qwen3-VL functions, so the Qwen3-VL
        # script's float64 versions of them serve here too.
        for a, b in [(vl.mq.Qwen3VLVisionRotaryEmbedding.forward, m35.Qwen3_5VisionRotaryEmbedding.forward),
                     (vl.mq.Qwen3VLVisionRotaryEmbedding.recomposition_frequencies,
                      m35.Qwen3_5VisionRotaryEmbedding.recomposition_frequencies),
                     (vl.mq.apply_rotary_pos_emb_vision, m35.apply_rotary_pos_emb_vision),
                     (vl.mq.eager_attention_forward, m35.eager_attention_forward),
                     (vl.mq.rotate_half, m35.rotate_half), (vl.mq.repeat_kv, m35.repeat_kv)]:
            assert _same_source(a, b), a.__qualname__
        patch_true_float64.edited = {
            name: _edit_source(fn, SOURCE_EDITS[name]) for name, fn in [
                ("torch_chunk_gated_delta_rule", m35.torch_chunk_gated_delta_rule),
                ("torch_recurrent_gated_delta_rule", m35.torch_recurrent_gated_delta_rule),
                ("Qwen3_5GatedDeltaNet.forward", m35.Qwen3_5GatedDeltaNet.forward),
                ("Qwen3_5RMSNormGated.forward", m35.Qwen3_5RMSNormGated.forward)]}
    if not enable:
        (m35.Qwen3_5RMSNorm.forward, m35.Qwen3_5TextRotaryEmbedding.forward,
         m35.Qwen3_5VisionRotaryEmbedding.forward, m35.apply_rotary_pos_emb_vision, m35.eager_attention_forward,
         m35.Qwen3_5RMSNormGated.forward, m35.Qwen3_5GatedDeltaNet.forward, m35.torch_chunk_gated_delta_rule,
         m35.torch_recurrent_gated_delta_rule) = patch_true_float64.orig
        return

    def rms_forward(self, x):  # stock: x.float(), (1 + weight.float())
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1.0 + self.weight)

    def text_rope_forward(self, x, position_ids):  # stock: inv_freq and angles in float32
        cfg = self.config
        rp = cfg.rope_parameters
        dim = int(cfg.head_dim * rp.get("partial_rotary_factor", 1.0))
        inv_freq = 1.0 / (rp["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
        position_ids = position_ids.expand(3, -1, -1)
        freqs = position_ids[..., None].to(torch.float64) * inv_freq
        cos = self.recomposition_frequencies(freqs.cos() * self.attention_scaling)
        sin = self.recomposition_frequencies(freqs.sin() * self.attention_scaling)
        return cos.to(x.dtype), sin.to(x.dtype)

    e = patch_true_float64.edited
    m35.Qwen3_5RMSNorm.forward = rms_forward
    m35.Qwen3_5TextRotaryEmbedding.forward = text_rope_forward
    m35.Qwen3_5VisionRotaryEmbedding.forward = vl.mq.Qwen3VLVisionRotaryEmbedding.forward  # vl's float64 one
    m35.apply_rotary_pos_emb_vision = vl.mq.apply_rotary_pos_emb_vision
    m35.eager_attention_forward = vl.mq.eager_attention_forward
    m35.Qwen3_5RMSNormGated.forward = e["Qwen3_5RMSNormGated.forward"]
    m35.Qwen3_5GatedDeltaNet.forward = m35.force_accelerate_hooks("conv1d")(e["Qwen3_5GatedDeltaNet.forward"])
    m35.torch_chunk_gated_delta_rule = e["torch_chunk_gated_delta_rule"]
    m35.torch_recurrent_gated_delta_rule = e["torch_recurrent_gated_delta_rule"]


# ----------------------------------------------------------------------------- independent float64 reference
def reference_tower(sd, pv, grids):
    """make_qwen3vl_golden's tower reference with no DeepStack taps (the tower is otherwise the same)."""
    with mock.patch.dict(vl.VISION, {"deepstack_visual_indexes": []}):
        out = vl.reference_tower(sd, pv, grids)
    assert out.pop("deepstack") == []
    return out


def mrope_axis(j):
    """Which of (t, h, w) drives rotary frequency j under interleaved M-RoPE (0 = t, 1 = h, 2 = w)."""
    sec = TEXT["rope_parameters"]["mrope_section"]
    return 1 if (j % 3 == 1 and j < 3 * sec[1]) else 2 if (j % 3 == 2 and j < 3 * sec[2]) else 0


def reference_lm(sd, input_ids, positions, image_token_id, merged=None):
    """Qwen3.5 hybrid text decoder, written from its description: logits (T, V) float64. Gated delta-net layers run
    the delta rule token by token (transformers' prefill runs it chunk-wise)."""
    P = "model.language_model."
    nh, nkv, hd = TEXT["num_attention_heads"], TEXT["num_key_value_heads"], TEXT["head_dim"]
    nk, nv = TEXT["linear_num_key_heads"], TEXT["linear_num_value_heads"]
    dk, dv = TEXT["linear_key_head_dim"], TEXT["linear_value_head_dim"]
    K = TEXT["linear_conv_kernel_dim"]
    eps = TEXT["rms_norm_eps"]

    def rms1(x, w):  # zero-centred RMSNorm: scale (1 + w)
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * (1.0 + w)

    def silu(x):
        return x * torch.sigmoid(x)

    ids = torch.tensor(input_ids)
    x = sd[P + "embed_tokens.weight"][ids].clone()
    if merged is not None:
        x[ids == image_token_id] = merged
    T = len(input_ids)
    # partial interleaved M-RoPE: the first ROTARY_DIM dims of each head, ROTARY_DIM/2 frequencies (T H W T here)
    nf = ROTARY_DIM // 2
    inv = 1.0 / (TEXT["rope_parameters"]["rope_theta"] ** (torch.arange(0, ROTARY_DIM, 2, dtype=torch.float64)
                                                           / ROTARY_DIM))
    p = torch.tensor(positions, dtype=torch.float64)  # (3, T)
    ang = torch.stack([p[mrope_axis(j)] * inv[j] for j in range(nf)], -1)
    ang = torch.cat([ang, ang], -1)
    cos, sin = ang.cos()[None], ang.sin()[None]

    def rope(x):  # (heads, T, hd)
        r, rest = x[..., :ROTARY_DIM], x[..., ROTARY_DIM:]
        return torch.cat([r * cos + _rot_half(r) * sin, rest], -1)

    mask = torch.triu(torch.full((T, T), float("-inf"), dtype=torch.float64), 1)
    for li, kind in enumerate(TEXT["layer_types"]):
        L = f"{P}layers.{li}."
        h = rms1(x, sd[L + "input_layernorm.weight"])
        if kind == "linear_attention":
            A = L + "linear_attn."
            qkv = h @ sd[A + "in_proj_qkv.weight"].T  # (T, 2*nk*dk + nv*dv)
            w = sd[A + "conv1d.weight"][:, 0, :]  # (C, K) depthwise causal conv, then SiLU
            padded = torch.cat([torch.zeros(K - 1, qkv.shape[1], dtype=qkv.dtype), qkv])
            qkv = silu(sum(padded[j:j + T] * w[:, j] for j in range(K)))
            q = qkv[:, :nk * dk].reshape(T, nk, dk)
            k = qkv[:, nk * dk:2 * nk * dk].reshape(T, nk, dk)
            v = qkv[:, 2 * nk * dk:].reshape(T, nv, dv)
            q = q.repeat_interleave(nv // nk, 1)  # value head j reads key head j // (nv / nk)
            k = k.repeat_interleave(nv // nk, 1)
            q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) / math.sqrt(dk)  # l2norm, then 1/sqrt(dk)
            k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
            beta = torch.sigmoid(h @ sd[A + "in_proj_b.weight"].T)  # (T, nv)
            g = -torch.exp(sd[A + "A_log"]) * F.softplus(h @ sd[A + "in_proj_a.weight"].T + sd[A + "dt_bias"])
            z = (h @ sd[A + "in_proj_z.weight"].T).reshape(T, nv, dv)
            S = torch.zeros(nv, dk, dv, dtype=torch.float64)  # state: S^T k predicts v
            o = torch.zeros(T, nv, dv, dtype=torch.float64)
            for t in range(T):
                S = S * torch.exp(g[t])[:, None, None]
                pred = torch.einsum("hk,hkv->hv", k[t], S)
                S = S + torch.einsum("hk,hv->hkv", k[t], (v[t] - pred) * beta[t][:, None])
                o[t] = torch.einsum("hk,hkv->hv", q[t], S)
            o = o * torch.rsqrt((o * o).mean(-1, keepdim=True) + eps) * sd[A + "norm.weight"] * silu(z)
            x = x + o.reshape(T, nv * dv) @ sd[A + "out_proj.weight"].T
        else:
            A = L + "self_attn."
            qg = (h @ sd[A + "q_proj.weight"].T).reshape(T, nh, 2 * hd)  # per head: [query | output gate]
            q, gate = qg[..., :hd].transpose(0, 1), qg[..., hd:].reshape(T, nh * hd)
            k = (h @ sd[A + "k_proj.weight"].T).reshape(T, nkv, hd).transpose(0, 1)
            v = (h @ sd[A + "v_proj.weight"].T).reshape(T, nkv, hd).transpose(0, 1)
            q = rope(rms1(q, sd[A + "q_norm.weight"]))
            k = rope(rms1(k, sd[A + "k_norm.weight"]))
            k = k.repeat_interleave(nh // nkv, 0)
            v = v.repeat_interleave(nh // nkv, 0)
            a = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(hd) + mask, -1) @ v
            a = a.transpose(0, 1).reshape(T, nh * hd) * torch.sigmoid(gate)
            x = x + a @ sd[A + "o_proj.weight"].T
        h = rms1(x, sd[L + "post_attention_layernorm.weight"])
        gt = h @ sd[L + "mlp.gate_proj.weight"].T
        u = h @ sd[L + "mlp.up_proj.weight"].T
        x = x + (silu(gt) * u) @ sd[L + "mlp.down_proj.weight"].T
    x = rms1(x, sd[P + "norm.weight"])
    return x @ sd[P + "embed_tokens.weight"].T  # tied LM head


# ----------------------------------------------------------------------------- runners (vl's, no DeepStack)
class _NoDeepstack:
    """What vl.run_tower sees: the model with image features carrying an empty DeepStack list."""

    def __init__(self, model):
        def get_image_features(pv, grid, **kw):
            out = model.model.get_image_features(pv, grid, **kw)
            assert getattr(out, "deepstack_features", None) is None
            out.deepstack_features = []
            return out

        self.model = types.SimpleNamespace(visual=model.model.visual, get_image_features=get_image_features)


def run_tower(model, pv, grid):
    out = vl.run_tower(_NoDeepstack(model), pv, grid)
    assert out.pop("deepstack") == []
    return out


# ----------------------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scratch", default="/tmp/qwen35vl_golden")
    args = ap.parse_args()
    ckpt = os.path.join(HERE, "qwen35vl_tiny")
    gdir = os.path.join(args.scratch, "goldens")
    if os.path.isdir(ckpt):
        shutil.rmtree(ckpt)
    os.makedirs(ckpt)
    os.makedirs(gdir, exist_ok=True)

    # ---- tokenizer / processor / model, written as a consumer reads them
    tokenizer = build_tokenizer()
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIALS}
    assert list(ids.values()) == list(range(384, 384 + len(SPECIALS))), ids
    assert len(tokenizer) <= VOCAB_MODEL
    image_processor = build_image_processor()
    processor = vl._NoVideoQwen3VLProcessor(image_processor=image_processor, tokenizer=tokenizer,
                                            chat_template=CHAT_TEMPLATE)
    assert processor.image_token_id == ids["<|image_pad|>"]
    model = build_model(ids)
    model.save_pretrained(ckpt, safe_serialization=True)
    processor.save_pretrained(ckpt)  # tokenizer.json, tokenizer_config.json, chat_template.jinja, processor_config.json
    image_processor.save_pretrained(ckpt)  # preprocessor_config.json

    # reload exactly what a consumer would read
    tok2 = AutoTokenizer.from_pretrained(ckpt)
    ip2 = AutoImageProcessor.from_pretrained(ckpt)
    assert type(ip2).__name__ == "Qwen2VLImageProcessorPil", type(ip2)
    with open(os.path.join(ckpt, "chat_template.jinja"), encoding="utf-8") as f:
        template2 = f.read()
    assert template2 == CHAT_TEMPLATE
    proc = vl._NoVideoQwen3VLProcessor(image_processor=ip2, tokenizer=tok2, chat_template=template2)
    assert {t: tok2.convert_tokens_to_ids(t) for t in SPECIALS} == ids
    with open(os.path.join(ckpt, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    assert tj["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] == QWEN35_SPLIT
    assert {t["content"]: t["special"] for t in tj["added_tokens"]} == {t: t not in THINK for t in SPECIALS}
    for s in ["a<think>\nb</think>\n\nc", "x\u0301y e\u0301"]:  # added tokens split out; a mark stays in its word
        assert tok2(s)["input_ids"] == tokenizer(s)["input_ids"]
    assert tok2("<think>\n\n</think>\n\n")["input_ids"][0] == ids["<think>"]
    model = Qwen3_5ForConditionalGeneration.from_pretrained(ckpt, dtype=torch.float32,
                                                            attn_implementation="eager").eval()
    assert model.model.visual.config._attn_implementation == "eager"
    assert model.model.language_model.config._attn_implementation == "eager"
    assert model.lm_head.weight is model.model.language_model.embed_tokens.weight
    assert not any(k.startswith("mtp") for k in model.state_dict())
    model = model.double()
    sd = {k: v.detach().to(torch.float64) for k, v in model.state_dict().items()}

    # ---- images -> file -> decoded RGB: the same files as qwen3vl_tiny's
    imgs, rgbs, files = {}, {}, {}
    for name, ext, make in IMAGES:
        arr = make()
        path = os.path.join(ckpt, f"{name}.{ext}")
        if ext == "png":
            Image.fromarray(arr, "RGB").save(path)
        else:
            Image.fromarray(arr, "RGB").save(path, quality=90)
        im = Image.open(path).convert("RGB")
        if ext == "png":
            assert np.array_equal(np.asarray(im), arr)
        sibling = os.path.join(HERE, "qwen3vl_tiny", os.path.basename(path))
        if os.path.exists(sibling):
            with open(sibling, "rb") as f1, open(path, "rb") as f2:
                assert f1.read() == f2.read(), f"{path} differs from {sibling}"
        imgs[name], rgbs[name], files[name] = im, np.asarray(im).copy(), os.path.basename(path)

    # ---- per image: processor output, checked against the in-memory processor and the numpy reference
    per_img = {}
    for name in imgs:
        a = proc.image_processor(images=[imgs[name]], return_tensors="pt")
        b = processor.image_processor(images=[imgs[name]], return_tensors="pt")
        c = proc(images=[imgs[name]], text=["<|vision_start|><|image_pad|><|vision_end|>"], return_tensors="pt")
        ref_pv, ref_grid, resized = reference_preprocess(rgbs[name])
        for other in (b, c):
            assert torch.equal(a["pixel_values"], other["pixel_values"])
            assert torch.equal(a["image_grid_thw"], other["image_grid_thw"])
        assert a["pixel_values"].dtype == torch.float32
        assert np.array_equal(a["pixel_values"].numpy(), ref_pv), name
        assert np.array_equal(a["image_grid_thw"].numpy(), ref_grid), name
        per_img[name] = dict(pixel_values=a["pixel_values"], grid=a["image_grid_thw"], resized=resized)

    pair_names = ["wide_100x61", "tall_9x41"]

    def compute_all():
        tow = {n: run_tower(model, per_img[n]["pixel_values"], per_img[n]["grid"]) for n in imgs}
        pv = torch.cat([per_img[n]["pixel_values"] for n in pair_names])
        grid = torch.cat([per_img[n]["grid"] for n in pair_names])
        pair = run_tower(model, pv, grid)
        pair["names"] = pair_names
        pair["grid"] = grid
        cases = {}
        for cname, cimgs, msgs in CASES:
            cases[cname] = vl.run_case(model, proc, [imgs[n] for n in cimgs], msgs)
            cases[cname]["images"] = cimgs
        return tow, pair, cases

    # ---- stock (unpatched) model.double() first, for the precision comparison, with a dtype audit
    patch_true_float64(False)
    audit_stock = DtypeAudit.current = DtypeAudit()
    stock_tow, stock_pair, stock_cases = compute_all()
    patch_true_float64(True)
    audit = DtypeAudit.current = DtypeAudit()
    tow, pair, cases = compute_all()
    DtypeAudit.current = None
    assert not audit.low, f"patched model still computes in low precision: {dict(audit.low)}"

    # ---- checks
    checks = {}
    # two images in one tower call (cu_seqlens) == each image alone
    d = maxdiff(pair["merged"], torch.cat([tow[n]["merged"] for n in pair_names]))
    assert d <= 1e-12, d
    checks["pair_vs_alone_max_abs_diff"] = d
    # independent reference, tower
    ref_d = {}
    for n in imgs:
        r = reference_tower(sd, per_img[n]["pixel_values"].double(), per_img[n]["grid"].tolist())
        for k in ["patch_embed", "pos_embeds", "block0", "last_hidden", "merged"]:
            ref_d[f"tower.{n}.{k}"] = maxdiff(r[k], tow[n][k])
    r = reference_tower(sd, torch.cat([per_img[n]["pixel_values"] for n in pair_names]).double(),
                        pair["grid"].tolist())
    ref_d["tower.pair.merged"] = maxdiff(r["merged"], pair["merged"])
    # independent reference, language model (+ rope index)
    for cname, c in cases.items():
        ids_list = c["inputs"]["input_ids"][0].tolist()
        grids = c["inputs"]["image_grid_thw"].tolist() if "image_grid_thw" in c["inputs"] else []
        rpos, rdelta = reference_rope_index(ids_list, ids["<|image_pad|>"], grids)
        assert np.array_equal(rpos, c["position_ids"].numpy()) and rdelta == int(c["rope_deltas"][0]), cname
        merged = None
        if c["images"]:
            merged = reference_tower(sd, c["inputs"]["pixel_values"].double(), grids)["merged"]
        ref_d[f"case.{cname}.logits"] = maxdiff(reference_lm(sd, ids_list, rpos, ids["<|image_pad|>"], merged),
                                                c["logits"])
        full_ids = ids_list + c["greedy"]
        fpos, _ = reference_rope_index(full_ids, ids["<|image_pad|>"], grids)
        assert np.array_equal(fpos, c["full_position_ids"].numpy())
        T = len(ids_list)
        ref_d[f"case.{cname}.gen_logits"] = maxdiff(
            reference_lm(sd, full_ids, fpos, ids["<|image_pad|>"], merged)[T - 1:T + 7], c["rerun_logits"])
    assert max(ref_d.values()) < 1e-10, ref_d
    checks["reference_max_abs_diff"] = ref_d
    # generate() (KV cache + conv/recurrent state, token-by-token delta rule) vs the no-cache chunked re-run; generate
    # hands back its output_logits as float32 copies, so this agrees to float32 rounding only
    checks["generate_kvcache_float32_logits_vs_full_rerun_max_abs_diff"] = {
        cname: maxdiff(c["gen_logits"], c["rerun_logits"]) for cname, c in cases.items()}
    assert max(checks["generate_kvcache_float32_logits_vs_full_rerun_max_abs_diff"].values()) < 1e-4
    # stock vs patched
    sdiff = {}
    for n in imgs:
        for k in ["pos_embeds", "block0", "last_hidden", "merged"]:
            sdiff[f"tower.{n}.{k}"] = maxdiff(stock_tow[n][k], tow[n][k])
    for cname in cases:
        sdiff[f"case.{cname}.logits"] = maxdiff(stock_cases[cname]["logits"], cases[cname]["logits"])
        sdiff[f"case.{cname}.rerun_logits"] = maxdiff(stock_cases[cname]["rerun_logits"],
                                                      cases[cname]["rerun_logits"])
        sdiff[f"case.{cname}.greedy_equal"] = stock_cases[cname]["greedy"] == cases[cname]["greedy"]
    checks["stock_vs_patched_max_abs_diff"] = sdiff
    checks["dtype_audit"] = {
        "patched_low_precision_ops": dict(audit.low),
        "patched_harmless_float32_ops": dict(sorted(audit.harmless.items())),
        "harmless_why": DtypeAudit.HARMLESS,
        "stock_low_precision_ops": dict(sorted(audit_stock.low.items())),
    }
    checks["float64_source_edits"] = {k: [{"stock": o, "patched": n} for o, n in v] for k, v in SOURCE_EDITS.items()}
    print(json.dumps(checks, indent=1))

    write_outputs(ckpt, gdir, ids, tokenizer, imgs, rgbs, files, per_img, tow, pair, cases, checks, proc)


def write_outputs(ckpt, gdir, ids, tokenizer, imgs, rgbs, files, per_img, tow, pair, cases, checks, proc):
    """make_qwen3vl_golden's layout and names, without the DeepStack tensors."""
    from safetensors.numpy import save_file

    tensors, desc, index = {}, {}, {}

    def put(name, arr, what, kind="float"):
        a = npy(arr)
        np.save(os.path.join(gdir, name + ".npy"), a)
        index[name] = {"shape": list(a.shape), "dtype": str(a.dtype), "sha256": sha256(a)}
        if kind == "float":
            a = a.astype(np.float32)
        elif kind == "int":
            a = a.astype(np.int32)
        elif kind == "u8":
            a = a.astype(np.uint8)
        tensors[name] = np.ascontiguousarray(a)
        desc[name] = {"shape": list(a.shape), "dtype": str(a.dtype), "what": what}

    FACTOR, MIN_PIXELS, MAX_PIXELS = vl.FACTOR, vl.MIN_PIXELS, vl.MAX_PIXELS
    images_meta = {}
    for n in imgs:
        g = per_img[n]["grid"][0].tolist()
        H, W = rgbs[n].shape[:2]
        rh, rw = per_img[n]["resized"].shape[:2]
        rounded = (round(H / FACTOR) * FACTOR, round(W / FACTOR) * FACTOR)
        branch = ("max_pixels (downscaled)" if rounded[0] * rounded[1] > MAX_PIXELS else
                  "min_pixels (upscaled)" if rounded[0] * rounded[1] < MIN_PIXELS else "rounded to multiples of 8")
        images_meta[n] = {"file": files[n], "width": W, "height": H, "sha256_rgb": sha256(rgbs[n]),
                          "resized_height": rh, "resized_width": rw, "smart_resize_branch": branch,
                          "image_grid_thw": g, "num_patches": g[0] * g[1] * g[2],
                          "num_image_tokens": g[0] * g[1] * g[2] // MERGE ** 2}
        put(f"img.{n}.rgb", rgbs[n], "decoded input image, uint8 (H, W, 3) RGB, as Pillow decodes the file", "u8")
        put(f"img.{n}.resized", per_img[n]["resized"],
            "after smart_resize + PIL BICUBIC resize on uint8, (H', W', 3)", "u8")
        put(f"img.{n}.pixel_values", per_img[n]["pixel_values"],
            "processor pixel_values (num_patches, 3*2*4*4): rows in 2x2-merge-block order, each row (C, T, ph, pw) "
            "flattened, the single frame repeated for T=2; values 2*float32(u8/255)-1 (exact float32 copy)")
        put(f"img.{n}.image_grid_thw", per_img[n]["grid"], "(1, 3) = (t=1, grid_h, grid_w) in patches", "int")
        t = tow[n]
        pre = f"tower.{n}."
        put(pre + "patch_embed", t["patch_embed"], "Conv3d patch embedding (num_patches, 32), before pos embeds")
        put(pre + "pos_embeds", t["pos_embeds"],
            "bilinear(align_corners=True)-interpolated learned 4x4 position table, per patch in the same "
            "merge-block order as pixel_values (num_patches, 32); the tower adds it to patch_embed")
        put(pre + "interp_indices", t["interp_indices"],
            "(num_patches, 4) rows of the 16-entry pos table: (r0,c0),(r0,c1),(r1,c0),(r1,c1) as r*4+c", "int")
        put(pre + "interp_weights", t["interp_weights"], "(num_patches, 4) bilinear weights for interp_indices")
        put(pre + "rope_pos", t["rope_pos"], "(num_patches, 2) = (row, col) of each patch, for the 2D vision rope",
            "int")
        put(pre + "block0", t["block0"], "hidden after vision block 0 (num_patches, 32)")
        put(pre + "last_hidden", t["last_hidden"], "hidden after the last vision block (num_patches, 32)")
        put(pre + "merged", t["merged"], "merger output = pooler_output = image features (num_patches/4, 64)")
    put("tower.pair.image_grid_thw", pair["grid"], f"grids of {pair['names']} run together in one tower call", "int")
    put("tower.pair.cu_seqlens", pair["cu_seqlens"], "cumulative patch counts (attention segments)", "int")
    put("tower.pair.merged", pair["merged"], "merged features of both images from one call (equal to the alone runs)")

    cases_meta = {}
    for cname, c in cases.items():
        inp = c["inputs"]
        input_ids = inp["input_ids"][0].tolist()
        pre = f"case.{cname}."
        put(pre + "input_ids", inp["input_ids"][0], "prompt token ids after <|image_pad|> expansion (T,)", "int")
        put(pre + "mm_token_type_ids", inp["mm_token_type_ids"][0], "1 at <|image_pad|> rows, else 0 (T,)", "int")
        put(pre + "position_ids", c["position_ids"], "M-RoPE positions (3, T) = (t, h, w) from get_rope_index", "int")
        put(pre + "rope_deltas", c["rope_deltas"], "(1,) max(position)+1-T; decode token at index t gets "
                                                   "position t + rope_deltas on all three axes", "int")
        put(pre + "logits", c["logits"], "logits for every prompt row (T, V)")
        put(pre + "greedy", torch.tensor(c["greedy"]), "8 greedy tokens from generate(do_sample=False)", "int")
        put(pre + "gen_logits", c["rerun_logits"],
            "(8, V) logits that chose each greedy token: rows T-1..T+6 of a no-cache forward over prompt+greedy")
        put(pre + "full_position_ids", c["full_position_ids"], "(3, T+8) M-RoPE positions of prompt+greedy", "int")
        expanded = proc.get_text_with_replacements(
            [c["prompt"]], images_replacements=[proc.replace_image_token(inp, i) for i in range(len(c["images"]))]
        )[0][0] if c["images"] else c["prompt"]
        assert tokenizer(expanded)["input_ids"] == input_ids
        cases_meta[cname] = {
            "images": c["images"],
            "messages": [m for cn, _, m in CASES if cn == cname][0],
            "prompt": c["prompt"],
            "expanded_prompt": expanded,
            "input_ids": input_ids,
            "num_tokens": len(input_ids),
            "image_token_count": sum(1 for t in input_ids if t == ids["<|image_pad|>"]),
            "image_grid_thw": inp["image_grid_thw"].tolist() if "image_grid_thw" in inp else [],
            "rope_deltas": int(c["rope_deltas"][0]),
            "greedy_8": c["greedy"],
            "greedy_8_text": tokenizer.decode(c["greedy"]),
            "greedy_top1_minus_top2": c["margins"],
            "last_logits_argmax": int(c["logits"][-1].argmax()),
        }

    # what the template renders around a user turn, with and without enable_thinking=False
    msgs = [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]
    gen_prompt = {
        "default": proc.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False),
        "enable_thinking=False": proc.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False,
                                                          enable_thinking=False),
    }

    save_file(tensors, os.path.join(ckpt, "golden.safetensors"))
    meta = {
        "generator": "tests/golden/make_qwen35vl_golden.py",
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__, "numpy": np.__version__,
                     "pillow": Image.__version__, "python": sys.version.split()[0]},
        "seed": SEED,
        "precision": "float32 weights on disk; goldens computed with model.double(), attn_implementation='eager', "
                     "and the true-float64 patches (text zero-centred RMSNorm, text M-RoPE table, vision rope table + "
                     "apply_rotary_pos_emb_vision, eager softmax, pos-embed interpolation weights, gated RMSNorm, "
                     "gated delta-net decay g, chunked and recurrent delta-rule kernels kept in float64); "
                     "stored in golden.safetensors as float32 (ids/positions int32, pixels uint8). "
                     "checks.stock_vs_patched_max_abs_diff compares with unpatched transformers model.double().",
        "special_token_ids": ids,
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
        "eos_token_ids": [ids["<|im_end|>"], ids["<|endoftext|>"]],
        "vocab_size_model": VOCAB_MODEL,
        "vocab_size_tokenizer": len(tokenizer),
        "vision": dict(VISION, deepstack_visual_indexes=[]),
        "deepstack": "none: Qwen3.5's vision tower has no DeepStack mergers, so there are no tower.*.deepstack.* "
                     "tensors and nothing is added to the LM hidden states after the decoder layers",
        "text": {k: v for k, v in TEXT.items()},
        "mrope_section": TEXT["rope_parameters"]["mrope_section"],
        "mrope_interleaved": True,
        "mrope_axis_per_frequency": "".join("THW"[mrope_axis(j)] for j in range(ROTARY_DIM // 2)),
        "rotary_dim": ROTARY_DIM,
        "vision_rope_theta": 10000.0,
        "processor": {"class": "Qwen2VLImageProcessorPil (PIL backend)", "min_pixels (size.shortest_edge)": MIN_PIXELS,
                      "max_pixels (size.longest_edge)": MAX_PIXELS, "patch_size": vl.PATCH,
                      "temporal_patch_size": vl.TEMPORAL_PATCH, "merge_size": MERGE,
                      "resample": "BICUBIC (PIL, uint8)", "rescale_factor": 1 / 255, "image_mean": [0.5] * 3,
                      "image_std": [0.5] * 3},
        "chat_template": {"source": "tests/golden/chat_templates/templates.json['qwen3.5']",
                          "sha256": hashlib.sha256(CHAT_TEMPLATE.encode("utf-8")).hexdigest(),
                          "user_Hi_with_generation_prompt": gen_prompt},
        "images": images_meta,
        "cases": cases_meta,
        "checks": checks,
        "tensors": desc,
    }
    with open(os.path.join(ckpt, "golden.json"), "w") as f:
        json.dump(meta, f, indent=1)
    with open(os.path.join(gdir, "index.json"), "w") as f:
        json.dump({"arrays": index, **{k: meta[k] for k in ("versions", "seed", "checks")}}, f, indent=1)
    print("wrote", ckpt, "and", gdir)


if __name__ == "__main__":
    main()
