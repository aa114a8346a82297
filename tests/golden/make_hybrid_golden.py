#!/usr/bin/env python3
"""Writes golden fixtures for the hybrid (recurrent + attention) families.

Each is a tiny random checkpoint of the family's own transformers class (the
independent reference), saved as make_family_golden.py saves its fixtures: a
Hugging Face directory (config.json, F32 model.safetensors under the names
save_pretrained writes, checked) with

  golden.json                prompts of 1, 7, 20 and 126 tokens, a 32-step
                             greedy continuation (full recompute each step,
                             no cache, float64) of prompts[1]
  golden_logits.safetensors  logits.{i}: every position of prompt i, float64,
                             stored as float32; logits_bf16.{i} /
                             logits_bf16kv.{i}: transformers in float32 with
                             Flover's bf16 rounding emulated (every
                             nn.Linear's weight and input; with kv also keys
                             after rotary and values, in the full-attention
                             layers only: the recurrent layers keep no K/V)

  qwen35_tiny  Qwen3_5ForConditionalGeneration (model_type "qwen3_5", as
               released) with a 1-block vision tower of width 16 whose
               weights (model.visual.*, 21 tensors) are in model.safetensors
               for a loader to skip; the text model under
               model.language_model.*, tied head (no lm_head.weight). Text:
               hidden 64, 8 layers [linear x3, full, linear x3, full]
               (llama.cpp's full_attention_interval 4), 4 heads of 32 on 2
               KV heads, partial_rotary_factor 0.25 (rotary on 8 of 32 dims),
               rope_theta 1e4 (released: 1e7, which leaves 3 of the 4
               frequencies almost still over 126 positions), mrope_section
               [2, 1, 1] interleaved (sums to 8 / 2; text positions are the
               same on every axis, so it is plain RoPE), linear attention
               with 2 key heads and 4 value heads of 16 (each key head
               serves 2 value heads), conv kernel 4, MLP 96, vocabulary
               331, rms_norm_eps 1e-6, eos 2. A = exp(A_log) drawn from
               U(0.01, 0.1) (decays exp(g) from 0.6 to 1, median 0.94) and
               dt_bias = 1 + 0.3 randn, so both matter.
  lfm2_tiny    Lfm2ForCausalLM: hidden 64, 6 layers layer_types [conv, conv,
               full_attention, conv, full_attention, conv] (and the matching
               full_attn_idxs [2, 4]), conv_L_cache 3, no conv bias, 4 heads
               of 16 on 2 KV heads, rope_theta 1e6, norm_eps 1e-5, vocabulary
               331, tied (as the released LFM2 models), intermediate_size
               128 with block_auto_adjust_ff_dim, block_ffn_dim_multiplier
               1.0, block_multiple_of 32: the MLP is 96 wide
               (int(2 * 128 / 3) = 85, times 1.0, rounded up to 96).

Every norm weight and bias gets 0.3 * randn, as make_family_golden.py's
`make`. Well-conditioned for bf16: deeper than the other fixtures, these
amplify rounding more, so qwen35_tiny's embeddings are scaled by 3, its key
rows of in_proj_qkv and key channels of conv1d are 0.9 x the query ones plus
sqrt(0.19) x their own draw (so q.k is rarely near 0, where the gated norm of
a tiny head output would blow rounding up), and the seeds (97 and 99) were
picked among six for the smallest rounding sensitivity. The script prints
it: the same bf16 roundings with float64 arithmetic between them land up
to 0.7% (qwen35_tiny) and 0.6% (lfm2_tiny) of the logit scale from
logits_bf16 / logits_bf16kv (a value on a rounding boundary rounds the other
way; median 0.2%), the floor for an implementation that rounds where the
emulation does; the emulations themselves are up to 7.4% / 7.8% from logits
(qwen3_tiny's: 1.8% / 3.5%); transformers' own float32 is 8e-6 / 3e-6 from
logits.

The reference is float64 throughout. transformers computes in float32
whatever the model's dtype: Qwen3_5RMSNorm (x.float(), weight.float()),
Qwen3_5RMSNormGated and Lfm2RMSNorm (.to(float32)), both delta rules
(.to(torch.float32) of q, k, v, beta, g), g (A_log.float(), a.float()), the
rotary embeddings (float32 positions times a float32 inv_freq) and eager
attention's softmax (dtype=float32). The float64 model runs those functions
recompiled from transformers' own source with the float32 casts edited out
(each edit counted: a changed transformers stops the script). Checked:
no aten op of the patched forward produces a tensor narrower than float64
(a TorchDispatchMode watches every op; the unpatched float64 forward has
1186 such ops for qwen35_tiny, 114 for lfm2_tiny); patched minus unpatched
float64 logits: up to 6.0e-5 (qwen35_tiny, logits up to 24) and 4.5e-6
(lfm2_tiny, logits up to 7.3); the longest prompt's full forward equals the
same prompt run token by token with the cache (generate-style: the
recurrent delta rule and causal_conv1d_update against the chunked rule and
the full conv), and prefilled 50 + 50 then token by token (the chunked rule
from a carried state), to 1e-14 of the logit scale; and config.json +
model.safetensors reloaded alone give the same logits bit for bit. Checked to
matter (float64 logits change by more than 1e-6): Qwen3.5's partial rotary
(8 dims, not 16), the attention output gate, its per-head [q, gate] layout,
the q, k, v order of in_proj_qkv, the conv's taps on past tokens and its
orientation, A_log, dt_bias, the (1 + w) norms, the gated norm's plain w and
the value heads' grouping (repeat_interleave, not tile); LFM2's conv taps
on past tokens and orientation, the B, C order of in_proj, the q/k
layernorms and rope_theta. make_gguf_hybrid.py writes the GGUF twins;
llama.cpp reads those to within 9e-6 (qwen35) and 2e-6 (lfm2) of logits,
with the same greedy tokens (CPU, F32, flash attention off).

The models, as transformers 5.23 computes them (for the C++ author):

Qwen3.5 (text), per layer i, residual h (embedding E[token], unscaled):
    x = rms1p(h, input_layernorm);  h += mixer_i(x)
    x = rms1p(h, post_attention_layernorm);  h += down(silu(gate(x)) * up(x))
  logits = rms1p(h, model.norm) @ E^T (tied).
  rms1p(x, w) = x / sqrt(mean(x^2) + eps) * (1 + w), eps = rms_norm_eps, in
  input_layernorm, post_attention_layernorm, model.norm, self_attn.q_norm,
  self_attn.k_norm (zero-centred: initialised to 0). NOT in
  linear_attn.norm, which is plain w: see the gated norm below.
  Full attention (H = 4 heads, D = 32, 2 KV heads, rot = 8):
    q_proj(x) is [T, H * 2D], per head [q (D) | gate (D)] (not all q then
    all gates); q = rms1p(q per head, q_norm); k = rms1p(k_proj(x) per head,
    k_norm); v = v_proj(x); RoPE on the first rot dims of each head
    (rotate_half: dim j with j + rot/2, j < rot/2, angle p * theta^(-2j/rot)),
    dims rot..D untouched; softmax(q k^T / sqrt(D)) causal, query head h on
    KV head h // 2; o = attn (T, H * D) * sigmoid(gate (T, H * D)); o_proj.
  Gated DeltaNet (nk = 2 key heads, nv = 4 value heads, dk = dv = 16):
    m = in_proj_qkv(x): channels [q (nk dk) | k (nk dk) | v (nv dv)];
    m = silu(causal depthwise conv of m over time): conv1d.weight [C, 1, 4],
      out[t, c] = sum_j w[c, 0, j] * m[t - 3 + j, c] (zeros before 0; w[.., 3]
      takes the current token), no bias, silu after it;
    q, k, v = split(m), per head; z = in_proj_z(x) [T, nv dv];
    beta = sigmoid(in_proj_b(x)); g = -exp(A_log) * softplus(in_proj_a(x) +
      dt_bias) (per value head; decay exp(g));
    q and k repeat_interleave(nv / nk) over heads: value head j reads key
      head j // 2 (grouped, not tiled: llama.cpp's GGUF reorders the value
      heads to tiled instead, see make_gguf_hybrid.py);
    q = l2norm(q) / sqrt(dk), k = l2norm(k), l2norm(x) = x / sqrt(sum(x^2) +
      1e-6) (a fixed 1e-6, not rms_norm_eps; llama.cpp: x / max(|x|, eps));
    per value head, state S [dk, dv] from 0:
      S = exp(g_t) * S;  delta = beta_t * (v_t - S^T k_t);
      S = S + k_t delta^T;  o_t = S^T q_t
    (transformers' chunked form, 64 tokens a chunk, equals it: checked);
    o = o / sqrt(mean(o^2 over dv) + rms_norm_eps) * norm.weight (plain w)
      * silu(z) per value head (the gated norm: norm, then gate);
    out_proj(o concatenated over heads).
LFM2, residual h (embedding E[token], unscaled), per layer:
    x = rms(h, operator_norm);  h += conv(x) or attn(x)
    h += w2(silu(w1(y)) * w3(y)),  y = rms(h, ffn_norm)
  logits = rms(h, model.embedding_norm) @ E^T: embedding_norm is the final
  norm, applied after the last layer (llama.cpp: token_embd_norm).
  rms(x, w) = x / sqrt(mean(x^2) + norm_eps) * w (plain w, eps 1e-5), also
  for q_layernorm / k_layernorm, per head of 16 on q_proj / k_proj before
  RoPE (full head, rotate_half, theta 1e6); scores / sqrt(16), query head h
  on KV head h // 2; out_proj.
  Short conv: [B | C | x] = in_proj(x) (3 x 64 rows in that order);
    y = B * x; y = causal depthwise conv (conv.weight [64, 1, 3], w[.., 2]
    on the current token, no bias, NO activation); out_proj(C * y).

Run in the oracle venv (torch 2.15 CPU, transformers 5.23.0):
    VENV/bin/python tests/golden/make_hybrid_golden.py [qwen35_tiny lfm2_tiny]
"""
import contextlib
import copy
import inspect
import json
import os
import sys
import tempfile
import textwrap

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from transformers import Lfm2Config, Lfm2ForCausalLM, Qwen3_5Config, Qwen3_5ForConditionalGeneration
import transformers.models.lfm2.modeling_lfm2 as modeling_lfm2
import transformers.models.qwen3_5.modeling_qwen3_5 as modeling_qwen3_5

