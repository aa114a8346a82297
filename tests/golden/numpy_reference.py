#!/usr/bin/env python3
"""A second, independent reference for the fixtures of make_moe_golden.py:
the forward pass of each family written out in numpy float64 from its
config.json and model.safetensors (no torch, no transformers code), compared
with golden_logits.safetensors' logits.{i} and golden.json's greedy run.

It checks that the transformers 4.51.3 run over Debian's torch 1.13 (with
make_moe_golden.py's import-time shims) computed what these architectures
are, and spells each family out for whoever implements it:

  qwen3, qwen3_moe  q_norm / k_norm: RMSNorm over each head's head_dim
                    (one weight of head_dim shared by the heads), before rope
  olmoe             q_norm / k_norm: RMSNorm over the whole q_proj output
                    (num_heads * head_dim) and the whole k_proj output
                    (num_kv_heads * head_dim), before splitting into heads
  gemma3_text       per-head q/k norms with (1 + w); layer i is local when
                    (i + 1) % sliding_window_pattern != 0, local layers see
                    keys i - sliding_window < j <= i and use
                    rope_local_base_freq without scaling, global ones
                    rope_theta with rope_scaling; scores times
                    query_pre_attn_scalar ** -0.5
  MoE routing       p = softmax(gate(x)); the top-k of p; divided by their
                    sum when norm_topk_prob (Mixtral: always); qwen2_moe adds
                    sigmoid(shared_expert_gate(x)) * shared_expert(x)

It is float64 throughout, where transformers runs norms and softmaxes in
float32, so agreement is to ~1e-6, not bit for bit.
    venv/bin/python numpy_reference.py [qwen3_tiny ...]
"""
import json
import math
import os
import sys

import numpy as np
from safetensors.numpy import load_file

HERE = os.path.dirname(os.path.abspath(__file__))
ALL = ("qwen3_tiny", "qwen3_moe_tiny", "qwen3_moe_mixed_tiny", "qwen2_moe_tiny",
       "mixtral_tiny", "olmoe_tiny", "gemma3_tiny")


