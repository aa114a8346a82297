#!/usr/bin/env python3
"""A Llama-family GGUF at builtin:llama-1b's shapes (TinyLlama-1.1B: 22
layers, 2048 wide, 32 heads over 4 KV heads, MLP 5632, vocabulary 32000),
seeded random weights (normal, std 0.02; norms 1) and a synthetic
SentencePiece-style vocabulary, as F32 and BF16 files: the peer for
model_benchmark's Llama figures, measured with llama.cpp's llama-bench and
llama-batched-bench. With ARCH=qwen2, phi3 or gemma2 the same shapes in that
family's layout (Qwen2: q/k/v biases, tied; Phi-3: fused attn_qkv and
gate/up; Gemma 2: post-attention and post-MLP norms, soft-caps 50 and 30,
window 4096, tied), the peers of builtin:qwen2-1b, phi3-1b and gemma2-1b.

Not part of the build: it needs numpy and llama.cpp's gguf-py (see
../shared/peers/README.md for building llama.cpp outside the repository):

    PERF_DIR=/tmp/perf [ARCH=gemma2] python3 benchmarks/make_llama_gguf.py f32 bf16

As llama.cpp's converter does, 1-D tensors (norms) stay F32 and 2-D ones take
the file's type. The q/k row permutation the converter applies to real
checkpoints is irrelevant for random weights.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.expandvars("${PERF_DIR}/llama.cpp/gguf-py"))
import gguf  # noqa: E402
from gguf.constants import GGMLQuantizationType as QT, LlamaFileType as FT  # noqa: E402

N_LAYER, N_EMBD, N_HEAD, N_HEAD_KV, N_FF, N_VOCAB, N_CTX = 22, 2048, 32, 4, 5632, 32000, 2048
HEAD_DIM = N_EMBD // N_HEAD
OUT = os.path.expandvars("${PERF_DIR}/models")
ARCH = os.environ.get("ARCH", "llama")


def vocab():
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * 256
    letters = "abcdefghijklmnopqrstuvwxyz"
    i = 0
    while len(tokens) < N_VOCAB:
        # Distinct ASCII pieces, half with the SentencePiece word marker.
        s, n = "", i
        while True:
            s += letters[n % 26]
            n //= 26
            if n == 0:
                break
        tokens.append(("\u2581" if i % 2 == 0 else "") + s)
        types.append(gguf.TokenType.NORMAL)
        i += 1
    scores = [0.0] * 3 + [0.0] * 256 + [-float(k) for k in range(N_VOCAB - 259)]
    return tokens, scores, types


def tensors(seed=0):
    rng = np.random.default_rng(seed)

    def rnd(*shape):
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)

    kv = N_HEAD_KV * HEAD_DIM
    ones = lambda: np.ones(N_EMBD, np.float32)  # noqa: E731
    yield "token_embd.weight", rnd(N_VOCAB, N_EMBD)
    for i in range(N_LAYER):
        p = f"blk.{i}."
        yield p + "attn_norm.weight", ones()
        if ARCH == "phi3":  # q, k, v rows in one tensor; gate and up in one
            yield p + "attn_qkv.weight", rnd(N_EMBD + 2 * kv, N_EMBD)
        else:
            yield p + "attn_q.weight", rnd(N_EMBD, N_EMBD)
            yield p + "attn_k.weight", rnd(kv, N_EMBD)
            yield p + "attn_v.weight", rnd(kv, N_EMBD)
        if ARCH == "qwen2":
            yield p + "attn_q.bias", rnd(N_EMBD)
            yield p + "attn_k.bias", rnd(kv)
            yield p + "attn_v.bias", rnd(kv)
        yield p + "attn_output.weight", rnd(N_EMBD, N_EMBD)
        if ARCH == "gemma2":
            yield p + "post_attention_norm.weight", ones()
        yield p + "ffn_norm.weight", ones()
        if ARCH == "phi3":
            yield p + "ffn_up.weight", rnd(2 * N_FF, N_EMBD)
        else:
            yield p + "ffn_gate.weight", rnd(N_FF, N_EMBD)
            yield p + "ffn_up.weight", rnd(N_FF, N_EMBD)
        yield p + "ffn_down.weight", rnd(N_EMBD, N_FF)
        if ARCH == "gemma2":
            yield p + "post_ffw_norm.weight", ones()
    yield "output_norm.weight", ones()
    if ARCH in ("llama", "phi3"):  # Qwen2 and Gemma 2 are tied here
        yield "output.weight", rnd(N_VOCAB, N_EMBD)


def write(kind):
    path = os.path.join(OUT, f"{ARCH}-1b-random-{kind}.gguf")
    w = gguf.GGUFWriter(path, ARCH)
    # No family in the name: llama.cpp looks up Phi-3's chat tokens when its
    # name says phi3, and this vocabulary has none.
    w.add_name(f"random-1b-{kind}")
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_feed_forward_length(N_FF)
    w.add_block_count(N_LAYER)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(N_VOCAB)
    if ARCH == "gemma2":
        w.add_key_length(HEAD_DIM)
        w.add_value_length(HEAD_DIM)
        w.add_attn_logit_softcapping(50.0)
        w.add_final_logit_softcapping(30.0)
        w.add_sliding_window(4096)
    w.add_file_type({"f32": FT.ALL_F32, "bf16": FT.MOSTLY_BF16}[kind])
    tokens, scores, types = vocab()
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    for name, t in tensors():
        if t.ndim == 1 or kind == "f32":
            w.add_tensor(name, t)
        else:
            q = gguf.quants.quantize(t, QT.BF16)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=QT.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(path, os.path.getsize(path) / 1e6, "MB")


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    for kind in sys.argv[1:] or ["f32", "bf16"]:
        write(kind)
