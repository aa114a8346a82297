#!/usr/bin/env python3
"""Writes make_hybrid_golden.py's fixtures as llama.cpp's converter
(convert_hf_to_gguf.py --outtype f32 --no-mtp; conversion/qwen.py's
Qwen3_5TextModel, conversion/lfm2.py's LFM2Model and the base TextModel)
writes them in GGUF, with their golden files (copied, as
make_gguf_families.py's twins: the same weights, so the same logits). F32
tensors under llama.cpp's names; no vocabulary (the fixtures have none), but
tokenizer.ggml.eos_token_id / bos_token_id from config.json as
make_gguf_families.py writes them; see make_hybrid_golden.py for the
models. Checked (llama.cpp 34af94cd9) against the converter itself, run on
the HF fixtures with --outtype f32 --no-mtp and a stand-in vocabulary: every
hyper-parameter key and every tensor (bytes) equal; it writes general.name
and general.size_label besides. And against llama.cpp's logits on the
golden prompts, from the --vocab none copies (CPU, F32 KV cache, flash
attention off: its CPU flash attention rounds through f16, 3e-4), the whole
prompt in one batch and token by token: at most 9e-6 (qwen35) and 2e-6
(lfm2) of the logit scale from logits.{i}, the same 32 greedy tokens; the V
heads left grouped instead: 1.8.

  gguf_qwen35  qwen35_tiny as general.architecture "qwen35" (the text model
               of Qwen3_5ForConditionalGeneration; model.visual.* dropped,
               model.language_model.* read as model.*):
      keys     block_count 8, context_length 128, embedding_length 64,
               feed_forward_length 96, attention.head_count 4,
               attention.head_count_kv 2, rope.dimension_sections
               [2, 1, 1, 0] (mrope_section padded to 4), rope.freq_base
               10000, attention.layer_norm_rms_epsilon 1e-6,
               attention.key_length 32, attention.value_length 32,
               ssm.conv_kernel 4 (linear_conv_kernel_dim), ssm.state_size
               16 (linear_key_head_dim), ssm.group_count 2
               (linear_num_key_heads), ssm.time_step_rank 4
               (linear_num_value_heads), ssm.inner_size 64 (value head dim x
               value heads), full_attention_interval 4 (the config's, or 4:
               llama.cpp makes layer i recurrent unless (i + 1) % 4 == 0),
               rope.dimension_count 8 (head_dim x partial_rotary_factor);
               vocab_size 331 (written by the converter's set_vocab)
      tensors  token_embd, output_norm (1 + w), no output (tied);
               per layer attn_norm (input_layernorm, 1 + w),
               post_attention_norm (post_attention_layernorm, 1 + w),
               ffn_gate / ffn_up / ffn_down;
               full attention: attn_q [2 x 4 x 32 rows: per head q then
               gate, as transformers], attn_k, attn_v, attn_output,
               attn_q_norm / attn_k_norm (1 + w);
               linear attention: attn_qkv (in_proj_qkv), attn_gate
               (in_proj_z), ssm_beta (in_proj_b), ssm_alpha (in_proj_a),
               ssm_a = -exp(A_log) (no .weight suffix; torch's float32
               exp, as the converter), ssm_dt.bias
               (dt_bias), ssm_conv1d.weight [128, 4] (conv1d squeezed),
               ssm_norm (linear_attn.norm: plain w, NOT + 1), ssm_out
               (out_proj). With 4 value heads on 2 key heads every
               value-head axis is reordered from grouped (value head
               j = g * 2 + r on key head g) to tiled (position r * 2 + g):
               the V rows of attn_qkv and the V channels of ssm_conv1d,
               the rows of attn_gate, ssm_beta, ssm_alpha, the entries of
               ssm_a and ssm_dt, the columns of ssm_out (ssm_norm is per
               head dim, shared by all heads, so untouched)
  gguf_lfm2    lfm2_tiny as "lfm2":
      keys     block_count 6, context_length 128, embedding_length 64,
               feed_forward_length 96 (the effective MLP width:
               int(2 * 128 / 3) = 85 rounded up to a multiple of 32; the
               converter first writes intermediate_size 128 and then
               overwrites it), attention.head_count 4,
               attention.head_count_kv [0, 0, 2, 0, 2, 0] (per layer, 0 for
               the conv layers), rope.freq_base 1e6,
               attention.layer_norm_rms_epsilon 1e-5 (norm_eps), vocab_size
               331, shortconv.l_cache 3; no key_length (no head_dim in the
               config: 64 / 4 = 16) and no rope.dimension_count (all 16)
      tensors  token_embd, token_embd_norm (model.embedding_norm, which is
               the FINAL norm, after the last layer), no output (tied);
               per layer attn_norm (operator_norm), ffn_norm, ffn_gate (w1),
               ffn_up (w3), ffn_down (w2); conv layers shortconv.in_proj
               [192 rows: B, C, x], shortconv.conv [64, 3] (conv.conv
               squeezed), shortconv.out_proj; attention layers attn_q,
               attn_k, attn_v, attn_output (out_proj), attn_q_norm /
               attn_k_norm (q_layernorm / k_layernorm); no + 1 anywhere

Also general.type "model", general.file_type 0 (all F32) and
general.quantization_version 2, as the converter writes them (it also writes
general.name and general.size_label from the directory, left out here).

With `--vocab none DIR` the same files go to DIR/gguf_*/model.gguf with
tokenizer.ggml.model "none" (llama.cpp then makes vocab_size dummy tokens),
which llama.cpp needs to load them: the cross-check copies, not fixtures.

    PYTHONPATH=llama.cpp/gguf-py VENV/bin/python tests/golden/make_gguf_hybrid.py
"""
import json
import os
import shutil
import sys

