#!/usr/bin/env python3
"""Reloads fixtures written by make_moe_golden.py from their files alone
(AutoConfig on config.json, AutoModelForCausalLM.from_config, the tensors of
model.safetensors loaded strictly, float64, eager attention) and recomputes
logits.{i} and the greedy run, to show that config.json and
model.safetensors reproduce golden_logits.safetensors. (from_pretrained
itself needs torch 2 in 4.51.3, and the files carry no safetensors metadata,
as the other fixtures, which 4.44.2's from_pretrained insists on.)

With transformers 4.51.3 (the venv make_moe_golden.py uses) every fixture
should match exactly; with transformers 4.44.2 (make_family_golden.py's
oracle, no shims), which has Mixtral and Qwen2-MoE but not the other
classes, mixtral_tiny and qwen2_moe_tiny are an independent recomputation:
    venv/bin/python check_fixtures.py
    venv44/bin/python check_fixtures.py mixtral_tiny qwen2_moe_tiny
"""
import json
import os
import sys

import torch

torch.set_num_threads(1)
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import transformers  # noqa: E402

if transformers.__version__ != "4.44.2":
    import make_moe_golden  # noqa: E402,F401  (its torch 1.13 shims)
from safetensors.torch import load_file  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

ALL = ("qwen3_tiny", "qwen3_moe_tiny", "qwen3_moe_mixed_tiny", "qwen2_moe_tiny",
       "mixtral_tiny", "olmoe_tiny", "gemma3_tiny")


def check(name):
    d = os.path.join(HERE, name)
    config = AutoConfig.from_pretrained(d)
    config._attn_implementation = "eager"
    model = AutoModelForCausalLM.from_config(config).eval()
    tensors = load_file(os.path.join(d, "model.safetensors"))
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    missing = [k for k in missing if "rotary_emb" not in k]
    if config.tie_word_embeddings and missing == ["lm_head.weight"]:
        missing = []
        model.tie_weights()
        assert model.lm_head.weight is model.get_input_embeddings().weight
    if missing or unexpected:
        sys.exit(f"{name}: missing {missing}, unexpected {unexpected}")
    model = model.double()
    golden = json.load(open(os.path.join(d, "golden.json")))
    want = load_file(os.path.join(d, "golden_logits.safetensors"))
    worst = 0.0
    with torch.no_grad():
        for i, p in enumerate(golden["prompts"]):
            got = model(torch.tensor([p]), use_cache=False).logits[0].float()
            worst = max(worst, (got - want[f"logits.{i}"]).abs().max().item())
        seq = list(golden["greedy_prompt"])
        for _ in range(len(golden["greedy_output"])):
            seq.append(int(model(torch.tensor([seq]), use_cache=False).logits[0, -1].argmax()))
    same = seq[len(golden["greedy_prompt"]):] == golden["greedy_output"]
    scale = max(v.abs().max().item() for k, v in want.items() if k.startswith("logits."))
    print(f"{name}: {type(model).__name__} via transformers {transformers.__version__}: "
          f"max |logit - golden| {worst:.3g} (logits up to {scale:.3g}), greedy "
          f"{'identical' if same else 'DIFFERENT'}")
    return worst < 1e-5 and same


if __name__ == "__main__":
    ok = all([check(n) for n in (sys.argv[1:] or ALL)])
    sys.exit(0 if ok else 1)
