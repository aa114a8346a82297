#!/usr/bin/env python3
"""A random-weights GGUF of Google's Gemma 4 E2B text model at its real shapes, for load and speed
tests (llama-bench, llama-cli, Flover's benchmarks). Keys, tensor names and shapes are what
llama.cpp's converter (conversion/gemma.py Gemma4Model) writes for arch "gemma4" (mirrors the fixture
tests/golden/gguf_gemma4/model.gguf), with E2B's shapes (tests/golden/gemma4_reference_notes.md §8–9);
the values are random.

    PYTHONPATH=$LLAMA/gguf-py python3 benchmarks/make_gemma4_e2b_gguf.py \
        [--seed 0] --out gemma4-e2b-random-q8_0.gguf

Needs numpy and gguf-py only.

Shapes: hidden 1536, 35 layers [S,S,S,S,F] x 7 (full at 4, 9, ..., 34), 8 query heads, head_dim 256
on sliding / 512 on full layers, 1 KV head everywhere, V has its own projection (attention_k_eq_v
false), sliding window 512, FFN 6144 on layers 0-14 and 12288 on 15-34 (use_double_wide_mlp),
layers 15-34 share K/V (shared_kv_layers 20: no attn_k / attn_v / attn_k_norm there), per-layer
input embeddings of 256 (per_layer_token_embd [262144 x 35*256]), vocabulary 262144, tied head,
final logit soft-cap 30, rope theta 1e6 (full) / 1e4 (sliding), rope_freqs [256] = 1.0 x 64, 1e30 x 192
(proportional rope: 64 of 256 pairs rotate), rms eps 1e-6, context 131072.

Types: every 2-D tensor Q8_0 (quantized with gguf.quants, bit-exact with ggml's reference
quantizer), 1-D tensors (norms, layer_output_scale, rope_freqs) F32; general.file_type 7 (MOSTLY_Q8_0).

Values: matrices normal with std 0.02 (token_embd and per_layer_token_embd too); norm weights
1 + N(0, 0.05); layer_output_scale uniform [0.9, 1.1]. Every block is RMS-normed before and after,
so activations stay O(1)-O(10) and logits O(1). Not a model of anything: greedy output is noise.

Tokenizer: SentencePiece-style "llama" vocabulary (what llama.cpp's SPM tokenizer accepts; the
real E2B GGUF says "gemma4", a BPE variant both read), 262144 tokens:
0 <pad>, 1 <eos>, 2 <bos>, 3 <unk>, 4 <mask>, 5-104 <unused0..99>, 105 <|turn>, 106 <turn|>
(CONTROL; llama.cpp treats <turn|> as end of generation, as for the real model), 107-362 the byte
tokens <0x00>..<0xFF> (BYTE, for byte fallback), then "▁", the printable ASCII characters, "▁"+letter,
the 676 lowercase letter pairs and "▁"+pair, and placeholders "<ph_ID>" up to 262143 (NORMAL, score
-rank). BOS 2, EOS 1, PAD 0, UNK 3, add_bos true, add_space_prefix false (as Gemma), a minimal
Gemma-4-style chat template.

Streamed: tensor infos first, then each tensor generated, quantized and written in chunks of at most
CHUNK_ELEMS values, so the peak memory stays well under 1 GB. Deterministic for a given --seed.
"""
import argparse
import os
import sys
import time

import numpy as np

import gguf  # llama.cpp's gguf-py (PYTHONPATH)
from gguf import GGMLQuantizationType as T
from gguf.quants import quantize, quant_shape_to_byte_shape

# E2B text config
N_EMBD = 1536
N_LAYER = 35
N_HEAD = 8
N_HEAD_KV = 1
HEAD_DIM_SWA = 256
HEAD_DIM_FULL = 512
N_FF = 6144
N_KV_SHARED = 20
N_PLE = 256  # hidden_size_per_layer_input
N_VOCAB = 262144
N_CTX = 131072
SWA = 512
ROPE_THETA, ROPE_THETA_SWA = 1e6, 1e4
PARTIAL_ROTARY_FULL = 0.25
SOFTCAP = 30.0
RMS_EPS = 1e-6
IS_SWA = [(i + 1) % 5 != 0 for i in range(N_LAYER)]  # [S,S,S,S,F] x 7
FIRST_SHARED = N_LAYER - N_KV_SHARED  # 15
N_FF_ARR = [N_FF if i < FIRST_SHARED else 2 * N_FF for i in range(N_LAYER)]

W_STD = 0.02
NORM_STD = 0.05
CHUNK_ELEMS = 8 << 20  # values generated per chunk (32 MiB of f32)

