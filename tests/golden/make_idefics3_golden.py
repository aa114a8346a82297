#!/usr/bin/env python
"""Regenerate the tiny Idefics3 (SmolVLM-architecture) checkpoint and its float64 goldens.

Usage (from the repository root, in a venv with torch, transformers 5.x, pillow):
    python tests/golden/make_idefics3_golden.py [--scratch DIR]

Writes
  tests/golden/idefics3_tiny/        save_pretrained() checkpoint (float32 safetensors) + tokenizer +
                                     processor, the two input PNGs, and the goldens the C++ tests read:
                                     golden.safetensors (float32 copies of the float64 arrays below, for
                                     the cases in PACKED) and golden.json (ids, prompts, greedy tokens)
  DIR/goldens/*.npy, index.json      every array in float64 with checksums, the resize intermediates
                                     (default DIR /tmp/idefics3_golden; not committed)

Everything is seeded and deterministic (CPU, 1 thread). Needs: torch, transformers 5.x, pillow,
tokenizers, numpy. No network.

"True float64" goldens: transformers upcasts to float32 inside LlamaRMSNorm, the rotary embedding
and the eager-attention softmax, which *downcasts* a float64 model. We patch those three spots
(see patch_true_float64) so the goldens are float64 end to end; the unpatched ("stock")
model.double() output is also computed and the max difference is recorded in index.json.
"""

import argparse
import hashlib
import json
import math
import os
import sys

import numpy as np
import torch
from PIL import Image

torch.set_num_threads(1)

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402

import transformers  # noqa: E402
from transformers import (  # noqa: E402
    Idefics3Config,
    Idefics3ForConditionalGeneration,
    Idefics3Processor,
    PreTrainedTokenizerFast,
)
from transformers.image_utils import PILImageResampling  # noqa: E402
from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil  # noqa: E402

SEED = 1234

# ----------------------------------------------------------------------------- configuration
TILE = 32  # vision image_size == processor max_image_size["longest_edge"]
PATCH = 4
SCALE = 2
IMAGE_SEQ_LEN = (TILE // PATCH) ** 2 // SCALE**2  # 16
RESIZE_LONGEST = 3 * TILE  # processor size["longest_edge"] (real SmolVLM2: 4 * 512 = 2048)

# Chat template of SmolVLM2 (transformers/models/smolvlm/processing_smolvlm.py DEFAULT_CHAT_TEMPLATE)
CHAT_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}"
    "{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% elif line['type'] == 'video' %}{{ '<video>' }}{% endif %}"
    "{% endfor %}<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)

BASE_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0,1,2 like SmolLM2
# Added tokens, in the same relative order as the real SmolVLM tokenizer
# (real ids: <global-img>=49152, <row_r_col_c>=49153..49188, <fake_token_around_image>=49189,
#  <image>=49190, ... reserved ..., <end_of_utterance>=49279)
ADDED = (
    ["<global-img>"]
    + [f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)]
    + ["<fake_token_around_image>", "<image>", "<end_of_utterance>"]
)
BPE_VOCAB = 320  # 3 specials + 256 bytes + 61 merges

CORPUS = [
    "What is this? Describe the image in detail.",
    "User: What do you see in this picture? Assistant: I see a gradient and a checkerboard.",
    "The quick brown fox jumps over the lazy dog.",
    "A red square, a green square and a blue square on a white background.",
    "This image shows colors that change smoothly from left to right and from top to bottom.",
] * 4


def build_tokenizer():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_VOCAB,
        special_tokens=BASE_SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
        min_frequency=2,
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ADDED])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<end_of_utterance>",
        pad_token="<|im_end|>",
        unk_token="<|endoftext|>",
        model_max_length=1024,
    )
    return fast


