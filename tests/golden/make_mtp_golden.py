#!/usr/bin/env python3
"""Gives qwen35_tiny (make_hybrid_golden.py) Qwen3.5's multi-token-
prediction layer, as the released checkpoints ship it, and its float64
reference. Run after make_hybrid_golden.py qwen35_tiny, then
make_gguf_hybrid.py (which writes it as llama.cpp's nextn block).

The released checkpoints hold, beside the text model and the vision tower,
under the top-level prefix mtp. (config: text_config.mtp_num_hidden_layers
1, mtp_use_dedicated_embeddings false; transformers 5.23 drops them on
loading, _keys_to_ignore_on_load_unexpected ^mtp.*):

  mtp.pre_fc_norm_embedding.weight  [C]      RMSNorm (1 + w) of the token's embedding
  mtp.pre_fc_norm_hidden.weight     [C]      RMSNorm (1 + w) of the model's hidden row
  mtp.fc.weight                     [C, 2C]  over [embedding | hidden], in that order
  mtp.layers.0.*                             a full-attention decoder layer (gated
                                             attention, q/k norms, partial rotary,
                                             the model's MLP), as a trunk one
  mtp.norm.weight                   [C]      RMSNorm (1 + w) before the shared head

The layer predicts the token after next: for position p of a sequence, the
model's final hidden row h_p (after model.norm, the row the head reads) and
the token t_{p+1} give logits for t_{p+2}:

  x = fc([enorm(embed(t_{p+1})) | hnorm(h_p)]);  x = layer(x) at position p + 1
  (its own causal attention over the pairs before it, its own K/V);
  out = norm(x);  logits = lm_head(out)

(llama.cpp's src/models/qwen35.cpp graph_mtp and common/speculative.cpp's
draft-mtp: the pair (h_p, t_{p+1}) at position p + 1, the head norm's
output fed back as the next draft's hidden row; vLLM's qwen3_5_mtp the same
with positions one lower, which rotary attention cannot tell apart.)

Writes into qwen35_tiny: model.safetensors (the mtp.* tensors added, the
rest byte for byte as before), config.json (the two keys), and

  golden_mtp.safetensors  hidden.{i}: the model's final hidden rows of
                          prompt i ([n, C], after model.norm); mtp.{i}: the
                          MTP logits of prompt i's pairs ([n - 1, V], row p
                          from (h_p, t_{p+1})); float64 stored as float32
  golden_mtp.json         chain: greedy_prompt + the model's first greedy
                          token, then 4 drafts, each the argmax of the MTP
                          logits from the previous draft's token and the
                          head-norm output that drafted it (the first from
                          the model's own last hidden row)

Run in the oracle venv: VENV/bin/python tests/golden/make_mtp_golden.py
"""
import copy
import json
import os
import sys

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_hybrid_golden as mh  # noqa: E402
from transformers import Qwen3_5ForConditionalGeneration  # noqa: E402

HERE = mh.HERE
NAME = "qwen35_tiny"


def mtp_tensors(trunk, text, seed=131):
    """Random mtp.* tensors shaped as the trunk's full-attention layer."""
    g = torch.Generator().manual_seed(seed)
    C = text["hidden_size"]
    full = text["layer_types"].index("full_attention")
    prefix = f"model.language_model.layers.{full}."
    out = {}
    for k, v in sorted(trunk.items()):
        if k.startswith(prefix):
            t = torch.randn(v.shape, generator=g, dtype=torch.float64)
            out["mtp.layers.0." + k[len(prefix):]] = t * (0.3 if v.ndim == 1 else 0.2)
    for k in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        out[f"mtp.{k}.weight"] = 0.3 * torch.randn(C, generator=g, dtype=torch.float64)
    out["mtp.fc.weight"] = 0.15 * torch.randn(C, 2 * C, generator=g, dtype=torch.float64)
    return {k: v.float().contiguous() for k, v in out.items()}


class Mtp(torch.nn.Module):
    """The MTP layer of `model` (float64), from the mtp.* tensors, built of
    transformers' own Qwen3_5 modules."""

    def __init__(self, model, tensors):
        super().__init__()
        lm = model.model.language_model
        cfg = lm.config
        full = cfg.layer_types.index("full_attention")
        self.layer = copy.deepcopy(lm.layers[full])
        self.enorm = copy.deepcopy(lm.norm)
        self.hnorm = copy.deepcopy(lm.norm)
        self.norm = copy.deepcopy(lm.norm)
        self.fc = torch.nn.Linear(2 * cfg.hidden_size, cfg.hidden_size, bias=False).double()
        self.rotary = lm.rotary_emb
        self.embed = lm.embed_tokens
        self.head = model.lm_head
        with torch.no_grad():
            for k, v in tensors.items():
                if k.startswith("mtp.layers.0."):
                    self.layer.get_parameter(k[len("mtp.layers.0."):]).copy_(v.double())
            self.enorm.weight.copy_(tensors["mtp.pre_fc_norm_embedding.weight"].double())
            self.hnorm.weight.copy_(tensors["mtp.pre_fc_norm_hidden.weight"].double())
            self.norm.weight.copy_(tensors["mtp.norm.weight"].double())
            self.fc.weight.copy_(tensors["mtp.fc.weight"].double())

    def forward(self, tokens, hidden, first_position):
        """Rows of the pairs (tokens[j], hidden[j]) at positions
        first_position + j, causal over these rows only: (logits, out)."""
        T = len(tokens)
        e = self.enorm(self.embed(torch.tensor([tokens])))
        x = self.fc(torch.cat([e, self.hnorm(hidden[None])], dim=-1))
        pos = torch.arange(first_position, first_position + T)
        ids = pos.view(1, 1, -1).expand(3, 1, -1)
        cos_sin = self.rotary(x, ids)
        mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)[None, None]
        x = self.layer(x, position_embeddings=cos_sin, attention_mask=mask, position_ids=pos[None])
        out = self.norm(x)
        return self.head(out)[0], out[0]


