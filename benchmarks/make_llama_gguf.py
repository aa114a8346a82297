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
ARCH=olmoe and qwen3 take their own shapes, the peers of builtin:olmoe-1b
and qwen3-0.6b: OLMoE-1B-7B's (16 layers, 2048 wide, 16 heads of 128, 64
experts of width 1024 with 8 per token, a router ffn_gate_inp, Q and K
norms over all heads, vocabulary 50304, untied) and Qwen3-0.6B's (28
layers, 1024 wide, 16 heads of 128 over 8 KV heads, MLP 3072, per-head Q
and K norms, rope base 1e6, vocabulary 151936, tied).

Not part of the build: it needs numpy and llama.cpp's gguf-py (see
../shared/peers/README.md for building llama.cpp outside the repository):

    PERF_DIR=/tmp/perf [ARCH=gemma2] python3 benchmarks/make_llama_gguf.py f32 bf16

As llama.cpp's converter does, 1-D tensors (norms) and a mixture's router
(ffn_gate_inp) stay F32 and the others take the file's type. The q/k row permutation the converter applies to real
checkpoints is irrelevant for random weights. Tensors are generated and
written one at a time, so memory stays near the largest tensor (OLMoE's
merged experts, 0.5 GB as F32; its BF16 file is 14 GB, an F32 one would be
28 GB).
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.expandvars("${PERF_DIR}/llama.cpp/gguf-py"))
import gguf  # noqa: E402
from gguf.constants import GGMLQuantizationType as QT, LlamaFileType as FT  # noqa: E402

OUT = os.path.expandvars("${PERF_DIR}/models")
ARCH = os.environ.get("ARCH", "llama")
# Layers, width, heads, KV heads, head size, MLP (an expert's, with experts),
# vocabulary, context, rope base, RMS eps, experts, experts per token; size.
SHAPES = {
    "olmoe": (16, 2048, 16, 16, 128, 1024, 50304, 4096, 1e4, 1e-5, 64, 8, "1b7b"),
    "qwen3": (28, 1024, 16, 8, 128, 3072, 151936, 4096, 1e6, 1e-6, 0, 0, "0.6b"),
}
(N_LAYER, N_EMBD, N_HEAD, N_HEAD_KV, HEAD_DIM, N_FF, N_VOCAB, N_CTX, ROPE_BASE, RMS_EPS,
 N_EXPERT, N_EXPERT_USED, SIZE) = SHAPES.get(
    ARCH, (22, 2048, 32, 4, 64, 5632, 32000, 2048, 1e4, 1e-5, 0, 0, "1b"))


def vocab(n_vocab=N_VOCAB):
    """A synthetic SentencePiece-style vocabulary of n_vocab pieces (also
    make_hybrid_gguf.py's): <unk>, <s>, </s>, the 256 byte tokens, then
    distinct ASCII pieces, half with the word marker; (tokens, scores, types)."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * 256
    letters = "abcdefghijklmnopqrstuvwxyz"
    i = 0
    while len(tokens) < n_vocab:
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
    scores = [0.0] * 3 + [0.0] * 256 + [-float(k) for k in range(n_vocab - 259)]
    return tokens, scores, types


def layout():
    """(name, numpy shape, is a norm) of each tensor, in the file's order."""
    q, kv = N_HEAD * HEAD_DIM, N_HEAD_KV * HEAD_DIM
    yield "token_embd.weight", (N_VOCAB, N_EMBD), False
    for i in range(N_LAYER):
        p = f"blk.{i}."
        yield p + "attn_norm.weight", (N_EMBD,), True
        if ARCH == "phi3":  # q, k, v rows in one tensor; gate and up in one
            yield p + "attn_qkv.weight", (q + 2 * kv, N_EMBD), False
        else:
            yield p + "attn_q.weight", (q, N_EMBD), False
            yield p + "attn_k.weight", (kv, N_EMBD), False
            yield p + "attn_v.weight", (kv, N_EMBD), False
        if ARCH == "qwen2":
            yield p + "attn_q.bias", (q,), False
            yield p + "attn_k.bias", (kv,), False
            yield p + "attn_v.bias", (kv,), False
        yield p + "attn_output.weight", (N_EMBD, q), False
        if ARCH == "olmoe":  # one norm over all of Q, one over all of K
            yield p + "attn_q_norm.weight", (q,), True
            yield p + "attn_k_norm.weight", (kv,), True
        if ARCH == "qwen3":  # one per head, shared by the heads
            yield p + "attn_q_norm.weight", (HEAD_DIM,), True
            yield p + "attn_k_norm.weight", (HEAD_DIM,), True
        if ARCH == "gemma2":
            yield p + "post_attention_norm.weight", (N_EMBD,), True
        yield p + "ffn_norm.weight", (N_EMBD,), True
        if N_EXPERT:  # the router, then the experts merged, [expert, out, in]
            yield p + "ffn_gate_inp.weight", (N_EXPERT, N_EMBD), False
            yield p + "ffn_gate_exps.weight", (N_EXPERT, N_FF, N_EMBD), False
            yield p + "ffn_up_exps.weight", (N_EXPERT, N_FF, N_EMBD), False
            yield p + "ffn_down_exps.weight", (N_EXPERT, N_EMBD, N_FF), False
        elif ARCH == "phi3":
            yield p + "ffn_up.weight", (2 * N_FF, N_EMBD), False
        else:
            yield p + "ffn_gate.weight", (N_FF, N_EMBD), False
            yield p + "ffn_up.weight", (N_FF, N_EMBD), False
        if not N_EXPERT:
            yield p + "ffn_down.weight", (N_EMBD, N_FF), False
        if ARCH == "gemma2":
            yield p + "post_ffw_norm.weight", (N_EMBD,), True
    yield "output_norm.weight", (N_EMBD,), True
    if ARCH in ("llama", "phi3", "olmoe"):  # Qwen2, Qwen3 and Gemma 2 are tied here
        yield "output.weight", (N_VOCAB, N_EMBD), False