# ----------------------------------------------------------------------------- images
def make_images():
    # A: 37 wide x 23 high RGB gradient (non-square, odd size)
    W, H = 37, 23
    y, x = np.mgrid[0:H, 0:W]
    a = np.stack(
        [
            np.round(x * 255.0 / (W - 1)),
            np.round(y * 255.0 / (H - 1)),
            np.round(((x + y) % 16) * 255.0 / 15),
        ],
        axis=-1,
    ).astype(np.uint8)
    # B: 16x16 checkerboard of 4x4 squares, two colours
    yy, xx = np.mgrid[0:16, 0:16]
    on = ((xx // 4 + yy // 4) % 2).astype(bool)
    b = np.zeros((16, 16, 3), np.uint8)
    b[on] = (230, 40, 20)
    b[~on] = (20, 60, 210)
    return {"gradient_37x23": a, "checker_16x16": b}


# ----------------------------------------------------------------------------- model
def build_model(vocab_size, ids):
    text_config = dict(
        model_type="llama",
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        hidden_act="silu",
        max_position_embeddings=1024,
        rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
        attention_bias=False,
        mlp_bias=False,
        tie_word_embeddings=False,
        bos_token_id=ids["<|im_start|>"],
        eos_token_id=ids["<end_of_utterance>"],
        pad_token_id=ids["<|im_end|>"],
    )
    vision_config = dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_channels=3,
        image_size=TILE,
        patch_size=PATCH,
        hidden_act="gelu_pytorch_tanh",
        layer_norm_eps=1e-6,
    )
    config = Idefics3Config(
        vision_config=vision_config,
        text_config=text_config,
        scale_factor=SCALE,
        image_token_id=ids["<image>"],
        tie_word_embeddings=False,
        pad_token_id=ids["<|im_end|>"],
    )
    torch.manual_seed(SEED)
    model = Idefics3ForConditionalGeneration(config).float().eval()
    # Deterministic, deliberately "large" init so that every op matters in the goldens.
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if p.ndim == 1 and ("norm" in name):
                v = 1.0 + 0.1 * torch.randn(p.shape, generator=g)
            elif p.ndim == 1:  # biases
                v = 0.1 * torch.randn(p.shape, generator=g)
            elif "embed_tokens" in name or "position_embedding" in name:
                v = 0.5 * torch.randn(p.shape, generator=g)
            else:
                fan_in = int(np.prod(p.shape[1:]))
                v = torch.randn(p.shape, generator=g) / math.sqrt(fan_in)
                if name == "lm_head.weight":
                    v = v * 4.0
            p.copy_(v.to(p.dtype))
    return model


# ----------------------------------------------------------------------------- float64 patches
def patch_true_float64(enable):
    """Keep float64 inside RMSNorm / RoPE / eager softmax (stock code computes them in float32)."""
    from transformers.models.idefics3 import modeling_idefics3 as mi
    from transformers.models.llama import modeling_llama as ml

    if not hasattr(patch_true_float64, "orig"):
        patch_true_float64.orig = (
            ml.LlamaRMSNorm.forward,
            ml.LlamaRotaryEmbedding.forward,
            ml.eager_attention_forward,
            mi.eager_attention_forward,
        )
    if not enable:
        (ml.LlamaRMSNorm.forward, ml.LlamaRotaryEmbedding.forward, ml.eager_attention_forward,
         mi.eager_attention_forward) = patch_true_float64.orig
        return

    def rms_forward(self, h):
        var = h.pow(2).mean(-1, keepdim=True)
        return self.weight * (h * torch.rsqrt(var + self.variance_epsilon))

    def rope_forward(self, x, position_ids):
        cfg = self.config
        base = cfg.rope_parameters["rope_theta"]
        dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
        freqs = position_ids[..., None].to(torch.float64) * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    def make_eager(orig_repeat):
        def eager(module, query, key, value, attention_mask, scaling, dropout=0.0, **kw):
            if orig_repeat is not None and hasattr(module, "num_key_value_groups"):
                key = orig_repeat(key, module.num_key_value_groups)
                value = orig_repeat(value, module.num_key_value_groups)
            w = torch.matmul(query, key.transpose(-1, -2)) * scaling
            if attention_mask is not None:
                w = w + attention_mask
            w = torch.softmax(w, dim=-1)
            out = torch.matmul(w, value).transpose(1, 2).contiguous()
            return out, w

        return eager

    ml.LlamaRMSNorm.forward = rms_forward
    ml.LlamaRotaryEmbedding.forward = rope_forward
    ml.eager_attention_forward = make_eager(ml.repeat_kv)
    mi.eager_attention_forward = make_eager(None)


# ----------------------------------------------------------------------------- helpers
def sha256(a):
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def summarize(a, n=6):
    a = np.asarray(a)
    flat = a.reshape(-1)
    return {
        "shape": list(a.shape),
        "dtype": str(a.dtype),
        "first": [float(v) for v in flat[:n]],
        "last": [float(v) for v in flat[-n:]],
        "sum": float(flat.astype(np.float64).sum()),
        "abs_sum": float(np.abs(flat.astype(np.float64)).sum()),
        "sha256": sha256(a),
    }


def save(outdir, name, arr, index_entry):
    np.save(os.path.join(outdir, name + ".npy"), arr)
    index_entry[name] = dict(file=name + ".npy", **summarize(arr))


@torch.no_grad()
def run_case(model, processor, images, text_prompt, proc_kwargs):
    inputs = processor(images=images, text=text_prompt, return_tensors="pt", **proc_kwargs)
    pv = inputs["pixel_values"]
    pam = inputs["pixel_attention_mask"]
    input_ids = inputs["input_ids"]
    m = model.model
    img = m.get_image_features(pv.to(torch.float64), pam, return_dict=True)
    vision_last = img.last_hidden_state  # (n_tiles, n_patches, vision_hidden)
    feats = torch.cat(img.pooler_output, 0)  # (n_tiles*image_seq_len, text_hidden)
    out = model(input_ids=input_ids, attention_mask=inputs["attention_mask"], pixel_values=pv,
                pixel_attention_mask=pam, use_cache=False)
    logits = out.logits[0]
    # greedy: 8 steps, full recompute each step, no EOS stop, pixel values every step
    ids = input_ids.clone()
    greedy, step_top = [], []
    for _ in range(8):
        o = model(input_ids=ids, pixel_values=pv, pixel_attention_mask=pam, use_cache=False)
        last = o.logits[0, -1]
        nxt = int(torch.argmax(last))
        top2 = torch.topk(last, 2)
        step_top.append({"token": nxt, "logit": float(top2.values[0]), "runner_up": int(top2.indices[1]),
                         "runner_up_logit": float(top2.values[1])})
        greedy.append(nxt)
        ids = torch.cat([ids, torch.tensor([[nxt]])], 1)
    # cross-check with generate() (KV cache path, pixel values only on the first step)
    gen = model.generate(**inputs, max_new_tokens=8, do_sample=False, eos_token_id=None,
                         pad_token_id=processor.tokenizer.pad_token_id)
    gen_tokens = gen[0, input_ids.shape[1]:].tolist()
    return dict(inputs=inputs, vision_last=vision_last, feats=feats, logits=logits, greedy=greedy,
                step_top=step_top, gen_tokens=gen_tokens)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scratch", default="/tmp/idefics3_golden")
    args = ap.parse_args()
    ckpt = os.path.join(os.path.dirname(os.path.abspath(__file__)), "idefics3_tiny")
    gdir = os.path.join(args.scratch, "goldens")
    os.makedirs(ckpt, exist_ok=True)
    os.makedirs(gdir, exist_ok=True)

    # tokenizer / processor
    tokenizer = build_tokenizer()
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in BASE_SPECIALS + ADDED}
    vocab_size = len(tokenizer)
    vocab_size = (vocab_size + 7) // 8 * 8
    image_processor = Idefics3ImageProcessorPil(
        size={"longest_edge": RESIZE_LONGEST},
        max_image_size={"longest_edge": TILE},
        resample=PILImageResampling.LANCZOS,
        do_image_splitting=True,
    )
    processor = Idefics3Processor(image_processor=image_processor, tokenizer=tokenizer,
                                  image_seq_len=IMAGE_SEQ_LEN, chat_template=CHAT_TEMPLATE)

    model = build_model(vocab_size, ids)
    model.save_pretrained(ckpt, safe_serialization=True)
    processor.save_pretrained(ckpt)

    # reload exactly what a consumer would read, then go float64
    model = Idefics3ForConditionalGeneration.from_pretrained(ckpt, dtype=torch.float32,
                                                             attn_implementation="eager").eval()
    model = model.double()

    # images -> PNG -> back (so a C++ PNG decoder sees exactly the same pixels)
    imgs = {}
    for name, arr in make_images().items():
        path = os.path.join(gdir, name + ".png")
        Image.fromarray(arr, "RGB").save(path)
        imgs[name] = Image.open(path).convert("RGB")
        assert np.array_equal(np.asarray(imgs[name]), arr)

    messages_one = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is this?"}]}]
    messages_two = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "and"},
                                                  {"type": "image"}, {"type": "text", "text": "?"}]}]
    prompt_one = processor.apply_chat_template(messages_one, add_generation_prompt=True)
    prompt_two = processor.apply_chat_template(messages_two, add_generation_prompt=True)

    cases = [
        ("gradient", [imgs["gradient_37x23"]], prompt_one, {}),
        ("checker", [imgs["checker_16x16"]], prompt_one, {}),
        ("gradient_nosplit", [imgs["gradient_37x23"]], prompt_one, {"do_image_splitting": False}),
        ("two_images", [imgs["gradient_37x23"], imgs["checker_16x16"]], prompt_two, {}),
    ]

    index = {
        "generator": "make_goldens.py",
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__,
                     "numpy": np.__version__, "pillow": Image.__version__, "python": sys.version.split()[0]},
        "checkpoint": "tiny_idefics3",
        "seed": SEED,
        "precision": "float32 weights on disk; goldens computed with model.double() and the true-float64 "
                     "patches (RMSNorm/RoPE/softmax kept in float64). 'stock_max_abs_diff' compares with "
                     "unpatched transformers model.double().",
        "special_token_ids": ids,
        "image_token_id": ids["<image>"],
        "image_seq_len": IMAGE_SEQ_LEN,
        "vocab_size_model": vocab_size,
        "vocab_size_tokenizer": len(tokenizer),
        "processor": {"size": {"longest_edge": RESIZE_LONGEST}, "max_image_size": {"longest_edge": TILE},
                      "resample": "LANCZOS (PIL, on uint8)", "rescale_factor": 1 / 255,
                      "image_mean": [0.5] * 3, "image_std": [0.5] * 3, "backend": "Idefics3ImageProcessorPil"},
        "chat_template": CHAT_TEMPLATE,
        "images": {k: {"file": k + ".png", "width": v.size[0], "height": v.size[1],
                       "sha256_rgb": sha256(np.asarray(v))} for k, v in imgs.items()},
        "cases": {},
    }

    # stock (unpatched) run first, for the precision comparison
    patch_true_float64(False)
    stock = {name: run_case(model, processor, ims, prm, kw) for name, ims, prm, kw in cases}
    patch_true_float64(True)

    ip = processor.image_processor
    for name, ims, prm, kw in cases:
        r = run_case(model, processor, ims, prm, kw)
        inputs = r["inputs"]
        entry = {"images": [k for im in ims for k, v in imgs.items() if v is im], "prompt": prm,
                 "processor_kwargs": kw}
        rows_cols = ip(ims, return_row_col_info=True, **kw)
        entry["rows"] = [int(x) for x in rows_cols["rows"][0]]
        entry["cols"] = [int(x) for x in rows_cols["cols"][0]]
        expanded = processor.get_text_with_replacements(
            [prm], images_replacements=[processor.replace_image_token(rows_cols, i) for i in range(len(ims))])[0][0]
        entry["expanded_prompt"] = expanded
        input_ids = inputs["input_ids"][0].tolist()
        entry["input_ids"] = input_ids
        entry["num_tokens"] = len(input_ids)
        entry["image_token_positions_count"] = int(sum(1 for t in input_ids if t == ids["<image>"]))
        entry["pixel_attention_mask_all_ones"] = bool(inputs["pixel_attention_mask"].all())
        # resize intermediates (uint8, HWC) so a C++ resampler can be checked in isolation
        inter = []
        for k, im in enumerate(ims):
            a = np.asarray(im).transpose(2, 0, 1)  # CHW uint8 (what the PIL backend works on)
            r1 = ip.resize(a, size=transformers.image_utils.SizeDict(longest_edge=RESIZE_LONGEST),
                           resample=PILImageResampling.LANCZOS)
            d = {"resize1_hw": list(r1.shape[1:])}
            save(gdir, f"{name}_img{k}_resize1_u8", r1.transpose(1, 2, 0), entry)
            if kw.get("do_image_splitting", True):
                r2 = ip.resize_for_vision_encoder(r1, TILE, resample=PILImageResampling.LANCZOS)
                d["resize2_hw"] = list(r2.shape[1:])
                save(gdir, f"{name}_img{k}_resize2_u8", r2.transpose(1, 2, 0), entry)
            inter.append(d)
        entry["resize_shapes"] = inter
        save(gdir, f"{name}_pixel_values", inputs["pixel_values"].numpy(), entry)
        save(gdir, f"{name}_vision_last_hidden", r["vision_last"].numpy(), entry)
        save(gdir, f"{name}_image_features", r["feats"].numpy(), entry)
        save(gdir, f"{name}_logits", r["logits"].numpy(), entry)
        entry["last_logits_argmax"] = int(r["logits"][-1].argmax())
        entry["greedy_8"] = r["greedy"]
        entry["greedy_8_text"] = processor.tokenizer.decode(r["greedy"])
        entry["greedy_steps"] = r["step_top"]
        entry["generate_8_kvcache"] = r["gen_tokens"]
        entry["generate_matches_full_recompute"] = r["gen_tokens"] == r["greedy"]
        s = stock[name]
        entry["stock_max_abs_diff"] = {
            "vision_last_hidden": float((s["vision_last"] - r["vision_last"]).abs().max()),
            "image_features": float((s["feats"] - r["feats"]).abs().max()),
            "logits": float((s["logits"] - r["logits"]).abs().max()),
            "greedy_equal": s["greedy"] == r["greedy"],
        }
        index["cases"][name] = entry
        print(name, "tokens", len(input_ids), "tiles", inputs["pixel_values"].shape[1], "greedy", r["greedy"],
              "gen==greedy", entry["generate_matches_full_recompute"], "stock diff", entry["stock_max_abs_diff"])

    with open(os.path.join(gdir, "index.json"), "w") as f:
        json.dump(index, f, indent=1)
    print("wrote", gdir)
    pack(ckpt, gdir, index)


