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
  gemma2_tiny   Gemma2ForCausalLM: head_dim 32 with hidden 64 and 4 heads,
                pre and post norms with (1 + w) weights, GeGLU-tanh,
                query_pre_attn_scalar 24, attention and final logit soft-
                capping small enough to bend the scores, embeddings times
                sqrt(hidden), sliding window 8 on layer 0 and 2 of 4 (global
                1 and 3), tied head; each of those checked to matter
  gemma2_hd_tiny  gemma2_tiny's class and seed with query_pre_attn_scalar =
                head_dim (32), as llama.cpp's GGUF reading assumes: the source
                of make_gguf_families.py's gguf_gemma2
  gptj_tiny     GPTJForCausalLM: rotary on 8 of 16 dims per head in
                interleaved pairs, attention and MLP in parallel on one
                LayerNorm, biased MLP and head, untied
  phi3_longrope_tiny  Phi3ForCausalLM with LongRoPE (Phi-3.5's rope_scaling
                "longrope"): short and long factors per frequency,
                original_max_position_embeddings 64 beside 256, so cos and
                sin are scaled by sqrt(1 + ln 4 / ln 64); prompts up to 62
                tokens (the short factors: transformers takes the long ones
                past 64); the factors and the scale each checked to matter
  phi3_longrope_long  the same checkpoint served to 256 positions: the long
                factors at every position (llama.cpp's rule for a context
                past the original); prompts of 1, 7, 20 and 254 tokens.
                transformers takes the long factors only where a forward
                passes 64, so the references come from a config with the
                long factors in both lists; the real config gives the 254-
                token prompt the same logits (checked, bit for bit), and
                the long factors are checked to matter there

