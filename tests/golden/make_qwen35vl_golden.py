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

Reused from make_qwen3vl_golden.py (not copied): the steps of main (directories, save + reload, images, processor
checks, the stock and patched runs of the tower and the chat cases under the dtype audit, the checks, the output
writing: called here with no DeepStack, Qwen3.5's rotary dim and its extra golden.json keys), the BPE tokenizer
(trained with Qwen3.5's pattern, <think> </think> added), the model build and init (Qwen3.5's extra parameters
first), image processor, video-less processor class, vision-tower float64 patches (rope table,
apply_rotary_pos_emb_vision, eager softmax, interpolation weights: the Qwen3.5 functions have the same source,
asserted below) and the float64 text rope table, the tower / chat-case runners, the independent preprocessing,
vision-tower and rope-index references, and the chat cases. New here: the Qwen3.5 tokenizer checks, config and
init, the Qwen3.5 float64 patches, and an independent float64 reference of the hybrid language model (gated delta
rule written token by token, which transformers computes chunk-wise in the prefill).

"True float64": with model.double(), stock transformers still computes these Qwen3.5 steps in float32 (beyond the
ones the Qwen3-VL script patches): Qwen3_5RMSNorm (x.float(), weight.float()), the text M-RoPE table (float32
inv_freq and angles), Qwen3_5RMSNormGated (to(float32) of the input and the gate), the gated delta-net decay
g = -exp(A_log.float()) * softplus(a.float() + dt_bias), and both delta-rule kernels (torch_chunk_gated_delta_rule,
torch_recurrent_gated_delta_rule cast q, k, v, beta, g to float32). The norm and rope are replaced by float64
functions; the gated norm, the decay and the two kernels are transformers' own source with only the float32 casts
edited (SOURCE_EDITS, each asserted to match exactly), so the chunked UT-transform algorithm is the one that runs.
The dtype audit, the independent reference and the stock-vs-patched differences are in golden.json["checks"].
"""

import hashlib
import inspect
import json
import math
import os
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import make_qwen3vl_golden as vl  # noqa: E402  (also sets torch to 1 thread)
from make_qwen3vl_golden import _rot_half  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from transformers import Qwen3_5ForConditionalGeneration  # noqa: E402
from transformers.models.qwen3_5 import modeling_qwen3_5 as m35  # noqa: E402
from transformers.models.qwen3_5.tokenization_qwen3_5 import PRETOKENIZE_REGEX as QWEN35_SPLIT  # noqa: E402

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
    return vl.build_tokenizer(split=QWEN35_SPLIT, extra_tokens=THINK)


# ----------------------------------------------------------------------------- model
def init_value(name, p, g):
    """Qwen3.5's own parameters, else make_qwen3vl_golden's init (gated RMSNorm weights, which scale by weight, and
    vision LayerNorms: 1 + noise; biases; embeddings, also the (tied) LM head; matrices by fan-in)."""
    if name.endswith("linear_attn.A_log"):  # decay rate A in [0.05, 0.5]: state half-lives ~2..20 tokens
        return torch.log(0.05 + 0.45 * torch.rand(p.shape, generator=g))
    if name.endswith("linear_attn.dt_bias"):
        return 0.5 * torch.randn(p.shape, generator=g)
    if name.startswith("model.language_model.") and name.endswith("norm.weight") \
            and not name.endswith("linear_attn.norm.weight"):
        return 0.1 * torch.randn(p.shape, generator=g)  # Qwen3_5RMSNorm scales by (1 + weight)
    return vl.init_value(name, p, g)


def build_model(ids):
    model = vl.build_model_from(Qwen3_5ForConditionalGeneration, ids, VISION, TEXT, tie_word_embeddings=True,
                                init=init_value)
    assert model.lm_head.weight is model.model.language_model.embed_tokens.weight
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

    e = patch_true_float64.edited
    m35.Qwen3_5RMSNorm.forward = rms_forward
    m35.Qwen3_5TextRotaryEmbedding.forward = vl.text_rope_forward64  # over the partial rotary dims
    m35.Qwen3_5VisionRotaryEmbedding.forward = vl.mq.Qwen3VLVisionRotaryEmbedding.forward  # vl's float64 one
    m35.apply_rotary_pos_emb_vision = vl.mq.apply_rotary_pos_emb_vision
    m35.eager_attention_forward = vl.mq.eager_attention_forward
    m35.Qwen3_5RMSNormGated.forward = e["Qwen3_5RMSNormGated.forward"]
    m35.Qwen3_5GatedDeltaNet.forward = m35.force_accelerate_hooks("conv1d")(e["Qwen3_5GatedDeltaNet.forward"])
    m35.torch_chunk_gated_delta_rule = e["torch_chunk_gated_delta_rule"]
    m35.torch_recurrent_gated_delta_rule = e["torch_recurrent_gated_delta_rule"]


# ----------------------------------------------------------------------------- independent float64 reference
def reference_lm(sd, input_ids, positions, image_token_id, merged=None, deepstack=None):
    """Qwen3.5 hybrid text decoder, written from its description: logits (T, V) float64. Gated delta-net layers run
    the delta rule token by token (transformers' prefill runs it chunk-wise). No DeepStack: deepstack is empty."""
    assert not deepstack
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
    ang = torch.stack([p[vl.mrope_axis(j, TEXT)] * inv[j] for j in range(nf)], -1)
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


# ----------------------------------------------------------------------------- main
def main():
    ckpt, gdir = vl.prepare_dirs("qwen35vl_tiny", "/tmp/qwen35vl_golden")

    # ---- tokenizer / processor / model, written as a consumer reads them
    tokenizer = build_tokenizer()
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIALS}
    assert list(ids.values()) == list(range(384, 384 + len(SPECIALS))), ids
    processor, proc, model, sd = vl.save_and_reload(ckpt, tokenizer, ids, build_model, CHAT_TEMPLATE)
    tok2 = proc.tokenizer  # the reloaded one
    with open(os.path.join(ckpt, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    assert tj["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] == QWEN35_SPLIT
    assert {t["content"]: t["special"] for t in tj["added_tokens"]} == {t: t not in THINK for t in SPECIALS}
    for s in ["a<think>\nb</think>\n\nc", "x\u0301y e\u0301"]:  # added tokens split out; a mark stays in its word
        assert tok2(s)["input_ids"] == tokenizer(s)["input_ids"]
    assert tok2("<think>\n\n</think>\n\n")["input_ids"][0] == ids["<think>"]
    assert model.lm_head.weight is model.model.language_model.embed_tokens.weight
    assert not any(k.startswith("mtp") for k in model.state_dict())

    # ---- images (the same files as qwen3vl_tiny's), processor outputs, stock and patched runs
    r = vl.compute_goldens(ckpt, model, processor, proc, patch_true_float64,
                           same_images_as=os.path.join(HERE, "qwen3vl_tiny"))

    # ---- checks
    checks = vl.common_checks(r, sd, ids, reference_lm, [], stock_rerun_logits=True, extra={
        "float64_source_edits": {k: [{"stock": o, "patched": n} for o, n in v] for k, v in SOURCE_EDITS.items()}})

    # what the template renders around a user turn, with and without enable_thinking=False
    msgs = [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]
    gen_prompt = {
        "default": proc.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False),
        "enable_thinking=False": proc.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False,
                                                          enable_thinking=False),
    }
    vl.write_outputs(
        ckpt, gdir, ids, tokenizer, proc, r, checks, generator="tests/golden/make_qwen35vl_golden.py",
        precision="float32 weights on disk; goldens computed with model.double(), attn_implementation='eager', "
                  "and the true-float64 patches (text zero-centred RMSNorm, text M-RoPE table, vision rope table + "
                  "apply_rotary_pos_emb_vision, eager softmax, pos-embed interpolation weights, gated RMSNorm, "
                  "gated delta-net decay g, chunked and recurrent delta-rule kernels kept in float64); "
                  "stored in golden.safetensors as float32 (ids/positions int32, pixels uint8). "
                  "checks.stock_vs_patched_max_abs_diff compares with unpatched transformers model.double().",
        text=TEXT, rotary_dim=ROTARY_DIM, deepstack_indexes=[],
        extra_meta={  # golden.json keys qwen3vl_tiny's does not have, each group after the key named
            "vision": {"deepstack": "none: Qwen3.5's vision tower has no DeepStack mergers, so there are no "
                                    "tower.*.deepstack.* tensors and nothing is added to the LM hidden states after "
                                    "the decoder layers"},
            "mrope_axis_per_frequency": {"rotary_dim": ROTARY_DIM},
            "processor": {"chat_template": {"source": "tests/golden/chat_templates/templates.json['qwen3.5']",
                                            "sha256": hashlib.sha256(CHAT_TEMPLATE.encode("utf-8")).hexdigest(),
                                            "user_Hi_with_generation_prompt": gen_prompt}},
        })


if __name__ == "__main__":
    main()
