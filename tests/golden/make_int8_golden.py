"""Golden logits for --dtype=int8, from transformers with Flover's int8
arithmetic emulated (kernels/cpu/int8_linear.h), for every committed GPT-2
and Llama fixture: every linear layer (the LM head included) multiplies

    q_x = round(x * (127 / max|x|))          per input row
    q_w = round(w * (127 / max|w[:, n]|))    per output column n

summed exactly (integers, in float64), then float32(sum) * (max|x| / 127 *
max|w[:, n]| / 127) + bias in float32. Embeddings, norms, attention and the
activations stay float32, as in Flover. Writes golden_int8.safetensors
(`logits_int8.<prompt>`) next to each fixture's golden_logits.safetensors.

It reads the committed fixtures (it does not regenerate them), so run it
after make_golden.py / make_llama_golden.py; the outputs are committed. Needs
the venv of those scripts (transformers 4.44.2 over Debian's python3-torch):
    python3 tests/golden/make_int8_golden.py
"""
import glob
import json
import os

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, GPT2LMHeadModel, LlamaForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = ["tiny_f32", "tiny_f16_prefix", "tiny_bf16_prefix", "llama_gqa", "llama_tied_sharded"]


def quantize(t, dim):
    """Symmetric int8 along `dim` as Flover does it: (q, scale), t ~ q * scale."""
    amax = t.abs().amax(dim, keepdim=True)
    inv = torch.where(amax > 0, torch.tensor(127.0) / torch.where(amax > 0, amax, torch.ones_like(amax)),
                      torch.zeros_like(amax))
    q = torch.clamp(torch.round(t * inv), -127, 127)  # round: half to even, as nearbyint
    return q, amax / torch.tensor(127.0)


def int8_matmul(x, w_in_out, bias):
    """x: [T, K] f32; w_in_out: [K, N] f32; bias: [N] or None."""
    qx, sx = quantize(x, 1)         # sx: [T, 1]
    qw, sw = quantize(w_in_out, 0)  # sw: [1, N]
    acc = (qx.double() @ qw.double()).float()
    y = acc * (sx * sw)
    return y + bias if bias is not None else y


def load(dirname):
    config = AutoConfig.from_pretrained(dirname)
    cls = LlamaForCausalLM if config.model_type == "llama" else GPT2LMHeadModel
    model = cls(config)
    sd = {}
    for f in sorted(glob.glob(os.path.join(dirname, "model*.safetensors"))):
        sd.update({k: v.float() for k, v in load_file(f).items()})
    if cls is GPT2LMHeadModel:  # the fixtures name GPT-2's tensors without the prefix
        sd = {k if k.startswith(("transformer.", "lm_head")) else "transformer." + k: v
              for k, v in sd.items()}
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not unexpected, unexpected
    assert all(m == "lm_head.weight" or m.endswith(("attn.bias", "attn.masked_bias"))
               for m in missing), missing
    model.tie_weights()
    return model.float().eval()


def main():
    import transformers.pytorch_utils as pu
    conv1d, linear = pu.Conv1D.forward, torch.nn.Linear.forward

    def conv1d_int8(self, x):  # GPT-2's layers: weight [in, out]
        y = int8_matmul(x.reshape(-1, x.shape[-1]), self.weight, self.bias)
        return y.view(*x.shape[:-1], self.nf)

    def linear_int8(self, x):  # Llama's layers and every LM head: weight [out, in]
        y = int8_matmul(x.reshape(-1, x.shape[-1]), self.weight.t(), self.bias)
        return y.view(*x.shape[:-1], -1)

    for name in FIXTURES:
        d = os.path.join(HERE, name)
        golden = json.load(open(os.path.join(d, "golden.json")))
        reference = load_file(os.path.join(d, "golden_logits.safetensors"))
        model = load(d)
        out = {}
        with torch.no_grad():
            for i, p in enumerate(golden["prompts"]):
                f32 = model(torch.tensor([p])).logits[0]
                # The model as loaded here is the fixture's: its F32 logits are the committed ones.
                assert torch.allclose(f32, reference[f"logits.{i}"], atol=1e-4, rtol=1e-4), name
            pu.Conv1D.forward, torch.nn.Linear.forward = conv1d_int8, linear_int8
            try:
                for i, p in enumerate(golden["prompts"]):
                    out[f"logits_int8.{i}"] = model(torch.tensor([p])).logits[0].float().contiguous()
            finally:
                pu.Conv1D.forward, torch.nn.Linear.forward = conv1d, linear
        save_file(out, os.path.join(d, "golden_int8.safetensors"))
        worst = max(((out[f"logits_int8.{i}"] - reference[f"logits.{i}"]).abs().amax(-1) /
                     reference[f"logits.{i}"].abs().amax(-1)).max().item()
                    for i in range(len(golden["prompts"])))
        print(f"{name}: emulated int8 vs F32, worst scaled logit error {worst:.2e}")


if __name__ == "__main__":
    main()
