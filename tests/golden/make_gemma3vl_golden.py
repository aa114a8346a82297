#!/usr/bin/env python
"""Regenerate the tiny Gemma 3 vision-language checkpoint and its float64 goldens.

Usage (from the repository root, in a venv with torch, transformers 5.x, pillow):
    python tests/golden/make_gemma3vl_golden.py [--scratch DIR]

Writes
  tests/golden/gemma3vl_tiny/        save_pretrained() checkpoint of a random Gemma3ForConditionalGeneration
                                     (SigLIP vision tower, Gemma3MultiModalProjector = 2x2 avg pool + Gemma
                                     RMSNorm (1+w) + matmul by mm_input_projection_weight, Gemma 3 text model
                                     with sliding/global layers) as float32 safetensors + tokenizer +
                                     processor + chat_template.jinja, the three input images (two PNGs and a
                                     JPEG), and the goldens the C++ tests read: golden.safetensors (float32
                                     copies of the float64 arrays below, for the cases in PACKED) and
                                     golden.json (ids, prompts, token_type_ids, greedy tokens)
  DIR/goldens/*.npy, index.json      every array in float64 with checksums
                                     (default DIR /tmp/gemma3vl_golden; not committed)

Everything is seeded and deterministic (CPU, 1 thread). Needs: torch, transformers 5.x, pillow,
tokenizers, numpy, safetensors. No network.

"True float64" goldens: transformers computes Gemma3RMSNorm in float32 (x.float()), the rotary
embedding in float32, and the eager-attention softmax (Gemma 3 text and SigLIP) with dtype=float32,
which *downcasts* a float64 model. We patch those spots (see patch_true_float64) so the goldens are
float64 end to end; the unpatched ("stock") model.double() output is also computed and the max
difference is recorded in index.json.

Attention masks: the processor returns token_type_ids (1 on the <image_soft_token> rows); passed to the
model they make each image's 16 soft tokens attend to each other bidirectionally (OR'ed with the causal
mask; on sliding layers AND'ed with the window afterwards). Every logits golden here is computed WITH
token_type_ids, including every greedy step (generated tokens get type 0). For "two_images" the logits
with token_type_ids=None (plain causal + sliding-window masks) are also saved as
"two_images.logits_causal", so a test can tell the two masks apart.
"""

import argparse
import json
import math
import os
import shutil
import sys

import numpy as np
import torch
from PIL import Image

torch.set_num_threads(1)

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402

import transformers  # noqa: E402
from transformers import (  # noqa: E402
    Gemma3Config,
    Gemma3ForConditionalGeneration,
    Gemma3Processor,
    PreTrainedTokenizerFast,
)
from transformers.image_utils import PILImageResampling  # noqa: E402
from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil  # noqa: E402

# The array helpers and the synthetic images, shared with the SmolVLM generator beside this one.
from make_idefics3_golden import make_images, save, sha256  # noqa: E402

SEED = 1234

# ----------------------------------------------------------------------------- configuration
IMAGE_SIZE = 32  # vision image_size == processor size (height, width)
PATCH = 4  # 8x8 = 64 patches
MM_TOKENS_PER_IMAGE = 16  # 4x4 after the projector's 2x2 average pool
IMAGE_SEQ_LEN = MM_TOKENS_PER_IMAGE
# The pan_and_scan case's processor arguments (the released processors leave pan-and-scan off).
PAN_AND_SCAN = {"do_pan_and_scan": True, "pan_and_scan_min_crop_size": 8, "pan_and_scan_max_num_crops": 4,
                "pan_and_scan_min_ratio_to_activate": 1.2}