HERE = os.path.dirname(os.path.abspath(__file__))


def bf16(t):
    return t.to(torch.bfloat16).to(t.dtype)


# ---------------------------------------------------------------------------
# float64 throughout. transformers computes these pieces in float32 whatever
# the model's dtype; the reference takes transformers' own source with the
# float32 casts edited out (each edit counted, so a changed transformers
# stops this script rather than silently computing something else).

def retyped(fn, edits, decorators=()):
    """`fn` recompiled from its own source with each (old, new, count) edit."""
    fn = inspect.unwrap(fn)
    src = textwrap.dedent(inspect.getsource(fn))
    lines = src.splitlines(keepends=True)
    while lines[0].lstrip().startswith("@"):  # re-applied below
        lines.pop(0)
    src = "".join(lines)
    for old, new, count in edits:
        if src.count(old) != count:
            sys.exit(f"{fn.__qualname__}: {src.count(old)} of {old!r}, expected {count}: transformers changed")
        src = src.replace(old, new)
    local = {}  # defined against the module's live globals, so patched names resolve
    exec(compile(src, f"<float64 {fn.__qualname__}>", "exec"), fn.__globals__, local)
    new = local[fn.__name__]
    for d in reversed(decorators):
        new = d(new)
    return new


def _rotary_edits():
    # cos/sin from float64 positions and float64 inverse frequencies
    # (transformers: float32 positions times the float32 inv_freq buffer).
    return [(".float()", ".double()", 1),
            ("self.inv_freq.to(device=x.device, dtype=torch.float)",
             "self.compute_default_rope_parameters(self.config)[0].to(x.device)", 1)]


