#!/usr/bin/env python
"""Build a SmolVLM2-256M-shaped Idefics3 checkpoint with random seeded weights (bf16),
for benchmarks/vision_serving.py: SigLIP 768 wide, 12 layers, 512-px tiles of 16-px
patches, pixel shuffle by 4; a Llama 576 wide, 30 layers, 9 heads (3 KV); SmolLM2's
tokenizer (read from its GGUF) with SmolVLM2's image tokens at their ids.
Usage (a venv with torch, transformers 5.x, gguf, tokenizers, pillow):
  python benchmarks/make_smolvlm2_shape.py OUTDIR [SMOLLM2.gguf] [LONGEST_EDGE]
LONGEST_EDGE (default 512: one 512-px tile an image, no splitting); past 512 the
processor splits (1024: 4 tiles and a global one for any image)."""
import json, os, sys
import torch, gguf
from tokenizers import Tokenizer, AddedToken, models, pre_tokenizers, decoders, processors
from transformers import (Idefics3Config, Idefics3ForConditionalGeneration, Idefics3Processor,
                          PreTrainedTokenizerFast)
from transformers.image_utils import PILImageResampling
from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

torch.set_num_threads(1)
OUT = sys.argv[1]
os.makedirs(OUT, exist_ok=True)
SEED = 4321
GGUF = sys.argv[2] if len(sys.argv) > 2 else "models/SmolLM2-135M-Instruct.Q4_1.gguf"

# SmolVLM2's chat template (transformers' DEFAULT_CHAT_TEMPLATE), as the
# test fixture written by tests/golden/make_idefics3_golden.py keeps it.
with open("tests/golden/idefics3_tiny/chat_template.jinja") as f:
    CHAT_TEMPLATE = f.read()

# ---- tokenizer: SmolLM2 vocab/merges from the GGUF + SmolVLM2 added tokens at the real ids
r = gguf.GGUFReader(GGUF)
f = r.fields
toks = f["tokenizer.ggml.tokens"].contents()
types = f["tokenizer.ggml.token_type"].contents()
merges = f["tokenizer.ggml.merges"].contents()
assert len(toks) == 49152
vocab = {t: i for i, t in enumerate(toks)}
bpe = models.BPE(vocab=vocab, merges=[tuple(m.split(" ", 1)) for m in merges], fuse_unk=False, byte_fallback=False)
tk = Tokenizer(bpe)
tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
tk.post_processor = processors.ByteLevel(trim_offsets=False)
tk.decoder = decoders.ByteLevel()
tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, ty in zip(toks, types) if ty == 3])
ADDED = (["<global-img>"] + [f"<row_{r_}_col_{c}>" for r_ in range(1, 7) for c in range(1, 7)]
         + ["<fake_token_around_image>", "<image>"])
n_res = 49279 - 49152 - len(ADDED)
ADDED += [f"<|reserved_special_token_{i}|>" for i in range(n_res)] + ["<end_of_utterance>"]
tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ADDED])
tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<|im_start|>", eos_token="<end_of_utterance>",
                              pad_token="<|im_end|>", unk_token="<|endoftext|>", model_max_length=8192)
ids = {t: tok.convert_tokens_to_ids(t) for t in ["<global-img>", "<row_1_col_1>", "<row_6_col_6>",
       "<fake_token_around_image>", "<image>", "<end_of_utterance>", "<|im_start|>", "<|im_end|>"]}
print("ids", ids, "len", len(tok))
assert ids["<global-img>"] == 49152 and ids["<image>"] == 49190 and ids["<end_of_utterance>"] == 49279
assert len(tok) == 49280

# ---- processor: one 512x512 tile per image, or split past 512
LONGEST = int(sys.argv[3]) if len(sys.argv) > 3 else 512
ip = Idefics3ImageProcessorPil(size={"longest_edge": LONGEST}, max_image_size={"longest_edge": 512},
                               resample=PILImageResampling.LANCZOS, do_image_splitting=LONGEST > 512)
proc = Idefics3Processor(image_processor=ip, tokenizer=tok, image_seq_len=64, chat_template=CHAT_TEMPLATE)

# ---- model
text_config = dict(model_type="llama", architectures=["VLlama3ForCausalLM"], vocab_size=49280, hidden_size=576,
                   intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                   head_dim=64, hidden_act="silu", max_position_embeddings=8192, rms_norm_eps=1e-5,
                   rope_parameters={"rope_type": "default", "rope_theta": 100000.0}, attention_bias=False,
                   mlp_bias=False, tie_word_embeddings=False, bos_token_id=1, eos_token_id=49279, pad_token_id=2)
vision_config = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                     num_channels=3, image_size=512, patch_size=16, hidden_act="gelu_pytorch_tanh",
                     layer_norm_eps=1e-6)
config = Idefics3Config(vision_config=vision_config, text_config=text_config, scale_factor=4,
                        image_token_id=49190, tie_word_embeddings=False, pad_token_id=2)
torch.manual_seed(SEED)
model = Idefics3ForConditionalGeneration(config).eval()  # HF init: normal(0, 0.02), norms 1, biases 0
g = torch.Generator().manual_seed(SEED)
with torch.no_grad():  # small nonzero biases / norm jitter so nothing is trivially zero
    for name, p in sorted(model.named_parameters()):
        if p.ndim == 1:
            base = 1.0 if "norm" in name else 0.0
            p.copy_(base + 0.02 * torch.randn(p.shape, generator=g))
model = model.to(torch.bfloat16)
model.save_pretrained(OUT, safe_serialization=True)
proc.save_pretrained(OUT)
# make text_config.architectures survive (llama.cpp's converter routes the text GGUF by it)
cp = os.path.join(OUT, "config.json")
cfg = json.load(open(cp))
cfg["text_config"]["architectures"] = ["VLlama3ForCausalLM"]
json.dump(cfg, open(cp, "w"), indent=2)
print(open(cp).read())
print(os.listdir(OUT))