SLIDING_WINDOW = 24  # > 16 image rows; every prompt below is longer than this
# Init scales (see build_model). With tied embeddings and the input embedding multiplied by sqrt(hidden) = 8,
# a large embedding dominates the residual stream and every position predicts its own token; a small one
# plus flat attention makes every position predict the same token. These values give greedy runs that
# differ between prompts and move between tokens, with the top-2 gap of every greedy step > 0.5% of the
# largest prompt logit (asserted in main; so a float32 implementation cannot flip a step).
EMBED_STD = 0.08  # token embeddings (and, tied, the LM head)
PROJ_SCALE = 1.0  # mm_input_projection_weight ~ PROJ_SCALE * N(0, 1/vision_hidden)
QK_NORM_MEAN = 1.5  # q_norm / k_norm weights ~ 1.5 + 0.3 N(0,1), i.e. (1 + w) ~ 2.5: sharper attention
NORM_STD = 0.45  # other Gemma RMSNorm weights ~ 0.45 N(0,1), i.e. (1 + w) ~ 1 +- 0.45
FINAL_NORM_SCALE = 6.0  # final norm's (1 + w) multiplied by this: logits x6 (argmax unchanged)
LAYER_TYPES = ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]

# Gemma 3's chat template, simplified (no system-prompt folding, no role checks)
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<start_of_turn>"
    "{{ 'model' if message['role'] == 'assistant' else message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for item in message['content'] %}{% if item['type'] == 'image' %}<start_of_image>"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)

BASE_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>"]  # ids 0,1,2,3 like the real Gemma 3 tokenizer
# Added tokens (real ids: <start_of_turn>=105, <end_of_turn>=106, <start_of_image>=255999,
#  <end_of_image>=256000, <image_soft_token>=262144)
ADDED = ["<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>", "<image_soft_token>"]
BPE_VOCAB = 400  # 4 specials + 256 bytes + 140 merges (incl. "\n\n")

CORPUS = [
    "What is this? Describe the image in detail.",
    "user\nWhat do you see in this picture?\nmodel\nI see a gradient and a checkerboard.",
    "The quick brown fox jumps over the lazy dog.",
    "A red square, a green square and a blue square on a white background.",
    "This image shows colors that change smoothly from left to right and from top to bottom.",
    "\n\n",
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
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        model_max_length=1024,
        # what Gemma3Processor reads: tokenizer.boi_token / eoi_token / image_token (+ _id)
        extra_special_tokens={
            "boi_token": "<start_of_image>",
            "eoi_token": "<end_of_image>",
            "image_token": "<image_soft_token>",
        },
    )
    return fast


# ----------------------------------------------------------------------------- images
# The gradient and checkerboard of make_idefics3_golden.make_images, and a real baseline JPEG copied from
# tests/golden/qwen3vl_tiny.
PHOTO = "photo_52x36.jpg"


