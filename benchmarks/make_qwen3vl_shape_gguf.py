#!/usr/bin/env python3
"""Random-weights GGUF files of Qwen3-VL-2B-Instruct at its real shapes, as llama.cpp's converter writes
them (convert_hf_to_gguf.py --outtype f16, and again with --mmproj), for speed tests beside
`llama-server -m TEXT --mmproj MMPROJ`: a text GGUF (arch "qwen3vl") and an mmproj GGUF (arch "clip",
projector "qwen3vl_merger"). Keys, tensor names, shapes, dtypes and transforms are the converter's
(conversion/qwen3vl.py Qwen3VLTextModel / Qwen3VLVisionModel, checked on the tiny fixture
tests/golden/gguf_qwen3vl, which is that converter's output; see its README.md); the values are
seeded random. No Hugging Face checkpoint is
written or read.

    PYTHONPATH=$LLAMA/gguf-py python3 benchmarks/make_qwen3vl_shape_gguf.py OUTDIR [--seed 0]
        [--layers 28] [--vision_layers 24] [--deepstack 5,11,17] [--dry_run]

writes OUTDIR/qwen3vl-2b-shape-random-f16.gguf (3444140096 bytes) and
OUTDIR/mmproj-qwen3vl-2b-shape-random-f16.gguf (819394624 bytes), 4.26 GB in all, in about a minute
plus the disk's write time. With --layers / --vision_layers other than 28 / 24 the names get a
-{L}l-{V}vl suffix (smaller files for load checks: the deepstack layers are then [i * V // 24 for i in
5, 11, 17], so --vision_layers 3 keeps all three, on blocks 0, 1, 2; llama.cpp needs --layers above the
number of deepstack layers, e.g. --layers 4 --vision_layers 3: 1.03 GB + 0.29 GB). --dry_run prints the
exact file sizes and writes nothing. It reads the tiny fixture's tokenizer and chat template from this
repository (paths relative to the script). Needs numpy and gguf-py (llama.cpp's, or pip's gguf >= 0.17).

Shapes (Qwen/Qwen3-VL-2B-Instruct's config.json): text hidden 2048, 28 layers, 16 query heads, 8 KV
heads, head_dim 128, intermediate 6144 (SiLU-gated), vocab 151936, tied embeddings (no output.weight:
llama.cpp reuses token_embd), rms_norm_eps 1e-6, rope theta 5e6, interleaved M-RoPE sections
[24, 20, 20] (written padded to 4: [24, 20, 20, 0]), max_position_embeddings 262144, 3 deepstack
additions. Vision: depth 24, hidden 1024, 16 heads (head 64), intermediate 4096 (GELU-tanh), patch 16,
temporal patch 2, spatial merge 2, out_hidden 2048, 2304 learned positions (a 48x48 grid:
clip.vision.image_size 768 = sqrt(2304) * 16), deepstack_visual_indexes [5, 11, 17], image mean/std
[0.5]*3, LayerNorm eps 1e-6.

Types as the converter's --outtype f16: every matrix (and the two patch kernels) F16; 1-D tensors
(norms, biases) and v.position_embd.weight F32; general.file_type 1 (MOSTLY_F16).

Values: matrices N(0, 0.02) (token_embd too), the patch kernels and position table N(0, 0.02), norm
weights 1 + N(0, 0.02), biases N(0, 0.02). Each tensor has its own generator seeded by (--seed,
crc32(name)), so a tensor's values do not depend on the layer counts. Not a model of anything.

Tokenizer: no real Qwen vocabulary is available offline, so a 151936-entry "gpt2" (byte-level BPE)
vocabulary with pre-tokenizer "qwen2" is built: ids 0-383 and the 128 merges are the tiny fixture's
BPE (tests/golden/gguf_qwen3vl/model.gguf: the 256 byte symbols and 128 merged tokens), ids
384-151642 are filler words "Ġa".."Ġzzzz" (NORMAL: never produced by tokenizing, decoded as " abcd"),
151643-151668 Qwen's 26 added tokens at their real ids (<|endoftext|> 151643, <|im_start|> 151644,
<|im_end|> 151645, ..., <|vision_start|> 151652, <|vision_end|> 151653, <|vision_pad|> 151654,
<|image_pad|> 151655, <|video_pad|> 151656, <tool_call> 151657, ..., <think> 151667, </think> 151668:
the <|...|> ones CONTROL, the others USER_DEFINED, as the converter types them) and "[PAD151669]"..
"[PAD151935]" UNUSED (as the converter pads a 151669-token tokenizer to vocab_size). BOS/PAD 151643,
EOS 151645 (<|im_end|>), add_bos_token false, chat template = Qwen3-VL-Instruct's
(tests/golden/qwen3vl_tiny/chat_template.jinja). Text tokenizes into about one token per 2-3
characters (only 128 merges). So that a greedy or sampled random model never emits text that is not
UTF-8 (llama-server answers 500 when its chat parser meets such output), the rows of token_embd (= the
tied output head) of the tokens whose bytes are not valid UTF-8 on their own (the 128 byte symbols
0x80-0xFF and the few such merges) and of the UNUSED pads are scaled by 0.01: their logits stay near 0
while the maximum over 151936 random logits is several standard deviations above it.

Streamed: tensor infos first, then each tensor generated and written in chunks, peak memory ~0.3 GB.
"""
import argparse
import io
import math
import os
import sys
import time
import zlib

