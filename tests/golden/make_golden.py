#!/usr/bin/env python3
"""Writes the golden fixtures Flover's model and tokenizer tests compare against.

Everything here comes from Hugging Face transformers (the independent
reference): a byte-level BPE vocabulary trained on a small corpus and checked
with GPT2Tokenizer, three tiny random GPT2LMHeadModel checkpoints, their logits
at every prompt position and their 32-step greedy continuations.

Run once after changing it; the outputs are committed (< 1 MB) so tests and CI
never need transformers:
    pip install "transformers==4.35.2" safetensors regex   # torch 1.13 works
    python3 tests/golden/make_golden.py
"""
import collections
import json
import os

import regex
import torch
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel, GPT2Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
PAT = regex.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")

CORPUS = """
The quick brown fox jumps over the lazy dog. It's what they'd said: we're here,
you've seen it, I'm sure they'll agree. Don't stop; the server isn't down.
Flover fuses every in-flight sequence into one forward pass at each token step.
Requests arrive at random times, and the engine reshuffles the KV cache so the
live sequences stay dense. In 2023 the paper reported 11.2x at 20 ms, 10.2x at
100 ms and 6.5x at 500 ms. Numbers: 0 1 2 3 42 1024 50257 3.14159 1e-5 -7.
def forward(self, x):  # x: [T, C]
    return self.ln_f(x) @ self.wte.T
for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }
Café naïve résumé façade — “quotes” and ‘single’ … ellipsis.
Москва, Київ, Ελληνικά, עברית, العربية, हिन्दी, 日本語のテキスト, 中文文本, 한국어.
Emoji: 🙂🚀✨ and symbols ©®™ °C ±√∞ ≠ ≤ ≥.
Tabs\tand\tnewlines\n\nand   several   spaces   here.
"""

TOKENIZER_CASES = [
    "Hello world",
    "Hello  world   ",
    " leading space",
    "It's we're they'll I'M don't 'tis",
    "numbers 123 4567.89 and x2y3",
    "tabs\tand\nnewlines\n\n  indented\n",
    "   ",
    "\n",
    "a",
    "Café naïve — “quotes” ½ Ⅻ ٣",
    "日本語のテキスト 中文 한국어",
    "emoji 🙂🚀 mixed🙂text",
    "The quick brown fox<|endoftext|>jumps over",
    "<|endoftext|>",
    "symbols ©®™ ±√∞ ≠≤≥ !!! ??? ...",
    "code: for (int i = 0; i < n; ++i) { x[i] = y[i]; }",
    "\u00a0nbsp and\u2003em space\u3000ideographic",
    "trailing spaces then text  x",
]


def bytes_to_unicode():
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
          list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def train_bpe(num_merges):
    b2u = bytes_to_unicode()
    words = collections.Counter(PAT.findall(CORPUS))
    splits = {w: [b2u[b] for b in w.encode("utf-8")] for w in words}
    merges = []
    for _ in range(num_merges):
        pairs = collections.Counter()
        for w, count in words.items():
            s = splits[w]
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] += count
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append((a, b))
        for w in words:
            s, out, i = splits[w], [], 0
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            splits[w] = out
    vocab = {}
    for b in range(256):
        vocab[b2u[b]] = len(vocab)
    for a, b in merges:
        if a + b not in vocab:
            vocab[a + b] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    return vocab, merges