# ----------------------------------------------------------------------------- model
def build_model(vocab_size, n_tokens, ids):
    text_config = dict(
        model_type="gemma3_text",
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        hidden_activation="gelu_pytorch_tanh",
        query_pre_attn_scalar=24,
        sliding_window=SLIDING_WINDOW,
        layer_types=LAYER_TYPES,
        # real Gemma 3 4B: rope_theta 1e6 + linear factor 8 on global layers, rope_local_base_freq 1e4
        rope_parameters={
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
        },
        rms_norm_eps=1e-6,
        final_logit_softcapping=None,
        attn_logit_softcapping=None,
        max_position_embeddings=256,
        attention_bias=False,
        tie_word_embeddings=True,
        bos_token_id=ids["<bos>"],
        eos_token_id=ids["<eos>"],
        pad_token_id=ids["<pad>"],
    )
    vision_config = dict(
        model_type="siglip_vision_model",
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_channels=3,
        image_size=IMAGE_SIZE,
        patch_size=PATCH,
        hidden_act="gelu_pytorch_tanh",
        layer_norm_eps=1e-6,
        vision_use_head=False,
    )
    config = Gemma3Config(
        vision_config=vision_config,
        text_config=text_config,
        mm_tokens_per_image=MM_TOKENS_PER_IMAGE,
        boi_token_index=ids["<start_of_image>"],
        eoi_token_index=ids["<end_of_image>"],
        image_token_index=ids["<image_soft_token>"],
        tie_word_embeddings=True,
    )
    torch.manual_seed(SEED)
    model = Gemma3ForConditionalGeneration(config).float().eval()
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm

    gemma_norms = {f"{mn}.weight" for mn, mod in model.named_modules() if isinstance(mod, Gemma3RMSNorm)}
    # Deterministic, deliberately "large" init so that every op matters in the goldens.
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name in gemma_norms and ("q_norm" in name or "k_norm" in name):
                v = QK_NORM_MEAN + 0.3 * torch.randn(p.shape, generator=g)  # sharper attention
            elif name in gemma_norms:  # Gemma RMSNorm scales by (1 + w): keep 1 + w around 1
                v = NORM_STD * torch.randn(p.shape, generator=g)
            elif p.ndim == 1 and "norm" in name:  # SigLIP LayerNorm weights
                v = 1.0 + 0.1 * torch.randn(p.shape, generator=g)
            elif p.ndim == 1:  # biases
                v = 0.1 * torch.randn(p.shape, generator=g)
            elif "position_embedding" in name:
                v = 0.5 * torch.randn(p.shape, generator=g)
            elif "embed_tokens" in name:
                v = EMBED_STD * torch.randn(p.shape, generator=g)
            elif name.endswith("mm_input_projection_weight"):  # (vision_hidden, text_hidden), x @ W
                v = PROJ_SCALE * torch.randn(p.shape, generator=g) / math.sqrt(p.shape[0])
            else:
                fan_in = int(np.prod(p.shape[1:]))
                v = torch.randn(p.shape, generator=g) / math.sqrt(fan_in)
            if name == "model.language_model.norm.weight":
                v = FINAL_NORM_SCALE * (1.0 + v) - 1.0
            if "embed_tokens" in name:
                v[n_tokens:] = 0.0  # rows past the tokenizer (vocab padded to a multiple of 8) stay unused
            p.copy_(v.to(p.dtype))
    return model


# ----------------------------------------------------------------------------- float64 patches
def patch_true_float64(enable):
    """Keep float64 inside Gemma RMSNorm / RoPE / eager softmax (stock code computes them in float32)."""
    from transformers.models.gemma3 import modeling_gemma3 as mg
    from transformers.models.siglip import modeling_siglip as ms

    if not hasattr(patch_true_float64, "orig"):
        patch_true_float64.orig = (
            mg.Gemma3RMSNorm.forward,
            mg.Gemma3RotaryEmbedding.forward,
            mg.eager_attention_forward,
            ms.eager_attention_forward,
        )
    if not enable:
        (mg.Gemma3RMSNorm.forward, mg.Gemma3RotaryEmbedding.forward, mg.eager_attention_forward,
         ms.eager_attention_forward) = patch_true_float64.orig
        return

    def rms_forward(self, h):
        var = h.pow(2).mean(-1, keepdim=True)
        return (h * torch.rsqrt(var + self.eps)) * (1.0 + self.weight)

    def rope_forward(self, x, position_ids, layer_type):
        cfg = self.config
        rp = cfg.rope_parameters[layer_type]
        base = rp["rope_theta"]
        dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
        if rp["rope_type"] == "linear":
            inv_freq = inv_freq / rp["factor"]
        else:
            assert rp["rope_type"] == "default", rp
        scaling = getattr(self, f"{layer_type}_attention_scaling")
        assert scaling == 1.0
        freqs = position_ids[..., None].to(torch.float64) * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    def make_eager(orig_repeat):
        def eager(module, query, key, value, attention_mask, scaling=None, dropout=0.0, softcap=None, **kw):
            assert softcap is None
            if scaling is None:
                scaling = module.head_dim**-0.5
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

    mg.Gemma3RMSNorm.forward = rms_forward
    mg.Gemma3RotaryEmbedding.forward = rope_forward
    mg.eager_attention_forward = make_eager(mg.repeat_kv)
    ms.eager_attention_forward = make_eager(None)