def tensors(seed=0):
    rng = np.random.default_rng(seed)
    for name, shape, norm in layout():
        if norm:
            yield name, np.ones(shape, np.float32)
        else:
            yield name, (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)


def add_vocab(w, n_vocab=N_VOCAB):
    """vocab(n_vocab) as the file's tokenizer: SentencePiece ("llama"), <unk>
    0, <s> 1, </s> 2 (also make_hybrid_gguf.py's)."""
    tokens, scores, types = vocab(n_vocab)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)


def bf16(t):
    """t as BF16 bytes, a block of rows at a time (the rounding is 8 bytes an element)."""
    rows = t.reshape(-1, t.shape[-1])
    q = np.empty((rows.shape[0], 2 * rows.shape[1]), np.uint8)
    step = max(1, (1 << 24) // rows.shape[1])
    for r in range(0, rows.shape[0], step):
        q[r:r + step] = gguf.quants.quantize(rows[r:r + step], QT.BF16)
    return q


def write(kind):
    path = os.path.join(OUT, f"{ARCH}-{SIZE}-random-{kind}.gguf")
    w = gguf.GGUFWriter(path, ARCH)
    # No family in the name: llama.cpp looks up Phi-3's chat tokens when its
    # name says phi3, and this vocabulary has none.
    w.add_name(f"random-{SIZE}-{kind}")
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_feed_forward_length(N_FF)
    w.add_block_count(N_LAYER)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_rope_freq_base(ROPE_BASE)
    w.add_layer_norm_rms_eps(RMS_EPS)
    w.add_vocab_size(N_VOCAB)
    if ARCH in ("gemma2", "olmoe", "qwen3"):
        w.add_key_length(HEAD_DIM)
        w.add_value_length(HEAD_DIM)
    if N_EXPERT:
        w.add_expert_count(N_EXPERT)
        w.add_expert_used_count(N_EXPERT_USED)
    if ARCH == "gemma2":
        w.add_attn_logit_softcapping(50.0)
        w.add_final_logit_softcapping(30.0)
        w.add_sliding_window(4096)
    w.add_file_type({"f32": FT.ALL_F32, "bf16": FT.MOSTLY_BF16}[kind])
    add_vocab(w)
    # Every tensor's info first, then the data tensor by tensor.
    f32 = lambda name, shape: kind == "f32" or len(shape) == 1 or name.endswith("ffn_gate_inp.weight")  # noqa: E731
    for name, shape, _ in layout():
        n = int(np.prod(shape))
        if f32(name, shape):
            w.add_tensor_info(name, shape, np.dtype(np.float32), 4 * n)
        else:
            w.add_tensor_info(name, shape, np.dtype(np.uint16), 2 * n, raw_dtype=QT.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, t in tensors():
        w.write_tensor_data(t if f32(name, t.shape) else bf16(t))
    w.close()
    print(path, os.path.getsize(path) / 1e6, "MB")


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    for kind in sys.argv[1:] or ["f32", "bf16"]:
        write(kind)