# The cases the C++ tests read, packed beside the checkpoint.
PACKED = ["gradient", "gradient_nosplit", "two_images"]


def pack(ckpt, gdir, index):
    from safetensors.numpy import save_file
    import shutil
    tensors, cases = {}, {}
    for name in PACKED:
        for part in ["pixel_values", "vision_last_hidden", "image_features", "logits"]:
            tensors[f"{name}.{part}"] = np.ascontiguousarray(
                np.load(os.path.join(gdir, f"{name}_{part}.npy")).astype(np.float32))
        e = index["cases"][name]
        cases[name] = {k: e[k] for k in ["images", "prompt", "processor_kwargs", "rows", "cols", "expanded_prompt",
                                         "input_ids", "greedy_8"]}
    save_file(tensors, os.path.join(ckpt, "golden.safetensors"))
    meta = {k: index[k] for k in ["generator", "versions", "seed", "precision", "special_token_ids",
                                  "image_token_id", "image_seq_len", "images"]}
    meta["generator"] = "tests/golden/make_idefics3_golden.py"
    meta["cases"] = cases
    with open(os.path.join(ckpt, "golden.json"), "w") as f:
        json.dump(meta, f, indent=1)
    for image in index["images"].values():
        shutil.copy(os.path.join(gdir, image["file"]), os.path.join(ckpt, image["file"]))
    print("packed", ckpt)


if __name__ == "__main__":
    main()
