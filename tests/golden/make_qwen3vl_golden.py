#!/usr/bin/env python
"""Regenerate the tiny Qwen3-VL (Qwen3VLForConditionalGeneration) checkpoint and its float64 goldens.

Usage (from the repository root, in a venv with torch, transformers 5.x, pillow, tokenizers, numpy, safetensors):
    python tests/golden/make_qwen3vl_golden.py [--scratch DIR]

Writes
  tests/golden/qwen3vl_tiny/         save_pretrained() checkpoint (float32 safetensors) + tokenizer + processor
                                     (processor_config.json from the processor, preprocessor_config.json from the
                                     image processor, chat_template.jinja = Qwen3-VL-Instruct's template), the four
                                     input images, and the goldens the C++ tests read: golden.safetensors (float32
                                     copies of the float64 arrays; ids/positions as int32, pixels as uint8) and
                                     golden.json (ids, prompts, greedy tokens, shapes and a description of every
                                     tensor name)
  DIR/goldens/*.npy, index.json      every array at full precision (float64) with checksums (default DIR
                                     /tmp/qwen3vl_golden; not committed)

Everything is seeded and deterministic (CPU, 1 thread). No network. Torchvision is not needed: the image
processor is transformers' PIL backend (Qwen2VLImageProcessorPil, which Qwen3-VL uses), and the video processor
(which needs torchvision) is left out of the processor.

"True float64" goldens: with model.double(), transformers still computes some steps in float32 (Qwen3VLTextRMSNorm,
the text M-RoPE and vision 2D-RoPE cos/sin tables, apply_rotary_pos_emb_vision, the eager softmax, and the bilinear
position-embedding interpolation weights in vision_utils). patch_true_float64 keeps those in float64. Three
independent checks are recorded in golden.json ("checks"):
  * a TorchDispatchMode audit that no aten op inside the model produces a non-float64 floating tensor in the
    patched run (the only float32 left is integer-valued rope-index arithmetic and generate()'s own float32 copy
    of the next-token logits), and the list of ops that do in the stock model.double(),
  * a from-scratch float64 re-implementation (reference_*() below, written from the Qwen3-VL description,
    reading only the state dict) agrees with the patched model to ~1e-14,
  * the max difference between the patched goldens and the unpatched ("stock") model.double().
Asserted before anything is written: the reloaded processor (AutoTokenizer + AutoImageProcessor + the saved
chat_template.jinja) gives the same pixel_values / grids as the in-memory one and as reference_preprocess() (bit
for bit); generate()'s greedy tokens equal the argmax of a no-cache forward over prompt + generated tokens, whose
get_rope_index positions for the generated tokens are index + rope_deltas; two images in one tower call (cu_seqlens)
equal their single-image runs to 1e-12.

make_qwen35vl_golden.py imports this module: the steps of main() (prepare_dirs, save_and_reload, compute_goldens,
common_checks, write_outputs), build_tokenizer, build_model_from / init_value, text_rope_forward64 and
reference_tower take parameters for what differs there (DeepStack or none, the pre-tokenizer pattern and extra
tokens, the rotary dim, the reference LM, extra golden.json keys), so that the shared logic lives here only.
"""

import argparse
import collections
import contextlib
import hashlib
import json
import math
import os
import shutil
import sys
import traceback
import types

import numpy as np
import torch
from PIL import Image

torch.set_num_threads(1)

from tokenizers import (  # noqa: E402
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

import transformers  # noqa: E402
from transformers import (  # noqa: E402
    AutoImageProcessor,
    AutoTokenizer,
    GenerationConfig,
    PreTrainedTokenizerFast,
    Qwen3VLForConditionalGeneration,
    Qwen3VLProcessor,
)
from transformers import vision_utils  # noqa: E402
from transformers.image_utils import PILImageResampling  # noqa: E402
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil  # noqa: E402
from transformers.models.qwen3_vl import modeling_qwen3_vl as mq  # noqa: E402

SEED = 1234
HERE = os.path.dirname(os.path.abspath(__file__))

# ----------------------------------------------------------------------------- configuration
PATCH = 4
TEMPORAL_PATCH = 2
MERGE = 2
FACTOR = PATCH * MERGE  # 8: resized sides are multiples of this
MIN_PIXELS = FACTOR * FACTOR * 6  # 384   (size["shortest_edge"]; real Qwen3-VL: 65536 = 32*32*64)
MAX_PIXELS = FACTOR * FACTOR * 48  # 3072 (size["longest_edge"];  real Qwen3-VL: 16777216 = 32*32*16384)
VOCAB_MODEL = 400

VISION = dict(
    depth=4,
    hidden_size=32,
    num_heads=2,
    intermediate_size=64,
    hidden_act="gelu_pytorch_tanh",
    in_channels=3,
    patch_size=PATCH,
    temporal_patch_size=TEMPORAL_PATCH,
    spatial_merge_size=MERGE,
    out_hidden_size=64,
    num_position_embeddings=16,  # a 4x4 learned grid, bilinearly resampled to each image's patch grid
    deepstack_visual_indexes=[0, 2],
)
# rope_theta 1e4 (real Qwen3-VL: 5e6) so that, with head_dim 16, more of the rotary frequencies matter.
TEXT = dict(
    vocab_size=VOCAB_MODEL,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    hidden_act="silu",
    max_position_embeddings=2048,
    rms_norm_eps=1e-6,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 2, 2],
                     "mrope_interleaved": True},
    attention_bias=False,
    tie_word_embeddings=False,
)