import numpy as np

try:
    import gguf
except ImportError:  # llama.cpp's gguf-py
    sys.path.insert(0, os.path.join(os.environ.get("LLAMA_CPP", "/work/peers/llama.cpp"), "gguf-py"))
    import gguf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY_GGUF = os.path.join(ROOT, "tests/golden/gguf_qwen3vl/model.gguf")
TEMPLATE = os.path.join(ROOT, "tests/golden/qwen3vl_tiny/chat_template.jinja")

# ---- Qwen3-VL-2B-Instruct
N_EMBD, N_LAYER, N_HEAD, N_HEAD_KV, HEAD_DIM, N_FF = 2048, 28, 16, 8, 128, 6144
N_VOCAB, N_CTX, RMS_EPS, ROPE_THETA, MROPE = 151936, 262144, 1e-6, 5000000.0, [24, 20, 20, 0]
V_EMBD, V_LAYER, V_HEAD, V_FF, V_PATCH, V_MERGE, V_POS = 1024, 24, 16, 4096, 16, 2, 2304
DEEPSTACK = [5, 11, 17]
STD = 0.02
ALIGN = 32  # GGUF default alignment
CHUNK = 1 << 23  # values per generated chunk

QWEN_ADDED = [  # Qwen2/Qwen3 added tokens, from id 151643
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
    "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>",
    "</tool_response>", "<think>", "</think>"]
FIRST_ADDED = 151643
TT = gguf.TokenType


