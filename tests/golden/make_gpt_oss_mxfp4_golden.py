#!/usr/bin/env python3
"""Writes gpt_oss_mxfp4_tiny: gpt_oss_tiny (make_gpt_oss_golden.py) with its experts packed in MXFP4
as the released gpt-oss checkpoints on Hugging Face store them (openai/gpt-oss-20b / -120b).

  gpt_oss_mxfp4_tiny/config.json                gpt_oss_tiny's config.json plus the released
                                                quantization_config (key order and format as
                                                transformers writes config.json: sorted, indent 2)
  gpt_oss_mxfp4_tiny/model.safetensors          per layer mlp.experts.gate_up_proj / down_proj
                                                replaced by *_blocks (U8) and *_scales (U8); all
                                                else gpt_oss_tiny's F32 tensors, bit for bit
  gpt_oss_mxfp4_tiny/golden.json,               copied from gpt_oss_tiny (the same weights, so
  gpt_oss_mxfp4_tiny/golden_logits.safetensors  the same logits)

The released layout (transformers 5.23 integrations/mxfp4.py, convert_moe_packed_tensors, the
dequantizer from_pretrained runs on them; E experts, C hidden, F intermediate):
  model.layers.N.mlp.experts.gate_up_proj_blocks  U8 [E, 2F, C/32, 16]
  model.layers.N.mlp.experts.gate_up_proj_scales  U8 [E, 2F, C/32]
  model.layers.N.mlp.experts.down_proj_blocks     U8 [E, C, F/32, 16]
  model.layers.N.mlp.experts.down_proj_scales     U8 [E, C, F/32]
  (gate_up_proj_bias [E, 2F] and down_proj_bias [E, C] unchanged, F32 here: BF16 in the release)
Rows are OUTPUTS and the 32-value blocks run along the INPUT: blocks[e, r, b] holds W[e, r, 32b ..
32b + 31] where W is the transpose of the eager parameter (gate_up_proj [E, C, 2F] -> W [E, 2F, C],
row 2j the gate of unit j, row 2j + 1 its up: interleaved, as gate_up's columns are; down_proj
[E, F, C] -> W [E, C, F]). Byte k of a block holds input 2k in its LOW nibble and 2k + 1 in its HIGH
nibble; a nibble is an e2m1 code (bit 3 the sign), FP4_VALUES = {0, .5, 1, 1.5, 2, 3, 4, 6, -0,
-.5, ..., -6}; the scale byte s is e8m0 with bias 127: value = FP4_VALUES[code] * 2^(s - 127).
convert_moe_packed_tensors unpacks [E, R, G, 16] to [E, R, 32G] and returns .transpose(1, 2), the
eager [E, in, out] layout. Scales here follow the OCP rule (= ggml's quantize_row_mxfp4): s =
floor(log2(amax of the block)) - 2 + 127, and every value must be exactly representable (checked:
make_gpt_oss_golden.py rounded the experts to MXFP4 along their input).

config.json's quantization_config as released (transformers' convert_gpt_oss_weights_to_hf.py, mxfp4):
  {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
   "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"}

Checks (the script exits otherwise; printed as run):
  - the packing is exact: every block's values are FP4_VALUES x 2^(s - 127) bit for bit;
  - transformers' convert_moe_packed_tensors reads the blocks / scales back to gpt_oss_tiny's F32
    experts bit for bit;
  - GptOssForCausalLM.from_pretrained(gpt_oss_mxfp4_tiny) on CPU, offline (HF_HUB_OFFLINE=1), with
    quantization_config=Mxfp4Config(dequantize=True) (the path transformers takes by itself on a
    CPU without the `kernels` package or without use_kernels: Mxfp4HfQuantizer, pre-quantized, its
    "dequantize" load operation Mxfp4Dequantize -> convert_moe_packed_tensors; no kernel download):
    no missing / unexpected / mismatched keys, every parameter equal to gpt_oss_tiny's bit for bit,
    and in float64 (make_gpt_oss_golden.py's float64 patches) it reproduces logits.{i} of
    golden_logits.safetensors, max |diff| 0 after the float32 rounding they are stored with;
  - ggml's block_mxfp4 repacking of the HF blocks (hf_to_ggml below: byte 0 = s unchanged, then
    qs[2k] = (B[k] & 0x0F) | (B[k+8] << 4), qs[2k+1] = (B[k] >> 4) | (B[k+8] & 0xF0), k = 0..7)
    equals gguf-py's quants.quantize of the F32 rows (gate rows W[:, 0::2], up rows W[:, 1::2],
    down rows) and llama.cpp's converter's transform_nibble_layout (when conversion/ is importable),
    and gguf-py's quants.dequantize of it gives the F32 experts bit for bit; where
    gguf_gpt_oss/model.gguf exists, its ffn_{gate,up,down}_exps bytes are these.

Run in the oracle venv (torch CPU, transformers 5.23.0) with llama.cpp's gguf-py, after
make_gpt_oss_golden.py:
    PYTHONPATH=llama.cpp/gguf-py VENV/bin/python tests/golden/make_gpt_oss_mxfp4_golden.py
Deterministic: a rerun writes the same bytes. A few seconds.
"""
import json
import os
import shutil
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no hub access: nothing here needs one

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_gpt_oss_golden as mg  # noqa: E402  (float64 patches; sets up the float64 rotary)
import make_hybrid_golden as mh  # noqa: E402
from transformers import GptOssConfig, GptOssForCausalLM, Mxfp4Config  # noqa: E402
from transformers.integrations import mxfp4 as hf_mxfp4  # noqa: E402

