#!/usr/bin/env python3
"""Writes the Llama golden fixtures Flover's model tests compare against.

Tiny random LlamaForCausalLM checkpoints from Hugging Face transformers (the
independent reference), their logits at every prompt position and their
32-step greedy continuations, in the format make_golden.py uses:

  llama_gqa           4 heads over 2 key/value heads, rope_theta 500000 with
                      llama3 rope scaling, vocabulary 301, untied head, F32,
                      one model.safetensors
  llama_tied_sharded  as many key/value heads as heads, linear rope scaling,
                      head_dim given explicitly, vocabulary 211, tied head,
                      BF16, three shards with model.safetensors.index.json
  llama_text          a model over the SentencePiece-style tokenizer.json of
                      hf_tokenizers/spm_legacy (make_tokenizer_golden.py),
                      with a generation_config.json of two EOS ids, and
                      golden_text.json: text prompts, their ids, greedy
                      continuations and the text they add

Each fixture also carries transformers' own emulation of Flover's 16-bit
options, so those are checked against an independent reference of the same
rounding rather than against F32 alone: "bf16" rounds every nn.Linear's
weight and input to bfloat16 (--dtype=bf16: f32 sums, norms and attention in
f32), "bf16kv" also rounds keys after rotary embedding and values to
bfloat16 (--kv_dtype=bf16).

Run once after changing it; the outputs are committed so tests and CI never
need transformers (a venv with --system-site-packages over Debian's
python3-torch):
    pip install "transformers==4.44.2" safetensors
    python3 tests/golden/make_tokenizer_golden.py   # llama_text's tokenizer
    python3 tests/golden/make_llama_golden.py
"""
import json
import os
import shutil

import torch
import transformers.models.llama.modeling_llama as modeling_llama
from safetensors.torch import save_file
from tokenizers import Tokenizer
from transformers import LlamaConfig, LlamaForCausalLM

import make_family_golden as family_golden

HERE = os.path.dirname(os.path.abspath(__file__))


def save_shards(tensors, out_dir, shards):
    """One model.safetensors, or `shards` files and the index naming them."""
    names = sorted(tensors)
    if shards == 1:
        save_file(tensors, os.path.join(out_dir, "model.safetensors"))
        return
    weight_map = {}
    per = (len(names) + shards - 1) // shards
    for s in range(shards):
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[s * per:(s + 1) * per]}
        save_file(part, os.path.join(out_dir, file))
        weight_map.update({n: file for n in part})
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f, indent=1)


def emulated_logits(model, prompts, kv):
    """Logits with Flover's bf16 rounding emulated: every Linear's weight and
    input in bfloat16, f32 sums; with `kv` also keys (after rotary) and values."""
    return family_golden.emulated_logits(model, modeling_llama, prompts, kv,
                                         family_golden.v_proj_values)


def random_model(cfg, seed):
    """A seeded LlamaForCausalLM with non-trivial norms, so every parameter matters."""
    torch.manual_seed(seed)
    config = LlamaConfig(**cfg, initializer_range=0.2, bos_token_id=1, eos_token_id=2)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "norm" in pname:
                p.add_(0.3 * torch.randn_like(p))
    return config, model