import gguf
import numpy as np
import torch
from safetensors.numpy import load_file

HERE = os.path.dirname(os.path.abspath(__file__))

if not hasattr(gguf.MODEL_ARCH, "QWEN35"):
    sys.exit("this gguf-py has no qwen35: put llama.cpp's gguf-py on PYTHONPATH")

QWEN35_LAYER = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
    "linear_attn.in_proj_qkv.weight": "attn_qkv.weight", "linear_attn.in_proj_z.weight": "attn_gate.weight",
    "linear_attn.in_proj_b.weight": "ssm_beta.weight", "linear_attn.in_proj_a.weight": "ssm_alpha.weight",
    "linear_attn.A_log": "ssm_a", "linear_attn.dt_bias": "ssm_dt.bias",
    "linear_attn.conv1d.weight": "ssm_conv1d.weight", "linear_attn.norm.weight": "ssm_norm.weight",
    "linear_attn.out_proj.weight": "ssm_out.weight",
}
LFM2_LAYER = {
    "operator_norm.weight": "attn_norm.weight", "ffn_norm.weight": "ffn_norm.weight",
    "feed_forward.w1.weight": "ffn_gate.weight", "feed_forward.w3.weight": "ffn_up.weight",
    "feed_forward.w2.weight": "ffn_down.weight",
    "conv.in_proj.weight": "shortconv.in_proj.weight", "conv.conv.weight": "shortconv.conv.weight",
    "conv.out_proj.weight": "shortconv.out_proj.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.out_proj.weight": "attn_output.weight",
    "self_attn.q_layernorm.weight": "attn_q_norm.weight", "self_attn.k_layernorm.weight": "attn_k_norm.weight",
}
GLOBAL = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
          "model.embedding_norm.weight": "token_embd_norm.weight", "lm_head.weight": "output.weight"}


def tiled(t, axis, n_k, per_k, head_dim):
    """_LinearAttentionVReorderBase._reorder_v_heads: the value heads along
    `axis` from grouped [k0: v0..v{r-1}, k1: ...] to tiled [v0 of k0, v0 of
    k1, ..., v1 of k0, ...], so that ggml's tiled broadcast of the key heads
    serves them."""
    shape = t.shape
    axis %= t.ndim
    t = t.reshape(*shape[:axis], n_k, per_k, head_dim, *shape[axis + 1:])
    return np.ascontiguousarray(np.swapaxes(t, axis, axis + 1)).reshape(shape)


def begin(path, arch):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    w = gguf.GGUFWriter(path, arch=arch)
    w.add_type(gguf.GGUFType.MODEL)
    return w