def eager_patch(m):
    """Eager attention's softmax(dtype=float32) in the query's dtype."""
    return (m, "eager_attention_forward",
            retyped(m.eager_attention_forward, [("dtype=torch.float32", "dtype=query.dtype", 1)]))


def qwen35_patches():
    m = modeling_qwen3_5
    rot = m.Qwen3_5TextRotaryEmbedding
    return [
        eager_patch(m),
        (m.Qwen3_5RMSNorm, "forward", retyped(m.Qwen3_5RMSNorm.forward, [(".float()", "", 2)])),
        (m.Qwen3_5RMSNormGated, "forward",
         retyped(m.Qwen3_5RMSNormGated.forward, [("torch.float32", "input_dtype", 2)])),
        (m, "torch_chunk_gated_delta_rule",
         retyped(m.torch_chunk_gated_delta_rule, [("torch.float32", "initial_dtype", 1)])),
        (m, "torch_recurrent_gated_delta_rule",
         retyped(m.torch_recurrent_gated_delta_rule, [("torch.float32", "initial_dtype", 1)])),
        # g = -A_log.float().exp() * softplus(a.float() + dt_bias)
        (m.Qwen3_5GatedDeltaNet, "forward",
         retyped(m.Qwen3_5GatedDeltaNet.forward,
                 [("-self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias)",
                   "-self.A_log.exp() * F.softplus(a + self.dt_bias)", 1)],
                 [m.force_accelerate_hooks("conv1d")])),
        (rot, "compute_default_rope_parameters",
         staticmethod(retyped(rot.compute_default_rope_parameters, [("dtype=torch.float)", "dtype=torch.float64)", 1)]))),
        (rot, "forward", retyped(rot.forward, _rotary_edits(), [torch.no_grad(), m.dynamic_rope_update])),
    ]


def lfm2_patches():
    m = modeling_lfm2
    rot = m.Lfm2RotaryEmbedding
    return [
        eager_patch(m),
        (m.Lfm2RMSNorm, "forward", retyped(m.Lfm2RMSNorm.forward, [("torch.float32", "input_dtype", 1)])),
        (rot, "compute_default_rope_parameters",
         staticmethod(retyped(rot.compute_default_rope_parameters, [("dtype=torch.float)", "dtype=torch.float64)", 1)]))),
        (rot, "forward", retyped(rot.forward, _rotary_edits(), [torch.no_grad(), m.dynamic_rope_update])),
    ]