def byte_decoder():
    """GPT-2 byte-level alphabet: unicode char -> byte."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def vocabulary():
    r = gguf.GGUFReader(TINY_GGUF)
    f = r.fields
    tiny = f["tokenizer.ggml.tokens"].contents()
    ttypes = f["tokenizer.ggml.token_type"].contents()
    merges = f["tokenizer.ggml.merges"].contents()
    n_bpe = ttypes.index(int(TT.CONTROL))  # 384: the BPE part, before the fixture's own special tokens
    tokens, types = list(tiny[:n_bpe]), [int(TT.NORMAL)] * n_bpe
    seen = set(tokens)
    letters = "abcdefghijklmnopqrstuvwxyz"

    def words():
        for length in range(1, 8):
            for k in range(26 ** length):
                s = ""
                for _ in range(length):
                    s = letters[k % 26] + s
                    k //= 26
                yield "Ġ" + s
    gen = words()
    while len(tokens) < FIRST_ADDED:
        w = next(gen)
        if w not in seen:
            tokens.append(w)
            types.append(int(TT.NORMAL))
            seen.add(w)
    for t in QWEN_ADDED:
        tokens.append(t)
        types.append(int(TT.CONTROL) if t.startswith("<|") else int(TT.USER_DEFINED))
    while len(tokens) < N_VOCAB:
        tokens.append(f"[PAD{len(tokens)}]")
        types.append(int(TT.UNUSED))
    assert len(tokens) == N_VOCAB and len(set(tokens)) == N_VOCAB
    assert tokens.index("<|im_end|>") == 151645 and tokens.index("<|vision_start|>") == 151652
    assert tokens.index("<|vision_end|>") == 151653 and tokens.index("<|image_pad|>") == 151655
    # rows to damp: tokens that decode to bytes that are not UTF-8 by themselves, and the unused pads
    bd = byte_decoder()
    damp = []
    for i, (t, ty) in enumerate(zip(tokens, types)):
        if ty == int(TT.UNUSED):
            damp.append(i)
        elif ty == int(TT.NORMAL):
            try:
                bytes(bd[c] for c in t).decode("utf-8")
            except (UnicodeDecodeError, KeyError):
                damp.append(i)
    return tokens, types, merges, np.array(damp, dtype=np.int64)


class Spec:
    def __init__(self, name, shape, f16, kind):
        self.name, self.shape, self.f16, self.kind = name, tuple(shape), f16, kind  # shape: numpy order
        self.nbytes = int(np.prod(self.shape)) * (2 if f16 else 4)


def text_specs(n_layer):
    d, q, kv = N_EMBD, N_HEAD * HEAD_DIM, N_HEAD_KV * HEAD_DIM
    s = [Spec("token_embd.weight", (N_VOCAB, d), True, "embd")]  # tied: no output.weight
    for i in range(n_layer):
        p = f"blk.{i}."
        s += [Spec(p + "attn_norm.weight", (d,), False, "norm"),
              Spec(p + "ffn_down.weight", (d, N_FF), True, "w"),
              Spec(p + "ffn_gate.weight", (N_FF, d), True, "w"),
              Spec(p + "ffn_up.weight", (N_FF, d), True, "w"),
              Spec(p + "ffn_norm.weight", (d,), False, "norm"),
              Spec(p + "attn_k_norm.weight", (HEAD_DIM,), False, "norm"),
              Spec(p + "attn_k.weight", (kv, d), True, "w"),
              Spec(p + "attn_output.weight", (d, q), True, "w"),
              Spec(p + "attn_q_norm.weight", (HEAD_DIM,), False, "norm"),
              Spec(p + "attn_q.weight", (q, d), True, "w"),
              Spec(p + "attn_v.weight", (kv, d), True, "w")]
    s.append(Spec("output_norm.weight", (d,), False, "norm"))
    return s


def vision_specs(n_layer, deepstack):
    e, m = V_EMBD, V_EMBD * V_MERGE * V_MERGE
    s = []
    for i in range(n_layer):
        p = f"v.blk.{i}."
        s += [Spec(p + "attn_out.bias", (e,), False, "bias"), Spec(p + "attn_out.weight", (e, e), True, "w"),
              Spec(p + "attn_qkv.bias", (3 * e,), False, "bias"), Spec(p + "attn_qkv.weight", (3 * e, e), True, "w"),
              Spec(p + "ffn_up.bias", (V_FF,), False, "bias"), Spec(p + "ffn_up.weight", (V_FF, e), True, "w"),
              Spec(p + "ffn_down.bias", (e,), False, "bias"), Spec(p + "ffn_down.weight", (e, V_FF), True, "w"),
              Spec(p + "ln1.bias", (e,), False, "bias"), Spec(p + "ln1.weight", (e,), False, "norm"),
              Spec(p + "ln2.bias", (e,), False, "bias"), Spec(p + "ln2.weight", (e,), False, "norm")]
    for i in deepstack:
        p = f"v.deepstack.{i}."
        s += [Spec(p + "fc1.bias", (m,), False, "bias"), Spec(p + "fc1.weight", (m, m), True, "w"),
              Spec(p + "fc2.bias", (N_EMBD,), False, "bias"), Spec(p + "fc2.weight", (N_EMBD, m), True, "w"),
              Spec(p + "norm.bias", (m,), False, "bias"), Spec(p + "norm.weight", (m,), False, "norm")]
    s += [Spec("mm.0.bias", (m,), False, "bias"), Spec("mm.0.weight", (m, m), True, "w"),
          Spec("mm.2.bias", (N_EMBD,), False, "bias"), Spec("mm.2.weight", (N_EMBD, m), True, "w"),
          Spec("v.post_ln.bias", (e,), False, "bias"), Spec("v.post_ln.weight", (e,), False, "norm"),
          Spec("v.patch_embd.bias", (e,), False, "bias"),
          Spec("v.patch_embd.weight", (e, 3, V_PATCH, V_PATCH), True, "w"),    # Conv3d kernel [:, :, 0]
          Spec("v.patch_embd.weight.1", (e, 3, V_PATCH, V_PATCH), True, "w"),  # Conv3d kernel [:, :, 1]
          Spec("v.position_embd.weight", (V_POS, e), False, "w")]
    return s


def text_keys(w, n_layer, n_deepstack, vocab):
    tokens, types, merges, _ = vocab
    a = "qwen3vl"
    w.add_type("model")
    w.add_name("Qwen3-VL-2B-Instruct shape, random weights")
    w.add_uint32(f"{a}.block_count", n_layer)
    w.add_uint32(f"{a}.context_length", N_CTX)
    w.add_uint32(f"{a}.embedding_length", N_EMBD)
    w.add_uint32(f"{a}.feed_forward_length", N_FF)
    w.add_uint32(f"{a}.attention.head_count", N_HEAD)
    w.add_uint32(f"{a}.attention.head_count_kv", N_HEAD_KV)
    w.add_array(f"{a}.rope.dimension_sections", MROPE)
    w.add_float32(f"{a}.rope.freq_base", ROPE_THETA)
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", RMS_EPS)
    w.add_uint32(f"{a}.attention.key_length", HEAD_DIM)
    w.add_uint32(f"{a}.attention.value_length", HEAD_DIM)
    w.add_uint32("general.file_type", int(gguf.LlamaFileType.MOSTLY_F16))
    w.add_uint32(f"{a}.n_deepstack_layers", n_deepstack)
    w.add_uint32("general.quantization_version", gguf.GGML_QUANT_VERSION)
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "qwen2")
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.token_type", types)
    w.add_array("tokenizer.ggml.merges", merges)
    w.add_uint32("tokenizer.ggml.eos_token_id", 151645)
    w.add_uint32("tokenizer.ggml.padding_token_id", 151643)
    w.add_uint32("tokenizer.ggml.bos_token_id", 151643)
    w.add_bool("tokenizer.ggml.add_bos_token", False)
    with open(TEMPLATE, encoding="utf-8") as f:
        w.add_string("tokenizer.chat_template", f.read())


def vision_keys(w, n_layer, deepstack):
    w.add_type("mmproj")
    w.add_name("Qwen3-VL-2B-Instruct shape, random weights")
    w.add_uint32("general.file_type", int(gguf.LlamaFileType.MOSTLY_F16))
    w.add_bool("clip.has_vision_encoder", True)
    w.add_uint32("clip.vision.projection_dim", N_EMBD)
    w.add_uint32("clip.vision.image_size", int(math.sqrt(V_POS) * V_PATCH))  # 768
    w.add_uint32("clip.vision.patch_size", V_PATCH)
    w.add_uint32("clip.vision.embedding_length", V_EMBD)
    w.add_uint32("clip.vision.feed_forward_length", V_FF)
    w.add_uint32("clip.vision.block_count", n_layer)
    w.add_uint32("clip.vision.attention.head_count", V_HEAD)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    w.add_string("clip.projector_type", "qwen3vl_merger")
    w.add_bool("clip.use_gelu", True)
    w.add_uint32("clip.vision.spatial_merge_size", V_MERGE)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", RMS_EPS)  # the converter copies text rms_norm_eps
    w.add_array("clip.vision.is_deepstack_layers", [i in deepstack for i in range(n_layer)])
    w.add_uint32("general.quantization_version", gguf.GGML_QUANT_VERSION)


def chunks(spec, seed, damp):
    """Yields the tensor's values (row-major, numpy order) in chunks."""
    rng = np.random.default_rng([seed, zlib.crc32(spec.name.encode())])
    n = int(np.prod(spec.shape))
    row = spec.shape[-1] if len(spec.shape) > 1 else n
    rows_per = max(1, CHUNK // row)
    done = 0
    while done < n:
        k = min(rows_per * row, n - done)
        x = rng.standard_normal(k, dtype=np.float32) * np.float32(STD)
        if spec.kind == "norm":
            x += np.float32(1.0)
        if spec.kind == "embd" and len(damp):
            r0, r1 = done // row, (done + k) // row
            sel = damp[(damp >= r0) & (damp < r1)] - r0
            x.reshape(-1, row)[sel] *= np.float32(0.01)
        yield x.astype(np.float16) if spec.f16 else x
        done += k


def write(path, arch, add_keys, specs, seed, damp, dry_run):
    w = gguf.GGUFWriter(None if dry_run else path, arch=arch)
    add_keys(w)
    for s in specs:
        w.add_tensor_info(s.name, s.shape, np.dtype(np.float16 if s.f16 else np.float32), s.nbytes)
    if dry_run:  # header, KV pairs and tensor infos written to memory; tensor data padded to ALIGN each
        buf = io.BytesIO()
        w.fout, w.state = [buf], gguf.gguf_writer.WriterState.EMPTY
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        pad = lambda n: (n + ALIGN - 1) // ALIGN * ALIGN  # noqa: E731
        size = pad(buf.tell()) + sum(pad(s.nbytes) for s in specs)
        print(f"{path}: {len(specs)} tensors, {sum(int(np.prod(s.shape)) for s in specs) / 1e9:.3f} B params, "
              f"would be {size} bytes ({size / 1e9:.3f} GB)", flush=True)
        return size
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    fout = w.fout[0]
    start, done = time.time(), 0
    for s in specs:  # as GGUFWriter.write_tensor_data, a chunk at a time
        ti = w.tensors[0].pop(s.name)
        assert ti.nbytes == s.nbytes
        w.write_padding(fout, fout.tell())
        n = 0
        for x in chunks(s, seed, damp):
            x.tofile(fout)
            n += x.nbytes
        assert n == s.nbytes, (s.name, n, s.nbytes)
        w.write_padding(fout, s.nbytes)
        done += n
        if s.nbytes > 100e6:
            print(f"  {s.name}: {done / 1e9:.2f} GB, {time.time() - start:.0f} s", flush=True)
    w.state = gguf.gguf_writer.WriterState.WEIGHTS
    w.close()
    size = os.path.getsize(path)
    print(f"wrote {path}: {size} bytes ({size / 1e9:.3f} GB) in {time.time() - start:.0f} s", flush=True)
    return size


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, default=N_LAYER, help="text layers (28)")
    ap.add_argument("--vision_layers", type=int, default=V_LAYER, help="vision blocks (24)")
    ap.add_argument("--deepstack", default=None, help="vision blocks feeding deepstack, e.g. 5,11,17")
    ap.add_argument("--dry_run", action="store_true", help="print the file sizes, write nothing")
    a = ap.parse_args()
    if a.deepstack:
        ds = [int(x) for x in a.deepstack.split(",")]
    else:
        ds = [i * a.vision_layers // V_LAYER for i in DEEPSTACK]
    if len(set(ds)) != len(ds) or ds != sorted(ds) or not all(0 <= i < a.vision_layers for i in ds):
        sys.exit(f"deepstack layers {ds} must be distinct, increasing, below --vision_layers {a.vision_layers}")
    if a.layers <= len(ds):  # llama.cpp adds deepstack k after text layer k, and its last layer keeps only the
        # output rows: with n_layer <= n_deepstack_layers the addition's rows do not match (GGML_ASSERT in ggml_add)
        sys.exit(f"--layers {a.layers} must exceed the number of deepstack layers ({len(ds)}) for llama.cpp")
    full = a.layers == N_LAYER and a.vision_layers == V_LAYER
    tag = "" if full else f"-{a.layers}l-{a.vision_layers}vl"
    if not a.dry_run:
        os.makedirs(a.outdir, exist_ok=True)
    text_path = os.path.join(a.outdir, f"qwen3vl-2b-shape-random-f16{tag}.gguf")
    mm_path = os.path.join(a.outdir, f"mmproj-qwen3vl-2b-shape-random-f16{tag}.gguf")
    vocab = vocabulary()
    print(f"vocabulary: {N_VOCAB} tokens, {len(vocab[2])} merges, {len(vocab[3])} damped output rows; "
          f"deepstack from vision blocks {ds}", flush=True)
    total = 0
    total += write(text_path, "qwen3vl", lambda w: text_keys(w, a.layers, len(ds), vocab), text_specs(a.layers),
                   a.seed, vocab[3], a.dry_run)
    total += write(mm_path, "clip", lambda w: vision_keys(w, a.vision_layers, ds), vision_specs(a.vision_layers, ds),
                   a.seed, np.zeros(0, np.int64), a.dry_run)
    print(f"total {total} bytes ({total / 1e9:.3f} GB)")


if __name__ == "__main__":
    main()
