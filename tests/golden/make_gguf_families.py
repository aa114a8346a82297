#!/usr/bin/env python3
"""Writes fixtures of make_moe_golden.py and make_family_golden.py as
llama.cpp's converter writes them in GGUF, with their golden files (the same
weights, so the same logits). F32 tensors under llama.cpp's names; each
layer's experts merged into 3-D tensors (ffn_gate_exps, ffn_up_exps:
[E, Fe, C]; ffn_down_exps: [E, C, Fe]) and the router as ffn_gate_inp. No
vocabulary (the fixtures have none).

  gguf_mixtral     mixtral_tiny as general.architecture "llama" with
                   expert_count (as llama.cpp converts Mixtral): Q and K
                   rows permuted per head, w1/w3/w2 as gate/up/down
  gguf_qwen3_moe   qwen3_moe_mixed_tiny as "qwen3moe": per-head Q/K norms,
                   expert_feed_forward_length 32 beside feed_forward_length 96
                   for dense layers 0 and 2, which have ffn_gate/up/down and
                   no router (Flover reads a layer without ffn_gate_inp as
                   dense; llama.cpp's qwen3moe expects every layer sparse)
  gguf_olmoe       olmoe_tiny as "olmoe": Q/K norms over all heads
  gguf_qwen3        qwen3_tiny as "qwen3": attn_q_norm / attn_k_norm for the
                   per-head Q/K norms; Q and K not permuted, as for qwen2;
                   key_length 32 beside a hidden size of 64 and 4 heads
  gguf_phi3        phi3_tiny as "phi3": attn_qkv and ffn_up (gate then up)
                   fused as transformers stores them
  gguf_gemma2      gemma2_hd_tiny as "gemma2": every norm stored as 1 + w,
                   post_attention_norm / ffn_norm / post_ffw_norm, the soft-
                   caps and the window; query_pre_attn_scalar is not stored
                   (llama.cpp takes head_dim but for the 27B model)
  gguf_gemma3      gemma3_hd_tiny as "gemma3": the same, with attn_q_norm /
                   attn_k_norm (1 + w too), linear rope scaling 8 for the
                   global layers; the pattern (6) and local base (1e4) are
                   llama.cpp's defaults
  gguf_smollm3     smollm3_tiny (make_smollm3_golden.py) as "smollm3": Q and K
                   permuted as for llama; llama.cpp fixes the NoPE layers at
                   every fourth, as the fixture has them
  gguf_qwen2_moe   qwen2_moe_tiny as "qwen2moe": q/k/v biases, the shared
                   expert (ffn_*_shexp) and its gate as a [C] vector
                   (ffn_gate_inp_shexp), expert_shared_feed_forward_length
  gguf_phi4_mini   phi4_mini_tiny (make_phi4_mini_golden.py) as "phi3":
                   rope.dimension_count 12 of head_dim 16 (partial rotary),
                   LongRoPE as rope_factors_short / rope_factors_long
                   tensors with rope.scaling.attn_factor and
                   original_context_length, as llama.cpp's converter writes
                   them; no output.weight (tied)

    python3 -m venv --system-site-packages VENV && VENV/bin/pip install gguf safetensors
    VENV/bin/python tests/golden/make_gguf_families.py
"""
import json
import math
import os
import re
import shutil

import gguf
import numpy as np
from safetensors.numpy import load_file

HERE = os.path.dirname(os.path.abspath(__file__))

LAYER = {"input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
         "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
         "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
         "self_attn.o_proj.weight": "attn_output.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
         "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
         "mlp.down_proj.weight": "ffn_down.weight", "mlp.gate.weight": "ffn_gate_inp.weight",
         "block_sparse_moe.gate.weight": "ffn_gate_inp.weight",
         "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
         "self_attn.v_proj.bias": "attn_v.bias",
         "mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
         "mlp.shared_expert.up_proj.weight": "ffn_up_shexp.weight",
         "mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
         "mlp.shared_expert_gate.weight": "ffn_gate_inp_shexp.weight",
         "self_attn.qkv_proj.weight": "attn_qkv.weight", "mlp.gate_up_proj.weight": "ffn_up.weight"}
GLOBAL = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
          "lm_head.weight": "output.weight"}
# Gemma's norms around the attention and the MLP, by their llama.cpp names.
GEMMA_LAYER = {"post_attention_layernorm.weight": "post_attention_norm.weight",
               "pre_feedforward_layernorm.weight": "ffn_norm.weight",
               "post_feedforward_layernorm.weight": "post_ffw_norm.weight"}
EXPERT = re.compile(r"model\.layers\.(\d+)\.(?:mlp|block_sparse_moe)\.experts\.(\d+)\.(\w+)\.weight")
PROJ = {"gate_proj": "gate", "w1": "gate", "up_proj": "up", "w3": "up", "down_proj": "down", "w2": "down"}


