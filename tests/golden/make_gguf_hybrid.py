#!/usr/bin/env python3
"""Writes make_hybrid_golden.py's fixtures as llama.cpp's converter
(convert_hf_to_gguf.py --outtype f32, --no-mtp but for gguf_qwen35; conversion/qwen.py's
Qwen3_5TextModel, Qwen3_5MoeTextModel and Qwen3NextModel, conversion/lfm2.py's
LFM2Model, conversion/granite.py's GraniteHybridModel and the base TextModel)
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
               head dim, shared by all heads, so untouched).
               The MTP layer (qwen35_tiny's mtp.*, make_mtp_golden.py) as
               the converter writes it without --no-mtp
               (_Qwen35MtpMixin): block_count 9, nextn_predict_layers 1,
               blk.8 a full-attention block under the names above plus
               nextn.eh_proj (mtp.fc), nextn.enorm / nextn.hnorm
               (pre_fc_norm_embedding / _hidden, 1 + w) and
               nextn.shared_head_norm (mtp.norm, 1 + w); checked against
               the converter run so: keys and all 123 tensors equal
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

  gguf_qwen35_moe  qwen35_moe_tiny as "qwen35moe" (Qwen3_5MoeTextModel):
      keys     as gguf_qwen35's (block_count 4, full_attention_interval 2,
               from text_config) but no feed_forward_length (no
               intermediate_size), and expert_count 8, expert_used_count 2,
               expert_feed_forward_length 32 (moe_intermediate_size),
               expert_shared_feed_forward_length 48; output.weight (untied)
      tensors  as gguf_qwen35's (the same value-head reordering to tiled),
               with per layer, instead of ffn_gate / ffn_up / ffn_down:
               ffn_gate_inp (mlp.gate [8, 64]), ffn_gate_exps / ffn_up_exps
               (the first / second 32 rows of each expert's gate_up_proj:
               [8, 32, 64] each), ffn_down_exps (down_proj [8, 64, 32]),
               ffn_gate_shexp / ffn_up_shexp / ffn_down_shexp (the shared
               expert) and ffn_gate_inp_shexp (shared_expert_gate, kept
               [1, 64]: GGUF shape (64, 1))
  gguf_qwen3next  qwen3_next_tiny as "qwen3next" (Qwen3NextModel):
      keys     as gguf_qwen35_moe's, but feed_forward_length 96
               (intermediate_size, used by no layer) and no
               rope.dimension_sections (plain rope)
      tensors  as gguf_qwen35_moe's, but NO value-head reordering (llama.cpp's
               qwen3next graph repeats each key head over its value heads,
               grouped as transformers), the experts stacked from the
               per-expert tensors, and the packed projections: in_proj_qkvz
               (per key head [q, k, v, z]) split into attn_qkv = [q of key
               heads 0, 1 | k of 0, 1 | v of value heads 0..3] (the order
               the conv reads) and attn_gate = z of value heads 0..3;
               in_proj_ba unchanged as ssm_ba.weight [8, 64] (still per key
               head [b, b, a, a]); no ssm_beta / ssm_alpha
  gguf_granitehybrid  granite_hybrid_tiny as "granitehybrid"
               (GraniteHybridModel: Mamba2Model + GraniteMoeModel):
      keys     block_count 4, context_length 1048576 (2^20: the converter's
               value without rope), embedding_length 64, feed_forward_length
               32 (intermediate_size: the experts' width),
               attention.head_count 4, attention.head_count_kv [0, 2, 0, 2]
               (0 marks a Mamba layer, which is how llama.cpp tells them
               apart), rope.freq_base 1e4, rope.dimension_count 16 (neither
               used), rope.scaling.finetuned false (llama.cpp's switch for
               no rope), attention.layer_norm_rms_epsilon 1e-5,
               expert_count 8, expert_used_count 2,
               expert_shared_feed_forward_length 48, attention.scale 0.125,
               embedding_scale 12, residual_scale 0.22, logit_scale 6
               (llama.cpp divides by it), ssm.conv_kernel 4, ssm.state_size
               16, ssm.group_count 2, ssm.inner_size 128,
               ssm.time_step_rank 8 (the number of heads), vocab_size 331;
               no key_length (no head_dim)
      tensors  token_embd, output_norm (model.norm), no output (tied); per
               layer attn_norm (input_layernorm), ffn_norm
               (post_attention_layernorm), ffn_gate_inp
               (block_sparse_moe.router.layer), ffn_gate_exps / ffn_up_exps
               (the halves of input_linear [8, 64, 64]: [8, 32, 64] each),
               ffn_down_exps (output_linear), ffn_gate_shexp / ffn_up_shexp
               / ffn_down_shexp (shared_mlp; ffn_gate / ffn_up / ffn_down
               when num_local_experts is 0); Mamba layers ssm_in (in_proj
               [328, 64] as is: z, x, B, C, dt), ssm_conv1d.weight [192, 4]
               (squeezed), ssm_conv1d.bias, ssm_dt.bias (dt_bias), ssm_a
               (-exp(A_log), torch's float32 exp, as [8, 1]), ssm_d (D as
               [8, 1]), ssm_norm ([2, 64]: per group), ssm_out; attention
               layers attn_q / attn_k with each head's rows permuted by
               LlamaModel.permute (the converter's undo_permute; harmless
               here: q and k alike, and no rope), attn_v, attn_output
  gguf_granite_micro  granite_micro_tiny as "granitehybrid" (the same
               GraniteHybridModel; GraniteMoeModel.modify_tensors without
               experts):
      keys     as gguf_granitehybrid's, but feed_forward_length 96 (TextModel
               writes intermediate_size, whatever the experts: -Micro's
               config.json has it equal to shared_intermediate_size, and
               llama.cpp's granitehybrid reads ffn_gate / ffn_up / ffn_down
               at n_ff = feed_forward_length when expert_count is 0; 32
               there and llama.cpp refuses the file: ffn_gate has the wrong
               shape), expert_count 0 and expert_used_count 0 (from
               num_local_experts / num_experts_per_tok, both 0; 2 there and
               llama.cpp asserts n_expert_used <= n_expert),
               expert_shared_feed_forward_length 96 (written, read, unused
               without experts)
      tensors  as gguf_granitehybrid's, but per layer ffn_gate / ffn_up (the
               halves of shared_mlp.input_linear [192, 64]: [96, 64] each)
               and ffn_down (shared_mlp.output_linear [64, 96]) instead of
               ffn_gate_inp, the experts and the *_shexp ones (46 tensors)

Checked for these three (llama.cpp's converter run as above, with
--no-mtp for the Qwens, on the HF fixtures): keys and tensors equal to the
byte; llama.cpp's logits at most 6.8e-6 (qwen35moe), 1.2e-5 (qwen3next) and
2.4e-6 (granitehybrid) of the logit scale from logits.{i}, whole prompts and
token by token, the same 32 greedy tokens; the V heads left grouped
(qwen35moe), in_proj_qkvz's rows read as blocked (qwen3next) or B and C
swapped (granitehybrid): 1.0 to 2.1. And for gguf_granite_micro: every key
and tensor equal to the converter's (their order too), llama.cpp's logits
at most 1.7e-6 of the logit scale from logits.{i}, the same 32 greedy
tokens; ffn_gate and ffn_up swapped: 1.1 to 2.1. What llama.cpp does not
take: a GraniteMoeHybrid config.json as transformers 5 writes it (layer_types
"linear_attention" / "full_attention": the converter looks for "attention",
finds none and makes all layers Mamba ones, head_count_kv all 0; the
fixture keeps the released "mamba" / "attention"), rope in a Granite hybrid
with Mamba layers (position_embedding_type is ignored: rope only for Bamba
or an all-attention model), a time_step_limit other than (0, inf) (no dt
clamp), mamba_expand other than 2, and without experts an
intermediate_size other than shared_intermediate_size or a
num_experts_per_tok other than 0 (refused here); Qwen3-Next only with
experts in every layer.

Also general.type "model", general.file_type 0 (all F32) and
general.quantization_version 2, as the converter writes them (it also writes
general.name and general.size_label from the directory, left out here).

(The Qwen3.5-MoE twin is written from the fused experts as released; for
Qwen3-Next the converter's Qwen2MoeModel stacks the per-expert tensors.)

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
    # Qwen3.5's MTP layer (mtp.*, read as block n_layer)
    **{k: k for k in ("nextn.eh_proj.weight", "nextn.enorm.weight", "nextn.hnorm.weight",
                      "nextn.shared_head_norm.weight")},
    # Qwen3.5-MoE and Qwen3-Next: the MoE block (experts: see qwen_hybrid)
    "mlp.gate.weight": "ffn_gate_inp.weight",
    "mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
    "mlp.shared_expert.up_proj.weight": "ffn_up_shexp.weight",
    "mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
    "mlp.shared_expert_gate.weight": "ffn_gate_inp_shexp.weight",
    # Qwen3-Next's linear attention (in_proj_qkvz: see qwen_hybrid)
    "linear_attn.in_proj_ba.weight": "ssm_ba.weight",
}
GRANITE_LAYER = {
    "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "mamba.in_proj.weight": "ssm_in.weight", "mamba.conv1d.weight": "ssm_conv1d.weight",
    "mamba.conv1d.bias": "ssm_conv1d.bias", "mamba.dt_bias": "ssm_dt.bias", "mamba.A_log": "ssm_a",
    "mamba.D": "ssm_d", "mamba.norm.weight": "ssm_norm.weight", "mamba.out_proj.weight": "ssm_out.weight",
    "block_sparse_moe.router.layer.weight": "ffn_gate_inp.weight",
    "block_sparse_moe.output_linear.weight": "ffn_down_exps.weight",
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
# Qwen3.5's MTP layer's own tensors (mtp.*, block n_layer): llama.cpp's nextn names.
MTP_GLOBAL = {"fc.weight": "nextn.eh_proj.weight", "pre_fc_norm_embedding.weight": "nextn.enorm.weight",
              "pre_fc_norm_hidden.weight": "nextn.hnorm.weight", "norm.weight": "nextn.shared_head_norm.weight"}
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
    if n_ff is not None:
        w.add_feed_forward_length(n_ff)
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(n_head_kv)
    rope = cfg.get("rope_parameters") or {}
    if "mrope_section" in rope:
        w.add_rope_dimension_sections((list(rope["mrope_section"]) + [0] * 4)[:4])
    w.add_rope_freq_base(rope["rope_theta"])
    w.add_layer_norm_rms_eps(cfg.get("rms_norm_eps", cfg.get("norm_eps")))
    if (n_experts := cfg.get("num_experts", cfg.get("num_local_experts"))) is not None:
        w.add_expert_count(n_experts)
    if cfg.get("num_experts_per_tok") is not None:
        w.add_expert_used_count(cfg["num_experts_per_tok"])
    if cfg.get("head_dim") is not None:
        w.add_key_length(cfg["head_dim"])
        w.add_value_length(cfg["head_dim"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)


def qwen_hybrid(src, path, vocab, arch):
    """Qwen3.5 ("qwen35": Qwen3_5TextModel), Qwen3.5-MoE ("qwen35moe":
    Qwen3_5MoeTextModel) and Qwen3-Next ("qwen3next": Qwen3NextModel)."""
    top = json.load(open(os.path.join(HERE, src, "config.json")))
    cfg = {**top, **top.get("text_config", {})}  # as TextModel: the text config at the root
    rope = cfg["rope_parameters"]
    if rope.get("rope_type", "default") != "default":
        sys.exit(f"{src}: rope_type {rope['rope_type']} is not written here")
    moe = cfg.get("num_experts") is not None
    w = begin(path, arch)
    n_layer, n_mtp = cfg["num_hidden_layers"], cfg.get("mtp_num_hidden_layers", 0)
    text_model_keys(w, {**cfg, "num_hidden_layers": n_layer + n_mtp}, cfg.get("intermediate_size"),
                    cfg["num_key_value_heads"])
    if moe:  # Qwen2MoeModel.set_gguf_parameters
        w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
        w.add_expert_shared_feed_forward_length(cfg["shared_expert_intermediate_size"])
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
    if n_mtp > 0:  # _Qwen35MtpMixin.set_gguf_parameters: the MTP layers follow the model's
        w.add_nextn_predict_layers(n_mtp)

    interval = cfg.get("full_attention_interval", 4)
    want = ["full_attention" if (i + 1) % interval == 0 else "linear_attention"
            for i in range(cfg["num_hidden_layers"])]
    if cfg["layer_types"] != want:
        sys.exit(f"{src}: layer_types {cfg['layer_types']} are not every {interval}th full, as llama.cpp reads them")

    state = load_file(os.path.join(HERE, src, "model.safetensors"))
    per_k = n_v // n_k
    reorder = arch != "qwen3next" and n_k != n_v  # _LinearAttentionVReorderBase, not Qwen3NextModel
    experts = {}  # Qwen3-Next's per-expert tensors, stacked (Qwen2MoeModel.modify_tensors)
    for hf in sorted(state):
        if "visual." in hf:  # TextModel.filter_tensors: the vision tower is mmproj's
            continue
        t = state[hf].astype(np.float32)
        name = hf.replace("language_model.", "")
        if name.startswith("mtp."):  # the MTP layer as block n_layer (the mixin's filter_tensors)
            rest = name[len("mtp."):]
            if rest.startswith("layers."):
                mtp_layer, _, rest = rest[len("layers."):].partition(".")
                name = f"model.layers.{n_layer + int(mtp_layer)}.{rest}"
            else:
                name = f"model.layers.{n_layer}.{MTP_GLOBAL[rest]}"
        _, _, rest = name.partition("model.layers.")
        layer, _, tail = rest.partition(".")
        if name in GLOBAL:
            gg = GLOBAL[name]
        elif tail in ("mlp.experts.gate_up_proj", "mlp.experts.down_proj"):  # fused [E, 2I, H], [E, H, I]
            if tail.endswith("down_proj"):
                w.add_tensor(f"blk.{layer}.ffn_down_exps.weight", np.ascontiguousarray(t))
            else:
                half = t.shape[-2] // 2
                w.add_tensor(f"blk.{layer}.ffn_gate_exps.weight", np.ascontiguousarray(t[..., :half, :]))
                w.add_tensor(f"blk.{layer}.ffn_up_exps.weight", np.ascontiguousarray(t[..., half:, :]))
            continue
        elif tail.startswith("mlp.experts."):  # mlp.experts.{e}.{gate,up,down}_proj.weight
            e, proj = tail.split(".")[2:4]
            experts.setdefault((int(layer), proj), {})[int(e)] = t
            continue
        elif tail == "linear_attn.in_proj_qkvz.weight":  # per key head [q, k, v, z] -> attn_qkv, attn_gate
            t = t.reshape(n_k, 2 * dk + 2 * per_k * dv, -1)
            q, k = t[:, :dk], t[:, dk:2 * dk]
            v, z = t[:, 2 * dk:2 * dk + per_k * dv], t[:, 2 * dk + per_k * dv:]
            w.add_tensor(f"blk.{layer}.attn_qkv.weight", np.ascontiguousarray(
                np.concatenate([x.reshape(-1, x.shape[-1]) for x in (q, k, v)])))
            w.add_tensor(f"blk.{layer}.attn_gate.weight", np.ascontiguousarray(z.reshape(-1, z.shape[-1])))
            continue
        else:
            gg = f"blk.{layer}.{QWEN35_LAYER[tail]}"
        if reorder and "linear_attn." in name:  # _LinearAttentionVReorderBase
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
    for (layer, proj), per in sorted(experts.items()):
        if sorted(per) != list(range(cfg["num_experts"])):
            sys.exit(f"{src}: layer {layer} {proj}: experts {sorted(per)}")
        kind = {"gate_proj": "ffn_gate_exps", "up_proj": "ffn_up_exps", "down_proj": "ffn_down_exps"}[proj]
        w.add_tensor(f"blk.{layer}.{kind}.weight", np.ascontiguousarray(np.stack([per[e] for e in sorted(per)])))
    finish(w, cfg, vocab)


def qwen35(src, path, vocab):
    qwen_hybrid(src, path, vocab, "qwen35")


def qwen35moe(src, path, vocab):
    qwen_hybrid(src, path, vocab, "qwen35moe")


def qwen3next(src, path, vocab):
    qwen_hybrid(src, path, vocab, "qwen3next")


def llama_permute(t, n_head):
    """LlamaModel.permute: each head's rows from rotate-half to interleaved
    pairs ([0, d/2, 1, d/2 + 1, ...]), ggml's NORM rope layout."""
    return t.reshape(n_head, 2, t.shape[0] // n_head // 2, *t.shape[1:]).swapaxes(1, 2).reshape(t.shape)


def granite_hybrid(src, path, vocab):
    """GraniteHybridModel (Mamba2Model + GraniteMoeModel), "granitehybrid"."""
    cfg = json.load(open(os.path.join(HERE, src, "config.json")))
    types = cfg["layer_types"]
    if set(types) != {"mamba", "attention"}:  # GraniteHybridModel.get_attn_layers: "attention"
        sys.exit(f"{src}: layer_types {types}: llama.cpp's converter knows \"mamba\" and \"attention\"")
    if cfg.get("position_embedding_type") == "rope":  # GraniteHybridModel: rope only for Bamba or no SSM
        sys.exit(f"{src}: llama.cpp applies no rope to GraniteMoeHybrid with Mamba layers")
    if cfg.get("time_step_limit", [0.0])[0] != 0.0 or cfg["mamba_expand"] != 2:
        sys.exit(f"{src}: llama.cpp clamps no dt, and takes mamba_expand 2 only")
    n_head, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    has_experts = bool(cfg.get("num_local_experts"))
    if not has_experts and (cfg["intermediate_size"] != cfg["shared_intermediate_size"]
                            or cfg.get("num_experts_per_tok")):
        # The converter writes intermediate_size as feed_forward_length, which
        # llama.cpp reads ffn_gate / ffn_up / ffn_down at (the shared MLP's
        # width), and num_experts_per_tok as expert_used_count, which it
        # refuses without experts: -Micro's config.json has them so.
        sys.exit(f"{src}: without experts llama.cpp needs intermediate_size = shared_intermediate_size "
                 f"and num_experts_per_tok 0")
    d_inner = cfg["mamba_expand"] * cfg["hidden_size"]
    groups = cfg["mamba_n_groups"]
    w = begin(path, "granitehybrid")
    # GraniteMoeModel.set_gguf_parameters: TextModel's, LlamaModel's, GraniteModel's (head_dim popped), its own
    text_model_keys(w, cfg, cfg["intermediate_size"], n_kv)
    w.add_vocab_size(cfg["vocab_size"])
    w.add_rope_dimension_count(cfg["hidden_size"] // n_head)
    w.add_attention_scale(cfg["attention_multiplier"])
    w.add_embedding_scale(cfg["embedding_multiplier"])
    w.add_residual_scale(cfg["residual_multiplier"])
    w.add_logit_scale(cfg["logits_scaling"])
    w.add_expert_shared_feed_forward_length(cfg["shared_intermediate_size"])
    # GraniteHybridModel.set_gguf_parameters
    w.add_ssm_conv_kernel(cfg["mamba_d_conv"])
    w.add_ssm_state_size(cfg["mamba_d_state"])
    w.add_ssm_group_count(groups)
    w.add_ssm_inner_size(d_inner)
    w.add_ssm_time_step_rank(cfg["mamba_n_heads"])
    w.add_head_count_kv([n_kv if t == "attention" else 0 for t in types])  # overwrites TextModel's
    w.add_rope_scaling_finetuned(False)  # no rope
    w.add_context_length(2 ** 20)  # overwrites TextModel's
    state = load_file(os.path.join(HERE, src, "model.safetensors"))
    for hf in sorted(state):
        t = state[hf].astype(np.float32)
        if hf in GLOBAL:
            w.add_tensor(GLOBAL[hf], np.ascontiguousarray(t))
            continue
        _, _, rest = hf.partition("model.layers.")
        layer, _, tail = rest.partition(".")
        if tail in ("block_sparse_moe.input_linear.weight", "shared_mlp.input_linear.weight"):
            half = t.shape[-2] // 2  # [gate | up] rows
            kinds = (("ffn_gate_exps", "ffn_up_exps") if tail.startswith("block_sparse_moe")
                     else ("ffn_gate_shexp", "ffn_up_shexp") if has_experts else ("ffn_gate", "ffn_up"))
            w.add_tensor(f"blk.{layer}.{kinds[0]}.weight", np.ascontiguousarray(t[..., :half, :]))
            w.add_tensor(f"blk.{layer}.{kinds[1]}.weight", np.ascontiguousarray(t[..., half:, :]))
            continue
        if tail == "shared_mlp.output_linear.weight":
            gg = f"blk.{layer}.{'ffn_down_shexp' if has_experts else 'ffn_down'}.weight"
        else:
            gg = f"blk.{layer}.{GRANITE_LAYER[tail]}"
        if tail == "self_attn.q_proj.weight":  # LlamaModel.modify_tensors (undo_permute)
            t = llama_permute(t, n_head)
        elif tail == "self_attn.k_proj.weight":
            t = llama_permute(t, n_kv)
        elif tail == "mamba.conv1d.weight":  # Mamba2Model.modify_tensors
            t = t.squeeze()
        elif tail in ("mamba.A_log", "mamba.D"):
            t = t.reshape(-1, 1)
            if tail == "mamba.A_log":
                t = -torch.exp(torch.from_numpy(t)).numpy()
        elif tail == "mamba.norm.weight":
            t = t.reshape(groups, d_inner // groups)
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
    for write, src, out in ((qwen35, "qwen35_tiny", "gguf_qwen35"), (lfm2, "lfm2_tiny", "gguf_lfm2"),
                            (qwen35moe, "qwen35_moe_tiny", "gguf_qwen35_moe"),
                            (qwen3next, "qwen3_next_tiny", "gguf_qwen3next"),
                            (granite_hybrid, "granite_hybrid_tiny", "gguf_granitehybrid"),
                            (granite_hybrid, "granite_micro_tiny", "gguf_granite_micro")):
        write(src, os.path.join(root, out, "model.gguf"), vocab)
        if vocab is None:
            for name in ("golden.json", "golden_logits.safetensors", "golden_mtp.json", "golden_mtp.safetensors"):
                if os.path.exists(os.path.join(HERE, src, name)):  # the MTP layer's: qwen35_tiny's
                    shutil.copy(os.path.join(HERE, src, name), os.path.join(HERE, out, name))
        print("wrote", os.path.join(root, out, "model.gguf"))


if __name__ == "__main__":
    main(sys.argv[1:])