HERE = mh.HERE
SRC, DST = "gpt_oss_tiny", "gpt_oss_mxfp4_tiny"
EXPERTS = ("mlp.experts.gate_up_proj", "mlp.experts.down_proj")
# As the released gpt-oss-20b / -120b config.json (keys sorted, as transformers writes them)
QUANTIZATION_CONFIG = {
    "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                               "lm_head"],
    "quant_method": "mxfp4",
}
FP4_VALUES = torch.tensor(hf_mxfp4.FP4_VALUES, dtype=torch.float64)  # e2m1, transformers' table
GGML_KVALUES = (0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12)  # ggml's kvalues_mxfp4: e2m1 doubled


def die(msg):
    sys.exit(f"{DST}: {msg}")


def rows_of(name, t):
    """The eager parameter as W [E, out, in]: rows of outputs, the input (the MXFP4 block axis) last."""
    return t.transpose(1, 2).contiguous()  # gate_up_proj [E, C, 2F] -> [E, 2F, C]; down_proj [E, F, C] -> [E, C, F]


def pack_hf(w):
    """W [E, N, K] float32 (exactly MXFP4 along K) -> (blocks U8 [E, N, K/32, 16], scales U8 [E, N, K/32])
    in the released layout: value = FP4_VALUES[code] * 2^(s - 127), byte k = code(2k) | code(2k+1) << 4."""
    E, N, K = w.shape
    if K % 32:
        die(f"input dimension {K} is not a multiple of 32")
    x = w.double().reshape(E, N, K // 32, 32)
    amax = x.abs().amax(-1)
    _, ex = torch.frexp(amax)  # amax = m 2^ex, m in [0.5, 1): floor(log2 amax) = ex - 1
    s = torch.where(amax > 0, ex - 1 - 2 + 127, torch.zeros_like(ex))
    if (s < 1).any() or (s > 254).any():
        die("a block exponent out of range")
    mag = x.abs() * torch.pow(2.0, (127 - s).double())[..., None]  # exact: a power of two
    codes = torch.full(x.shape, -1, dtype=torch.int64)
    for c in range(8):
        codes = torch.where(mag == FP4_VALUES[c], torch.full_like(codes, c), codes)
    if (codes < 0).any():
        die(f"{int((codes < 0).sum())} values are not FP4 x 2^(s - 127) (not exactly MXFP4)")
    codes = codes | (torch.signbit(x).long() << 3)
    back = FP4_VALUES[codes] * torch.pow(2.0, (s - 127).double())[..., None]
    if not torch.equal(back.float().reshape(E, N, K).view(torch.int32), w.view(torch.int32)):
        die("the packed codes do not give the weights back bit for bit")
    c = codes.reshape(E, N, K // 32, 16, 2).to(torch.uint8)
    blocks = (c[..., 0] | (c[..., 1] << 4)).contiguous()
    return blocks, s.to(torch.uint8).contiguous()


def hf_to_ggml(blocks, scales):
    """HF blocks [..., G, 16] / scales [..., G] -> ggml block_mxfp4 bytes [..., G, 17]: byte 0 the scale
    unchanged (HF FP4_VALUES x 2^(s - 127) = ggml kvalues x 2^(e - 128), kvalues = 2 x FP4_VALUES), then
    qs[j] = code(j) | code(j + 16) << 4 (j = 0..15), where HF code(i) = nibble (i & 1) of byte i >> 1:
    qs[2k] = (B[k] & 0x0F) | (B[k+8] & 0x0F) << 4, qs[2k+1] = (B[k] >> 4) | (B[k+8] & 0xF0)."""
    lo, hi = blocks[..., :8], blocks[..., 8:]
    even = (lo & 0x0F) | ((hi & 0x0F) << 4)
    odd = (lo >> 4) | (hi & 0xF0)
    qs = torch.stack([even, odd], -1).reshape(blocks.shape)
    return torch.cat([scales[..., None], qs], -1).contiguous()


def write(gguf):
    src, dst = os.path.join(HERE, SRC), os.path.join(HERE, DST)
    with open(os.path.join(src, "config.json")) as f:
        text = f.read()
    cfg = json.loads(text)
    if json.dumps(cfg, indent=2, sort_keys=True) + "\n" != text:
        die("gpt_oss_tiny's config.json is not in transformers' format (sorted keys, indent 2)")
    if "quantization_config" in cfg:
        die("gpt_oss_tiny already has a quantization_config")
    cfg["quantization_config"] = QUANTIZATION_CONFIG
    C, F, E = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_local_experts"]

    state = load_file(os.path.join(src, "model.safetensors"))
    out, experts = {}, {}
    for name in sorted(state):
        t = state[name]
        if not name.endswith(EXPERTS):
            out[name] = t
            continue
        if t.dtype != torch.float32:
            die(f"{name} is {t.dtype}, not F32")
        w = rows_of(name, t)
        want = (E, 2 * F, C) if name.endswith("gate_up_proj") else (E, C, F)
        if tuple(w.shape) != want:
            die(f"{name}: rows {tuple(w.shape)}, expected {want}")
        blocks, scales = pack_hf(w)
        out[name + "_blocks"], out[name + "_scales"] = blocks, scales
        experts[name] = (t, w, blocks, scales)
    if len(experts) != 2 * cfg["num_hidden_layers"]:
        die(f"{len(experts)} expert tensors")
    e0 = experts["model.layers.0.mlp.experts.gate_up_proj"]
    d0 = experts["model.layers.0.mlp.experts.down_proj"]
    lo, hi = min(int(x[3].min()) for x in experts.values()), max(int(x[3].max()) for x in experts.values())
    print(f"  {DST}: gate_up_proj_blocks {tuple(e0[2].shape)} scales {tuple(e0[3].shape)}, down_proj_blocks "
          f"{tuple(d0[2].shape)} scales {tuple(d0[3].shape)}; scale bytes {lo}..{hi}; packing exact")

    # transformers' own dequantizer, called directly
    for name, (t, _, blocks, scales) in experts.items():
        back = hf_mxfp4.convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)
        if back.shape != t.shape or not torch.equal(back.view(torch.int32), t.view(torch.int32)):
            die(f"{name}: convert_moe_packed_tensors does not read the F32 experts back bit for bit")
    print(f"  {DST}: transformers' convert_moe_packed_tensors reads all {len(experts)} packed expert tensors back "
          f"to gpt_oss_tiny's F32 bit for bit")

    check_ggml(gguf, experts)

    os.makedirs(dst, exist_ok=True)
    with open(os.path.join(dst, "config.json"), "w") as f:
        f.write(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    save_file(out, os.path.join(dst, "model.safetensors"))
    os.chmod(os.path.join(dst, "model.safetensors"), 0o644)
    for name in ("golden.json", "golden_logits.safetensors"):
        shutil.copyfile(os.path.join(src, name), os.path.join(dst, name))
    print(f"wrote {dst}: config.json (+ quantization_config), model.safetensors ({len(out)} tensors: "
          f"{len(experts)} expert tensors as *_blocks / *_scales), golden.json, golden_logits.safetensors (copied)")
    return state


def check_ggml(gguf, experts):
    """The HF bytes repacked to ggml's block_mxfp4 (hf_to_ggml) are gguf-py's quantization of the F32 rows
    and dequantize (gguf-py) to them bit for bit; llama.cpp's converter repacks them to the same bytes;
    gguf_gpt_oss/model.gguf, where present, holds these bytes."""
    Q = gguf.GGMLQuantizationType.MXFP4
    if tuple(gguf.quants.MXFP4.kvalues) != GGML_KVALUES:
        die("gguf-py's MXFP4 kvalues differ")
    transform = None
    try:  # llama.cpp's converter, llama.cpp/conversion/gpt_oss.py (gguf-py's parent directory on sys.path)
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(gguf.__file__)))))
        from conversion.gpt_oss import GptOssModel
        transform = GptOssModel.transform_nibble_layout
    except Exception as exc:  # noqa: BLE001
        print(f"  {DST}: llama.cpp's llama.cpp/conversion/gpt_oss.py not importable ({type(exc).__name__}): its repacking "
              f"not compared")
    reader = None
    gguf_path = os.path.join(HERE, "gguf_gpt_oss", "model.gguf")
    if os.path.exists(gguf_path):
        reader = {t.name: t for t in gguf.GGUFReader(gguf_path).tensors}
    n = n_conv = n_file = 0
    for name, (_, w, blocks, scales) in experts.items():
        layer = name.split(".")[2]
        parts = ({"ffn_down_exps": slice(None)} if name.endswith("down_proj")
                 else {"ffn_gate_exps": slice(0, None, 2), "ffn_up_exps": slice(1, None, 2)})
        for kind, rows in parts.items():
            b, s, r = blocks[:, rows].contiguous(), scales[:, rows].contiguous(), w[:, rows].contiguous()
            ggml = hf_to_ggml(b, s)  # [E, N, G, 17]
            flat = ggml.reshape(*ggml.shape[:2], -1).numpy()  # [E, N, 17 G]: the GGUF tensor's bytes
            q = gguf.quants.quantize(r.numpy(), Q)
            if not np.array_equal(q, flat):
                die(f"{name} ({kind}): the repacked bytes are not gguf-py's MXFP4 quantization of the F32 rows")
            back = gguf.quants.dequantize(flat, Q)
            if back.shape != tuple(r.shape) or not np.array_equal(back.view(np.uint32), r.numpy().view(np.uint32)):
                die(f"{name} ({kind}): gguf-py does not dequantize the repacked bytes to the F32 experts")
            if transform is not None:
                conv = torch.cat([s[..., None], transform(None, b)], -1)
                if not torch.equal(conv, ggml):
                    die(f"{name} ({kind}): llama.cpp's transform_nibble_layout repacks otherwise")
                n_conv += 1
            if reader is not None:
                t = reader.get(f"blk.{layer}.{kind}.weight")
                if t is None or t.tensor_type != Q or not np.array_equal(
                        np.asarray(t.data).reshape(-1), flat.reshape(-1)):
                    die(f"{name} ({kind}): gguf_gpt_oss/model.gguf's blk.{layer}.{kind}.weight holds other bytes")
                n_file += 1
            n += 1
    print(f"  {DST}: ggml block_mxfp4 repacking (hf_to_ggml) of {n} gate / up / down tensors = gguf-py's "
          f"quants.quantize of the F32 rows, dequantized by gguf-py ({os.path.dirname(gguf.__file__)}) to them bit for "
          f"bit; = llama.cpp's transform_nibble_layout: {n_conv} of {n}; = gguf_gpt_oss/model.gguf: {n_file} of {n}")


