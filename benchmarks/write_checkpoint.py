#!/usr/bin/env python3
"""Writes a random-weight Hugging Face checkpoint directory at a built-in
model's shape, for load_benchmark (peak memory loading real-size files).

    python3 benchmarks/write_checkpoint.py --shape=llama-1b --dtype=bf16 --out=/tmp/llama1b

Needs torch and safetensors (the venv the golden fixtures use). Weights are
seeded normal with std 0.02 (norms 1); tensors are written into shards of at
most --shard_gb with model.safetensors.index.json, as transformers saves
large models. Writes config.json only: prompts are token ids.
"""
import argparse
import json
import os

import torch
from safetensors.torch import save_file

SHAPES = {
    # TinyLlama-1.1B's shape (builtin:llama-1b).
    "llama-1b": dict(num_hidden_layers=22, hidden_size=2048, num_attention_heads=32,
                     num_key_value_heads=4, intermediate_size=5632, vocab_size=32000,
                     max_position_embeddings=2048),
}


def tensors(shape):
    c, f, v = shape["hidden_size"], shape["intermediate_size"], shape["vocab_size"]
    d = c // shape["num_attention_heads"]
    kv = shape["num_key_value_heads"] * d
    yield "model.embed_tokens.weight", (v, c)
    for i in range(shape["num_hidden_layers"]):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", (c,)
        yield p + "self_attn.q_proj.weight", (c, c)
        yield p + "self_attn.k_proj.weight", (kv, c)
        yield p + "self_attn.v_proj.weight", (kv, c)
        yield p + "self_attn.o_proj.weight", (c, c)
        yield p + "post_attention_layernorm.weight", (c,)
        yield p + "mlp.gate_proj.weight", (f, c)
        yield p + "mlp.up_proj.weight", (f, c)
        yield p + "mlp.down_proj.weight", (c, f)
    yield "model.norm.weight", (c,)
    yield "lm_head.weight", (v, c)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="llama-1b", choices=sorted(SHAPES))
    ap.add_argument("--dtype", default="bf16", choices=["f32", "f16", "bf16"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--shard_gb", type=float, default=2.0)
    args = ap.parse_args()
    dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    shape = SHAPES[args.shape]
    os.makedirs(args.out, exist_ok=True)
    gen = torch.Generator().manual_seed(0)
    shards, current, size = [], {}, 0
    limit = args.shard_gb * 2**30
    for name, dims in tensors(shape):
        t = (torch.ones(dims) if name.endswith("norm.weight")
             else torch.randn(dims, generator=gen) * 0.02).to(dtype)
        nbytes = t.numel() * t.element_size()
        if current and size + nbytes > limit:
            shards.append(current)
            current, size = {}, 0
        current[name] = t
        size += nbytes
    shards.append(current)
    weight_map = {}
    for i, part in enumerate(shards):
        file = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(part, os.path.join(args.out, file), metadata={"format": "pt"})
        weight_map.update({n: file for n in part})
    with open(os.path.join(args.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f, indent=1)
    config = dict(shape, architectures=["LlamaForCausalLM"], model_type="llama",
                  rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                  bos_token_id=1, eos_token_id=2, hidden_act="silu",
                  torch_dtype={"f32": "float32", "f16": "float16", "bf16": "bfloat16"}[args.dtype])
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    print(f"{args.out}: {len(shards)} shards")


if __name__ == "__main__":
    main()