@contextlib.contextmanager
def patched(patches):
    saved = [(owner, attr, owner.__dict__[attr]) for owner, attr, _ in patches]
    try:
        for owner, attr, new in patches:
            setattr(owner, attr, new)
        yield
    finally:
        for owner, attr, old in saved:
            setattr(owner, attr, old)


class DtypeWatch(TorchDispatchMode):
    """Counts the aten ops that produce a floating tensor other than float64."""

    def __init__(self):
        super().__init__()
        self.narrow = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64:
                key = f"{func} -> {t.dtype}"
                self.narrow[key] = self.narrow.get(key, 0) + 1
        return out


# ---------------------------------------------------------------------------
# As make_family_golden.py.

def emulated_logits(model, module, prompts, kv, round_values):
    """Logits in float32 with Flover's bf16 rounding: every Linear's weight
    and input; with `kv` also keys after rotary (`module`'s
    apply_rotary_pos_emb) and values (`round_values(model)` returns hooks)."""
    saved, hooks = {}, []
    original_rope = module.apply_rotary_pos_emb if module is not None else None
    # A tied head is its own bf16 copy in Flover; the embedding stays f32.
    head, table = model.get_output_embeddings(), model.get_input_embeddings()
    tied = head.weight is table.weight
    if tied:
        head.weight = torch.nn.Parameter(table.weight.detach().clone())
    try:
        for mod in model.modules():
            if isinstance(mod, torch.nn.Linear):
                saved[mod] = mod.weight.data.clone()
                mod.weight.data = bf16(mod.weight.data)
                hooks.append(mod.register_forward_pre_hook(lambda m, inp: (bf16(inp[0]),)))
        if kv and module is not None:
            def rope(q, k, cos, sin, *args, **kwargs):
                q_embed, k_embed = original_rope(q, k, cos, sin, *args, **kwargs)
                return q_embed, bf16(k_embed)
            module.apply_rotary_pos_emb = rope
        if kv:
            hooks.extend(round_values(model))
        with torch.no_grad():
            return [model(torch.tensor([p]), use_cache=False).logits[0].float().contiguous() for p in prompts]
    finally:
        if module is not None:
            module.apply_rotary_pos_emb = original_rope
        for h in hooks:
            h.remove()
        for mod, w in saved.items():
            mod.weight.data = w
        if tied:
            head.weight = table.weight


def attention_values(layers):
    """Rounds the values of the full-attention layers only (the recurrent
    layers keep no K/V cache)."""
    def hooks(model):
        return [layer.self_attn.v_proj.register_forward_hook(lambda m, inp, out: bf16(out))
                for layer in layers(model) if hasattr(layer, "self_attn")]
    return hooks


def logits64(model, patches, prompt):
    with patched(patches), torch.no_grad():
        return model(torch.tensor([prompt]), use_cache=False).logits[0]


def double_of(model, config=None):
    other = type(model)(copy.deepcopy(config if config is not None else model.config)).eval().double()
    other.load_state_dict(model.state_dict())
    return other


def must_matter(name, model, patches, prompt, what, change=None, alter=None):
    """Exits unless `change` (a function of a copy of the config) or `alter`
    (a function of a float64 copy of the model that changes its weights, or
    adds hooks or float64 patches, which it returns) changes the float64
    logits of `prompt`: a fixture that exercises nothing proves nothing."""
    config = copy.deepcopy(model.config)
    if change is not None:
        change(config)
    other = double_of(model, config)
    added = (alter(other) if alter is not None else None) or []
    hooks = [h for h in added if not isinstance(h, tuple)]
    try:
        a = logits64(model, patches, prompt)
        b = logits64(other, patches + [p for p in added if isinstance(p, tuple)], prompt)
    finally:
        for h in hooks:
            h.remove()
    if torch.allclose(a, b, rtol=1e-6, atol=1e-6):
        sys.exit(f"{name}: {what} changed nothing")
    print(f"  {name}: {what} matters: max |logit change| {(a - b).abs().max().item():.3g}")