def permute(w, n_head):
    """llama.cpp's converter: each head's rows from halves to interleaved pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write(src, out, arch, permuted, renormalize_note):
    cfg = json.load(open(os.path.join(HERE, src, "config.json")))
    state = load_file(os.path.join(HERE, src, "model.safetensors"))
    os.makedirs(os.path.join(HERE, out), exist_ok=True)
    w = gguf.GGUFWriter(os.path.join(HERE, out, "model.gguf"), arch=arch)
    head_dim = cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
    experts = cfg.get("num_local_experts", cfg.get("num_experts")) or 0
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(cfg["rope_theta"])
    rotary = int(head_dim * cfg.get("partial_rotary_factor", 1.0))
    w.add_rope_dimension_count(rotary)
    w.add_vocab_size(cfg["vocab_size"])
    if experts:
        w.add_expert_count(experts)
        w.add_expert_used_count(cfg["num_experts_per_tok"])
    if "moe_intermediate_size" in cfg:
        w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    if cfg.get("shared_expert_intermediate_size"):
        w.add_expert_shared_feed_forward_length(cfg["shared_expert_intermediate_size"])
    gemma = arch.startswith("gemma")
    if arch == "gemma2":
        w.add_attn_logit_softcapping(cfg["attn_logit_softcapping"])
        w.add_final_logit_softcapping(cfg["final_logit_softcapping"])
    if gemma:
        w.add_sliding_window(cfg["sliding_window"])
    if cfg.get("rope_scaling") and cfg["rope_scaling"].get("rope_type") == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(cfg["rope_scaling"]["factor"])
    rope = cfg.get("rope_scaling") or {}
    if rope.get("type") == "longrope":
        original = cfg["original_max_position_embeddings"]
        scale = cfg["max_position_embeddings"] / original
        w.add_rope_scaling_orig_ctx_len(original)
        w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(original)) if scale > 1 else 1.0)
        w.add_tensor("rope_factors_long.weight", np.array(rope["long_factor"], dtype=np.float32))
        w.add_tensor("rope_factors_short.weight", np.array(rope["short_factor"], dtype=np.float32))
    w.add_eos_token_id(cfg["eos_token_id"])
    if "bos_token_id" in cfg:
        w.add_bos_token_id(cfg["bos_token_id"])
    merged = {}
    for hf in sorted(state):
        t = state[hf].astype(np.float32)
        m = EXPERT.fullmatch(hf)
        if m:
            layer, e, proj = int(m.group(1)), int(m.group(2)), PROJ[m.group(3)]
            merged.setdefault((layer, proj), {})[e] = t
            continue
        if gemma and hf.endswith("norm.weight"):
            t = t + 1  # llama.cpp's converter stores Gemma's (1 + w)
        if hf in GLOBAL:
            name = GLOBAL[hf]
        else:
            _, _, rest = hf.partition("model.layers.")
            layer, _, tail = rest.partition(".")
            name = f"blk.{layer}.{(GEMMA_LAYER if gemma and tail in GEMMA_LAYER else LAYER)[tail]}"
        if name.endswith("ffn_gate_inp_shexp.weight"):
            t = t.reshape(-1)  # [C], as llama.cpp's qwen2moe reads it
        if permuted and name.endswith("attn_q.weight"):
            t = permute(t, cfg["num_attention_heads"])
        if permuted and name.endswith("attn_k.weight"):
            t = permute(t, cfg["num_key_value_heads"])
        w.add_tensor(name, np.ascontiguousarray(t))
    for (layer, proj), by_expert in sorted(merged.items()):
        stacked = np.stack([by_expert[e] for e in range(experts)])
        w.add_tensor(f"blk.{layer}.ffn_{proj}_exps.weight", np.ascontiguousarray(stacked))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    for name in ("golden.json", "golden_logits.safetensors"):
        shutil.copy(os.path.join(HERE, src, name), os.path.join(HERE, out, name))
    print("wrote", out, renormalize_note)


def main():
    write("mixtral_tiny", "gguf_mixtral", "llama", True, "(llama.cpp renormalises llama's experts)")
    write("qwen3_moe_mixed_tiny", "gguf_qwen3_moe", "qwen3moe", False, "(and qwen3moe's)")
    write("olmoe_tiny", "gguf_olmoe", "olmoe", False, "(not olmoe's)")
    write("qwen2_moe_tiny", "gguf_qwen2_moe", "qwen2moe", False, "(nor qwen2moe's)")
    write("phi3_tiny", "gguf_phi3", "phi3", False, "")
    write("qwen3_tiny", "gguf_qwen3", "qwen3", False, "")
    write("gemma2_hd_tiny", "gguf_gemma2", "gemma2", False, "")
    write("gemma3_hd_tiny", "gguf_gemma3", "gemma3", False, "")
    write("smollm3_tiny", "gguf_smollm3", "smollm3", True, "")
    write("phi4_mini_tiny", "gguf_phi4_mini", "phi3", False, "")


if __name__ == "__main__":
    main()