# ----------------------------------------------------------------------------- helpers
@torch.no_grad()
def run_case(model, processor, images, text_prompt, with_causal=False, proc_kwargs=None):
    inputs = processor(images=images, text=text_prompt, return_tensors="pt", **(proc_kwargs or {}))
    pv = inputs["pixel_values"]
    input_ids = inputs["input_ids"]
    tti = inputs["token_type_ids"]
    image_token_id = model.config.image_token_id
    assert torch.equal(tti, (input_ids == image_token_id).long())
    m = model.model
    img = m.get_image_features(pv.to(torch.float64), return_dict=True)
    vision_last = img.last_hidden_state  # (n_images, n_patches, vision_hidden), after post_layernorm
    feats = img.pooler_output.reshape(-1, img.pooler_output.shape[-1])  # (n_images*16, text_hidden)

    # check that exactly these features land in the image-token rows of the language model's input
    seen = {}

    def grab(mod, args, kwargs):
        seen["embeds"] = kwargs["inputs_embeds"].detach().clone()

    h = m.language_model.register_forward_pre_hook(grab, with_kwargs=True)
    out = model(input_ids=input_ids, attention_mask=inputs["attention_mask"], pixel_values=pv,
                token_type_ids=tti, use_cache=False)
    h.remove()
    emb = seen["embeds"][0]
    is_img = input_ids[0] == image_token_id
    assert torch.equal(emb[is_img], feats), "image features are not the scattered rows"
    text_emb = m.language_model.embed_tokens(input_ids[0, ~is_img])
    assert torch.equal(emb[~is_img], text_emb)
    logits = out.logits[0]

    logits_causal = None
    if with_causal:
        oc = model(input_ids=input_ids, attention_mask=inputs["attention_mask"], pixel_values=pv,
                   token_type_ids=None, use_cache=False)
        logits_causal = oc.logits[0]

    # greedy: 8 steps, full recompute each step, no EOS stop, pixel values + token_type_ids every step
    ids = input_ids.clone()
    types = tti.clone()
    greedy, step_top = [], []
    for _ in range(8):
        o = model(input_ids=ids, pixel_values=pv, token_type_ids=types, use_cache=False)
        last = o.logits[0, -1]
        nxt = int(torch.argmax(last))
        top2 = torch.topk(last, 2)
        step_top.append({"token": nxt, "logit": float(top2.values[0]), "runner_up": int(top2.indices[1]),
                         "runner_up_logit": float(top2.values[1])})
        greedy.append(nxt)
        assert nxt != image_token_id, "greedy produced the image token; pick other init scales"
        ids = torch.cat([ids, torch.tensor([[nxt]])], 1)
        types = torch.cat([types, torch.zeros((1, 1), dtype=types.dtype)], 1)
    # cross-check with generate() (KV cache path, pixel values / token_type_ids on the prefill)
    gen = model.generate(**inputs, max_new_tokens=8, do_sample=False, eos_token_id=None,
                         pad_token_id=processor.tokenizer.pad_token_id)
    gen_tokens = gen[0, input_ids.shape[1]:].tolist()
    return dict(inputs=inputs, vision_last=vision_last, feats=feats, logits=logits, logits_causal=logits_causal,
                greedy=greedy, step_top=step_top, gen_tokens=gen_tokens)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scratch", default="/tmp/gemma3vl_golden")
    args = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    ckpt = os.path.join(here, "gemma3vl_tiny")
    gdir = os.path.join(args.scratch, "goldens")
    os.makedirs(ckpt, exist_ok=True)
    os.makedirs(gdir, exist_ok=True)

    # tokenizer / processor
    tokenizer = build_tokenizer()
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in BASE_SPECIALS + ADDED}
    assert [ids[t] for t in BASE_SPECIALS] == [0, 1, 2, 3], ids
    vocab_size = len(tokenizer)
    vocab_size = (vocab_size + 7) // 8 * 8
    assert ids["<image_soft_token>"] < vocab_size
    image_processor = Gemma3ImageProcessorPil(
        size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
        resample=PILImageResampling.BILINEAR,
        do_rescale=True,
        rescale_factor=1 / 255,
        do_normalize=True,
        image_mean=[0.5] * 3,
        image_std=[0.5] * 3,
        do_pan_and_scan=False,
    )
    processor = Gemma3Processor(image_processor=image_processor, tokenizer=tokenizer,
                                image_seq_length=IMAGE_SEQ_LEN, chat_template=CHAT_TEMPLATE)

    model = build_model(vocab_size, len(tokenizer), ids)
    model.save_pretrained(ckpt, safe_serialization=True)
    processor.save_pretrained(ckpt)

    # reload exactly what a consumer would read, then go float64
    processor = Gemma3Processor.from_pretrained(ckpt)
    assert isinstance(processor.image_processor, Gemma3ImageProcessorPil), type(processor.image_processor)
    assert processor.image_seq_length == IMAGE_SEQ_LEN
    assert processor.tokenizer.image_token_id == ids["<image_soft_token>"]
    assert processor.tokenizer.boi_token_id == ids["<start_of_image>"]
    assert processor.tokenizer.eoi_token_id == ids["<end_of_image>"]
    model = Gemma3ForConditionalGeneration.from_pretrained(ckpt, dtype=torch.float32,
                                                           attn_implementation="eager").eval()
    assert model.config.text_config._attn_implementation == "eager"
    assert model.config.vision_config._attn_implementation == "eager"
    assert model.lm_head.weight.data_ptr() == model.model.language_model.embed_tokens.weight.data_ptr()
    model = model.double()

    # images -> PNG -> back (so a C++ PNG decoder sees exactly the same pixels); the JPEG is read as is
    imgs = {}
    for name, arr in make_images().items():
        path = os.path.join(gdir, name + ".png")
        Image.fromarray(arr, "RGB").save(path)
        imgs[name] = Image.open(path).convert("RGB")
        assert np.array_equal(np.asarray(imgs[name]), arr)
    shutil.copy(os.path.join(here, "qwen3vl_tiny", PHOTO), os.path.join(gdir, PHOTO))
    photo_name = os.path.splitext(PHOTO)[0]
    imgs[photo_name] = Image.open(os.path.join(gdir, PHOTO)).convert("RGB")
    files = {"gradient_37x23": "gradient_37x23.png", "checker_16x16": "checker_16x16.png", photo_name: PHOTO}

    question = "What is this? Describe the image in detail."
    messages_one = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
    messages_two = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "and"},
                                                  {"type": "image"}, {"type": "text", "text": question}]}]
    prompt_one = processor.apply_chat_template(messages_one, add_generation_prompt=True)
    prompt_two = processor.apply_chat_template(messages_two, add_generation_prompt=True)

    cases = [
        ("gradient", [imgs["gradient_37x23"]], prompt_one),
        ("photo", [imgs[photo_name]], prompt_one),
        ("two_images", [imgs["gradient_37x23"], imgs["checker_16x16"]], prompt_two),
        # Pan-and-scan (off in the released processors, asked for per call): the 37 x 23 gradient's
        # aspect ratio 1.6 makes 2 crops of 19 x 23 (min crop size lowered from 256 to 8 for the tiny
        # image); the original and each crop are an image of 16 rows, each run attending both ways.
        ("pan_and_scan", [imgs["gradient_37x23"]], prompt_one),
    ]
    with_causal = {"two_images"}
    proc_kwargs = {"pan_and_scan": PAN_AND_SCAN}

    index = {
        "generator": "make_goldens.py",
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__,
                     "numpy": np.__version__, "pillow": Image.__version__, "python": sys.version.split()[0]},
        "checkpoint": "tiny_gemma3vl",
        "seed": SEED,
        "precision": "float32 weights on disk; goldens computed with model.double() and the true-float64 "
                     "patches (Gemma RMSNorm/RoPE/softmax and SigLIP softmax kept in float64). "
                     "'stock_max_abs_diff' compares with unpatched transformers model.double().",
        "special_token_ids": ids,
        "image_token_id": ids["<image_soft_token>"],
        "boi_token_id": ids["<start_of_image>"],
        "eoi_token_id": ids["<end_of_image>"],
        "image_seq_len": IMAGE_SEQ_LEN,
        "sliding_window": SLIDING_WINDOW,
        "layer_types": LAYER_TYPES,
        "vocab_size_model": vocab_size,
        "vocab_size_tokenizer": len(tokenizer),
        "processor": {"size": {"height": IMAGE_SIZE, "width": IMAGE_SIZE},
                      "resample": "BILINEAR (PIL, on uint8)", "rescale_factor": 1 / 255,
                      "image_mean": [0.5] * 3, "image_std": [0.5] * 3, "do_pan_and_scan": False,
                      "backend": "Gemma3ImageProcessorPil",
                      "full_image_sequence": processor.full_image_sequence},
        "chat_template": CHAT_TEMPLATE,
        "images": {k: {"file": files[k], "width": v.size[0], "height": v.size[1],
                       "sha256_rgb": sha256(np.asarray(v))} for k, v in imgs.items()},
        "cases": {},
    }

    # stock (unpatched) run first, for the precision comparison
    patch_true_float64(False)
    stock = {name: run_case(model, processor, ims, prm, name in with_causal, proc_kwargs.get(name))
             for name, ims, prm in cases}
    patch_true_float64(True)

    for name, ims, prm in cases:
        r = run_case(model, processor, ims, prm, name in with_causal, proc_kwargs.get(name))
        inputs = r["inputs"]
        entry = {"images": [k for im in ims for k, v in imgs.items() if v is im], "prompt": prm}
        crops = [0] * len(ims)
        if name in proc_kwargs:
            entry["processor_kwargs"] = proc_kwargs[name]
            crops = [int(n) for n in processor.image_processor(ims, **proc_kwargs[name])["num_crops"]]
            entry["num_crops"] = crops
        # Each <start_of_image> as Gemma3Processor.replace_image_token expands it, image by image.
        seq, expanded, at = processor.full_image_sequence, prm, 0
        for n in crops:
            text = seq if not n else ("Here is the original image " + seq + " and here are some crops to help you "
                                      "see better " + " ".join([seq] * n))
            at = expanded.index(processor.boi_token, at)
            expanded = expanded[:at] + text + expanded[at + len(processor.boi_token):]
            at += len(text)
        entry["expanded_prompt"] = expanded
        input_ids = inputs["input_ids"][0].tolist()
        assert processor.tokenizer(expanded, add_special_tokens=False)["input_ids"] == input_ids
        entry["input_ids"] = input_ids
        entry["token_type_ids"] = inputs["token_type_ids"][0].tolist()
        entry["num_tokens"] = len(input_ids)
        assert len(input_ids) > SLIDING_WINDOW
        entry["image_token_positions_count"] = int(sum(1 for t in input_ids if t == ids["<image_soft_token>"]))
        assert entry["image_token_positions_count"] == IMAGE_SEQ_LEN * (len(ims) + sum(crops))
        save(gdir, f"{name}_pixel_values", inputs["pixel_values"].numpy(), entry)
        save(gdir, f"{name}_vision_last_hidden", r["vision_last"].numpy(), entry)
        save(gdir, f"{name}_image_features", r["feats"].numpy(), entry)
        save(gdir, f"{name}_logits", r["logits"].numpy(), entry)
        if r["logits_causal"] is not None:
            save(gdir, f"{name}_logits_causal", r["logits_causal"].numpy(), entry)
            d = float((r["logits_causal"] - r["logits"]).abs().max())
            entry["causal_vs_bidirectional_max_abs_diff"] = d
            assert d > 1e-3, d
        entry["last_logits_argmax"] = int(r["logits"][-1].argmax())
        entry["greedy_8"] = r["greedy"]
        entry["greedy_8_text"] = processor.tokenizer.decode(r["greedy"])
        entry["greedy_steps"] = r["step_top"]
        entry["generate_8_kvcache"] = r["gen_tokens"]
        entry["generate_matches_full_recompute"] = r["gen_tokens"] == r["greedy"]
        gap = min(st["logit"] - st["runner_up_logit"] for st in r["step_top"])
        entry["greedy_min_top2_gap"] = gap
        assert gap > 0.005 * float(r["logits"].abs().max()), (name, gap)
        s = stock[name]
        entry["stock_max_abs_diff"] = {
            "vision_last_hidden": float((s["vision_last"] - r["vision_last"]).abs().max()),
            "image_features": float((s["feats"] - r["feats"]).abs().max()),
            "logits": float((s["logits"] - r["logits"]).abs().max()),
            "greedy_equal": s["greedy"] == r["greedy"],
        }
        if r["logits_causal"] is not None:
            entry["stock_max_abs_diff"]["logits_causal"] = float((s["logits_causal"] - r["logits_causal"]).abs().max())
        index["cases"][name] = entry
        print(name, "tokens", len(input_ids), "greedy", r["greedy"],
              "gen==greedy", entry["generate_matches_full_recompute"], "stock diff", entry["stock_max_abs_diff"],
              "causal diff", entry.get("causal_vs_bidirectional_max_abs_diff"))

    with open(os.path.join(gdir, "index.json"), "w") as f:
        json.dump(index, f, indent=1)
    print("wrote", gdir)
    pack(ckpt, gdir, index)