def check_from_pretrained(state):
    """The directory through from_pretrained on CPU (MXFP4 dequantized by transformers) gives gpt_oss_tiny's
    parameters bit for bit and, in float64, the golden logits."""
    dst = os.path.join(HERE, DST)
    cfg = GptOssConfig.from_pretrained(dst)
    qc = cfg.quantization_config
    qc = qc.to_dict() if hasattr(qc, "to_dict") else qc
    if qc != QUANTIZATION_CONFIG:
        die(f"GptOssConfig reads quantization_config {qc}")
    seen, ops = [], []
    orig, orig_op = hf_mxfp4.convert_moe_packed_tensors, hf_mxfp4.Mxfp4Dequantize.convert

    def counting(blocks, scales, **kw):
        seen.append(tuple(blocks.shape))
        return orig(blocks, scales, **kw)

    def counting_op(self, input_dict, *args, **kw):
        ops.append((type(self.hf_quantizer).__name__, self.hf_quantizer.pre_quantized, sorted(input_dict)))
        return orig_op(self, input_dict, *args, **kw)
    hf_mxfp4.convert_moe_packed_tensors, hf_mxfp4.Mxfp4Dequantize.convert = counting, counting_op
    try:
        model, info = GptOssForCausalLM.from_pretrained(
            dst, dtype=torch.float32, attn_implementation="eager", experts_implementation="eager",
            quantization_config=Mxfp4Config(dequantize=True), output_loading_info=True)
    finally:
        hf_mxfp4.convert_moe_packed_tensors, hf_mxfp4.Mxfp4Dequantize.convert = orig, orig_op
    problems = {k: v for k, v in info.items() if v}
    if problems:
        die(f"from_pretrained: {problems}")
    n_experts = sum(k.endswith(EXPERTS) for k in state)
    if len(seen) != n_experts or len(ops) != n_experts or any(
            o[:2] != ("Mxfp4HfQuantizer", True) or len(o[2]) != 2 or not all(k.endswith(("_blocks", "_scales"))
                                                                           for k in o[2]) for o in ops):
        die(f"transformers' MXFP4 dequantization ran otherwise: {ops}, {seen}")
    if getattr(model.config, "quantization_config", None) is not None or getattr(model, "hf_quantizer", None):
        die("the loaded model is still marked quantized")
    params = dict(model.named_parameters())
    if set(params) != set(state):
        die(f"from_pretrained's parameters differ: {sorted(set(params) ^ set(state))}")
    for name, p in params.items():
        if p.dtype != torch.float32 or not torch.equal(p.detach().view(torch.int32), state[name].view(torch.int32)):
            die(f"from_pretrained's {name} is not gpt_oss_tiny's bit for bit")
    print(f"  {DST}: from_pretrained (CPU, offline, Mxfp4HfQuantizer pre-quantized, dequantize=True: {len(ops)} "
          f"Mxfp4Dequantize ops on *_blocks + *_scales, each through convert_moe_packed_tensors) gives all "
          f"{len(params)} parameters of gpt_oss_tiny bit for bit")

    with open(os.path.join(dst, "golden.json")) as f:
        prompts = json.load(f)["prompts"]
    logits = load_file(os.path.join(dst, "golden_logits.safetensors"))
    patches = mg.gpt_oss_patches()
    model = model.eval().double()
    worst, scale = 0.0, 0.0
    for i, p in enumerate(prompts):
        got = mh.logits64(model, patches, p)
        ref = logits[f"logits.{i}"]
        worst = max(worst, (got.float() - ref).abs().max().item())
        scale = max(scale, ref.abs().max().item())
    print(f"  {DST}: from_pretrained in float64 vs logits.0..{len(prompts) - 1} (float32-stored): "
          f"max |diff| {worst:.3g} (logits up to {scale:.3g})")
    if worst != 0.0:
        die("the loaded model does not reproduce the golden logits")


def main():
    torch.set_num_threads(max(1, min(8, os.cpu_count() or 1)))
    try:
        import gguf
    except ImportError:
        sys.exit("no gguf-py: PYTHONPATH=llama.cpp/gguf-py")
    if not hasattr(gguf.GGMLQuantizationType, "MXFP4"):
        sys.exit("this gguf-py has no MXFP4")
    state = write(gguf)
    check_from_pretrained(state)


if __name__ == "__main__":
    main()