# Qwen3-VL-Instruct's chat template, byte for byte (Qwen/Qwen3-VL-2B-Instruct, -4B, -8B, -30B-A3B-Instruct ship
# the same one; copied from TRL's chat template file for Qwen3-VL (qwen3_vl.jinja in its chat_templates folder), "Original Qwen3-VL chat template").
# Two runs of it occur twice (a system message's text parts; a user or tool message's text / image / video
# parts), so they are spelled out once; TEMPLATE_SHA256 pins the assembled text.
_SYSTEM_CONTENT = r"""        {%- if messages[0].content is string %}
            {{- messages[0].content }}
        {%- else %}
            {%- for content in messages[0].content %}
                {%- if 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
"""
_MESSAGE_CONTENT = r"""        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content in message.content %}
                {%- if content.type == 'image' or 'image' in content or 'image_url' in content %}
                    {%- set image_count.value = image_count.value + 1 %}
                    {%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}
                    <|vision_start|><|image_pad|><|vision_end|>
                {%- elif content.type == 'video' or 'video' in content %}
                    {%- set video_count.value = video_count.value + 1 %}
                    {%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}
                    <|vision_start|><|video_pad|><|vision_end|>
                {%- elif 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
"""
CHAT_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
""" + _SYSTEM_CONTENT + r"""        {{- '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' }}
""" + _SYSTEM_CONTENT + r"""        {{- '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set image_count = namespace(value=0) %}
{%- set video_count = namespace(value=0) %}
{%- for message in messages %}
    {%- if message.role == "user" %}
        {{- '<|im_start|>' + message.role + '\n' }}
""" + _MESSAGE_CONTENT + r"""        {{- '<|im_end|>\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role + '\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content_item in message.content %}
                {%- if 'text' in content_item %}
                    {{- content_item.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and message.content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
""" + _MESSAGE_CONTENT + r"""        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""
TEMPLATE_SHA256 = "3636d0f0bd6bef02654cdffdc447b79cb2cef8ab02cc75267345946291a489e4"
assert hashlib.sha256(CHAT_TEMPLATE.encode("utf-8")).hexdigest() == TEMPLATE_SHA256

# Qwen's added tokens, in the real tokenizer's relative order (real ids: <|endoftext|>=151643, <|im_start|>=151644,
# <|im_end|>=151645, <|vision_start|>=151652, <|vision_end|>=151653, <|image_pad|>=151655, <|video_pad|>=151656).
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
            "<|video_pad|>"]
BPE_VOCAB = 384  # 256 byte symbols + 128 merges; the 7 added tokens follow (ids 384..390); model rows up to 399
# Qwen2/Qwen3 pre-tokenizer split (tokenizer.json of every Qwen2+ model)
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
              r"\s*[\r\n]+|\s+(?!\S)|\s+")

CORPUS = [
    "You are a helpful assistant.",
    "What is this? Describe the image in detail.",
    "Compare the two pictures and tell me what is different.",
    "The image shows a colour gradient from left to right and a checkerboard pattern.",
    "A red square, a green square and a blue square on a white background.",
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "There are 3 stripes, 12 squares and 100 pixels in the picture.",
    "Describe the colours of a gradient that changes smoothly from top to bottom.",
    "I see a tall narrow image with diagonal stripes and a wide photo of a landscape.",
] * 4


def build_tokenizer(split=QWEN_SPLIT, extra_tokens=()):
    """Byte-level BPE trained on CORPUS (BPE_VOCAB entries) with the pre-tokenizer pattern split, then the SPECIALS as
    special added tokens and extra_tokens as plain (non-special) added tokens."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_VOCAB,
        special_tokens=[],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
        min_frequency=2,
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    assert tok.get_vocab_size() == BPE_VOCAB, tok.get_vocab_size()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        model_max_length=2048,
    )
    if extra_tokens:
        fast.add_tokens([AddedToken(t, special=False, normalized=False) for t in extra_tokens])
    return fast


class _NoVideoQwen3VLProcessor(Qwen3VLProcessor):
    """Qwen3VLProcessor without its video processor (which needs torchvision). Serialises as Qwen3VLProcessor."""

    @classmethod
    def get_attributes(cls):
        return ["image_processor", "tokenizer"]

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        super().__init__(image_processor=image_processor, tokenizer=tokenizer, video_processor=None,
                         chat_template=chat_template, **kwargs)


_NoVideoQwen3VLProcessor.__name__ = "Qwen3VLProcessor"


def build_image_processor():
    return Qwen2VLImageProcessorPil(
        size={"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS},
        patch_size=PATCH,
        temporal_patch_size=TEMPORAL_PATCH,
        merge_size=MERGE,
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
        resample=PILImageResampling.BICUBIC,
    )


# ----------------------------------------------------------------------------- images
def pattern(W, H, cell, phase, diag):
    """RGB uint8 H x W: R = horizontal ramp, G = vertical ramp, B = checkerboard + diagonal stripes."""
    y, x = np.mgrid[0:H, 0:W].astype(np.float64)
    r = np.round(x * 255.0 / max(W - 1, 1))
    g = np.round(y * 255.0 / max(H - 1, 1))
    chk = ((x // cell + y // cell + phase) % 2)
    b = np.round(30.0 + 160.0 * chk + 60.0 * (((x + diag * y) // 3) % 2))
    return np.clip(np.stack([r, g, b], -1), 0, 255).astype(np.uint8)


# name -> (file, array); the JPEG's pixels are what Pillow decodes, stored in golden.safetensors as img.*.rgb
IMAGES = [
    ("gradient_37x23", "png", lambda: pattern(37, 23, 4, 0, 1)),  # plain rounding to 40x24 (no min/max)
    ("wide_100x61", "png", lambda: pattern(100, 61, 7, 1, -1)),  # 6100 px > max_pixels: down to 64x40
    ("tall_9x41", "png", lambda: pattern(9, 41, 3, 0, 2)),  # rounds to 8x40 = 320 < min_pixels: up to 16x48
    ("photo_52x36", "jpg", lambda: pattern(52, 36, 5, 1, 1)),  # JPEG q90; 6.5 and 4.5 round half-even -> 48x32
]


# ----------------------------------------------------------------------------- model
def init_value(name, p, g):
    """Deterministic, deliberately "large" init (so that every op matters in the goldens): parameter name's values."""
    if p.ndim == 1 and name.endswith("weight"):  # RMSNorm / LayerNorm scales
        return 1.0 + 0.1 * torch.randn(p.shape, generator=g)
    if p.ndim == 1:  # biases (vision linears, conv, LayerNorm shifts)
        return 0.1 * torch.randn(p.shape, generator=g)
    if "embed_tokens" in name or "pos_embed" in name:
        return 0.5 * torch.randn(p.shape, generator=g)
    fan_in = int(np.prod(p.shape[1:]))
    v = torch.randn(p.shape, generator=g) / math.sqrt(fan_in)
    return v * 4.0 if name == "lm_head.weight" else v


def build_model_from(model_cls, ids, vision, text, tie_word_embeddings, init=init_value):
    """model_cls (Qwen3-VL-style image-text model) with these vision / text configs and special token ids, in float32,
    seeded, every parameter (in name order, from one generator) set to init(name, param, generator)."""
    text = dict(text, bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
                pad_token_id=ids["<|endoftext|>"])
    config = model_cls.config_class(
        vision_config=dict(vision),
        text_config=text,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=tie_word_embeddings,
    )
    torch.manual_seed(SEED)
    model = model_cls(config).float().eval()
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):  # a tied LM head is not listed
            p.copy_(init(name, p, g).to(p.dtype))
    model.generation_config = GenerationConfig(
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]],
        pad_token_id=ids["<|endoftext|>"],
    )
    return model


def build_model(ids):
    return build_model_from(Qwen3VLForConditionalGeneration, ids, VISION, TEXT, tie_word_embeddings=False)