def final_hidden(model, prompt):
    out = model.model(input_ids=torch.tensor([prompt]), use_cache=False)
    return out.last_hidden_state[0]  # after model.language_model.norm


def main():
    d = os.path.join(HERE, NAME)
    cfg_path = os.path.join(d, "config.json")
    config = json.load(open(cfg_path))
    text = config["text_config"]
    st_path = os.path.join(d, "model.safetensors")
    tensors = {k: v for k, v in load_file(st_path).items() if not k.startswith("mtp.")}
    mtp = mtp_tensors(tensors, text)

    # The model as make_hybrid_golden.py checks it (float64, its patches).
    double, prompts, patches = None, json.load(open(os.path.join(d, "golden.json"))), mh.qwen35_patches()
    hf_config = Qwen3_5ForConditionalGeneration.config_class.from_pretrained(d)
    for c in (hf_config, hf_config.text_config, hf_config.vision_config):
        c._attn_implementation = "eager"
    double = Qwen3_5ForConditionalGeneration(hf_config).eval()
    missing, unexpected = double.load_state_dict(tensors, strict=False)
    if missing != ["lm_head.weight"] or unexpected:
        sys.exit(f"loading: missing {missing}, unexpected {unexpected}")
    double = double.double()
    golden = load_file(os.path.join(d, "golden_logits.safetensors"))
    out, chain = {}, None
    with mh.patched(patches), torch.no_grad():
        module = Mtp(double, mtp)
        for i, p in enumerate(prompts["prompts"]):
            h = final_hidden(double, p)
            worst = (double.lm_head(h).float() - golden[f"logits.{i}"]).abs().max().item()
            if worst != 0.0:
                sys.exit(f"prompt {i}: the hidden rows do not give the golden logits ({worst:.3g})")
            out[f"hidden.{i}"] = h.float().contiguous()
            if len(p) >= 2:
                logits, _ = module(p[1:], h[:-1], 1)
                out[f"mtp.{i}"] = logits.float().contiguous()
        # The draft chain after greedy_prompt and the model's first token.
        seq = list(prompts["greedy_prompt"]) + prompts["greedy_output"][:1]
        h = final_hidden(double, seq[:-1])
        toks, rows = seq[1:], h
        drafts = []
        for _ in range(4):
            logits, o = module(toks, rows, 1)
            drafts.append(int(logits[-1].argmax()))
            toks, rows = toks + [drafts[-1]], torch.cat([rows, o[-1:]])
        chain = {"tokens": seq, "drafts": drafts}
        # The layer matters: each part changes the logits.
        base, _ = module(prompts["prompts"][2][1:], final_hidden(double, prompts["prompts"][2])[:-1], 1)
        for what, edit in (("fc's [embedding | hidden] order", lambda m: m.fc.weight.copy_(m.fc.weight.roll(
                               m.fc.weight.shape[1] // 2, 1))),
                           ("hnorm", lambda m: m.hnorm.weight.add_(1.0)),
                           ("enorm", lambda m: m.enorm.weight.add_(1.0)),
                           ("the head norm", lambda m: m.norm.weight.add_(1.0))):
            other = copy.deepcopy(module)
            edit(other)
            changed, _ = other(prompts["prompts"][2][1:], final_hidden(double, prompts["prompts"][2])[:-1], 1)
            if (changed - base).abs().max().item() < 1e-3:
                sys.exit(f"{what} does not change the MTP logits")
        shifted, _ = module(prompts["prompts"][2][1:], final_hidden(double, prompts["prompts"][2])[:-1], 0)
        print(f"  positions one lower (vLLM's): max |logit difference| {(shifted - base).abs().max().item():.3g}")
    if len(set(chain["drafts"])) < 2:
        sys.exit(f"the draft chain repeats itself: {chain}")
    all_tensors = {**tensors, **mtp}
    save_file(all_tensors, st_path)
    os.chmod(st_path, 0o644)
    text["mtp_num_hidden_layers"] = 1
    text["mtp_use_dedicated_embeddings"] = False
    with open(cfg_path, "w") as f:
        f.write(json.dumps(config, indent=2, sort_keys=True) + "\n")
    save_file(out, os.path.join(d, "golden_mtp.safetensors"))
    os.chmod(os.path.join(d, "golden_mtp.safetensors"), 0o644)
    with open(os.path.join(d, "golden_mtp.json"), "w") as f:
        json.dump({"chain": chain}, f)
    print(f"{NAME}: {len(mtp)} mtp tensors, chain {chain['drafts']}")


if __name__ == "__main__":
    main()