def finish(w, cfg, vocab):
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    if vocab is not None:
        w.add_tokenizer_model(vocab)
    if cfg.get("bos_token_id") is not None:
        w.add_bos_token_id(cfg["bos_token_id"])
    if cfg.get("eos_token_id") is not None:
        w.add_eos_token_id(cfg["eos_token_id"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def text_model_keys(w, cfg, n_ff, n_head_kv):
    """TextModel.set_gguf_parameters, in its order."""
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(n_ff)
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(n_head_kv)
    rope = cfg.get("rope_parameters") or {}
    if "mrope_section" in rope:
        w.add_rope_dimension_sections((list(rope["mrope_section"]) + [0] * 4)[:4])
    w.add_rope_freq_base(rope["rope_theta"])
    w.add_layer_norm_rms_eps(cfg.get("rms_norm_eps", cfg.get("norm_eps")))
    if cfg.get("head_dim") is not None:
        w.add_key_length(cfg["head_dim"])
        w.add_value_length(cfg["head_dim"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)


def qwen35(src, path, vocab):
    top = json.load(open(os.path.join(HERE, src, "config.json")))
    cfg = {**top, **top["text_config"]}  # as TextModel: the text config at the root
    rope = cfg["rope_parameters"]
    if rope.get("rope_type", "default") != "default":
        sys.exit(f"{src}: rope_type {rope['rope_type']} is not written here")
    w = begin(path, "qwen35")
    text_model_keys(w, cfg, cfg["intermediate_size"], cfg["num_key_value_heads"])
    n_k, n_v = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    dk, dv = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
    w.add_ssm_conv_kernel(cfg["linear_conv_kernel_dim"])  # Qwen3NextModel.set_gguf_parameters
    w.add_ssm_state_size(dk)
    w.add_ssm_group_count(n_k)
    w.add_ssm_time_step_rank(n_v)
    w.add_ssm_inner_size(dv * n_v)
    w.add_full_attention_interval(cfg.get("full_attention_interval", 4))
    w.add_rope_dimension_count(int(cfg["head_dim"] * rope.get("partial_rotary_factor", 0.25)))
    w.add_vocab_size(cfg["vocab_size"])  # the converter's set_vocab

    interval = cfg.get("full_attention_interval", 4)
    want = ["full_attention" if (i + 1) % interval == 0 else "linear_attention"
            for i in range(cfg["num_hidden_layers"])]
    if cfg["layer_types"] != want:
        sys.exit(f"{src}: layer_types {cfg['layer_types']} are not every {interval}th full, as llama.cpp reads them")

    state = load_file(os.path.join(HERE, src, "model.safetensors"))
    per_k = n_v // n_k
    for hf in sorted(state):
        if "visual." in hf:  # TextModel.filter_tensors: the vision tower is mmproj's
            continue
        t = state[hf].astype(np.float32)
        name = hf.replace("language_model.", "")
        if name in GLOBAL:
            gg = GLOBAL[name]
        else:
            _, _, rest = name.partition("model.layers.")
            layer, _, tail = rest.partition(".")
            gg = f"blk.{layer}.{QWEN35_LAYER[tail]}"
        if n_k != n_v and "linear_attn." in name:  # _LinearAttentionVReorderBase
            if ".in_proj_qkv." in name:
                t = np.concatenate([t[:2 * n_k * dk], tiled(t[2 * n_k * dk:], 0, n_k, per_k, dv)])
            elif ".in_proj_z." in name:
                t = tiled(t, 0, n_k, per_k, dv)
            elif ".in_proj_b." in name or ".in_proj_a." in name:
                t = tiled(t, 0, n_k, per_k, 1)
            elif name.endswith((".A_log", ".dt_bias")):
                t = tiled(t[:, None], 0, n_k, per_k, 1)[:, 0]
            elif ".conv1d." in name:
                t = t.squeeze()
                t = np.concatenate([t[:2 * n_k * dk], tiled(t[2 * n_k * dk:], 0, n_k, per_k, dv)])
            elif ".out_proj." in name:
                t = tiled(t, 1, n_k, per_k, dv)
        # Qwen3NextModel.modify_tensors
        if name.endswith(".A_log"):  # with torch's float32 exp, as the converter (numpy's differs by an ulp)
            t = -torch.exp(torch.from_numpy(t)).numpy()
        elif "conv1d" in name:
            t = t.squeeze()
        elif name.endswith("norm.weight") and not name.endswith("linear_attn.norm.weight"):
            t = t + 1
        w.add_tensor(gg, np.ascontiguousarray(t, dtype=np.float32))
    finish(w, cfg, vocab)


def lfm2(src, path, vocab):
    cfg = json.load(open(os.path.join(HERE, src, "config.json")))
    ff = cfg["intermediate_size"]  # LFM2Model._add_feed_forward_length
    if cfg["block_auto_adjust_ff_dim"]:
        ff = int(2 * ff / 3)
        if cfg["block_ffn_dim_multiplier"] is not None:
            ff = int(cfg["block_ffn_dim_multiplier"] * ff)
        m = cfg["block_multiple_of"]
        ff = m * ((ff + m - 1) // m)
    w = begin(path, "lfm2")
    text_model_keys(w, cfg, ff, [cfg["num_key_value_heads"] if t != "conv" else 0 for t in cfg["layer_types"]])
    w.add_vocab_size(cfg["vocab_size"])
    w.add_shortconv_l_cache(cfg["conv_L_cache"])
    state = load_file(os.path.join(HERE, src, "model.safetensors"))
    for hf in sorted(state):
        t = state[hf].astype(np.float32)
        if hf in GLOBAL:
            gg = GLOBAL[hf]
        else:
            _, _, rest = hf.partition("model.layers.")
            layer, _, tail = rest.partition(".")
            gg = f"blk.{layer}.{LFM2_LAYER[tail]}"
        if "conv.conv" in hf:
            t = t.squeeze(1)
        w.add_tensor(gg, np.ascontiguousarray(t))
    if state["model.layers.0.feed_forward.w1.weight"].shape[0] != ff:
        sys.exit(f"{src}: the MLP is {state['model.layers.0.feed_forward.w1.weight'].shape[0]} wide, not {ff}")
    finish(w, cfg, vocab)


def main(argv):
    vocab, root = None, HERE
    if argv[:1] == ["--vocab"]:
        vocab, root = argv[1], argv[2]
    for write, src, out in ((qwen35, "qwen35_tiny", "gguf_qwen35"), (lfm2, "lfm2_tiny", "gguf_lfm2")):
        write(src, os.path.join(root, out, "model.gguf"), vocab)
        if vocab is None:
            for name in ("golden.json", "golden_logits.safetensors"):
                shutil.copy(os.path.join(HERE, src, name), os.path.join(HERE, out, name))
        print("wrote", os.path.join(root, out, "model.gguf"))


if __name__ == "__main__":
    main(sys.argv[1:])