CHAT_TEMPLATE = (
    "{{ bos_token }}{%- for message in messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "<|turn>{{ role }}\n{{ message['content'] | trim }}<turn|>\n{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|turn>model\n{%- endif -%}")


def vocabulary():
    TT = gguf.TokenType
    toks = [("<pad>", TT.CONTROL), ("<eos>", TT.CONTROL), ("<bos>", TT.CONTROL), ("<unk>", TT.UNKNOWN),
            ("<mask>", TT.CONTROL)]
    toks += [(f"<unused{i}>", TT.CONTROL) for i in range(100)]
    toks += [("<|turn>", TT.CONTROL), ("<turn|>", TT.CONTROL)]
    assert len(toks) == 107
    toks += [(f"<0x{b:02X}>", TT.BYTE) for b in range(256)]
    n_special = len(toks)
    sp = "\u2581"
    letters = "abcdefghijklmnopqrstuvwxyz"
    normal = [sp] + [chr(c) for c in range(0x21, 0x7F)]
    normal += [sp + c for c in letters + letters.upper()]
    pairs = [a + b for a in letters for b in letters]
    normal += pairs + [sp + p for p in pairs]
    toks += [(t, TT.NORMAL) for t in normal]
    toks += [(f"<ph_{i}>", TT.NORMAL) for i in range(len(toks), N_VOCAB)]
    assert len(toks) == N_VOCAB
    tokens = [t for t, _ in toks]
    assert len(set(tokens)) == N_VOCAB
    types = [int(k) for _, k in toks]
    scores = [0.0] * n_special + [-float(i) for i in range(N_VOCAB - n_special)]
    return tokens, scores, types


class Tensor:
    """name, ggml type, numpy-order shape, fill(rng) -> iterator of f32 chunks (flattened, row-aligned)."""

    def __init__(self, name, qtype, shape, fill):
        self.name, self.qtype, self.shape, self.fill = name, qtype, tuple(int(s) for s in shape), fill
        if qtype == T.F32:
            self.nbytes = int(np.prod(self.shape)) * 4
            self.byte_shape = self.shape
        else:
            self.byte_shape = quant_shape_to_byte_shape(self.shape, qtype)
            self.nbytes = int(np.prod(self.byte_shape))


def normal_chunks(rng, shape, std, mean=0.0):
    ncol = shape[-1]
    nrow = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
    rows_per = max(1, CHUNK_ELEMS // ncol)
    for r in range(0, nrow, rows_per):
        k = min(rows_per, nrow - r)
        x = rng.standard_normal((k, ncol), dtype=np.float32)
        x *= np.float32(std)
        if mean:
            x += np.float32(mean)
        yield x


def tensors():
    out = []

    def mat(name, shape):  # numpy order: (rows, cols) = (ne1, ne0)
        out.append(Tensor(name, T.Q8_0, shape, lambda rng, s=shape: normal_chunks(rng, s, W_STD)))

    def norm(name, n):
        out.append(Tensor(name, T.F32, (n,), lambda rng, n=n: normal_chunks(rng, (n,), NORM_STD, 1.0)))

    def const(name, values):
        v = np.asarray(values, np.float32)
        out.append(Tensor(name, T.F32, v.shape, lambda rng, v=v: iter([v])))

    n_rot = int(HEAD_DIM_FULL * PARTIAL_ROTARY_FULL / 2)
    const("rope_freqs.weight", [1.0] * n_rot + [1e30] * (HEAD_DIM_FULL // 2 - n_rot))
    mat("token_embd.weight", (N_VOCAB, N_EMBD))
    mat("per_layer_token_embd.weight", (N_VOCAB, N_LAYER * N_PLE))
    for i in range(N_LAYER):
        b = f"blk.{i}."
        d = HEAD_DIM_SWA if IS_SWA[i] else HEAD_DIM_FULL
        ff = N_FF_ARR[i]
        owns_kv = i < FIRST_SHARED
        # the converter's order: the checkpoint's sorted HF names within a layer
        norm(b + "attn_norm.weight", N_EMBD)                      # input_layernorm
        out.append(Tensor(b + "layer_output_scale.weight", T.F32, (1,),  # layer_scalar
                          lambda rng: iter([rng.uniform(0.9, 1.1, 1).astype(np.float32)])))
        mat(b + "ffn_down.weight", (N_EMBD, ff))                  # mlp.down_proj
        mat(b + "ffn_gate.weight", (ff, N_EMBD))                  # mlp.gate_proj
        mat(b + "ffn_up.weight", (ff, N_EMBD))                    # mlp.up_proj
        mat(b + "inp_gate.weight", (N_PLE, N_EMBD))               # per_layer_input_gate
        mat(b + "proj.weight", (N_EMBD, N_PLE))                   # per_layer_projection
        norm(b + "post_attention_norm.weight", N_EMBD)            # post_attention_layernorm
        norm(b + "post_ffw_norm.weight", N_EMBD)                  # post_feedforward_layernorm
        norm(b + "post_norm.weight", N_EMBD)                      # post_per_layer_input_norm
        norm(b + "ffn_norm.weight", N_EMBD)                       # pre_feedforward_layernorm
        if owns_kv:
            norm(b + "attn_k_norm.weight", d)                     # self_attn.k_norm
            mat(b + "attn_k.weight", (N_HEAD_KV * d, N_EMBD))     # self_attn.k_proj
        mat(b + "attn_output.weight", (N_EMBD, N_HEAD * d))       # self_attn.o_proj
        norm(b + "attn_q_norm.weight", d)                         # self_attn.q_norm
        mat(b + "attn_q.weight", (N_HEAD * d, N_EMBD))            # self_attn.q_proj
        if owns_kv:
            mat(b + "attn_v.weight", (N_HEAD_KV * d, N_EMBD))     # self_attn.v_proj
    norm("output_norm.weight", N_EMBD)
    mat("per_layer_model_proj.weight", (N_LAYER * N_PLE, N_EMBD))
    norm("per_layer_proj_norm.weight", N_PLE)
    return out


def add_keys(w):
    w.add_type(gguf.GGUFType.MODEL)
    # TextModel / Gemma3Model / Gemma4Model.set_gguf_parameters, in the fixture's order
    w.add_block_count(N_LAYER)
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_feed_forward_length(N_FF_ARR)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)  # scalar: E2B's num_global_key_value_heads is null
    w.add_rope_freq_base(ROPE_THETA)
    w.add_rope_freq_base_swa(ROPE_THETA_SWA)
    w.add_layer_norm_rms_eps(RMS_EPS)
    w.add_key_length(HEAD_DIM_FULL)
    w.add_value_length(HEAD_DIM_FULL)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_final_logit_softcapping(SOFTCAP)
    w.add_sliding_window(SWA)
    w.add_shared_kv_layers(N_KV_SHARED)
    w.add_embedding_length_per_layer_input(N_PLE)
    w.add_sliding_window_pattern(IS_SWA)
    w.add_key_length_swa(HEAD_DIM_SWA)
    w.add_value_length_swa(HEAD_DIM_SWA)
    w.add_rope_dimension_count(HEAD_DIM_FULL)
    w.add_rope_dimension_count_swa(HEAD_DIM_SWA)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    tokens, scores, types = vocabulary()
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(False)
    w.add_chat_template(CHAT_TEMPLATE)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="gemma4-e2b-random-q8_0.gguf")
    a = ap.parse_args()
    out = a.out
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    ts = tensors()
    total = sum(t.nbytes for t in ts)
    n_params = sum(int(np.prod(t.shape)) for t in ts)
    print(f"{out}: {len(ts)} tensors, {n_params / 1e9:.3f} B params, {total / 1e9:.2f} GB of tensor data",
          flush=True)

    w = gguf.GGUFWriter(out, arch="gemma4")
    add_keys(w)
    for t in ts:
        if t.qtype == T.F32:
            w.add_tensor_info(t.name, t.shape, np.dtype(np.float32), t.nbytes)
        else:
            w.add_tensor_info(t.name, t.byte_shape, np.dtype(np.uint8), t.nbytes, raw_dtype=t.qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    fout = w.fout[0]
    rng = np.random.default_rng(a.seed)
    start, done = time.time(), 0
    for t in ts:  # as GGUFWriter.write_tensor_data, a chunk at a time
        ti = w.tensors[0].pop(t.name)
        assert ti.nbytes == t.nbytes
        w.write_padding(fout, fout.tell())
        n = 0
        for x in t.fill(rng):
            y = x.astype(np.float32, copy=False) if t.qtype == T.F32 else quantize(x, t.qtype)
            y.tofile(fout)
            n += y.nbytes
        if n != t.nbytes:
            sys.exit(f"{t.name}: wrote {n} bytes, expected {t.nbytes}")
        w.write_padding(fout, t.nbytes)
        done += n
        if t.nbytes > 200e6 or t.name.endswith("attn_q.weight") and t.name.startswith(("blk.14.", "blk.34.")):
            print(f"  {t.name}: {done / 1e9:.2f} / {total / 1e9:.2f} GB, {time.time() - start:.0f} s", flush=True)
    w.state = gguf.gguf_writer.WriterState.WEIGHTS
    w.close()
    print(f"wrote {out}: {os.path.getsize(out)} bytes ({os.path.getsize(out) / 1e9:.3f} GB) "
          f"in {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
