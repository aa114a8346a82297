#!/usr/bin/env python3
"""A hybrid GGUF at a real model's shapes, seeded random weights and a
synthetic SentencePiece-style vocabulary (make_llama_gguf.py's), laid out as
llama.cpp's converter writes the architecture: the peers of
builtin:qwen3.5-0.8b and builtin:lfm2-1.2b, and a Qwen3.6-35B-A3B cut to a
few layers (no built-in: Flover reads that file itself), measured with
llama.cpp's llama-bench and llama-batched-bench (usually after
llama-quantize ... Q4_K_M).

  ARCH=qwen35 (the default; conversion/qwen.py's Qwen3_5TextModel, with
      --no-mtp): Qwen3.5-0.8B's text model. 24 layers, 1024 wide, every 4th
      attention (full_attention_interval 4), the others gated delta nets.
      Attention: 8 heads of 256 over 2 KV heads, attn_q holding each head's
      Q rows then its output gate's (4096 rows), per-head Q and K norms,
      interleaved multimodal rotary over the first 64 dimensions
      (rope.dimension_sections [11, 11, 10, 0]), base 1e7. Delta net: 16 key
      heads and 16 value heads of 128 (ssm.state_size 128, ssm.group_count
      16, ssm.time_step_rank 16, ssm.inner_size 2048), a 4-tap conv over the
      6144 q/k/v channels (ssm_conv1d), attn_gate, ssm_beta, ssm_alpha,
      ssm_a (= -exp(A_log), no .weight suffix), ssm_dt.bias, ssm_norm,
      ssm_out. MLP 3584, RMS eps 1e-6, vocabulary 248320, tied head (no
      output.weight). With as many value heads as key heads the converter's
      grouped-to-tiled value-head reorder is the identity.
  ARCH=lfm2 (conversion/lfm2.py's LFM2Model): LFM2-1.2B. 16 layers, 2048
      wide, attention at layers 2, 5, 8, 10, 12 and 14 (attention.head_count_kv
      8 there, 0 at the short-convolution layers), 32 heads of 64 with Q and
      K norms, rope base 1e6; conv layers shortconv.in_proj (6144 rows: B, C,
      x), shortconv.conv (3 taps, shortconv.l_cache 3), shortconv.out_proj.
      MLP 8192 (the config's 12288 after the converter's 2/3 adjustment),
      RMS eps 1e-5, vocabulary 65536, tied; the final norm is
      token_embd_norm.
  ARCH=qwen35moe (conversion/qwen.py's Qwen3_5MoeTextModel, with --no-mtp):
      Qwen3.6-35B-A3B's text model (Qwen3.5-35B-A3B's shapes: transformers'
      Qwen3_5MoeTextConfig defaults and the model card) with LAYERS layers
      instead of 40 (default 8: 6 delta nets, attention at 3 and 7), so that
      it fits on a small machine: f16 15.5 GB, Q4_K_M 4.8 GB at 8 layers.
      2048 wide; attention as qwen35's but 16 heads of 256 over 2 KV heads
      (attn_q 8192 rows); delta net 16 key heads and 32 value heads of 128
      (ssm.group_count 16, ssm.time_step_rank 32, ssm.inner_size 4096, the
      conv over 8192 channels); no dense MLP (no feed_forward_length):
      every layer 256 experts of 512 (expert_count 256, expert_used_count
      8, expert_feed_forward_length 512), ffn_gate_inp [256, 2048] (the
      router, F32 as the converter keeps it), ffn_gate_exps / ffn_up_exps
      [256, 512, 2048] (the halves of mlp.experts.gate_up_proj) and
      ffn_down_exps [256, 2048, 512], a shared expert of 512
      (expert_shared_feed_forward_length 512; ffn_gate_shexp, ffn_up_shexp,
      ffn_down_shexp) and its gate ffn_gate_inp_shexp ([1, 2048], F32);
      untied head output.weight (lm_head.weight); rope as qwen35's (base
      1e7, the first 64 of 256 dimensions in sections [11, 11, 10, 0]), RMS
      eps 1e-6, vocabulary 248320. The converter reorders the value heads
      from grouped to tiled (32 on 16 key heads); for i.i.d. random weights
      that is only another draw, so nothing is permuted here.

All take context_length 32768 (the builtins' max_positions and
Qwen3_5MoeTextConfig's default; the released configs say 262144, 128000
and 262144) and no MTP layer (Qwen3.5 and 3.6 ship one; the converter's
default would append it as one more block with nextn_predict_layers 1,
which llama.cpp skips at inference and Flover does not read).

Not part of the build: it needs numpy and llama.cpp's gguf-py (LLAMA_CPP,
default ${PERF_DIR}/llama.cpp; see ../shared/peers/README.md):

    PERF_DIR=/tmp/perf [ARCH=lfm2|qwen35moe] [LAYERS=8] [LLAMA_CPP=...] \\
        python3 benchmarks/make_hybrid_gguf.py f16
    llama-quantize $PERF_DIR/models/qwen35-0.8b-random-f16.gguf \\
        $PERF_DIR/models/qwen35-0.8b-random-q4_k_m.gguf Q4_K_M 2

The files: qwen35-0.8b-random-KIND.gguf, lfm2-1.2b-random-KIND.gguf and
qwen36-35b-a3b-8l-random-KIND.gguf (8l: LAYERS).

Outputs f32, f16 and bf16 (default f16). As llama.cpp's converter does, 1-D
tensors (norms, ssm_a, ssm_dt.bias), the convolution kernels (ssm_conv1d,
shortconv.conv) and the routers (ffn_gate_inp, ffn_gate_inp_shexp) stay F32
and the other matrices take the file's type; keys and tensors follow the
converter's order (tests/golden/make_gguf_hybrid.py, checked byte for byte
against it, writes the same layout for tiny models). Weights: matrices
(the experts and routers too) normal with std 0.02; norms 1 (the Qwens'
zero-centred norms as llama.cpp stores them, 1 + w, with w = 0; ssm_norm is
plain w = 1); A uniform in [1, 8] (ssm_a in [-8, -1]); dt_bias normal with
std 0.1; convolution taps normal with std 0.1. Tensors are generated and
written one at a time, so memory stays near the largest tensor (qwen35's
token_embd, 1 GB as F32; qwen35moe's token_embd and output, 2 GB, and each
layer's ffn_*_exps, 1.1 GB).
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.environ.get("LLAMA_CPP", os.path.expandvars("${PERF_DIR}/llama.cpp")), "gguf-py"))
import gguf  # noqa: E402
from gguf.constants import GGMLQuantizationType as QT, LlamaFileType as FT  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_llama_gguf  # noqa: E402  (its synthetic vocabulary and BF16 writer)

OUT = os.path.expandvars("${PERF_DIR}/models")
ARCH = os.environ.get("ARCH", "qwen35")
if ARCH not in ("qwen35", "lfm2", "qwen35moe"):
    sys.exit(f"ARCH={ARCH}: qwen35, lfm2 or qwen35moe")
if not hasattr(gguf.MODEL_ARCH, "QWEN35MOE"):
    sys.exit("this gguf-py has no qwen35 / qwen35moe: point LLAMA_CPP at a recent llama.cpp")
QWEN = ARCH in ("qwen35", "qwen35moe")  # the Qwen3.5 hybrids (Qwen3NextModel's keys)
MOE = ARCH == "qwen35moe"
# qwen35moe: Qwen3.6-35B-A3B's 40 layers cut to LAYERS (the file name says how many).
MOE_LAYERS = int(os.environ.get("LAYERS", "8"))
if MOE_LAYERS < 1:
    sys.exit(f"LAYERS={MOE_LAYERS}: at least 1")
# Layers, width, heads, KV heads, head size, MLP (None: no dense MLP),
# vocabulary, context, rope base, RMS eps; the file name's stem.
SHAPES = {
    "qwen35": (24, 1024, 8, 2, 256, 3584, 248320, 32768, 1e7, 1e-6, "qwen35-0.8b"),
    "lfm2": (16, 2048, 32, 8, 64, 8192, 65536, 32768, 1e6, 1e-5, "lfm2-1.2b"),
    "qwen35moe": (MOE_LAYERS, 2048, 16, 2, 256, None, 248320, 32768, 1e7, 1e-6,
                  f"qwen36-35b-a3b-{MOE_LAYERS}l"),
}
N_LAYER, N_EMBD, N_HEAD, N_HEAD_KV, HEAD_DIM, N_FF, N_VOCAB, N_CTX, ROPE_BASE, RMS_EPS, STEM = SHAPES[ARCH]
# qwen35, qwen35moe: the delta net (conv taps, key heads, value heads, head
# size), every INTERVAL-th layer attention, a quarter of each attention head
# rotated.
CONV, LIN_K_HEADS, LIN_V_HEADS, LIN_DIM, INTERVAL = 4, 16, 32 if MOE else 16, 128, 4
ROPE_DIM, ROPE_SECTIONS = HEAD_DIM // 4, [11, 11, 10, 0]
# qwen35moe: experts, experts per token, an expert's width, the shared expert's.
N_EXPERT, N_EXPERT_USED, N_FF_EXP, N_FF_SHEXP = 256, 8, 512, 512
# lfm2: the attention layers, the short convolution's taps.
LFM2_ATTENTION, L_CACHE = (2, 5, 8, 10, 12, 14), 3


def is_attention(i):
    if QWEN:
        return (i + 1) % INTERVAL == 0
    return i in LFM2_ATTENTION


def hf_layer(i):
    """(HF name under the layer, GGUF name, numpy shape, kind) of layer i's
    tensors; kind is "matrix", "router" (a matrix kept F32), "norm", "a",
    "dt" or "conv"."""
    q, kv = N_HEAD * HEAD_DIM, N_HEAD_KV * HEAD_DIM
    if QWEN:
        t = [("input_layernorm.weight", "attn_norm.weight", (N_EMBD,), "norm"),
             ("post_attention_layernorm.weight", "post_attention_norm.weight", (N_EMBD,), "norm")]
        if is_attention(i):
            t += [("self_attn.q_proj.weight", "attn_q.weight", (2 * q, N_EMBD), "matrix"),  # Q and gate
                  ("self_attn.k_proj.weight", "attn_k.weight", (kv, N_EMBD), "matrix"),
                  ("self_attn.v_proj.weight", "attn_v.weight", (kv, N_EMBD), "matrix"),
                  ("self_attn.o_proj.weight", "attn_output.weight", (N_EMBD, q), "matrix"),
                  ("self_attn.q_norm.weight", "attn_q_norm.weight", (HEAD_DIM,), "norm"),
                  ("self_attn.k_norm.weight", "attn_k_norm.weight", (HEAD_DIM,), "norm")]
        else:
            key, value = LIN_K_HEADS * LIN_DIM, LIN_V_HEADS * LIN_DIM
            t += [("linear_attn.in_proj_qkv.weight", "attn_qkv.weight", (2 * key + value, N_EMBD), "matrix"),
                  ("linear_attn.in_proj_z.weight", "attn_gate.weight", (value, N_EMBD), "matrix"),
                  ("linear_attn.in_proj_b.weight", "ssm_beta.weight", (LIN_V_HEADS, N_EMBD), "matrix"),
                  ("linear_attn.in_proj_a.weight", "ssm_alpha.weight", (LIN_V_HEADS, N_EMBD), "matrix"),
                  ("linear_attn.A_log", "ssm_a", (LIN_V_HEADS,), "a"),
                  ("linear_attn.dt_bias", "ssm_dt.bias", (LIN_V_HEADS,), "dt"),
                  ("linear_attn.conv1d.weight", "ssm_conv1d.weight", (2 * key + value, CONV), "conv"),
                  ("linear_attn.norm.weight", "ssm_norm.weight", (LIN_DIM,), "norm"),
                  ("linear_attn.out_proj.weight", "ssm_out.weight", (N_EMBD, value), "matrix")]
        if not MOE:
            t += [("mlp.gate_proj.weight", "ffn_gate.weight", (N_FF, N_EMBD), "matrix"),
                  ("mlp.up_proj.weight", "ffn_up.weight", (N_FF, N_EMBD), "matrix"),
                  ("mlp.down_proj.weight", "ffn_down.weight", (N_EMBD, N_FF), "matrix")]
            return t
        # The experts as released, two 3-D tensors; gate_up_proj [E, 2F, C]
        # becomes ffn_gate_exps (its first F rows of each expert) and then
        # ffn_up_exps (the others), both at its place in the order.
        t += [("mlp.experts.down_proj", "ffn_down_exps.weight", (N_EXPERT, N_EMBD, N_FF_EXP), "matrix"),
              ("mlp.experts.gate_up_proj", "ffn_gate_exps.weight", (N_EXPERT, N_FF_EXP, N_EMBD), "matrix"),
              ("mlp.experts.gate_up_proj", "ffn_up_exps.weight", (N_EXPERT, N_FF_EXP, N_EMBD), "matrix"),
              ("mlp.gate.weight", "ffn_gate_inp.weight", (N_EXPERT, N_EMBD), "router"),
              ("mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight", (N_EMBD, N_FF_SHEXP), "matrix"),
              ("mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight", (N_FF_SHEXP, N_EMBD), "matrix"),
              ("mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight", (N_FF_SHEXP, N_EMBD), "matrix"),
              ("mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight", (1, N_EMBD), "router")]
        return t
    t = [("operator_norm.weight", "attn_norm.weight", (N_EMBD,), "norm"),
         ("ffn_norm.weight", "ffn_norm.weight", (N_EMBD,), "norm"),
         ("feed_forward.w1.weight", "ffn_gate.weight", (N_FF, N_EMBD), "matrix"),
         ("feed_forward.w3.weight", "ffn_up.weight", (N_FF, N_EMBD), "matrix"),
         ("feed_forward.w2.weight", "ffn_down.weight", (N_EMBD, N_FF), "matrix")]
    if is_attention(i):
        t += [("self_attn.q_proj.weight", "attn_q.weight", (q, N_EMBD), "matrix"),
              ("self_attn.k_proj.weight", "attn_k.weight", (kv, N_EMBD), "matrix"),
              ("self_attn.v_proj.weight", "attn_v.weight", (kv, N_EMBD), "matrix"),
              ("self_attn.out_proj.weight", "attn_output.weight", (N_EMBD, q), "matrix"),
              ("self_attn.q_layernorm.weight", "attn_q_norm.weight", (HEAD_DIM,), "norm"),
              ("self_attn.k_layernorm.weight", "attn_k_norm.weight", (HEAD_DIM,), "norm")]
    else:  # in_proj's rows: B, C, x
        t += [("conv.in_proj.weight", "shortconv.in_proj.weight", (3 * N_EMBD, N_EMBD), "matrix"),
              ("conv.conv.weight", "shortconv.conv.weight", (N_EMBD, L_CACHE), "conv"),
              ("conv.out_proj.weight", "shortconv.out_proj.weight", (N_EMBD, N_EMBD), "matrix")]
    return t


def layout():
    """(name, numpy shape, kind) of each tensor, in the file's order: the
    converter's, which follows the checkpoint's (sorted) tensor names."""
    prefix = "model.language_model." if QWEN else "model."
    rows = [(prefix + "embed_tokens.weight", "token_embd.weight", (N_VOCAB, N_EMBD), "matrix")]
    if MOE:  # untied
        rows.append(("lm_head.weight", "output.weight", (N_VOCAB, N_EMBD), "matrix"))
    if QWEN:
        rows.append((prefix + "norm.weight", "output_norm.weight", (N_EMBD,), "norm"))
    else:  # LFM2's final norm
        rows.append((prefix + "embedding_norm.weight", "token_embd_norm.weight", (N_EMBD,), "norm"))
    for i in range(N_LAYER):
        rows += [(f"{prefix}layers.{i}.{hf}", f"blk.{i}.{gg}", shape, kind) for hf, gg, shape, kind in hf_layer(i)]
    for _, name, shape, kind in sorted(rows):
        yield name, shape, kind


def tensors(seed=0):
    rng = np.random.default_rng(seed)
    for name, shape, kind in layout():
        if kind == "norm":
            yield name, np.ones(shape, np.float32)
        elif kind == "a":  # ssm_a = -exp(A_log) = -A, A uniform in [1, 8]
            a_log = np.log(rng.uniform(1.0, 8.0, shape))
            yield name, (-np.exp(a_log)).astype(np.float32)
        else:  # scaled in place (float32 times float32(scale)): no copy of the largest tensors
            t = rng.standard_normal(shape, dtype=np.float32)
            t *= 0.1 if kind in ("dt", "conv") else 0.02  # "matrix" and "router" 0.02
            yield name, t


bf16 = make_llama_gguf.bf16  # t as BF16 bytes, a block of rows at a time


def write(kind):
    path = os.path.join(OUT, f"{STEM}-random-{kind}.gguf")
    w = gguf.GGUFWriter(path, ARCH)
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name(f"random-{STEM.partition('-')[2]}-{kind}")
    # TextModel.set_gguf_parameters, in its order.
    w.add_block_count(N_LAYER)
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    if N_FF is not None:  # qwen35moe's config has no intermediate_size
        w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    if QWEN:
        w.add_head_count_kv(N_HEAD_KV)
        w.add_rope_dimension_sections(ROPE_SECTIONS)
    else:  # per layer, 0 at the convolution layers
        w.add_head_count_kv([N_HEAD_KV if is_attention(i) else 0 for i in range(N_LAYER)])
    w.add_rope_freq_base(ROPE_BASE)
    w.add_layer_norm_rms_eps(RMS_EPS)
    if MOE:
        w.add_expert_count(N_EXPERT)
        w.add_expert_used_count(N_EXPERT_USED)
    if QWEN:  # the config's head_dim; LFM2's has none
        w.add_key_length(HEAD_DIM)
        w.add_value_length(HEAD_DIM)
    w.add_file_type({"f32": FT.ALL_F32, "f16": FT.MOSTLY_F16, "bf16": FT.MOSTLY_BF16}[kind])
    if MOE:  # Qwen2MoeModel.set_gguf_parameters
        w.add_expert_feed_forward_length(N_FF_EXP)
        w.add_expert_shared_feed_forward_length(N_FF_SHEXP)
    if QWEN:  # Qwen3NextModel.set_gguf_parameters
        w.add_ssm_conv_kernel(CONV)
        w.add_ssm_state_size(LIN_DIM)
        w.add_ssm_group_count(LIN_K_HEADS)
        w.add_ssm_time_step_rank(LIN_V_HEADS)
        w.add_ssm_inner_size(LIN_DIM * LIN_V_HEADS)
        w.add_full_attention_interval(INTERVAL)
        w.add_rope_dimension_count(ROPE_DIM)
        w.add_vocab_size(N_VOCAB)
    else:  # LFM2Model.set_gguf_parameters
        w.add_vocab_size(N_VOCAB)
        w.add_shortconv_l_cache(L_CACHE)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    make_llama_gguf.add_vocab(w, N_VOCAB)
    # Every tensor's info first, then the data tensor by tensor.
    f32 = lambda k: kind == "f32" or k != "matrix"  # noqa: E731
    for name, shape, k in layout():
        n = int(np.prod(shape))
        if f32(k):
            w.add_tensor_info(name, shape, np.dtype(np.float32), 4 * n)
        elif kind == "f16":
            w.add_tensor_info(name, shape, np.dtype(np.float16), 2 * n)
        else:
            w.add_tensor_info(name, shape, np.dtype(np.uint16), 2 * n, raw_dtype=QT.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    kinds = {name: k for name, _, k in layout()}
    for name, t in tensors():
        if f32(kinds[name]):
            w.write_tensor_data(t)
        elif kind == "f16":
            w.write_tensor_data(t.astype(np.float16))
        else:
            w.write_tensor_data(bf16(t))
    w.close()
    print(path, os.path.getsize(path) / 1e6, "MB")


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    for kind in sys.argv[1:] or ["f16"]:
        write(kind)