def make(name, config, model_class, module, patches, round_values, seed, perturb, positions=None):
    """make_family_golden.py's `make`, the float64 model under `patches`."""
    torch.manual_seed(seed)
    model = model_class(config).eval()
    with torch.no_grad():  # non-trivial norms and biases, so every parameter matters
        for pname, p in model.named_parameters():
            if "norm" in pname or ".ln_" in pname or pname.endswith(".bias"):
                p.add_(0.3 * torch.randn_like(p))
        perturb(model)
    out_dir = os.path.join(HERE, name)
    os.makedirs(out_dir, exist_ok=True)
    tensors = {k: v.detach().contiguous() for k, v in model.state_dict().items()
               if "rotary_emb" not in k}
    if config.tie_word_embeddings:  # saved once, as transformers saves it
        tensors.pop("lm_head.weight", None)
    with tempfile.TemporaryDirectory() as tmp:  # the names transformers saves
        model.save_pretrained(tmp)
        with safe_open(os.path.join(tmp, "model.safetensors"), "pt") as f:
            if set(f.keys()) != set(tensors):
                sys.exit(f"{name}: save_pretrained writes {sorted(set(f.keys()) ^ set(tensors))} differently")
    save_file(tensors, os.path.join(out_dir, "model.safetensors"))
    os.chmod(os.path.join(out_dir, "model.safetensors"), 0o644)  # save_file writes 0600
    config.to_json_file(os.path.join(out_dir, "config.json"))

    text = config.get_text_config()
    V, P = text.vocab_size, positions or text.max_position_embeddings
    g = torch.Generator().manual_seed(seed + 1)
    prompts = [torch.randint(0, V, (n,), generator=g).tolist() for n in (1, 7, 20, P - 2)]
    logits = {}
    double = double_of(model)
    with torch.no_grad():
        for i, p in enumerate(prompts):
            logits[f"logits.{i}"] = logits64(double, patches, p).float().contiguous()
        seq = list(prompts[1])
        for _ in range(32):
            seq.append(int(logits64(double, patches, seq)[-1].argmax()))
    for kind, kv in (("bf16", False), ("bf16kv", True)):
        for i, l in enumerate(emulated_logits(model, module, prompts, kv, round_values)):
            logits[f"logits_{kind}.{i}"] = l
    save_file(logits, os.path.join(out_dir, "golden_logits.safetensors"))
    os.chmod(os.path.join(out_dir, "golden_logits.safetensors"), 0o644)
    with open(os.path.join(out_dir, "golden.json"), "w") as f:
        json.dump({"prompts": prompts, "greedy_prompt": prompts[1],
                   "greedy_output": seq[len(prompts[1]):], "stored_dtype": "float32"}, f)
    if len(set(seq[len(prompts[1]):])) < 8:
        sys.exit(f"{name}: the greedy run repeats itself: {seq[len(prompts[1]):]}")
    print(f"{name}: greedy {seq[len(prompts[1]):]}")
    return double, prompts, logits


# ---------------------------------------------------------------------------
# Checks of the float64 reference.

def check_reference(name, double, patches, prompts, logits):
    long = prompts[3]
    # (a) nothing narrower than float64 anywhere in the patched forward
    watch = DtypeWatch()
    with watch:
        exact = logits64(double, patches, long)
    if watch.narrow:
        sys.exit(f"{name}: the float64 forward still narrows: {watch.narrow}")
    # ... and what the patches removed
    watch = DtypeWatch()
    with watch, torch.no_grad():
        plain = double(torch.tensor([long]), use_cache=False).logits[0]
    print(f"  {name}: unpatched float64 forward narrows in {sum(watch.narrow.values())} ops "
          f"({', '.join(sorted(watch.narrow))})")
    print(f"  {name}: max |patched - unpatched float64| = {(exact - plain).abs().max().item():.3g} "
          f"(logits up to {exact.abs().max().item():.3g})")
    # (b) full forward == token by token with the cache (generate-style),
    # and == prefill 50, 50 more, then token by token
    scale = exact.abs().max().item()
    for split in ((1,) * len(long), (50, 50) + (1,) * (len(long) - 100)):
        rows, cache, at = [], None, 0
        watch = DtypeWatch()
        with patched(patches), torch.no_grad(), watch:
            for n in split:
                out = double(torch.tensor([long[at:at + n]]), past_key_values=cache, use_cache=True)
                cache, at = out.past_key_values, at + n
                rows.append(out.logits[0])
        if watch.narrow:
            sys.exit(f"{name}: the cached float64 forward narrows: {watch.narrow}")
        step = torch.cat(rows)
        err = (step - exact).abs().max().item() / scale
        what = "token by token" if split[0] == 1 else "prefill 50 + 50, then token by token"
        print(f"  {name}: {what} with the cache vs full forward: max |diff| / max |logit| = {err:.3g}")
        if err > 1e-12:
            sys.exit(f"{name}: the cached run differs from the full forward")
    if not torch.equal(exact.float(), logits["logits.3"]):
        sys.exit(f"{name}: logits.3 is not the checked reference")


