#!/usr/bin/env python3
"""Writes gguf_qwen3/: qwen3_tiny (make_moe_golden.py) as llama.cpp's
converter writes a qwen3 GGUF file — F32 tensors under llama.cpp's names
(attn_q_norm / attn_k_norm for the per-head Q/K norms; Q and K not
permuted, as for qwen2), the qwen3.* hyper-parameters with key_length 32
beside a hidden size of 64 and 4 heads — with qwen3_tiny's golden files:
the same weights, so the same logits. No vocabulary (the fixture has none).

    python3 -m venv --system-site-packages VENV && VENV/bin/pip install gguf safetensors
    VENV/bin/python tests/golden/make_gguf_qwen3.py
"""
import json
import os
import shutil

import gguf
import numpy as np
from safetensors.numpy import load_file

HERE = os.path.dirname(os.path.abspath(__file__))
SRC, OUT = os.path.join(HERE, "qwen3_tiny"), os.path.join(HERE, "gguf_qwen3")

LAYER = {"input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
         "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
         "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
         "self_attn.o_proj.weight": "attn_output.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
         "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
         "mlp.down_proj.weight": "ffn_down.weight"}
GLOBAL = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
          "lm_head.weight": "output.weight"}


def gguf_name(hf):
    if hf in GLOBAL:
        return GLOBAL[hf]
    _, _, rest = hf.partition("model.layers.")
    layer, _, tail = rest.partition(".")
    return f"blk.{layer}.{LAYER[tail]}"


def main():
    cfg = json.load(open(os.path.join(SRC, "config.json")))
    state = load_file(os.path.join(SRC, "model.safetensors"))
    os.makedirs(OUT, exist_ok=True)
    w = gguf.GGUFWriter(os.path.join(OUT, "model.gguf"), arch="qwen3")
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_rope_dimension_count(cfg["head_dim"])
    w.add_vocab_size(cfg["vocab_size"])
    w.add_eos_token_id(cfg["eos_token_id"])
    w.add_bos_token_id(cfg["bos_token_id"])
    for hf in sorted(state):
        if hf == "lm_head.weight" and cfg.get("tie_word_embeddings"):
            continue
        w.add_tensor(gguf_name(hf), np.ascontiguousarray(state[hf].astype(np.float32)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    for name in ("golden.json", "golden_logits.safetensors"):
        shutil.copy(os.path.join(SRC, name), os.path.join(OUT, name))
    print("wrote", OUT)


if __name__ == "__main__":
    main()