def rms(x, w, eps, gemma=False):
    y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    return y * (1.0 + w) if gemma else y * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def rope(x, theta, factor, positions):
    """HF's rotate_half rope: x (heads, T, d)."""
    d = x.shape[-1]
    inv = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d) / factor
    f = positions[:, None] * inv[None, :]
    cos, sin = np.cos(np.concatenate([f, f], -1)), np.sin(np.concatenate([f, f], -1))
    half = np.concatenate([-x[..., d // 2:], x[..., :d // 2]], -1)
    return x * cos + half * sin


class Model:
    def __init__(self, directory):
        self.c = json.load(open(os.path.join(directory, "config.json")))
        self.w = {k: v.astype(np.float64) for k, v in
                  load_file(os.path.join(directory, "model.safetensors")).items()}
        self.kind = self.c["model_type"]
        self.gemma = self.kind == "gemma3_text"

    def linear(self, name, x):
        y = x @ self.w[name + ".weight"].T
        return y + self.w[name + ".bias"] if name + ".bias" in self.w else y

    def glu(self, prefix, x, names=("gate_proj", "up_proj", "down_proj")):
        act = gelu_tanh if self.gemma else silu
        g, u, d = names
        return self.linear(f"{prefix}.{d}", act(self.linear(f"{prefix}.{g}", x)) *
                           self.linear(f"{prefix}.{u}", x))

    def attention(self, i, x):
        c, p = self.c, f"model.layers.{i}.self_attn"
        T, H, KV = x.shape[0], c["num_attention_heads"], c["num_key_value_heads"]
        hd = c.get("head_dim") or c["hidden_size"] // H
        eps = c["rms_norm_eps"]
        q, k, v = (self.linear(f"{p}.{n}", x) for n in ("q_proj", "k_proj", "v_proj"))
        if self.kind == "olmoe":  # whole-projection norms
            q, k = rms(q, self.w[f"{p}.q_norm.weight"], eps), rms(k, self.w[f"{p}.k_norm.weight"], eps)
        q = q.reshape(T, H, hd).transpose(1, 0, 2)
        k = k.reshape(T, KV, hd).transpose(1, 0, 2)
        v = v.reshape(T, KV, hd).transpose(1, 0, 2)
        if self.kind in ("qwen3", "qwen3_moe", "gemma3_text"):  # per-head norms
            q = rms(q, self.w[f"{p}.q_norm.weight"], eps, self.gemma)
            k = rms(k, self.w[f"{p}.k_norm.weight"], eps, self.gemma)
        theta, factor, window = c["rope_theta"], 1.0, None
        scale = hd ** -0.5
        if self.gemma:
            scale = c["query_pre_attn_scalar"] ** -0.5
            if (i + 1) % c["sliding_window_pattern"]:
                theta, window = c["rope_local_base_freq"], c["sliding_window"]
            elif c.get("rope_scaling"):
                assert c["rope_scaling"]["rope_type"] == "linear"
                factor = c["rope_scaling"]["factor"]
        elif c.get("sliding_window") is not None:
            window = c["sliding_window"]
        pos = np.arange(T, dtype=np.float64)
        q, k = rope(q, theta, factor, pos), rope(k, theta, factor, pos)
        k, v = np.repeat(k, H // KV, axis=0), np.repeat(v, H // KV, axis=0)
        s = q @ k.transpose(0, 2, 1) * scale
        ii, jj = np.arange(T)[:, None], np.arange(T)[None, :]
        allowed = jj <= ii
        if window is not None:
            allowed &= jj > ii - window
        s = np.where(allowed, s, -np.inf)
        o = (softmax(s) @ v).transpose(1, 0, 2).reshape(T, H * hd)
        return self.linear(f"{p}.o_proj", o)

    def moe(self, prefix, x, names):
        c = self.c
        k = c["num_experts_per_tok"]
        probs = softmax(self.linear(f"{prefix}.gate", x))
        top = np.argsort(-probs, axis=-1, kind="stable")[:, :k]
        weights = np.take_along_axis(probs, top, -1)
        if self.kind == "mixtral" or c.get("norm_topk_prob"):
            weights = weights / weights.sum(-1, keepdims=True)
        out = np.zeros_like(x)
        for t in range(x.shape[0]):
            for j in range(k):
                out[t] += weights[t, j] * self.glu(f"{prefix}.experts.{top[t, j]}", x[t:t + 1], names)[0]
        if self.kind == "qwen2_moe":
            gate = 1.0 / (1.0 + np.exp(-self.linear(f"{prefix}.shared_expert_gate", x)))
            out += gate * self.glu(f"{prefix}.shared_expert", x)
        return out

    def mlp(self, i, x):
        c, p = self.c, f"model.layers.{i}"
        if self.kind == "mixtral":
            return self.moe(f"{p}.block_sparse_moe", x, ("w1", "w3", "w2"))
        if self.kind == "olmoe":
            return self.moe(f"{p}.mlp", x, ("gate_proj", "up_proj", "down_proj"))
        if self.kind in ("qwen3_moe", "qwen2_moe"):
            sparse = (i not in c["mlp_only_layers"] and c["num_experts"] > 0 and
                      (i + 1) % c["decoder_sparse_step"] == 0)
            if sparse:
                return self.moe(f"{p}.mlp", x, ("gate_proj", "up_proj", "down_proj"))
        return self.glu(f"{p}.mlp", x)

    def logits(self, ids):
        c, eps = self.c, self.c["rms_norm_eps"]
        table = self.w["model.embed_tokens.weight"]
        x = table[ids]
        if self.gemma:
            x = x * np.float64(np.float32(math.sqrt(c["hidden_size"])))
        for i in range(c["num_hidden_layers"]):
            p = f"model.layers.{i}"
            h = self.attention(i, rms(x, self.w[f"{p}.input_layernorm.weight"], eps, self.gemma))
            if self.gemma:
                h = rms(h, self.w[f"{p}.post_attention_layernorm.weight"], eps, True)
                x = x + h
                h = rms(x, self.w[f"{p}.pre_feedforward_layernorm.weight"], eps, True)
                h = rms(self.mlp(i, h), self.w[f"{p}.post_feedforward_layernorm.weight"], eps, True)
                x = x + h
            else:
                x = x + h
                x = x + self.mlp(i, rms(x, self.w[f"{p}.post_attention_layernorm.weight"], eps))
        x = rms(x, self.w["model.norm.weight"], eps, self.gemma)
        head = self.w.get("lm_head.weight", table)
        out = x @ head.T
        if c.get("final_logit_softcapping"):
            cap = c["final_logit_softcapping"]
            out = np.tanh(out / cap) * cap
        return out


def check(name):
    d = os.path.join(HERE, name)
    model = Model(d)
    golden = json.load(open(os.path.join(d, "golden.json")))
    want = load_file(os.path.join(d, "golden_logits.safetensors"))
    worst, argmax_same = 0.0, True
    for i, p in enumerate(golden["prompts"]):
        got = model.logits(np.array(p))
        ref = want[f"logits.{i}"].astype(np.float64)
        worst = max(worst, float(np.abs(got - ref).max()))
        argmax_same &= bool((got.argmax(-1) == ref.argmax(-1)).all())
    seq = list(golden["greedy_prompt"])
    for _ in range(len(golden["greedy_output"])):
        seq.append(int(model.logits(np.array(seq))[-1].argmax()))
    same = seq[len(golden["greedy_prompt"]):] == golden["greedy_output"]
    print(f"{name}: numpy float64 vs golden: max |logit diff| {worst:.2e}, argmax at every "
          f"position {'same' if argmax_same else 'DIFFERENT'}, greedy "
          f"{'identical' if same else 'DIFFERENT'}")
    return worst < 1e-4 and argmax_same and same


if __name__ == "__main__":
    ok = all([check(n) for n in (sys.argv[1:] or ALL)])
    sys.exit(0 if ok else 1)
