#!/usr/bin/env python3
"""Writes the Phi-4-mini golden fixture, phi4_mini_tiny.

A tiny random checkpoint of Phi3ForCausalLM shaped as Phi-4-mini is (the
independent reference: transformers 4.53.3, whose Phi3 reads
partial_rotary_factor; 4.44.2, which make_family_golden.py runs, does not),
written by make_smollm3_golden.write in the same format (F32
model.safetensors, config.json, golden.json with a 32-step greedy run of
prompts[1], golden_logits.safetensors: every position of each prompt in
float64, stored as float32).

  phi4_mini_tiny  Phi3ForCausalLM: q/k/v fused as qkv_proj, gate/up as
                  gate_up_proj; hidden 64, intermediate 96, 2 layers, 4
                  heads of head_dim 16, 2 key/value heads; partial rotary
                  (partial_rotary_factor 0.75: the first 12 dims of each
                  head turn, as halves of those 12); LongRoPE with 6 short
                  and 6 long factors, max_position_embeddings 256 over
                  original_max_position_embeddings 64 (attention factor
                  sqrt(1 + ln 4 / ln 64), on cos and sin: the turned dims
                  only); a tied head (Phi-4-mini's); vocab 331. Prompts of
                  1, 7, 20 and 62 tokens: within the original context, where
                  transformers uses the short factors.

Checks (the script exits otherwise): the partial rotary and the attention
factor each matter (every dim turning, or no attention factor, changes the
62-token prompt's logits); the greedy run is varied (at least 8 distinct
tokens of 32) and its best two logits are at least MIN_GAP apart at every
step.

    venv-smollm3/bin/python tests/golden/make_phi4_mini_golden.py
(the venv of make_smollm3_golden.py: torch 2.5.1, transformers 4.53.3);
CPU, a few seconds, byte for byte the same on every run.
"""
import sys

import torch

torch.set_num_threads(1)

import transformers  # noqa: E402
from transformers import Phi3Config, Phi3ForCausalLM  # noqa: E402

from make_smollm3_golden import TRANSFORMERS_VERSION, greedy_run, write  # noqa: E402

NAME = "phi4_mini_tiny"
SEED = 7
MIN_GAP = 1e-3


def phi4_config(**changes):
    g = torch.Generator().manual_seed(1234)
    short = (1 + 3 * torch.rand(6, generator=g)).tolist()
    long = (4 + 8 * torch.rand(6, generator=g)).tolist()
    args = dict(vocab_size=331, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                original_max_position_embeddings=64, initializer_range=0.2, rms_norm_eps=1e-5,
                rope_theta=10000.0, partial_rotary_factor=0.75,
                rope_scaling={"type": "longrope", "short_factor": short, "long_factor": long},
                tie_word_embeddings=True, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                sliding_window=None, attn_implementation="eager")
    args.update(changes)
    return Phi3Config(**args)


def logits_of(config, state, prompt):
    m = Phi3ForCausalLM(config).eval().double()
    m.load_state_dict(state)
    with torch.no_grad():
        return m(torch.tensor([prompt]), use_cache=False).logits


def build(seed):
    config = phi4_config()
    torch.manual_seed(seed)
    model = Phi3ForCausalLM(config).eval()
    with torch.no_grad():  # non-trivial norms, so every parameter matters
        for pname, p in model.named_parameters():
            if "norm" in pname:
                p.add_(0.3 * torch.randn_like(p))
    V = config.vocab_size
    g = torch.Generator().manual_seed(seed + 1)
    prompts = [torch.randint(0, V, (n,), generator=g).tolist() for n in (1, 7, 20, 62)]
    double = Phi3ForCausalLM(config).eval().double()
    double.load_state_dict(model.state_dict())
    greedy, gap = greedy_run(double, prompts[1])
    return model, double, prompts, greedy, gap


def main():
    if transformers.__version__ != TRANSFORMERS_VERSION:
        sys.exit(f"transformers {transformers.__version__}: run with {TRANSFORMERS_VERSION}")
    model, double, prompts, greedy, gap = build(SEED)
    state = double.state_dict()
    base = logits_of(phi4_config(), state, prompts[3])
    full = logits_of(phi4_config(partial_rotary_factor=1.0,
                                 rope_scaling={"type": "longrope", "short_factor": [1.0] * 8,
                                               "long_factor": [1.0] * 8}), state, prompts[3])
    no_factor = logits_of(phi4_config(max_position_embeddings=64), state, prompts[3])
    d_full, d_factor = float((base - full).abs().max()), float((base - no_factor).abs().max())
    print(f"{NAME}: seed {SEED}; every dim turning moves the logits by {d_full:.3g}, "
          f"no attention factor by {d_factor:.3g}")
    print(f"  greedy: {len(set(greedy))} distinct of {len(greedy)}, smallest best-two gap {gap:.3g}")
    bad = []
    if d_full < 1e-4:
        bad.append("the partial rotary changed nothing")
    if d_factor < 1e-4:
        bad.append("the attention factor changed nothing")
    if len(set(greedy)) < 8:
        bad.append(f"the greedy run repeats itself: {greedy}")
    if gap < MIN_GAP:
        bad.append(f"a greedy step's best two logits are {gap:.3g} apart")
    if bad:
        sys.exit(f"{NAME}: " + "; ".join(bad))
    print("wrote", write(model, double, prompts, greedy, NAME))


if __name__ == "__main__":
    main()