def rounding_sensitivity(name, double, module, patches, prompts, round_values, logits):
    """The bf16 emulation again with float64 arithmetic between the same
    roundings: how far an implementation that rounds exactly where
    emulated_logits does, but computes the rest differently, may land from
    logits_bf16*.{i} (a value on a bf16 rounding boundary rounds the other
    way). Printed, for the tolerances of the tests that read the fixture."""
    with torch.no_grad():  # transformers' own float32 (its float32 casts and all)
        f32 = [double.float()(torch.tensor([p]), use_cache=False).logits[0] for p in prompts]
        double.double()
    rows = torch.cat([(a - logits[f"logits.{i}"]).abs().max(1).values / logits[f"logits.{i}"].abs().max(1).values
                      for i, a in enumerate(f32)])
    print(f"  {name}: transformers in float32 vs logits (float64): max {rows.max().item():.3g}")
    for kind, kv in (("bf16", False), ("bf16kv", True)):
        with patched(patches):
            again = emulated_logits(double, module, prompts, kv, round_values)
        rows = torch.cat([(a.float() - logits[f"logits_{kind}.{i}"]).abs().max(1).values
                          / logits[f"logits_{kind}.{i}"].abs().max(1).values for i, a in enumerate(again)])
        away = torch.cat([(logits[f"logits_{kind}.{i}"] - logits[f"logits.{i}"]).abs().max(1).values
                          / logits[f"logits.{i}"].abs().max(1).values for i in range(len(prompts))])
        print(f"  {name}: logits_{kind} vs logits (float64): max {away.max().item():.3g}, median "
              f"{away.median().item():.3g}; the same roundings in float64 vs logits_{kind}: max "
              f"{rows.max().item():.3g}, median {rows.median().item():.3g}")


def reload_check(name, model_class, patches, prompts, logits):
    """config.json and model.safetensors alone reproduce the references."""
    d = os.path.join(HERE, name)
    config = model_class.config_class.from_pretrained(d)
    for c in (config, *(getattr(config, k) for k in ("text_config", "vision_config") if hasattr(config, k))):
        c._attn_implementation = "eager"
    model = model_class(config).eval()
    tensors = load_file(os.path.join(d, "model.safetensors"))
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    if config.tie_word_embeddings and missing == ["lm_head.weight"]:
        missing = []
        assert model.lm_head.weight is model.get_input_embeddings().weight
    if missing or unexpected:
        sys.exit(f"{name}: reloading: missing {missing}, unexpected {unexpected}")
    model = model.double()
    worst = max((logits64(model, patches, p).float() - logits[f"logits.{i}"]).abs().max().item()
                for i, p in enumerate(prompts))
    print(f"  {name}: reloaded from config.json + model.safetensors: max |logit - golden| {worst:.3g}")
    if worst != 0.0:
        sys.exit(f"{name}: the files do not reproduce the references")


# ---------------------------------------------------------------------------

def qwen35():
    m = modeling_qwen3_5
    text = dict(vocab_size=331, hidden_size=64, intermediate_size=96, num_hidden_layers=8,
                layer_types=["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3
                + ["full_attention"],
                num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                                 "mrope_section": [2, 1, 1], "mrope_interleaved": True},
                linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
                linear_value_head_dim=16, linear_conv_kernel_dim=4, max_position_embeddings=128,
                tie_word_embeddings=True, rms_norm_eps=1e-6, initializer_range=0.2, eos_token_id=2)
    vision = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, patch_size=4,
                  temporal_patch_size=2, spatial_merge_size=2, out_hidden_size=64, num_position_embeddings=16)
    config = Qwen3_5Config(text_config=text, vision_config=vision, tie_word_embeddings=True)
    config.architectures = ["Qwen3_5ForConditionalGeneration"]
    for c in (config, config.text_config, config.vision_config):
        c._attn_implementation = "eager"

    def perturb(model):
        """A_log, dt_bias perturbed; and conditioned for bf16 (see the docstring)."""
        g = torch.Generator().manual_seed(90)
        model.get_input_embeddings().weight.mul_(3.0)
        for layer in model.model.language_model.layers:
            if hasattr(layer, "linear_attn"):
                la = layer.linear_attn
                n, kd = la.A_log.numel(), la.key_dim
                la.A_log.copy_(torch.empty(n).uniform_(0.01, 0.1, generator=g).log())
                la.dt_bias.add_(0.3 * torch.randn(n, generator=g))
                for w in (la.in_proj_qkv.weight, la.conv1d.weight):  # keys correlated with queries
                    w[kd:2 * kd] = 0.9 * w[:kd] + 0.19 ** 0.5 * w[kd:2 * kd]

    patches = qwen35_patches()
    layers = lambda model: model.model.language_model.layers  # noqa: E731
    double, prompts, logits = make("qwen35_tiny", config, Qwen3_5ForConditionalGeneration, m, patches,
                                   attention_values(layers), 97, perturb)
    print(f"  attention implementation: {double.model.language_model.layers[3].self_attn.config._attn_implementation}")
    check_reference("qwen35_tiny", double, patches, prompts, logits)
    reload_check("qwen35_tiny", Qwen3_5ForConditionalGeneration, patches, prompts, logits)
    rounding_sensitivity("qwen35_tiny", double, m, patches, prompts, attention_values(layers), logits)
    return double, prompts, patches