def make_model(name, cfg, dtype, shards, seed):
    config, model = random_model(cfg, seed)
    with torch.no_grad():
        # Round weights to the stored dtype; the reference then computes in
        # float32 with exactly the weights Flover will read.
        for p in model.parameters():
            p.copy_(p.to(dtype).to(torch.float32))

    out_dir = os.path.join(HERE, name)
    os.makedirs(out_dir, exist_ok=True)
    tensors = {k: v.detach().to(dtype).contiguous() for k, v in model.state_dict().items()
               if "rotary_emb" not in k}
    if config.tie_word_embeddings:
        tensors.pop("lm_head.weight", None)
    save_shards(tensors, out_dir, shards)
    config.to_json_file(os.path.join(out_dir, "config.json"))

    V, P = cfg["vocab_size"], cfg["max_position_embeddings"]
    g = torch.Generator().manual_seed(seed + 1)
    prompts = [torch.randint(0, V, (n,), generator=g).tolist() for n in (1, 7, 20, P - 2)]
    logits = {}
    with torch.no_grad():
        for i, p in enumerate(prompts):
            logits[f"logits.{i}"] = model(torch.tensor([p])).logits[0].float().contiguous()
        # Greedy, 32 steps, no EOS stop, full recompute each step (no cache).
        greedy_prompt = prompts[1]
        seq = list(greedy_prompt)
        for _ in range(32):
            seq.append(int(model(torch.tensor([seq])).logits[0, -1].argmax()))
    for kind, kv in (("bf16", False), ("bf16kv", True)):
        for i, l in enumerate(emulated_logits(model, prompts, kv)):
            logits[f"logits_{kind}.{i}"] = l
    save_file(logits, os.path.join(out_dir, "golden_logits.safetensors"))
    with open(os.path.join(out_dir, "golden.json"), "w") as f:
        json.dump({"prompts": prompts, "greedy_prompt": greedy_prompt,
                   "greedy_output": seq[len(greedy_prompt):],
                   "stored_dtype": str(dtype).replace("torch.", "")}, f)


TEXT_PROMPTS = ["The quick brown fox", "Requests arrive at random times,",
                "Café naïve 日本語 \U0001F642", "  two spaces\nand a line"]


def make_text_model(name, cfg, seed, steps=24):
    """A model whose directory carries a tokenizer.json: text in, text out."""
    config, model = random_model(cfg, seed)
    out_dir = os.path.join(HERE, name)
    os.makedirs(out_dir, exist_ok=True)
    tensors = {k: v.detach().contiguous() for k, v in model.state_dict().items()
               if "rotary_emb" not in k}
    save_shards(tensors, out_dir, 1)
    config.to_json_file(os.path.join(out_dir, "config.json"))
    # transformers' generate() stops at generation_config's ids over config's.
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": [2, 7]}, f)
    shutil.copy(os.path.join(HERE, "hf_tokenizers", "spm_legacy", "tokenizer.json"), out_dir)
    tok = Tokenizer.from_file(os.path.join(out_dir, "tokenizer.json"))
    cases = []
    with torch.no_grad():
        for text in TEXT_PROMPTS:
            ids = tok.encode(text).ids
            seq = list(ids)
            for _ in range(steps):  # greedy, no EOS stop, full recompute
                seq.append(int(model(torch.tensor([seq])).logits[0, -1].argmax()))
            out = seq[len(ids):]
            # The text the ids add after the prompt, as a server streams it.
            head = tok.decode(ids, skip_special_tokens=False)
            whole = tok.decode(seq, skip_special_tokens=False)
            assert whole.startswith(head)
            cases.append({"text": text, "prompt_ids": ids, "output_ids": out,
                          "output_text": whole[len(head):]})
    with open(os.path.join(out_dir, "golden_text.json"), "w") as f:
        json.dump({"steps": steps, "cases": cases}, f, ensure_ascii=False, indent=1)


def main():
    make_model("llama_gqa",
               dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                    num_key_value_heads=2, intermediate_size=96, vocab_size=301,
                    max_position_embeddings=96, rms_norm_eps=1e-5, rope_theta=500000.0,
                    rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0,
                                  "original_max_position_embeddings": 64},
                    tie_word_embeddings=False),
               torch.float32, shards=1, seed=11)
    make_model("llama_tied_sharded",
               dict(num_hidden_layers=3, hidden_size=48, num_attention_heads=3,
                    num_key_value_heads=3, head_dim=16, intermediate_size=80, vocab_size=211,
                    max_position_embeddings=64, rms_norm_eps=1e-6, rope_theta=10000.0,
                    rope_scaling={"type": "linear", "factor": 2.0},
                    tie_word_embeddings=True),
               torch.bfloat16, shards=3, seed=12)
    make_text_model("llama_text",
                    dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=96, vocab_size=700,
                         max_position_embeddings=128, rms_norm_eps=1e-5, rope_theta=10000.0,
                         tie_word_embeddings=False),
                    seed=13)


if __name__ == "__main__":
    main()