Run in the oracle venv (transformers 4.44.2 over Debian's python3-torch):
    python3 tests/golden/make_family_golden.py [gemma2_tiny gptj_tiny ...]
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import (Gemma2Config, Gemma2ForCausalLM, GPTJConfig, GPTJForCausalLM,
                          MistralConfig, MistralForCausalLM, Phi3Config, Phi3ForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM)
import transformers.models.gemma2.modeling_gemma2 as modeling_gemma2
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


class _Restore:
    def __init__(self, undo):
        self.remove = undo


def gptj_keys_and_values(model):
    """GPT-J rotates q and k inside its attention (one tensor at a time,
    partial): round the keys after rotary and the values where _attn gets
    them."""
    attention = type(model.transformer.h[0].attn)
    original = attention._attn

    def _attn(self, query, key, value, *args, **kwargs):
        return original(self, query, bf16(key), bf16(value), *args, **kwargs)
    attention._attn = _attn
    return [_Restore(lambda: setattr(attention, "_attn", original))]


def make(name, config, model_class, module, round_values, seed, embed_scale=1.0, positions=None):
    """`embed_scale` multiplies the embedding table: Gemma's tied head over
    sqrt(hidden)-scaled embeddings otherwise predicts the input token.
    `positions` bounds the prompts (default: max_position_embeddings)."""
    torch.manual_seed(seed)
    model = model_class(config).eval()
    with torch.no_grad():  # non-trivial norms and biases, so every parameter matters
        for pname, p in model.named_parameters():
            if "norm" in pname or ".ln_" in pname or pname.endswith(".bias"):
                p.add_(0.3 * torch.randn_like(p))
        model.get_input_embeddings().weight.mul_(embed_scale)
    out_dir = os.path.join(HERE, name)
    os.makedirs(out_dir, exist_ok=True)
    tensors = {k: v.detach().contiguous() for k, v in model.state_dict().items()
               if "rotary_emb" not in k}
    if config.tie_word_embeddings:  # saved once, as transformers saves it
        tensors.pop("lm_head.weight", None)
    save_file(tensors, os.path.join(out_dir, "model.safetensors"))
    config.to_json_file(os.path.join(out_dir, "config.json"))

    V, P = config.vocab_size, positions or config.max_position_embeddings
    g = torch.Generator().manual_seed(seed + 1)
    prompts = [torch.randint(0, V, (n,), generator=g).tolist() for n in (1, 7, 20, P - 2)]
    logits = {}
    double = model_class(config).eval().double()
    double.load_state_dict(model.state_dict())
    with torch.no_grad():
        for i, p in enumerate(prompts):
            logits[f"logits.{i}"] = double(torch.tensor([p]), use_cache=False).logits[0].float().contiguous()
        seq = list(prompts[1])
        for _ in range(32):
            seq.append(int(double(torch.tensor([seq]), use_cache=False).logits[0, -1].argmax()))
    for kind, kv in (("bf16", False), ("bf16kv", True)):
        for i, l in enumerate(emulated_logits(model, module, prompts, kv, round_values)):
            logits[f"logits_{kind}.{i}"] = l
    save_file(logits, os.path.join(out_dir, "golden_logits.safetensors"))
    with open(os.path.join(out_dir, "golden.json"), "w") as f:
        json.dump({"prompts": prompts, "greedy_prompt": prompts[1],
                   "greedy_output": seq[len(prompts[1]):], "stored_dtype": "float32"}, f)
    if len(set(seq[len(prompts[1]):])) < 8:
        sys.exit(f"{name}: the greedy run repeats itself: {seq[len(prompts[1]):]}")
    return double, prompts


def must_matter(name, model, prompt, what, change):
    """Exits unless `change` (a function of a copy of the config) changes
    the logits of `prompt`: a fixture that exercises nothing proves nothing."""
    config = type(model.config).from_dict(model.config.to_dict())
    change(config)
    other = type(model)(config).eval().double()
    other.load_state_dict(model.state_dict())
    with torch.no_grad():
        a = model(torch.tensor([prompt]), use_cache=False).logits
        b = other(torch.tensor([prompt]), use_cache=False).logits
    if torch.allclose(a, b, rtol=1e-6, atol=1e-6):
        sys.exit(f"{name}: {what} changed nothing")


def main(names):
    common = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                  initializer_range=0.2, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
                  tie_word_embeddings=False, attn_implementation="eager")
    def gemma2_config(scalar):
        return Gemma2Config(vocab_size=317, hidden_size=64, intermediate_size=96,
                            num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                            head_dim=32, max_position_embeddings=64, initializer_range=0.2,
                            rms_norm_eps=1e-6, bos_token_id=2, eos_token_id=1, pad_token_id=0,
                            query_pre_attn_scalar=scalar, attn_logit_softcapping=2.0,
                            final_logit_softcapping=3.0, sliding_window=8,
                            hidden_activation="gelu_pytorch_tanh", rope_theta=10000.0,
                            tie_word_embeddings=True, attn_implementation="eager")
    if "gemma2_tiny" in names:
        model, prompts = make("gemma2_tiny", gemma2_config(24), Gemma2ForCausalLM, modeling_gemma2,
                              v_proj_values, 74, embed_scale=0.2)
        long = prompts[3]
        must_matter("gemma2_tiny", model, long, "the sliding window",
                    lambda c: setattr(c, "sliding_window", 4096))
        must_matter("gemma2_tiny", model, long, "attention soft-capping",
                    lambda c: setattr(c, "attn_logit_softcapping", None))
        must_matter("gemma2_tiny", model, long, "final soft-capping",
                    lambda c: setattr(c, "final_logit_softcapping", None))
        must_matter("gemma2_tiny", model, long, "query_pre_attn_scalar",
                    lambda c: setattr(c, "query_pre_attn_scalar", 32))
    if "gemma2_hd_tiny" in names:  # query_pre_attn_scalar = head_dim, as llama.cpp's GGUF reading assumes
        make("gemma2_hd_tiny", gemma2_config(32), Gemma2ForCausalLM, modeling_gemma2, v_proj_values, 74,
             embed_scale=0.2)
    if "gptj_tiny" in names:
        gptj = GPTJConfig(vocab_size=313, n_positions=64, n_embd=64, n_layer=2, n_head=4,
                          rotary_dim=8, n_inner=None, activation_function="gelu_new",
                          layer_norm_epsilon=1e-5, initializer_range=0.2, bos_token_id=1,
                          eos_token_id=2, tie_word_embeddings=False, attn_implementation="eager")
        make("gptj_tiny", gptj, GPTJForCausalLM, None, gptj_keys_and_values, 75)
    g = torch.Generator().manual_seed(77)
    short = (1.0 + 3.0 * torch.rand(8, generator=g)).tolist()
    long = (4.0 + 8.0 * torch.rand(8, generator=g)).tolist()
    longrope = dict(common, max_position_embeddings=256)

    def longrope_config(short_factor, long_factor):
        return Phi3Config(vocab_size=319, pad_token_id=0, original_max_position_embeddings=64,
                          rope_theta=10000.0, rope_scaling={"type": "longrope", "short_factor": short_factor,
                                                            "long_factor": long_factor}, **longrope)
    if "phi3_longrope_tiny" in names:
        phi3 = longrope_config(short, long)
        model, prompts = make("phi3_longrope_tiny", phi3, Phi3ForCausalLM, modeling_phi3, phi3_values,
                              76, positions=64)
        long_prompt = prompts[3]
        must_matter("phi3_longrope_tiny", model, long_prompt, "the short factors",
                    lambda c: c.rope_scaling.update(short_factor=[1.0] * 8))
        must_matter("phi3_longrope_tiny", model, long_prompt, "the cos/sin scale",
                    lambda c: setattr(c, "max_position_embeddings", 64))
    if "phi3_longrope_long" in names:
        # The same checkpoint served beyond its original context, as llama.cpp
        # serves a context past it (and Flover with --max_seq_len past it): the
        # long factors for every position. transformers takes them when a
        # forward's positions pass 64, so the reference of every prompt comes
        # from the long factors in both lists; config.json is the real one.
        model, prompts = make("phi3_longrope_long", longrope_config(long, long), Phi3ForCausalLM,
                              modeling_phi3, phi3_values, 76)
        real = longrope_config(short, long)
        real.to_json_file(os.path.join(HERE, "phi3_longrope_long", "config.json"))
        # The 254-token prompt passes 64: transformers with the real config
        # gives the same logits, and the long factors matter there.
        served = Phi3ForCausalLM(real).eval().double()
        served.load_state_dict(model.state_dict())
        with torch.no_grad():
            a = model(torch.tensor([prompts[3]]), use_cache=False).logits
            b = served(torch.tensor([prompts[3]]), use_cache=False).logits
        if not torch.equal(a, b):
            sys.exit("phi3_longrope_long: transformers' own long factors differ from the reference")
        must_matter("phi3_longrope_long", served, prompts[3], "the long factors",
                    lambda c: c.rope_scaling.update(long_factor=short))
    if "mistral_tiny" not in names:
        return
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


ALL = ("mistral_tiny", "gemma2_tiny", "gemma2_hd_tiny", "gptj_tiny", "phi3_longrope_tiny",
       "phi3_longrope_long")

if __name__ == "__main__":
    # Names to write (mistral_tiny also writes phi3_tiny and qwen2_untied);
    # all of them by default.
    main(sys.argv[1:] or ALL)