# The cases the C++ tests read, packed beside the checkpoint.
PACKED = ["gradient", "photo", "two_images", "pan_and_scan"]


def pack(ckpt, gdir, index):
    from safetensors.numpy import save_file
    tensors, cases = {}, {}
    for name in PACKED:
        e = index["cases"][name]
        parts = ["pixel_values", "vision_last_hidden", "image_features", "logits"]
        if f"{name}_logits_causal" in e:
            parts.append("logits_causal")
        for part in parts:
            tensors[f"{name}.{part}"] = np.ascontiguousarray(
                np.load(os.path.join(gdir, f"{name}_{part}.npy")).astype(np.float32))
        cases[name] = {k: e[k] for k in ["images", "prompt", "expanded_prompt", "input_ids", "token_type_ids",
                                         "greedy_8"]}
        if "causal_vs_bidirectional_max_abs_diff" in e:
            cases[name]["causal_vs_bidirectional_max_abs_diff"] = e["causal_vs_bidirectional_max_abs_diff"]
        for key in ("processor_kwargs", "num_crops"):
            if key in e:
                cases[name][key] = e[key]
    save_file(tensors, os.path.join(ckpt, "golden.safetensors"))
    meta = {k: index[k] for k in ["generator", "versions", "seed", "precision", "special_token_ids",
                                  "image_token_id", "boi_token_id", "eoi_token_id", "image_seq_len",
                                  "sliding_window", "images"]}
    meta["generator"] = "tests/golden/make_gemma3vl_golden.py"
    meta["cases"] = cases
    with open(os.path.join(ckpt, "golden.json"), "w") as f:
        json.dump(meta, f, indent=1)
    for image in index["images"].values():
        shutil.copy(os.path.join(gdir, image["file"]), os.path.join(ckpt, image["file"]))
    for f in os.listdir(ckpt):  # safetensors writes 0600
        os.chmod(os.path.join(ckpt, f), 0o644)
    print("packed", ckpt)


if __name__ == "__main__":
    main()
