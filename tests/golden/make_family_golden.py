#!/usr/bin/env python3
"""Writes golden fixtures for the model families beyond GPT-2 and Llama.

Each is a tiny random checkpoint of the family's own transformers class (the
independent reference), saved as a Hugging Face directory (F32 safetensors
and config.json), with, in the format make_llama_golden.py uses:

  golden.json                prompts, a 32-step greedy continuation (full
                             recompute each step, no cache) of prompts[1]
  golden_logits.safetensors  logits.{i}: every position of prompt i, computed
                             in float64; logits_bf16.{i} / logits_bf16kv.{i}:
                             transformers in float32 with Flover's bf16
                             rounding emulated (every Linear's weight and
                             input; with kv also keys after rotary and values)

  mistral_tiny  MistralForCausalLM, sliding_window 8: the prompts (up to 62
                tokens) and the greedy run reach far past the window;
                grouped-query attention, untied head
  phi3_tiny     Phi3ForCausalLM: q/k/v in one qkv_proj and gate/up in one
                gate_up_proj; grouped-query attention, untied head
  qwen2_untied  Qwen2ForCausalLM (Qwen2.5's class): q/k/v biases, grouped-
                query attention, an untied head (qwen2_tiny, from
                make_gguf_golden.py, is tied)

Run in the oracle venv (transformers 4.44.2 over Debian's python3-torch):
    python3 tests/golden/make_family_golden.py
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import (MistralConfig, MistralForCausalLM, Phi3Config, Phi3ForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM)
import transformers.models.mistral.modeling_mistral as modeling_mistral
import transformers.models.phi3.modeling_phi3 as modeling_phi3
import transformers.models.qwen2.modeling_qwen2 as modeling_qwen2

HERE = os.path.dirname(os.path.abspath(__file__))


def bf16(t):
    return t.to(torch.bfloat16).to(t.dtype)


def emulated_logits(model, module, prompts, kv, round_values):
    """Logits in float32 with Flover's bf16 rounding: every Linear's weight
    and input; with `kv` also keys after rotary (`module`'s
    apply_rotary_pos_emb) and values (`round_values(model)` returns hooks)."""
    saved, hooks = {}, []
    original_rope = module.apply_rotary_pos_emb
    try:
        for mod in model.modules():
            if isinstance(mod, torch.nn.Linear):
                saved[mod] = mod.weight.data.clone()
                mod.weight.data = bf16(mod.weight.data)
                hooks.append(mod.register_forward_pre_hook(lambda m, inp: (bf16(inp[0]),)))
        if kv:
            def rope(q, k, cos, sin, *args, **kwargs):
                q_embed, k_embed = original_rope(q, k, cos, sin, *args, **kwargs)
                return q_embed, bf16(k_embed)
            module.apply_rotary_pos_emb = rope
            hooks.extend(round_values(model))
        with torch.no_grad():
            return [model(torch.tensor([p])).logits[0].float().contiguous() for p in prompts]
    finally:
        module.apply_rotary_pos_emb = original_rope
        for h in hooks:
            h.remove()
        for mod, w in saved.items():
            mod.weight.data = w


def v_proj_values(model):
    return [layer.self_attn.v_proj.register_forward_hook(lambda m, inp, out: bf16(out))
            for layer in model.model.layers]


def phi3_values(model):
    c = model.config
    d = c.hidden_size // c.num_attention_heads
    v0 = (c.num_attention_heads + c.num_key_value_heads) * d  # V's columns of qkv_proj's output

    def hook(m, inp, out):
        out = out.clone()
        out[..., v0:] = bf16(out[..., v0:])
        return out
    return [layer.self_attn.qkv_proj.register_forward_hook(hook) for layer in model.model.layers]


def make(name, config, model_class, module, round_values, seed):
    torch.manual_seed(seed)
    model = model_class(config).eval()
    with torch.no_grad():  # non-trivial norms and biases, so every parameter matters
        for pname, p in model.named_parameters():
            if "norm" in pname or pname.endswith(".bias"):
                p.add_(0.3 * torch.randn_like(p))
    out_dir = os.path.join(HERE, name)
    os.makedirs(out_dir, exist_ok=True)
    tensors = {k: v.detach().contiguous() for k, v in model.state_dict().items()
               if "rotary_emb" not in k}
    save_file(tensors, os.path.join(out_dir, "model.safetensors"))
    config.to_json_file(os.path.join(out_dir, "config.json"))

    V, P = config.vocab_size, config.max_position_embeddings
    g = torch.Generator().manual_seed(seed + 1)
    prompts = [torch.randint(0, V, (n,), generator=g).tolist() for n in (1, 7, 20, P - 2)]
    logits = {}
    double = model_class(config).eval().double()
    double.load_state_dict(model.state_dict())
    with torch.no_grad():
        for i, p in enumerate(prompts):
            logits[f"logits.{i}"] = double(torch.tensor([p])).logits[0].float().contiguous()
        seq = list(prompts[1])
        for _ in range(32):
            seq.append(int(double(torch.tensor([seq])).logits[0, -1].argmax()))
    for kind, kv in (("bf16", False), ("bf16kv", True)):
        for i, l in enumerate(emulated_logits(model, module, prompts, kv, round_values)):
            logits[f"logits_{kind}.{i}"] = l
    save_file(logits, os.path.join(out_dir, "golden_logits.safetensors"))
    with open(os.path.join(out_dir, "golden.json"), "w") as f:
        json.dump({"prompts": prompts, "greedy_prompt": prompts[1],
                   "greedy_output": seq[len(prompts[1]):], "stored_dtype": "float32"}, f)
    return double, prompts


def main():
    common = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                  initializer_range=0.2, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
                  tie_word_embeddings=False, attn_implementation="eager")
    mistral = MistralConfig(vocab_size=301, sliding_window=8, rope_theta=10000.0, **common)
    model, prompts = make("mistral_tiny", mistral, MistralForCausalLM, modeling_mistral,
                          v_proj_values, 71)
    # The window must matter: without it the long prompt's logits differ.
    unwindowed = MistralConfig(vocab_size=301, sliding_window=None, rope_theta=10000.0, **common)
    plain = MistralForCausalLM(unwindowed).eval().double()
    plain.load_state_dict(model.state_dict())
    with torch.no_grad():
        a = model(torch.tensor([prompts[3]])).logits
        b = plain(torch.tensor([prompts[3]])).logits
    if torch.allclose(a, b):
        sys.exit("mistral_tiny: the sliding window changed nothing")

    phi3 = Phi3Config(vocab_size=307, pad_token_id=0, original_max_position_embeddings=64,
                      rope_theta=10000.0, **common)
    make("phi3_tiny", phi3, Phi3ForCausalLM, modeling_phi3, phi3_values, 72)

    qwen2 = Qwen2Config(vocab_size=311, rope_theta=1000000.0, use_sliding_window=False,
                        **common)
    make("qwen2_untied", qwen2, Qwen2ForCausalLM, modeling_qwen2, v_proj_values, 73)


if __name__ == "__main__":
    main()