def write_tokenizer(dirname):
    vocab, merges = train_bpe(300)
    os.makedirs(dirname, exist_ok=True)
    with open(os.path.join(dirname, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(dirname, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in merges:
            f.write(f"{a} {b}\n")
    return len(vocab)


def tokenizer_cases(dirname):
    tok = GPT2Tokenizer(os.path.join(dirname, "vocab.json"), os.path.join(dirname, "merges.txt"))
    cases = []
    for text in TOKENIZER_CASES:
        ids = tok.encode(text)
        cases.append({"text": text, "ids": ids,
                      "decoded": tok.decode(ids, clean_up_tokenization_spaces=False)})
    # Decoding arbitrary ids, including byte tokens that split UTF-8
    # characters: the text must match errors="replace" exactly.
    g = torch.Generator().manual_seed(7)
    decodes = []
    for n in (1, 2, 3, 5, 8, 13, 40):
        ids = torch.randint(0, len(tok), (n,), generator=g).tolist()
        decodes.append({"ids": ids,
                        "decoded": tok.decode(ids, clean_up_tokenization_spaces=False)})
    with open(os.path.join(dirname, "cases.json"), "w", encoding="utf-8") as f:
        json.dump({"encode": cases, "decode": decodes}, f, ensure_ascii=False)


def make_model(name, cfg, dtype, prefix, tied, tokenizer_dir=None, seed=0):
    torch.manual_seed(seed)
    config = GPT2Config(**cfg, tie_word_embeddings=tied, initializer_range=0.2,
                        bos_token_id=cfg["vocab_size"] - 1, eos_token_id=cfg["vocab_size"] - 1)
    model = GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        # Non-trivial layernorms and biases, so every parameter matters.
        for pname, p in model.named_parameters():
            if pname.endswith("bias") or ".ln_" in pname or "ln_f" in pname:
                p.add_(0.3 * torch.randn_like(p))
        # Round weights to the stored dtype; the reference then computes in
        # float32 with exactly the weights Flover will read.
        for p in model.parameters():
            p.copy_(p.to(dtype).to(torch.float32))

    out_dir = os.path.join(HERE, name)
    os.makedirs(out_dir, exist_ok=True)
    state = model.state_dict() if prefix else model.transformer.state_dict()
    tensors = {}
    for k, v in state.items():
        if k.endswith(".attn.bias") or k.endswith(".attn.masked_bias"):
            continue  # causal-mask buffers, not weights
        if not prefix and k.startswith("lm_head"):
            continue
        tensors[k] = v.detach().to(dtype).contiguous()
    if not tied:
        tensors["lm_head.weight"] = model.lm_head.weight.detach().to(dtype).contiguous()
    elif "lm_head.weight" in tensors:
        del tensors["lm_head.weight"]
    save_file(tensors, os.path.join(out_dir, "model.safetensors"))
    config.to_json_file(os.path.join(out_dir, "config.json"))
    if tokenizer_dir:
        for f in ("vocab.json", "merges.txt"):
            with open(os.path.join(tokenizer_dir, f), "rb") as src, \
                    open(os.path.join(out_dir, f), "wb") as dst:
                dst.write(src.read())

    V, P = cfg["vocab_size"], cfg["n_positions"]
    g = torch.Generator().manual_seed(seed + 1)
    prompts = [torch.randint(0, V, (n,), generator=g).tolist() for n in (1, 7, 20, P - 2)]
    logits = {}
    with torch.no_grad():
        for i, p in enumerate(prompts):
            logits[f"logits.{i}"] = model(torch.tensor([p])).logits[0].contiguous()
        # Greedy, 32 steps, no EOS stop, full recompute each step (no cache).
        greedy_prompt = prompts[1]
        seq = list(greedy_prompt)
        for _ in range(32):
            nxt = int(model(torch.tensor([seq])).logits[0, -1].argmax())
            seq.append(nxt)
    save_file(logits, os.path.join(out_dir, "golden_logits.safetensors"))
    with open(os.path.join(out_dir, "golden.json"), "w") as f:
        json.dump({"prompts": prompts, "greedy_prompt": greedy_prompt,
                   "greedy_output": seq[len(greedy_prompt):],
                   "stored_dtype": str(dtype).replace("torch.", "")}, f)


def main():
    tok_dir = os.path.join(HERE, "tokenizer")
    vocab_size = write_tokenizer(tok_dir)
    tokenizer_cases(tok_dir)
    # Head counts that are not powers of two; vocab sizes not multiples of 8.
    make_model("tiny_f32", dict(n_layer=2, n_head=3, n_embd=36, n_positions=40,
                                vocab_size=vocab_size),
               torch.float32, prefix=False, tied=True, tokenizer_dir=tok_dir, seed=1)
    make_model("tiny_f16_prefix", dict(n_layer=3, n_head=5, n_embd=40, n_positions=48,
                                       vocab_size=301),
               torch.float16, prefix=True, tied=False, seed=2)
    make_model("tiny_bf16_prefix", dict(n_layer=1, n_head=6, n_embd=24, n_positions=44,
                                        vocab_size=211),
               torch.bfloat16, prefix=True, tied=True, seed=3)


if __name__ == "__main__":
    main()