def qwen35_must_matter(double, prompts, patches):
    m = modeling_qwen3_5
    name, long = "qwen35_tiny", prompts[3]
    t = double.config.text_config
    H, D = t.num_attention_heads, t.head_dim

    def partial(c):
        c.text_config.rope_parameters["partial_rotary_factor"] = 0.5
    must_matter(name, double, patches, long, "the partial rotary (8 of 32 dims, not 16)", change=partial)

    def attn_layers(model):
        return [l.self_attn for l in model.model.language_model.layers if hasattr(l, "self_attn")]

    def no_gate(model):  # gate half of each head's q_proj rows saturated: sigmoid = 1
        def hook(mod, inp, out):
            out = out.view(*out.shape[:-1], H, 2 * D).clone()
            out[..., D:] = 40.0
            return out.view(*out.shape[:-2], -1)
        return [a.q_proj.register_forward_hook(hook) for a in attn_layers(model)]
    must_matter(name, double, patches, long, "the attention output gate sigmoid(gate)", alter=no_gate)

    def blocked(model):  # q_proj read as [all q | all gates] instead of per head [q, gate]
        def hook(mod, inp, out):
            q, g = out[..., :H * D], out[..., H * D:]
            return torch.stack([q.view(*q.shape[:-1], H, D), g.view(*g.shape[:-1], H, D)], -2).flatten(-3)
        return [a.q_proj.register_forward_hook(hook) for a in attn_layers(model)]
    must_matter(name, double, patches, long, "the per-head [q, gate] layout of q_proj", alter=blocked)

    def linear(model):
        return [l.linear_attn for l in model.model.language_model.layers if hasattr(l, "linear_attn")]

    def swap_qk(model):  # in_proj_qkv's rows (and the conv's channels) read as [k, q, v]
        with torch.no_grad():
            for la in linear(model):
                kd = la.key_dim
                for w in (la.in_proj_qkv.weight, la.conv1d.weight):
                    w.copy_(torch.cat([w[kd:2 * kd], w[:kd], w[2 * kd:]]))
        return None
    must_matter(name, double, patches, long, "the q, k, v order of in_proj_qkv (q and k swapped)", alter=swap_qk)

    def current_tap_only(model):
        with torch.no_grad():
            for la in linear(model):
                la.conv1d.weight[..., :-1] = 0
        return None
    must_matter(name, double, patches, long, "the conv kernel's taps on past tokens", alter=current_tap_only)

    def flipped(model):
        with torch.no_grad():
            for la in linear(model):
                la.conv1d.weight.copy_(la.conv1d.weight.flip(-1))
        return None
    must_matter(name, double, patches, long, "the conv kernel's orientation (flipped)", alter=flipped)

    def a_log(model):
        with torch.no_grad():
            for la in linear(model):
                la.A_log.add_(0.5)
        return None
    must_matter(name, double, patches, long, "A_log (+0.5)", alter=a_log)

    def dt_bias(model):
        with torch.no_grad():
            for la in linear(model):
                la.dt_bias.zero_()
        return None
    must_matter(name, double, patches, long, "dt_bias (zeroed)", alter=dt_bias)

    def plain_norms(model):  # (1 + w) read as w
        return [(m.Qwen3_5RMSNorm, "forward",
                 retyped(m.Qwen3_5RMSNorm.forward, [(".float()", "", 2), ("(1.0 + self.weight)", "self.weight", 1)]))]
    must_matter(name, double, patches, long, "the (1 + w) zero-centred norms (as plain w)", alter=plain_norms)

    def centred_gated_norm(model):  # the gated norm's plain w read as (1 + w)
        return [(m.Qwen3_5RMSNormGated, "forward",
                 retyped(m.Qwen3_5RMSNormGated.forward, [("torch.float32", "input_dtype", 2),
                                                         ("self.weight * hidden_states", "(1.0 + self.weight) * hidden_states", 1)]))]
    must_matter(name, double, patches, long, "the gated norm's plain w (as 1 + w)", alter=centred_gated_norm)

    def tiled(model):  # value head j on key head j % n_k instead of j // (n_v / n_k)
        edits = [("torch.float32", "initial_dtype", 1),
                 (".repeat_interleave(num_v_heads // num_k_heads, dim=2)", ".repeat(1, 1, num_v_heads // num_k_heads, 1)", 2)]
        return [(m, "torch_chunk_gated_delta_rule", retyped(m.torch_chunk_gated_delta_rule, edits)),
                (m, "torch_recurrent_gated_delta_rule", retyped(m.torch_recurrent_gated_delta_rule, edits))]
    must_matter(name, double, patches, long, "the grouping of value heads on key heads (repeat_interleave, not tile)",
                alter=tiled)