# ----------------------------------------------------------------------------- float64 patches
def text_rope_forward64(self, x, position_ids):  # stock: inv_freq and angles in float32
    """The text M-RoPE cos/sin table in float64, over the rotary dims (head_dim * partial_rotary_factor, if set)."""
    cfg = self.config
    rp = cfg.rope_parameters
    dim = int(cfg.head_dim * rp.get("partial_rotary_factor", 1.0))
    inv_freq = 1.0 / (rp["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    position_ids = position_ids.expand(3, -1, -1)
    freqs = position_ids[..., None].to(torch.float64) * inv_freq
    cos = self.recomposition_frequencies(freqs.cos() * self.attention_scaling)
    sin = self.recomposition_frequencies(freqs.sin() * self.attention_scaling)
    return cos.to(x.dtype), sin.to(x.dtype)


def patch_true_float64(enable):
    """Keep float64 in the spots where stock transformers computes in float32 even for a float64 model."""
    if not hasattr(patch_true_float64, "orig"):
        patch_true_float64.orig = (
            mq.Qwen3VLTextRMSNorm.forward,
            mq.Qwen3VLTextRotaryEmbedding.forward,
            mq.Qwen3VLVisionRotaryEmbedding.forward,
            mq.apply_rotary_pos_emb_vision,
            mq.eager_attention_forward,
            vision_utils._interpolation_axis_taps_weights,
        )
    if not enable:
        (mq.Qwen3VLTextRMSNorm.forward, mq.Qwen3VLTextRotaryEmbedding.forward,
         mq.Qwen3VLVisionRotaryEmbedding.forward, mq.apply_rotary_pos_emb_vision, mq.eager_attention_forward,
         vision_utils._interpolation_axis_taps_weights) = patch_true_float64.orig
        return

    def rms_forward(self, h):  # stock: h.to(float32) before the variance
        var = h.pow(2).mean(-1, keepdim=True)
        return self.weight * (h * torch.rsqrt(var + self.variance_epsilon))

    def vision_rope_forward(self, x, position_ids):  # stock: float32 table, returned as float32
        cfg = self.config
        dim = cfg.hidden_size // cfg.num_heads
        spatial = dim // 2
        base = cfg.rope_parameters["rope_theta"]
        inv_freq = 1.0 / (base ** (torch.arange(0, spatial, 2, dtype=torch.float64) / spatial))
        freqs = position_ids[..., None].to(torch.float64) * inv_freq
        cos = self.recomposition_frequencies(freqs.cos() * self.attention_scaling)
        sin = self.recomposition_frequencies(freqs.sin() * self.attention_scaling)
        return cos.to(x.dtype), sin.to(x.dtype)

    def apply_rope_vision(q, k, cos, sin):  # stock: q, k, cos, sin .float()
        cos, sin = cos.unsqueeze(-2).to(q.dtype), sin.unsqueeze(-2).to(q.dtype)
        return (q * cos) + (mq.rotate_half(q) * sin), (k * cos) + (mq.rotate_half(k) * sin)

    def eager(module, query, key, value, attention_mask, scaling, dropout=0.0, **kw):  # stock: softmax in float32
        key = mq.repeat_kv(key, module.num_key_value_groups)
        value = mq.repeat_kv(value, module.num_key_value_groups)
        w = torch.matmul(query, key.transpose(2, 3)) * scaling
        if attention_mask is not None:
            w = w + attention_mask
        w = torch.softmax(w, dim=-1)
        return torch.matmul(w, value).transpose(1, 2).contiguous(), w

    def taps64(index, size, side, mode, align_corners, padding="border"):  # stock: index.to(float32)
        assert mode == "bilinear" and align_corners and padding == "border"
        src = index.to(torch.float64) * (side - 1) / torch.clamp(size - 1, min=1).to(torch.float64)
        floor = torch.floor(src)
        offsets = torch.arange(0, 2, device=index.device)
        taps = (floor.long()[:, None] + offsets).clamp(0, side - 1)
        weights = (1 - (src[:, None] - floor[:, None] - offsets).abs()).clamp(min=0)
        return taps, weights

    mq.Qwen3VLTextRMSNorm.forward = rms_forward
    mq.Qwen3VLTextRotaryEmbedding.forward = text_rope_forward64
    mq.Qwen3VLVisionRotaryEmbedding.forward = vision_rope_forward
    mq.apply_rotary_pos_emb_vision = apply_rope_vision
    mq.eager_attention_forward = eager
    vision_utils._interpolation_axis_taps_weights = taps64


# ----------------------------------------------------------------------------- dtype audit
class DtypeAudit(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts aten ops whose output holds a floating tensor that is not float64 (entered around model calls only)."""

    current = None  # the audit that audited() enters, if any

    # float32 that cannot change a float64 result
    HARMLESS = {
        "get_vision_position_ids": "get_rope_index: arange(t) * time_interval(1.0) is float32, integer-valued, "
                                   "then .long()",
        "_sample": "generate(): next-token logits copied to float32 for the logits processors / argmax (outside "
                   "the model; the returned output_logits are these float32 copies)",
        "__call__": "generate(): logits processors on the float32 next-token logits",
    }

    def __init__(self):
        super().__init__()
        self.low = collections.Counter()
        self.harmless = collections.Counter()

    @staticmethod
    def where():
        """Innermost caller outside torch and this class: the transformers function that made the tensor."""
        for fr in reversed(traceback.extract_stack()[:-3]):
            if "/torch/" not in fr.filename:
                return fr.name
        return "?"

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64:
                where = self.where()
                key = f"{func} -> {t.dtype} in {where}"
                if where in self.HARMLESS:
                    self.harmless[key] += 1
                else:
                    self.low[key] += 1
        return out


def audited():
    return DtypeAudit.current if DtypeAudit.current is not None else contextlib.nullcontext()


# ----------------------------------------------------------------------------- independent float64 reference
def reference_preprocess(rgb):
    """Image (H, W, 3) uint8 -> (pixel_values (N, 3*2*P*P) float32, grid (1, gh, gw), resized uint8)."""
    H, W = rgb.shape[:2]
    h = round(H / FACTOR) * FACTOR  # Python round: half to even
    w = round(W / FACTOR) * FACTOR
    if h * w > MAX_PIXELS:
        beta = math.sqrt(H * W / MAX_PIXELS)
        h = max(FACTOR, math.floor(H / beta / FACTOR) * FACTOR)
        w = max(FACTOR, math.floor(W / beta / FACTOR) * FACTOR)
    elif h * w < MIN_PIXELS:
        beta = math.sqrt(MIN_PIXELS / (H * W))
        h = math.ceil(H * beta / FACTOR) * FACTOR
        w = math.ceil(W * beta / FACTOR) * FACTOR
    resized = np.asarray(Image.fromarray(rgb, "RGB").resize((w, h), Image.Resampling.BICUBIC))
    x = (resized.astype(np.float64) * (1 / 255)).astype(np.float32)
    x = (x - np.float32(0.5)) / np.float32(0.5)
    gh, gw = h // PATCH, w // PATCH
    rows = []
    for br in range(gh // MERGE):
        for bc in range(gw // MERGE):
            for ir in range(MERGE):
                for ic in range(MERGE):
                    r, c = br * MERGE + ir, bc * MERGE + ic
                    p = x[r * PATCH:(r + 1) * PATCH, c * PATCH:(c + 1) * PATCH, :].transpose(2, 0, 1)  # (C, P, P)
                    rows.append(np.stack([p] * TEMPORAL_PATCH, 1).reshape(-1))  # (C, T, P, P) flattened
    return np.stack(rows), np.array([[1, gh, gw]]), resized


def _patch_rc(gh, gw):
    """(row, col) of each patch in the processor's order: 2x2 merge blocks in raster order, raster inside a block."""
    rc = []
    for br in range(gh // MERGE):
        for bc in range(gw // MERGE):
            for ir in range(MERGE):
                for ic in range(MERGE):
                    rc.append((br * MERGE + ir, bc * MERGE + ic))
    return rc


def _ln(x, w, b, eps=1e-6):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def _gelu_tanh(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def _gelu_erf(x):
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def _rot_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], -1)


def reference_tower(sd, pv, grids, deepstack_indexes=None):
    """Vision tower from the state dict. pv (N, 96) float64, grids list of (t, gh, gw). Returns dict of tensors.
    deepstack_indexes: the blocks with a DeepStack merger (default VISION's; [] for a tower without DeepStack)."""
    if deepstack_indexes is None:
        deepstack_indexes = VISION["deepstack_visual_indexes"]
    P = "model.visual."
    D = VISION["hidden_size"]
    nh = VISION["num_heads"]
    hd = D // nh
    side = int(round(VISION["num_position_embeddings"] ** 0.5))
    Wp = sd[P + "patch_embed.proj.weight"].reshape(D, -1)
    x = pv @ Wp.T + sd[P + "patch_embed.proj.bias"]
    patch_embed = x.clone()
    # bilinear (align_corners=True) resample of the side x side table to each gh x gw grid, per patch
    pos, rope_pos, seg = [], [], []
    for t, gh, gw in grids:
        for (r, c) in _patch_rc(gh, gw):
            sr = r * (side - 1) / max(gh - 1, 1)
            sc = c * (side - 1) / max(gw - 1, 1)
            r0, c0 = math.floor(sr), math.floor(sc)
            r1, c1 = min(r0 + 1, side - 1), min(c0 + 1, side - 1)
            fr, fc = sr - r0, sc - c0
            tab = sd[P + "pos_embed.weight"]
            pos.append(tab[r0 * side + c0] * ((1 - fr) * (1 - fc)) + tab[r0 * side + c1] * ((1 - fr) * fc)
                       + tab[r1 * side + c0] * (fr * (1 - fc)) + tab[r1 * side + c1] * (fr * fc))
            rope_pos.append((r, c))
        seg.append(gh * gw)
    pos = torch.stack(pos)
    x = x + pos
    # 2D rope: head_dim/4 frequencies; angle layout [row*f (4), col*f (4)] repeated twice = head_dim
    theta = 10000.0
    inv = 1.0 / (theta ** (torch.arange(0, hd // 2, 2, dtype=torch.float64) / (hd // 2)))
    rp = torch.tensor(rope_pos, dtype=torch.float64)
    ang = torch.cat([rp[:, :1] * inv, rp[:, 1:] * inv], -1)
    ang = torch.cat([ang, ang], -1)
    cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
    out = {"patch_embed": patch_embed, "pos_embeds": pos}
    deep = []
    for i in range(VISION["depth"]):
        B = f"{P}blocks.{i}."
        h = _ln(x, sd[B + "norm1.weight"], sd[B + "norm1.bias"])
        qkv = (h @ sd[B + "attn.qkv.weight"].T + sd[B + "attn.qkv.bias"]).reshape(-1, 3, nh, hd)
        q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]
        q = q * cos + _rot_half(q) * sin
        k = k * cos + _rot_half(k) * sin
        att, s = [], 0
        for n in seg:  # attention only inside each image
            qs, ks, vs = q[s:s + n].transpose(0, 1), k[s:s + n].transpose(0, 1), v[s:s + n].transpose(0, 1)
            a = torch.softmax(qs @ ks.transpose(1, 2) / math.sqrt(hd), -1) @ vs
            att.append(a.transpose(0, 1).reshape(n, D))
            s += n
        x = x + torch.cat(att) @ sd[B + "attn.proj.weight"].T + sd[B + "attn.proj.bias"]
        h = _ln(x, sd[B + "norm2.weight"], sd[B + "norm2.bias"])
        h = _gelu_tanh(h @ sd[B + "mlp.linear_fc1.weight"].T + sd[B + "mlp.linear_fc1.bias"])
        x = x + h @ sd[B + "mlp.linear_fc2.weight"].T + sd[B + "mlp.linear_fc2.bias"]
        if i == 0:
            out["block0"] = x.clone()
        if i in deepstack_indexes:
            M = f"{P}deepstack_merger_list.{deepstack_indexes.index(i)}."
            m = _ln(x.reshape(-1, 4 * D), sd[M + "norm.weight"], sd[M + "norm.bias"])  # norm after the 2x2 shuffle
            m = _gelu_erf(m @ sd[M + "linear_fc1.weight"].T + sd[M + "linear_fc1.bias"])
            deep.append(m @ sd[M + "linear_fc2.weight"].T + sd[M + "linear_fc2.bias"])
    out["last_hidden"] = x
    M = P + "merger."
    m = _ln(x, sd[M + "norm.weight"], sd[M + "norm.bias"]).reshape(-1, 4 * D)  # norm before the 2x2 shuffle
    m = _gelu_erf(m @ sd[M + "linear_fc1.weight"].T + sd[M + "linear_fc1.bias"])
    out["merged"] = m @ sd[M + "linear_fc2.weight"].T + sd[M + "linear_fc2.bias"]
    out["deepstack"] = deep
    return out


def reference_rope_index(input_ids, image_token_id, grids):
    """(3, T) M-RoPE positions and rope_delta, for one sequence of ids."""
    pos, cur, i, g = [], 0, 0, iter(grids)
    T = len(input_ids)
    while i < T:
        if input_ids[i] == image_token_id:
            t, gh, gw = next(g)
            lh, lw = gh // MERGE, gw // MERGE
            for r in range(lh):
                for c in range(lw):
                    pos.append((cur, cur + r, cur + c))
            i += t * lh * lw
            cur += max(lh, lw)
        else:
            pos.append((cur, cur, cur))
            cur += 1
            i += 1
    pos = np.array(pos).T
    return pos, int(pos.max()) + 1 - T


def mrope_axis(j, text=TEXT):
    """Which of (t, h, w) drives rotary frequency j under interleaved M-RoPE (0 = t, 1 = h, 2 = w)."""
    sec = text["rope_parameters"]["mrope_section"]
    return 1 if (j % 3 == 1 and j < 3 * sec[1]) else 2 if (j % 3 == 2 and j < 3 * sec[2]) else 0


def reference_lm(sd, input_ids, positions, image_token_id, merged=None, deepstack=None):
    """Text decoder with interleaved M-RoPE and DeepStack. Returns logits (T, V) float64."""
    P = "model.language_model."
    nh, nkv, hd = TEXT["num_attention_heads"], TEXT["num_key_value_heads"], TEXT["head_dim"]
    eps = TEXT["rms_norm_eps"]

    def rms(x, w):
        return w * (x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps))

    ids = torch.tensor(input_ids)
    x = sd[P + "embed_tokens.weight"][ids].clone()
    vis = ids == image_token_id
    if merged is not None:
        x[vis] = merged
    T = len(input_ids)
    # interleaved M-RoPE (mrope_axis): over head_dim/2 = 8 frequencies with mrope_section [4, 2, 2]: T H W T H W T T
    inv = 1.0 / (TEXT["rope_parameters"]["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    axis = [mrope_axis(j) for j in range(hd // 2)]
    p = torch.tensor(positions, dtype=torch.float64)  # (3, T)
    ang = torch.stack([p[axis[j]] * inv[j] for j in range(hd // 2)], -1)
    ang = torch.cat([ang, ang], -1)
    cos, sin = ang.cos()[None], ang.sin()[None]
    mask = torch.triu(torch.full((T, T), float("-inf"), dtype=torch.float64), 1)
    for li in range(TEXT["num_hidden_layers"]):
        L = f"{P}layers.{li}."
        h = rms(x, sd[L + "input_layernorm.weight"])
        q = (h @ sd[L + "self_attn.q_proj.weight"].T).reshape(T, nh, hd).transpose(0, 1)
        k = (h @ sd[L + "self_attn.k_proj.weight"].T).reshape(T, nkv, hd).transpose(0, 1)
        v = (h @ sd[L + "self_attn.v_proj.weight"].T).reshape(T, nkv, hd).transpose(0, 1)
        q = rms(q, sd[L + "self_attn.q_norm.weight"])
        k = rms(k, sd[L + "self_attn.k_norm.weight"])
        q = q * cos + _rot_half(q) * sin
        k = k * cos + _rot_half(k) * sin
        k = k.repeat_interleave(nh // nkv, 0)
        v = v.repeat_interleave(nh // nkv, 0)
        a = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(hd) + mask, -1) @ v
        x = x + a.transpose(0, 1).reshape(T, nh * hd) @ sd[L + "self_attn.o_proj.weight"].T
        h = rms(x, sd[L + "post_attention_layernorm.weight"])
        g = h @ sd[L + "mlp.gate_proj.weight"].T
        u = h @ sd[L + "mlp.up_proj.weight"].T
        x = x + (g * torch.sigmoid(g) * u) @ sd[L + "mlp.down_proj.weight"].T
        if deepstack is not None and li < len(deepstack):
            x[vis] = x[vis] + deepstack[li]  # DeepStack: after decoder layer li, at the image-token rows
    x = rms(x, sd[P + "norm.weight"])
    return x @ sd["lm_head.weight"].T


# ----------------------------------------------------------------------------- helpers
def sha256(a):
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def maxdiff(a, b):
    a = torch.as_tensor(a, dtype=torch.float64)
    b = torch.as_tensor(b, dtype=torch.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    return float((a - b).abs().max()) if a.numel() else 0.0


def npy(t):
    if isinstance(t, torch.Tensor):
        t = t.detach().cpu()
        return t.numpy() if t.dtype != torch.bfloat16 else t.double().numpy()
    return np.asarray(t)


@torch.no_grad()
def run_tower(model, pv, grid):
    """Vision tower on pv (N, 96) with grid (n_img, 3), capturing the intermediates."""
    vis = model.model.visual
    cap = {}
    hooks = [
        vis.patch_embed.register_forward_hook(lambda m, a, o: cap.__setitem__("patch_embed", o.clone())),
        vis.blocks[0].register_forward_pre_hook(lambda m, a, kw: cap.__setitem__(
            "block0_in", (a[0] if a else kw["hidden_states"]).clone()), with_kwargs=True),
        vis.blocks[0].register_forward_hook(lambda m, a, o: cap.__setitem__("block0", o.clone())),
    ]
    pv = pv.to(torch.float64)
    try:
        with audited():
            out = model.model.get_image_features(pv, grid, return_dict=True)
    finally:
        for h in hooks:
            h.remove()
    idx, w = vision_utils.get_vision_interpolation_indices_and_weights(
        grid, num_grid_per_side=vis.num_grid_per_side, mode="bilinear", align_corners=True,
        spatial_merge_size=MERGE)
    pos = (vis.pos_embed(idx) * w[:, :, None]).sum(1)
    assert torch.equal(cap["patch_embed"] + pos.to(cap["patch_embed"].dtype), cap["block0_in"])
    return {
        "patch_embed": cap["patch_embed"],
        "pos_embeds": pos,
        "interp_indices": idx,
        "interp_weights": w,
        "rope_pos": vision_utils.get_vision_position_ids(grid, MERGE),
        "cu_seqlens": vision_utils.get_vision_cu_seqlens(grid),
        "block0": cap["block0"],
        "last_hidden": out.last_hidden_state,
        # a tower without DeepStack (Qwen3.5's) has no deepstack_features (or None): an empty list
        "deepstack": [torch.cat(f, 0) for f in getattr(out, "deepstack_features", None) or []],
        "merged": torch.cat(out.pooler_output, 0),
    }


@torch.no_grad()
def run_case(model, processor, images, messages):
    prompt = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = processor(images=images if images else None, text=[prompt], return_tensors="pt")
    if "pixel_values" in inputs:
        inputs["pixel_values"] = inputs["pixel_values"].to(torch.float64)
    ids = inputs["input_ids"]
    T = ids.shape[1]
    grid = inputs.get("image_grid_thw")
    model.model.rope_deltas = None
    position_ids, deltas = model.model.get_rope_index(ids, inputs["mm_token_type_ids"], image_grid_thw=grid,
                                                      attention_mask=inputs["attention_mask"])
    with audited():
        out = model(**inputs, use_cache=False)
    logits = out.logits[0]
    # greedy via generate() (KV cache; decode positions = cache position + rope_deltas)
    model.model.rope_deltas = None
    gc = GenerationConfig(do_sample=False, max_new_tokens=8, min_new_tokens=0, eos_token_id=None,
                          pad_token_id=processor.tokenizer.pad_token_id, bos_token_id=None, output_logits=True,
                          return_dict_in_generate=True)
    with audited():
        gen = model.generate(**inputs, generation_config=gc)
    greedy = gen.sequences[0, T:].tolist()
    assert len(greedy) == 8, greedy
    gen_logits = torch.cat(gen.logits, 0)  # (8, V)
    # full re-run over prompt + generated tokens, no cache: argmax must reproduce the generated tokens
    model.model.rope_deltas = None
    full_ids = torch.cat([ids, torch.tensor([greedy])], 1)
    full_mm = torch.cat([inputs["mm_token_type_ids"], torch.zeros(1, 8, dtype=inputs["mm_token_type_ids"].dtype)], 1)
    kw = {k: v for k, v in inputs.items() if k in ("pixel_values", "image_grid_thw")}
    with audited():
        full = model(input_ids=full_ids, attention_mask=torch.ones_like(full_ids), mm_token_type_ids=full_mm,
                     use_cache=False, **kw).logits[0]
    full_pos, full_delta = model.model.get_rope_index(full_ids, full_mm, image_grid_thw=grid)
    rerun = full[T - 1:T + 7]
    assert rerun.argmax(-1).tolist() == greedy, (rerun.argmax(-1).tolist(), greedy)
    # decode positions generate() used: token index t >= T sits at t + rope_delta on all three axes
    tail = torch.arange(T, T + 8) + int(deltas[0, 0])
    assert torch.equal(full_pos[:, 0, T:], tail.expand(3, -1)), "decode positions disagree with get_rope_index"
    assert torch.equal(full_pos[:, :, :T], position_ids) and int(full_delta[0, 0]) == int(deltas[0, 0])
    top2 = torch.topk(rerun, 2, -1)
    return dict(prompt=prompt, inputs=inputs, position_ids=position_ids[:, 0], rope_deltas=deltas[0], logits=logits,
                greedy=greedy, gen_logits=gen_logits, rerun_logits=rerun, full_position_ids=full_pos[:, 0],
                margins=[float(v[0] - v[1]) for v in top2.values])


# ----------------------------------------------------------------------------- chat cases
# The chat cases (messages use the Qwen3-VL content-list format)
CASES = [
    ("text_only", [], [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": [{"type": "text", "text": "Describe the colours of a gradient."}]},
    ]),
    ("one_image", ["gradient_37x23"], [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is this?"}]},
    ]),
    ("two_images", ["wide_100x61", "tall_9x41"], [
        {"role": "user", "content": [{"type": "text", "text": "Compare"}, {"type": "image"},
                                     {"type": "text", "text": " and "}, {"type": "image"},
                                     {"type": "text", "text": "."}]},
    ]),
]
PAIR_NAMES = ["wide_100x61", "tall_9x41"]  # run together in one tower call


# ----------------------------------------------------------------------------- the steps of main (shared with
# make_qwen35vl_golden.py, which passes its own model, patches, reference LM, DeepStack layout and golden.json keys)
def prepare_dirs(ckpt_name, default_scratch):
    """Parse --scratch; (re)create tests/golden/<ckpt_name>/ and DIR/goldens/. Returns (ckpt, gdir)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--scratch", default=default_scratch)
    args = ap.parse_args()
    ckpt = os.path.join(HERE, ckpt_name)
    gdir = os.path.join(args.scratch, "goldens")
    if os.path.isdir(ckpt):
        shutil.rmtree(ckpt)
    os.makedirs(ckpt)
    os.makedirs(gdir, exist_ok=True)
    return ckpt, gdir


def save_and_reload(ckpt, tokenizer, ids, build_model, chat_template):
    """Write tokenizer, processor (with chat_template) and build_model(ids) to ckpt, then reload them exactly as a
    consumer would. Returns (processor, proc, model, sd): the in-memory processor, the reloaded one (proc.tokenizer is
    the reloaded tokenizer), the reloaded model (eager attention) in float64, and its float64 state dict."""
    assert len(tokenizer) <= VOCAB_MODEL
    image_processor = build_image_processor()
    processor = _NoVideoQwen3VLProcessor(image_processor=image_processor, tokenizer=tokenizer,
                                         chat_template=chat_template)
    assert processor.image_token_id == ids["<|image_pad|>"]
    model = build_model(ids)
    model.save_pretrained(ckpt, safe_serialization=True)
    processor.save_pretrained(ckpt)  # tokenizer.json, tokenizer_config.json, chat_template.jinja, processor_config.json
    image_processor.save_pretrained(ckpt)  # preprocessor_config.json (what the real Qwen3-VL repos ship)

    # reload exactly what a consumer would read
    tok2 = AutoTokenizer.from_pretrained(ckpt)
    ip2 = AutoImageProcessor.from_pretrained(ckpt)
    assert type(ip2).__name__ == "Qwen2VLImageProcessorPil", type(ip2)
    with open(os.path.join(ckpt, "chat_template.jinja"), encoding="utf-8") as f:
        template2 = f.read()
    assert template2 == chat_template
    proc = _NoVideoQwen3VLProcessor(image_processor=ip2, tokenizer=tok2, chat_template=template2)
    assert {t: tok2.convert_tokens_to_ids(t) for t in ids} == ids
    model = type(model).from_pretrained(ckpt, dtype=torch.float32, attn_implementation="eager").eval()
    assert model.model.visual.config._attn_implementation == "eager"
    assert model.model.language_model.config._attn_implementation == "eager"
    model = model.double()
    sd = {k: v.detach().to(torch.float64) for k, v in model.state_dict().items()}
    return processor, proc, model, sd


def compute_goldens(ckpt, model, processor, proc, patch, same_images_as=None):
    """The IMAGES written to ckpt and decoded, their processor outputs (checked), and the towers and chat cases run
    with the stock model.double() (patch(False)) and the true-float64 one (patch(True)), each under a dtype audit.
    same_images_as: a directory whose image files (where present) must equal the ones written here."""
    r = types.SimpleNamespace()
    # ---- images -> file -> decoded RGB (what a C++ decoder must reproduce)
    r.imgs, r.rgbs, r.files = {}, {}, {}
    for name, ext, make in IMAGES:
        arr = make()
        path = os.path.join(ckpt, f"{name}.{ext}")
        if ext == "png":
            Image.fromarray(arr, "RGB").save(path)
        else:
            Image.fromarray(arr, "RGB").save(path, quality=90)
        im = Image.open(path).convert("RGB")
        if ext == "png":
            assert np.array_equal(np.asarray(im), arr)
        sibling = os.path.join(same_images_as, os.path.basename(path)) if same_images_as else None
        if sibling and os.path.exists(sibling):
            with open(sibling, "rb") as f1, open(path, "rb") as f2:
                assert f1.read() == f2.read(), f"{path} differs from {sibling}"
        r.imgs[name], r.rgbs[name], r.files[name] = im, np.asarray(im).copy(), os.path.basename(path)

    # ---- per image: processor output, checked against the in-memory processor and the numpy reference
    r.per_img = {}
    for name in r.imgs:
        a = proc.image_processor(images=[r.imgs[name]], return_tensors="pt")
        b = processor.image_processor(images=[r.imgs[name]], return_tensors="pt")
        c = proc(images=[r.imgs[name]], text=["<|vision_start|><|image_pad|><|vision_end|>"], return_tensors="pt")
        ref_pv, ref_grid, resized = reference_preprocess(r.rgbs[name])
        for other in (b, c):
            assert torch.equal(a["pixel_values"], other["pixel_values"])
            assert torch.equal(a["image_grid_thw"], other["image_grid_thw"])
        assert a["pixel_values"].dtype == torch.float32
        assert np.array_equal(a["pixel_values"].numpy(), ref_pv), name
        assert np.array_equal(a["image_grid_thw"].numpy(), ref_grid), name
        r.per_img[name] = dict(pixel_values=a["pixel_values"], grid=a["image_grid_thw"], resized=resized)

    def compute_all():
        tow = {n: run_tower(model, r.per_img[n]["pixel_values"], r.per_img[n]["grid"]) for n in r.imgs}
        pv = torch.cat([r.per_img[n]["pixel_values"] for n in PAIR_NAMES])
        grid = torch.cat([r.per_img[n]["grid"] for n in PAIR_NAMES])
        pair = run_tower(model, pv, grid)
        pair["names"] = PAIR_NAMES
        pair["grid"] = grid
        cases = {}
        for cname, cimgs, msgs in CASES:
            cases[cname] = run_case(model, proc, [r.imgs[n] for n in cimgs], msgs)
            cases[cname]["images"] = cimgs
        return tow, pair, cases

    # ---- stock (unpatched) model.double() first, for the precision comparison, with a dtype audit
    patch(False)
    r.audit_stock = DtypeAudit.current = DtypeAudit()
    r.stock_tow, _, r.stock_cases = compute_all()
    patch(True)
    r.audit = DtypeAudit.current = DtypeAudit()
    r.tow, r.pair, r.cases = compute_all()
    DtypeAudit.current = None
    assert not r.audit.low, f"patched model still computes in low precision: {dict(r.audit.low)}"
    return r


def common_checks(r, sd, ids, reference_lm, deepstack_indexes, stock_rerun_logits=False, extra=None):
    """The checks both fixtures record in golden.json["checks"] (then extra's), printed. reference_lm(sd, ids, positions,
    image_token_id, merged, deepstack): the independent LM; stock_rerun_logits: also compare the re-run logits."""
    checks = {}
    tow, pair, cases, imgs, per_img = r.tow, r.pair, r.cases, r.imgs, r.per_img
    nd = len(deepstack_indexes)
    for n in imgs:
        assert len(tow[n]["deepstack"]) == nd, (n, len(tow[n]["deepstack"]))
    # two images in one tower call (cu_seqlens) == each image alone
    d = max([maxdiff(pair["merged"], torch.cat([tow[n]["merged"] for n in pair["names"]]))]
            + [maxdiff(pair["deepstack"][j], torch.cat([tow[n]["deepstack"][j] for n in pair["names"]]))
               for j in range(nd)])
    assert d <= 1e-12, d
    checks["pair_vs_alone_max_abs_diff"] = d
    # independent reference, tower
    ref_d = {}
    for n in imgs:
        rt = reference_tower(sd, per_img[n]["pixel_values"].double(), per_img[n]["grid"].tolist(), deepstack_indexes)
        for k in ["patch_embed", "pos_embeds", "block0", "last_hidden", "merged"]:
            ref_d[f"tower.{n}.{k}"] = maxdiff(rt[k], tow[n][k])
        for j in range(nd):
            ref_d[f"tower.{n}.deepstack.{j}"] = maxdiff(rt["deepstack"][j], tow[n]["deepstack"][j])
    rt = reference_tower(sd, torch.cat([per_img[n]["pixel_values"] for n in pair["names"]]).double(),
                         pair["grid"].tolist(), deepstack_indexes)
    ref_d["tower.pair.merged"] = maxdiff(rt["merged"], pair["merged"])
    # independent reference, language model (+ rope index)
    for cname, c in cases.items():
        ids_list = c["inputs"]["input_ids"][0].tolist()
        grids = c["inputs"]["image_grid_thw"].tolist() if "image_grid_thw" in c["inputs"] else []
        rpos, rdelta = reference_rope_index(ids_list, ids["<|image_pad|>"], grids)
        assert np.array_equal(rpos, c["position_ids"].numpy()) and rdelta == int(c["rope_deltas"][0]), cname
        merged = deep = None
        if c["images"]:
            rt = reference_tower(sd, c["inputs"]["pixel_values"].double(), grids, deepstack_indexes)
            merged, deep = rt["merged"], rt["deepstack"]
        ref_d[f"case.{cname}.logits"] = maxdiff(reference_lm(sd, ids_list, rpos, ids["<|image_pad|>"], merged, deep),
                                                c["logits"])
        full_ids = ids_list + c["greedy"]
        fpos, _ = reference_rope_index(full_ids, ids["<|image_pad|>"], grids)
        assert np.array_equal(fpos, c["full_position_ids"].numpy())
        T = len(ids_list)
        ref_d[f"case.{cname}.gen_logits"] = maxdiff(
            reference_lm(sd, full_ids, fpos, ids["<|image_pad|>"], merged, deep)[T - 1:T + 7], c["rerun_logits"])
    assert max(ref_d.values()) < 1e-10, ref_d
    checks["reference_max_abs_diff"] = ref_d
    # generate() (KV cache, and for Qwen3.5 the conv/recurrent state with the token-by-token delta rule) vs the
    # no-cache re-run; generate() hands back its output_logits as float32 copies, so this agrees to float32 rounding
    checks["generate_kvcache_float32_logits_vs_full_rerun_max_abs_diff"] = {
        cname: maxdiff(c["gen_logits"], c["rerun_logits"]) for cname, c in cases.items()}
    assert max(checks["generate_kvcache_float32_logits_vs_full_rerun_max_abs_diff"].values()) < 1e-4
    # stock vs patched
    sdiff = {}
    for n in imgs:
        for k in ["pos_embeds", "block0", "last_hidden", "merged"]:
            sdiff[f"tower.{n}.{k}"] = maxdiff(r.stock_tow[n][k], tow[n][k])
        for j in range(nd):
            sdiff[f"tower.{n}.deepstack.{j}"] = maxdiff(r.stock_tow[n]["deepstack"][j], tow[n]["deepstack"][j])
    for cname in cases:
        sdiff[f"case.{cname}.logits"] = maxdiff(r.stock_cases[cname]["logits"], cases[cname]["logits"])
        if stock_rerun_logits:
            sdiff[f"case.{cname}.rerun_logits"] = maxdiff(r.stock_cases[cname]["rerun_logits"],
                                                          cases[cname]["rerun_logits"])
        sdiff[f"case.{cname}.greedy_equal"] = r.stock_cases[cname]["greedy"] == cases[cname]["greedy"]
    checks["stock_vs_patched_max_abs_diff"] = sdiff
    checks["dtype_audit"] = {
        "patched_low_precision_ops": dict(r.audit.low),
        "patched_harmless_float32_ops": dict(sorted(r.audit.harmless.items())),
        "harmless_why": DtypeAudit.HARMLESS,
        "stock_low_precision_ops": dict(sorted(r.audit_stock.low.items())),
    }
    checks.update(extra or {})
    print(json.dumps(checks, indent=1))
    return checks


def write_outputs(ckpt, gdir, ids, tokenizer, proc, r, checks, *, generator, precision, text, rotary_dim,
                  deepstack_indexes, extra_meta=None):
    """golden.safetensors + golden.json in ckpt, every array as .npy + index.json in gdir. text: the text config;
    rotary_dim: its rotary dims per head; deepstack_indexes: the tower's DeepStack blocks ([]: no tower.*.deepstack.*
    tensors); extra_meta {key: {new_key: value}}: golden.json keys to add, each group right after key."""
    from safetensors.numpy import save_file

    tensors, desc, index = {}, {}, {}

    def put(name, arr, what, kind="float"):
        a = npy(arr)
        np.save(os.path.join(gdir, name + ".npy"), a)
        index[name] = {"shape": list(a.shape), "dtype": str(a.dtype), "sha256": sha256(a)}
        if kind == "float":
            a = a.astype(np.float32)
        elif kind == "int":
            a = a.astype(np.int32)
        elif kind == "u8":
            a = a.astype(np.uint8)
        tensors[name] = np.ascontiguousarray(a)
        desc[name] = {"shape": list(a.shape), "dtype": str(a.dtype), "what": what}

    per_img, rgbs, tow, pair = r.per_img, r.rgbs, r.tow, r.pair
    images_meta = {}
    for n in r.imgs:
        g = per_img[n]["grid"][0].tolist()
        H, W = rgbs[n].shape[:2]
        rh, rw = per_img[n]["resized"].shape[:2]
        rounded = (round(H / FACTOR) * FACTOR, round(W / FACTOR) * FACTOR)
        branch = ("max_pixels (downscaled)" if rounded[0] * rounded[1] > MAX_PIXELS else
                  "min_pixels (upscaled)" if rounded[0] * rounded[1] < MIN_PIXELS else "rounded to multiples of 8")
        images_meta[n] = {"file": r.files[n], "width": W, "height": H, "sha256_rgb": sha256(rgbs[n]),
                          "resized_height": rh, "resized_width": rw, "smart_resize_branch": branch,
                          "image_grid_thw": g, "num_patches": g[0] * g[1] * g[2],
                          "num_image_tokens": g[0] * g[1] * g[2] // MERGE ** 2}
        put(f"img.{n}.rgb", rgbs[n], "decoded input image, uint8 (H, W, 3) RGB, as Pillow decodes the file", "u8")
        put(f"img.{n}.resized", per_img[n]["resized"],
            "after smart_resize + PIL BICUBIC resize on uint8, (H', W', 3)", "u8")
        put(f"img.{n}.pixel_values", per_img[n]["pixel_values"],
            "processor pixel_values (num_patches, 3*2*4*4): rows in 2x2-merge-block order, each row (C, T, ph, pw) "
            "flattened, the single frame repeated for T=2; values 2*float32(u8/255)-1 (exact float32 copy)")
        put(f"img.{n}.image_grid_thw", per_img[n]["grid"], "(1, 3) = (t=1, grid_h, grid_w) in patches", "int")
        t = tow[n]
        pre = f"tower.{n}."
        put(pre + "patch_embed", t["patch_embed"], "Conv3d patch embedding (num_patches, 32), before pos embeds")
        put(pre + "pos_embeds", t["pos_embeds"],
            "bilinear(align_corners=True)-interpolated learned 4x4 position table, per patch in the same "
            "merge-block order as pixel_values (num_patches, 32); the tower adds it to patch_embed")
        put(pre + "interp_indices", t["interp_indices"],
            "(num_patches, 4) rows of the 16-entry pos table: (r0,c0),(r0,c1),(r1,c0),(r1,c1) as r*4+c", "int")
        put(pre + "interp_weights", t["interp_weights"], "(num_patches, 4) bilinear weights for interp_indices")
        put(pre + "rope_pos", t["rope_pos"], "(num_patches, 2) = (row, col) of each patch, for the 2D vision rope",
            "int")
        put(pre + "block0", t["block0"], "hidden after vision block 0 (num_patches, 32)")
        put(pre + "last_hidden", t["last_hidden"], "hidden after the last vision block (num_patches, 32)")
        for j, li in enumerate(deepstack_indexes):
            put(pre + f"deepstack.{j}", t["deepstack"][j],
                f"deepstack_merger_list[{j}] on the output of vision block {li} (num_patches/4, 64); added to the "
                f"LM hidden at the image rows after decoder layer {j}")
        put(pre + "merged", t["merged"], "merger output = pooler_output = image features (num_patches/4, 64)")
    put("tower.pair.image_grid_thw", pair["grid"], f"grids of {pair['names']} run together in one tower call", "int")
    put("tower.pair.cu_seqlens", pair["cu_seqlens"], "cumulative patch counts (attention segments)", "int")
    put("tower.pair.merged", pair["merged"], "merged features of both images from one call (equal to the alone runs)")
    for j in range(len(deepstack_indexes)):
        put(f"tower.pair.deepstack.{j}", pair["deepstack"][j], f"deepstack {j} of both images from one call")

    cases_meta = {}
    for cname, c in r.cases.items():
        inp = c["inputs"]
        input_ids = inp["input_ids"][0].tolist()
        pre = f"case.{cname}."
        put(pre + "input_ids", inp["input_ids"][0], "prompt token ids after <|image_pad|> expansion (T,)", "int")
        put(pre + "mm_token_type_ids", inp["mm_token_type_ids"][0], "1 at <|image_pad|> rows, else 0 (T,)", "int")
        put(pre + "position_ids", c["position_ids"], "M-RoPE positions (3, T) = (t, h, w) from get_rope_index", "int")
        put(pre + "rope_deltas", c["rope_deltas"], "(1,) max(position)+1-T; decode token at index t gets "
                                                   "position t + rope_deltas on all three axes", "int")
        put(pre + "logits", c["logits"], "logits for every prompt row (T, V)")
        put(pre + "greedy", torch.tensor(c["greedy"]), "8 greedy tokens from generate(do_sample=False)", "int")
        put(pre + "gen_logits", c["rerun_logits"],
            "(8, V) logits that chose each greedy token: rows T-1..T+6 of a no-cache forward over prompt+greedy")
        put(pre + "full_position_ids", c["full_position_ids"], "(3, T+8) M-RoPE positions of prompt+greedy", "int")
        expanded = proc.get_text_with_replacements(
            [c["prompt"]], images_replacements=[proc.replace_image_token(inp, i) for i in range(len(c["images"]))]
        )[0][0] if c["images"] else c["prompt"]
        assert tokenizer(expanded)["input_ids"] == input_ids
        cases_meta[cname] = {
            "images": c["images"],
            "messages": [m for cn, _, m in CASES if cn == cname][0],
            "prompt": c["prompt"],
            "expanded_prompt": expanded,
            "input_ids": input_ids,
            "num_tokens": len(input_ids),
            "image_token_count": sum(1 for t in input_ids if t == ids["<|image_pad|>"]),
            "image_grid_thw": inp["image_grid_thw"].tolist() if "image_grid_thw" in inp else [],
            "rope_deltas": int(c["rope_deltas"][0]),
            "greedy_8": c["greedy"],
            "greedy_8_text": tokenizer.decode(c["greedy"]),
            "greedy_top1_minus_top2": c["margins"],
            "last_logits_argmax": int(c["logits"][-1].argmax()),
        }

    save_file(tensors, os.path.join(ckpt, "golden.safetensors"))
    meta = {
        "generator": generator,
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__, "numpy": np.__version__,
                     "pillow": Image.__version__, "python": sys.version.split()[0]},
        "seed": SEED,
        "precision": precision,
        "special_token_ids": ids,
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
        "eos_token_ids": [ids["<|im_end|>"], ids["<|endoftext|>"]],
        "vocab_size_model": VOCAB_MODEL,
        "vocab_size_tokenizer": len(tokenizer),
        "vision": dict(VISION, deepstack_visual_indexes=list(deepstack_indexes)),
        "text": {k: v for k, v in text.items()},
        "mrope_section": text["rope_parameters"]["mrope_section"],
        "mrope_interleaved": True,
        "mrope_axis_per_frequency": "".join("THW"[mrope_axis(j, text)] for j in range(rotary_dim // 2)),
        "vision_rope_theta": 10000.0,
        "processor": {"class": "Qwen2VLImageProcessorPil (PIL backend)", "min_pixels (size.shortest_edge)": MIN_PIXELS,
                      "max_pixels (size.longest_edge)": MAX_PIXELS, "patch_size": PATCH,
                      "temporal_patch_size": TEMPORAL_PATCH, "merge_size": MERGE, "resample": "BICUBIC (PIL, uint8)",
                      "rescale_factor": 1 / 255, "image_mean": [0.5] * 3, "image_std": [0.5] * 3},
        "images": images_meta,
        "cases": cases_meta,
        "checks": checks,
        "tensors": desc,
    }
    extra_meta = extra_meta or {}
    assert set(extra_meta) <= set(meta), extra_meta.keys()
    meta = dict(kv for key, value in meta.items() for kv in [(key, value), *extra_meta.get(key, {}).items()])
    with open(os.path.join(ckpt, "golden.json"), "w") as f:
        json.dump(meta, f, indent=1)
    with open(os.path.join(gdir, "index.json"), "w") as f:
        json.dump({"arrays": index, **{k: meta[k] for k in ("versions", "seed", "checks")}}, f, indent=1)
    print("wrote", ckpt, "and", gdir)


# ----------------------------------------------------------------------------- main
def main():
    ckpt, gdir = prepare_dirs("qwen3vl_tiny", "/tmp/qwen3vl_golden")

    # ---- tokenizer / processor / model, written as a consumer reads them
    tokenizer = build_tokenizer()
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIALS}
    processor, proc, model, sd = save_and_reload(ckpt, tokenizer, ids, build_model, CHAT_TEMPLATE)

    r = compute_goldens(ckpt, model, processor, proc, patch_true_float64)

    # ---- checks
    # float64 interpolation weights == stock float32 ones up to float32 rounding, same taps
    for n in r.imgs:
        patch_true_float64(False)
        i32, w32 = vision_utils.get_vision_interpolation_indices_and_weights(
            r.per_img[n]["grid"], num_grid_per_side=4, mode="bilinear", align_corners=True, spatial_merge_size=MERGE)
        patch_true_float64(True)
        assert torch.equal(i32, r.tow[n]["interp_indices"]) and maxdiff(w32, r.tow[n]["interp_weights"]) < 1e-6
    deepstack = VISION["deepstack_visual_indexes"]
    checks = common_checks(r, sd, ids, reference_lm, deepstack)

    write_outputs(
        ckpt, gdir, ids, tokenizer, proc, r, checks, generator="tests/golden/make_qwen3vl_golden.py",
        precision="float32 weights on disk; goldens computed with model.double(), attn_implementation='eager', "
                  "and the true-float64 patches (text RMSNorm, text M-RoPE table, vision rope table + "
                  "apply_rotary_pos_emb_vision, eager softmax, pos-embed interpolation weights kept in float64); "
                  "stored in golden.safetensors as float32 (ids/positions int32, pixels uint8). "
                  "checks.stock_vs_patched_max_abs_diff compares with unpatched transformers model.double().",
        text=TEXT, rotary_dim=TEXT["head_dim"], deepstack_indexes=deepstack)


if __name__ == "__main__":
    main()