def qwen35_decay_stats(double, prompts, patches):
    """Per-token decay exp(g) and beta of the linear-attention layers."""
    stats = []
    def hook(mod, args, kwargs, out):
        x = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
        a, b = mod.in_proj_a(x), mod.in_proj_b(x)
        g = -mod.A_log.exp() * F.softplus(a + mod.dt_bias)
        stats.append((g.exp(), b.sigmoid()))
    hooks = [l.linear_attn.register_forward_hook(hook, with_kwargs=True) for l in double.model.language_model.layers
             if hasattr(l, "linear_attn")]
    logits64(double, patches, prompts[3])
    for h in hooks:
        h.remove()
    d = torch.cat([s[0].flatten() for s in stats])
    b = torch.cat([s[1].flatten() for s in stats])
    print(f"  qwen35_tiny: decay exp(g) quartiles {[round(v, 3) for v in d.quantile(torch.tensor([0.0, .25, .5, .75, 1.0], dtype=d.dtype)).tolist()]}, "
          f"beta quartiles {[round(v, 3) for v in b.quantile(torch.tensor([0.0, .25, .5, .75, 1.0], dtype=b.dtype)).tolist()]}")


def lfm2():
    m = modeling_lfm2
    layer_types = ["conv", "conv", "full_attention", "conv", "full_attention", "conv"]
    config = Lfm2Config(vocab_size=331, hidden_size=64, intermediate_size=128, num_hidden_layers=6,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                        initializer_range=0.2, norm_eps=1e-5, conv_L_cache=3, conv_bias=False,
                        block_multiple_of=32, block_ffn_dim_multiplier=1.0, block_auto_adjust_ff_dim=True,
                        layer_types=layer_types,
                        full_attn_idxs=[i for i, t in enumerate(layer_types) if t == "full_attention"],
                        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                        tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    config.architectures = ["Lfm2ForCausalLM"]
    config._attn_implementation = "eager"
    patches = lfm2_patches()
    layers = lambda model: model.model.layers  # noqa: E731
    double, prompts, logits = make("lfm2_tiny", config, Lfm2ForCausalLM, m, patches,
                                   attention_values(layers), 99, lambda model: None)
    print(f"  MLP width {double.model.layers[0].feed_forward.w1.out_features} "
          f"(intermediate_size {config.intermediate_size})")
    check_reference("lfm2_tiny", double, patches, prompts, logits)
    reload_check("lfm2_tiny", Lfm2ForCausalLM, patches, prompts, logits)
    rounding_sensitivity("lfm2_tiny", double, m, patches, prompts, attention_values(layers), logits)
    return double, prompts, patches


def lfm2_must_matter(double, prompts, patches):
    name, long = "lfm2_tiny", prompts[3]
    C = double.config.hidden_size

    def convs(model):
        return [l.conv for l in model.model.layers if hasattr(l, "conv")]

    def current_tap_only(model):
        with torch.no_grad():
            for c in convs(model):
                c.conv.weight[..., :-1] = 0
        return None
    must_matter(name, double, patches, long, "the conv kernel's taps on past tokens", alter=current_tap_only)

    def flipped(model):
        with torch.no_grad():
            for c in convs(model):
                c.conv.weight.copy_(c.conv.weight.flip(-1))
        return None
    must_matter(name, double, patches, long, "the conv kernel's orientation (flipped)", alter=flipped)

    def swap_bc(model):  # in_proj's rows read as [C, B, x] instead of [B, C, x]
        with torch.no_grad():
            for c in convs(model):
                w = c.in_proj.weight
                w.copy_(torch.cat([w[C:2 * C], w[:C], w[2 * C:]]))
        return None
    must_matter(name, double, patches, long, "the B, C order of in_proj (B gates before the conv, C after)",
                alter=swap_bc)

    def no_qk_norm(model):
        for l in model.model.layers:
            if hasattr(l, "self_attn"):
                l.self_attn.q_layernorm = torch.nn.Identity()
                l.self_attn.k_layernorm = torch.nn.Identity()
        return None
    must_matter(name, double, patches, long, "the per-head q/k layernorms", alter=no_qk_norm)

    def theta(c):
        c.rope_parameters["rope_theta"] = 10000.0
    must_matter(name, double, patches, long, "rope_theta (1e6, not 1e4)", change=theta)


def main(names):
    torch.set_num_threads(max(1, min(8, os.cpu_count() or 1)))
    if "qwen35_tiny" in names:
        double, prompts, patches = qwen35()
        qwen35_decay_stats(double, prompts, patches)
        qwen35_must_matter(double, prompts, patches)
    if "lfm2_tiny" in names:
        double, prompts, patches = lfm2()
        lfm2_must_matter(double, prompts, patches)


ALL = ("qwen35_tiny", "lfm2_tiny")

if __name__ == "__main__":
    main(sys.argv[1:] or ALL)
