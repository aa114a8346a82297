#!/usr/bin/env python3
"""Writes golden fixtures for the hybrid (recurrent + attention) families.

Each is a tiny random checkpoint of the family's own transformers class (the
independent reference), saved as make_family_golden.py saves its fixtures: a
Hugging Face directory (config.json, F32 model.safetensors under the names
save_pretrained writes, checked; the released names where those differ, see
qwen35_moe_tiny and granite_hybrid_tiny) with

  golden.json                prompts of 1, 7, 20 and 126 tokens, a 32-step
                             greedy continuation (full recompute each step,
                             no cache, float64) of prompts[1]
  golden_logits.safetensors  logits.{i}: every position of prompt i, float64,
                             stored as float32; logits_bf16.{i} /
                             logits_bf16kv.{i}: transformers in float32 with
                             Flover's bf16 rounding emulated (every
                             nn.Linear's weight and input; with kv also keys
                             after rotary and values, in the full-attention
                             layers only: the recurrent layers keep no K/V)

  qwen35_tiny  Qwen3_5ForConditionalGeneration (model_type "qwen3_5", as
               released) with a 1-block vision tower of width 16 whose
               weights (model.visual.*, 21 tensors) are in model.safetensors
               for a loader to skip; the text model under
               model.language_model.*, tied head (no lm_head.weight). Text:
               hidden 64, 8 layers [linear x3, full, linear x3, full]
               (llama.cpp's full_attention_interval 4), 4 heads of 32 on 2
               KV heads, partial_rotary_factor 0.25 (rotary on 8 of 32 dims),
               rope_theta 1e4 (released: 1e7, which leaves 3 of the 4
               frequencies almost still over 126 positions), mrope_section
               [2, 1, 1] interleaved (sums to 8 / 2; text positions are the
               same on every axis, so it is plain RoPE), linear attention
               with 2 key heads and 4 value heads of 16 (each key head
               serves 2 value heads), conv kernel 4, MLP 96, vocabulary
               331, rms_norm_eps 1e-6, eos 2. A = exp(A_log) drawn from
               U(0.01, 0.1) (decays exp(g) from 0.6 to 1, median 0.94) and
               dt_bias = 1 + 0.3 randn, so both matter. Its multi-token-
               prediction layer (mtp.*, mtp_num_hidden_layers 1, as
               released) is added by make_mtp_golden.py, run after this
               script: transformers drops it on loading (reload_check
               honours its _keys_to_ignore_on_load_unexpected).
  lfm2_tiny    Lfm2ForCausalLM: hidden 64, 6 layers layer_types [conv, conv,
               full_attention, conv, full_attention, conv] (and the matching
               full_attn_idxs [2, 4]), conv_L_cache 3, no conv bias, 4 heads
               of 16 on 2 KV heads, rope_theta 1e6, norm_eps 1e-5, vocabulary
               331, tied (as the released LFM2 models), intermediate_size
               128 with block_auto_adjust_ff_dim, block_ffn_dim_multiplier
               1.0, block_multiple_of 32: the MLP is 96 wide
               (int(2 * 128 / 3) = 85, times 1.0, rounded up to 96).

Every norm weight and bias gets 0.3 * randn, as make_family_golden.py's
`make`. Well-conditioned for bf16: deeper than the other fixtures, these
amplify rounding more, so qwen35_tiny's embeddings are scaled by 3, its key
rows of in_proj_qkv and key channels of conv1d are 0.9 x the query ones plus
sqrt(0.19) x their own draw (so q.k is rarely near 0, where the gated norm of
a tiny head output would blow rounding up), and the seeds (97 and 99) were
picked among six for the smallest rounding sensitivity. The script prints
it: the same bf16 roundings with float64 arithmetic between them land up
to 0.7% (qwen35_tiny) and 0.6% (lfm2_tiny) of the logit scale from
logits_bf16 / logits_bf16kv (a value on a rounding boundary rounds the other
way; median 0.2%), the floor for an implementation that rounds where the
emulation does; the emulations themselves are up to 7.4% / 7.8% from logits
(qwen3_tiny's: 1.8% / 3.5%); transformers' own float32 is 8e-6 / 3e-6 from
logits.

The reference is float64 throughout. transformers computes in float32
whatever the model's dtype: Qwen3_5RMSNorm (x.float(), weight.float()),
Qwen3_5RMSNormGated and Lfm2RMSNorm (.to(float32)), both delta rules
(.to(torch.float32) of q, k, v, beta, g), g (A_log.float(), a.float()), the
rotary embeddings (float32 positions times a float32 inv_freq) and eager
attention's softmax (dtype=float32). The float64 model runs those functions
recompiled from transformers' own source with the float32 casts edited out
(each edit counted: a changed transformers stops the script). Checked:
no aten op of the patched forward produces a tensor narrower than float64
(a TorchDispatchMode watches every op; the unpatched float64 forward has
1186 such ops for qwen35_tiny, 114 for lfm2_tiny); patched minus unpatched
float64 logits: up to 6.0e-5 (qwen35_tiny, logits up to 24) and 4.5e-6
(lfm2_tiny, logits up to 7.3); the longest prompt's full forward equals the
same prompt run token by token with the cache (generate-style: the
recurrent delta rule and causal_conv1d_update against the chunked rule and
the full conv), and prefilled 50 + 50 then token by token (the chunked rule
from a carried state), to 1e-14 of the logit scale; and config.json +
model.safetensors reloaded alone give the same logits bit for bit. Checked to
matter (float64 logits change by more than 1e-6): Qwen3.5's partial rotary
(8 dims, not 16), the attention output gate, its per-head [q, gate] layout,
the q, k, v order of in_proj_qkv, the conv's taps on past tokens and its
orientation, A_log, dt_bias, the (1 + w) norms, the gated norm's plain w and
the value heads' grouping (repeat_interleave, not tile); LFM2's conv taps
on past tokens and orientation, the B, C order of in_proj, the q/k
layernorms and rope_theta. make_gguf_hybrid.py writes the GGUF twins;
llama.cpp reads those to within 9e-6 (qwen35) and 2e-6 (lfm2) of logits,
with the same greedy tokens (CPU, F32, flash attention off).

The models, as transformers 5.23 computes them (for the C++ author):

Qwen3.5 (text), per layer i, residual h (embedding E[token], unscaled):
    x = rms1p(h, input_layernorm);  h += mixer_i(x)
    x = rms1p(h, post_attention_layernorm);  h += down(silu(gate(x)) * up(x))
  logits = rms1p(h, model.norm) @ E^T (tied).
  rms1p(x, w) = x / sqrt(mean(x^2) + eps) * (1 + w), eps = rms_norm_eps, in
  input_layernorm, post_attention_layernorm, model.norm, self_attn.q_norm,
  self_attn.k_norm (zero-centred: initialised to 0). NOT in
  linear_attn.norm, which is plain w: see the gated norm below.
  Full attention (H = 4 heads, D = 32, 2 KV heads, rot = 8):
    q_proj(x) is [T, H * 2D], per head [q (D) | gate (D)] (not all q then
    all gates); q = rms1p(q per head, q_norm); k = rms1p(k_proj(x) per head,
    k_norm); v = v_proj(x); RoPE on the first rot dims of each head
    (rotate_half: dim j with j + rot/2, j < rot/2, angle p * theta^(-2j/rot)),
    dims rot..D untouched; softmax(q k^T / sqrt(D)) causal, query head h on
    KV head h // 2; o = attn (T, H * D) * sigmoid(gate (T, H * D)); o_proj.
  Gated DeltaNet (nk = 2 key heads, nv = 4 value heads, dk = dv = 16):
    m = in_proj_qkv(x): channels [q (nk dk) | k (nk dk) | v (nv dv)];
    m = silu(causal depthwise conv of m over time): conv1d.weight [C, 1, 4],
      out[t, c] = sum_j w[c, 0, j] * m[t - 3 + j, c] (zeros before 0; w[.., 3]
      takes the current token), no bias, silu after it;
    q, k, v = split(m), per head; z = in_proj_z(x) [T, nv dv];
    beta = sigmoid(in_proj_b(x)); g = -exp(A_log) * softplus(in_proj_a(x) +
      dt_bias) (per value head; decay exp(g));
    q and k repeat_interleave(nv / nk) over heads: value head j reads key
      head j // 2 (grouped, not tiled: llama.cpp's GGUF reorders the value
      heads to tiled instead, see make_gguf_hybrid.py);
    q = l2norm(q) / sqrt(dk), k = l2norm(k), l2norm(x) = x / sqrt(sum(x^2) +
      1e-6) (a fixed 1e-6, not rms_norm_eps; llama.cpp: x / max(|x|, eps));
    per value head, state S [dk, dv] from 0:
      S = exp(g_t) * S;  delta = beta_t * (v_t - S^T k_t);
      S = S + k_t delta^T;  o_t = S^T q_t
    (transformers' chunked form, 64 tokens a chunk, equals it: checked);
    o = o / sqrt(mean(o^2 over dv) + rms_norm_eps) * norm.weight (plain w)
      * silu(z) per value head (the gated norm: norm, then gate);
    out_proj(o concatenated over heads).
LFM2, residual h (embedding E[token], unscaled), per layer:
    x = rms(h, operator_norm);  h += conv(x) or attn(x)
    h += w2(silu(w1(y)) * w3(y)),  y = rms(h, ffn_norm)
  logits = rms(h, model.embedding_norm) @ E^T: embedding_norm is the final
  norm, applied after the last layer (llama.cpp: token_embd_norm).
  rms(x, w) = x / sqrt(mean(x^2) + norm_eps) * w (plain w, eps 1e-5), also
  for q_layernorm / k_layernorm, per head of 16 on q_proj / k_proj before
  RoPE (full head, rotate_half, theta 1e6); scores / sqrt(16), query head h
  on KV head h // 2; out_proj.
  Short conv: [B | C | x] = in_proj(x) (3 x 64 rows in that order);
    y = B * x; y = causal depthwise conv (conv.weight [64, 1, 3], w[.., 2]
    on the current token, no bias, NO activation); out_proj(C * y).

Three more families (written by the same code; what differs is said here).
Each is a mixture of experts, so the bf16 emulation also rounds both
operands of every F.linear (transformers 5 keeps experts as 3-D tensors and
routes with F.linear: no nn.Linear there), and routing is checked as
make_moe_golden.py checks it: every expert used in every MoE layer, at
least 8 distinct expert sets, over the prompts and the greedy sequence the
2nd and 3rd routing probabilities at least MIN_MARGIN = 1e-4 apart in
float64 and in both bf16 emulations, and the greedy run's best two logits
at least MIN_GAP = 1e-3 of the logit scale apart. A flip of the top 2
between float64 and bf16 is no fault (logits_bf16* follow their own routing,
which an implementation that rounds where they do shares), but it makes the
emulations further from logits than the dense fixtures' (printed below).
The seeds (318, 309, 306) were picked among 55 each for these margins and a
small float64-with-the-same-roundings floor. 4 layers each (two of each
kind), so fewer flips compound.

  qwen35_moe_tiny  Qwen3_5MoeForConditionalGeneration (model_type
               "qwen3_5_moe", as released: 1-block vision tower as
               qwen35_tiny's, text under model.language_model.*), UNtied
               (lm_head.weight, as Qwen3.5-35B-A3B). Text as qwen35_tiny's
               but 4 layers [linear, full, linear, full] with
               full_attention_interval 2 in text_config (transformers keeps
               the key; llama.cpp's converter reads it) and the MLP a
               mixture of 8 experts, 2 per token, moe_intermediate_size 32,
               with a shared expert (SwiGLU, 48) gated by
               sigmoid(shared_expert_gate(x)) (a 64 -> 1 Linear); no
               intermediate_size (Qwen3_5MoeTextConfig has none). Experts
               stored FUSED as released (and as the model holds them):
               mlp.experts.gate_up_proj [8, 64, 64] (per expert 32 gate rows
               then 32 up rows), mlp.experts.down_proj [8, 64, 32], no
               ".weight"; save_pretrained in transformers 5.23 writes them
               split per expert (experts.{e}.gate_proj.weight, ...): checked
               equal, and from_pretrained reads the fused file back.
  qwen3_next_tiny  Qwen3NextForCausalLM, untied, 4 layers [linear, full,
               linear, full] (full_attention_interval 2), attention and
               delta net sized as qwen35_tiny's (4 heads of 32 on 2 KV
               heads, partial rotary 0.25, rope_theta 1e4; 2 key heads and
               4 value heads of 16, conv kernel 4), every layer a MoE block
               as qwen35_moe_tiny's (decoder_sparse_step 1, no
               mlp_only_layers: llama.cpp's qwen3next requires experts in
               every layer), norm_topk_prob true (as released);
               intermediate_size 96 is in config.json but used by no layer.
               Experts per expert as released and as save_pretrained writes
               them: mlp.experts.{e}.{gate,up,down}_proj.weight.
  granite_hybrid_tiny  GraniteMoeHybridForCausalLM (Granite 4.0-H), tied,
               hidden 64, 4 layers [mamba, attention, mamba, attention], 4
               heads of 16 on 2 KV heads, position_embedding_type "nope"
               (as released: no rotary at all), 8 experts of 32, 2 per
               token, a shared MLP of 48 beside them (as Granite 4.0-H-Tiny;
               -Micro has num_local_experts 0 and only the shared MLP),
               embedding_multiplier 12, attention_multiplier 0.125 (not
               1/sqrt(16)), residual_multiplier 0.22, logits_scaling 6,
               rms_norm_eps 1e-5; Mamba-2: mamba_expand 2 (d_inner 128),
               mamba_n_heads 8 of mamba_d_head 16, mamba_d_state 16,
               mamba_n_groups 2, mamba_d_conv 4, mamba_conv_bias true,
               mamba_proj_bias false, mamba_chunk_size 16 (released 256; a
               126-token prompt spans 8 chunks), time_step_limit (0, inf)
               (the default). pad_token_id null (a padding row of zeros
               would give a token whose router logits all tie). The
               embeddings are scaled by 0.15 (times 12: the residual stream
               would otherwise be the token's own embedding, and the tied
               head would repeat it), so the logits are small (up to 0.2).
               A = exp(A_log) from U(0.05, 0.5), dt_bias = -1 + 0.5 randn,
               D = 1 + 0.5 randn. config.json is transformers' but for two
               keys, as the released files have them: layer_types
               "mamba" / "attention" (transformers 5.23 writes
               "linear_attention" / "full_attention", reads either:
               configuration_utils._LEGACY_LAYER_TYPE_REMAP; llama.cpp's
               converter knows only "attention" and would make every layer
               a Mamba layer), and no time_step_limit (transformers writes
               its default as [0.0, {"__float__": "Infinity"}]). Tensors as
               save_pretrained writes them, the released names:
               block_sparse_moe.input_linear.weight [8, 64, 64] (per expert
               32 gate rows, then 32 up rows), .output_linear.weight
               [8, 64, 32], .router.layer.weight [8, 64].
  granite_micro_tiny  granite_hybrid_tiny's model as Granite 4.0-H-Micro
               is laid out: num_local_experts 0, so each layer's MLP is the
               shared MLP alone (transformers builds no block_sparse_moe and
               runs shared_mlp(x) only; checked: no layer has one), 96 wide:
               shared_mlp.input_linear.weight [192, 64] (96 gate rows, then
               96 up rows), .output_linear.weight [64, 96]. As the released
               -Micro config.json: num_experts_per_tok 0 and
               intermediate_size 96 = shared_intermediate_size. transformers
               reads neither without experts (intermediate_size 7 gives the
               same logits bit for bit: checked), but llama.cpp's converter
               writes intermediate_size as feed_forward_length, the width
               llama.cpp reads ffn_gate / ffn_up / ffn_down at (another value
               and the file does not load), and num_experts_per_tok as
               expert_used_count, which llama.cpp refuses above its
               expert_count 0. All else as granite_hybrid_tiny's (sizes,
               Mamba-2, multipliers, NoPE, tied, the perturbations, the
               released config.json's layer_types and no time_step_limit);
               seed 300, picked among eight (300-307) for the greedy run's
               gap and the bf16 floor. No routing, and no F.linear outside
               an nn.Linear, so the bf16 emulation rounds the Linears'
               operands only.

Their float64 patches, as above, and: the routers (softmax(dtype=float) in
Qwen3.5-MoE's / Qwen3-Next's TopKRouter; F.linear(...).float() in
Granite's), Granite's RMSNorm / RMSNormGated (.to(float32)), A =
-exp(A_log.float()), mamba2_chunk_scan (5 .float()) and
mamba2_selective_state_update (exp(dt.float() * A.float())): the torch
fallbacks transformers 5.23 runs without the mamba_ssm / causal_conv1d
kernels (mamba2_split_conv1d_scan_combined only in training). Unpatched
float64 narrows in 490 / 471 / 356 ops; patched minus unpatched float64
logits 1.4e-5 / 9.2e-6 / 1.3e-7 (logits up to 6.8 / 7.4 / 0.2); the cached
runs (token by token; 50 + 50 then token by token) equal the full forward
to 5e-15 / 8e-15 / 5e-15 of the logit scale (the recurrent delta rule /
mamba2_selective_state_update against the chunked forms); from_pretrained on
config.json + model.safetensors (its renaming of the saved names included)
gives logits bit for bit; transformers' own float32 is 4.7e-6 / 4.9e-6 /
3.7e-6 from logits; logits_bf16* are up to 0.47 / 0.25 / 0.41 of the logit
scale from logits (median 0.019 / 0.017 / 0.013), the bf16 emulations
routing 7-10 / 7-8 / 18 of 772 token-layers otherwise than float64; the same
roundings in float64 land up to 0.0072 / 0.0084 / 0.0061 from logits_bf16*
(medians 0.0016 / 0.0010 / 0.0005). Written out in float64 from the
formulas below (not from transformers' code), token by token where they
recur, and compared with transformers' modules on the 126-token prompt:
the MoE blocks (7e-16), Qwen3-Next's gated delta net with its per-key-head
unpacking (4e-16), Granite's Mamba-2 mixer (6e-16), routed experts and
shared MLP, and the whole Granite model (6e-15 of the logit scale, every
prompt); Granite's chunked scan gives the same logits for chunk sizes 1, 7,
16, 128 and 256 (3e-15). Checked to matter: for each MoE the router (its
rows rolled by one expert), the top-k choice (the least likely instead), the
renormalisation, the experts' [gate | up] order, the shared expert (and its
sigmoid gate for the Qwens); Qwen3.5-MoE's value-head grouping and (1 + w)
norms; Qwen3-Next's per-key-head [q, k, v, z] layout of in_proj_qkvz and
[b, a] of in_proj_ba (read as blocked), the value-head grouping, the conv's
past taps, A_log, dt_bias, the (1 + w) norms, the gated norm's plain w, the
attention output gate and its per-head [q, gate] layout, the partial rotary
and norm_topk_prob; Granite's four multipliers, NoPE (rope instead), the
z / x and B / C orders of in_proj, the conv's past taps, orientation and
bias, A_log, D, dt_bias, the heads' groups (h // 4, not h % 2), the gated
norm per group of 64 (not 128) and its gate-then-norm order. llama.cpp reads
make_gguf_hybrid.py's twins to within 6.8e-6 (qwen35moe), 1.2e-5
(qwen3next) and 2.4e-6 (granitehybrid) of logits, with the same greedy
tokens (CPU, F32, flash attention off).

granite_micro_tiny (the same code and checks, less the routing ones):
unpatched float64 narrows in 344 ops; patched minus unpatched float64
logits 9.0e-8 (logits up to 0.19); the cached runs equal the full forward
to 3.3e-15 / 2.3e-15 of the logit scale; from_pretrained gives logits bit
for bit; transformers' own float32 is 2.1e-6 from logits; logits_bf16* are
up to 0.027 of the logit scale from logits (median 0.011), the same
roundings in float64 up to 0.0029 from them (median 1e-7); written out in
float64 the Mamba-2 mixer (5e-16), the shared MLP (0) and the whole model
(3.3e-15, every prompt); chunk sizes 1, 7, 128, 256 give the same logits
(3.1e-15); greedy run 19 distinct tokens, best-vs-second gap 0.0044 of the
logit scale. Checked to matter: as granite_hybrid_tiny's (multipliers,
NoPE, in_proj's orders, the conv, A_log, D, dt_bias, the groups, the gated
norm), the shared MLP's [gate | up] order and the shared MLP itself.
llama.cpp reads make_gguf_hybrid.py's gguf_granite_micro to within 1.7e-6
of logits, whole prompts and token by token, the same 32 greedy tokens;
with its ffn_gate and ffn_up swapped, 1.1 to 2.1.

Qwen3.5-MoE (text): Qwen3.5 above with the MLP replaced by, per token x
(post_attention_layernorm's output, [64]):
    p = softmax(x @ mlp.gate.weight^T) over the 8 experts (float32 in
      transformers); the 2 largest p_e; w_e = p_e / (sum of those 2)
      (ALWAYS renormalised: no norm_topk_prob in this config class; so
      this is softmax over the 2 chosen logits);
    expert e: G = gate_up_proj[e] [64, 64]: gate = G[:32] x, up = G[32:] x,
      h_e = down_proj[e] @ (silu(gate) * up);
    y = sum_e w_e h_e + sigmoid(shared_expert_gate.weight . x)
        * shared_expert.down(silu(shared_expert.gate(x)) * shared_expert.up(x)).
  logits = rms1p(h, model.norm) @ lm_head.weight^T (untied).
Qwen3-Next: the same model (every norm as Qwen3.5's: (1 + w), zero-centred,
  in input_layernorm, post_attention_layernorm, model.norm, q_norm, k_norm;
  plain w in linear_attn.norm, the gated norm: norm, then * silu(z); the
  attention's per-head [q | gate] q_proj and sigmoid output gate; partial
  rotary, plain RoPE), with every MLP the MoE block above (norm_topk_prob
  true: renormalised; false would leave the 2 softmax probabilities as they
  are), and its linear attention's projections PACKED PER KEY HEAD
  (fix_query_key_value_ordering), r = nv / nk = 2 value heads per key head:
    in_proj_qkvz [nk * (2 dk + 2 r dv) = 192, 64]: key head g's block of 96
      rows is [q_g (16) | k_g (16) | v (r heads of 16: value heads g r,
      g r + 1) | z (the same r heads)];
    in_proj_ba [nk * 2 r = 8, 64]: key head g's 4 rows are [b (r) | a (r)]
      (value heads g r, g r + 1);
    then the conv runs on [q of all key heads | k of all | v of all value
      heads, head j = g r + i] (conv1d.weight [128, 1, 4]: channels in that
      unpacked order), and the rest is Qwen3.5's delta rule: beta =
      sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias), value head j on
      key head j // r (grouped), l2norm (1e-6 inside the sqrt), q / sqrt(dk).
Granite 4.0-H (GraniteMoeHybridForCausalLM), residual h:
    h = E[token] * embedding_multiplier
    per layer: x = rms(h, input_layernorm); h += residual_multiplier * mixer(x)
               x = rms(h, post_attention_layernorm);
               h += residual_multiplier * (moe(x) + shared_mlp(x))
               (-Micro, num_local_experts 0: shared_mlp(x) alone)
    logits = rms(h, model.norm) @ E^T / logits_scaling   (tied; a divisor)
  rms(x, w) = x / sqrt(mean(x^2) + rms_norm_eps) * w (plain w everywhere).
  Attention (no biases, head_dim 64 / 4 = 16): NO rotary
    (position_embedding_type "nope"; only "rope" builds one); scores =
    q k^T * attention_multiplier (instead of 1/sqrt(16)), causal softmax,
    query head h on KV head h // 2; o_proj.
  moe(x): router logits l = x @ router.weight^T [8]; the 2 largest l_e;
    w = softmax over those 2 logits (= softmax then renormalised top 2);
    expert e: W = input_linear[e] [64, 64]: gate = W[:32] x, up = W[32:] x;
    sum_e w_e output_linear[e] @ (silu(gate) * up).
  shared_mlp(x): W = input_linear [96, 64]: output_linear @ (silu(W[:48] x)
    * W[48:] x); added ungated (granite_micro_tiny: [192, 64], W[:96] and
    W[96:], output_linear [64, 96]).
  Mamba-2 mixer (GraniteMoeHybridMambaLayer; d_inner D = 128, heads H = 8
  of P = 16, state N = 16, groups G = 2, kernel K = 4):
    zxbcdt = in_proj(x) [T, 328] = [z (D) | x (D) | B (G N) | C (G N) |
      dt (H)];
    xBC = silu(conv(x | B | C)): depthwise causal over those 192 channels,
      conv1d.weight [192, 1, 4] (w[.., 3] on the current token) PLUS
      conv1d.bias, silu after; z and dt are not convolved;
    dt = softplus(dt + dt_bias) (torch's, threshold 20), clamped to
      time_step_limit (here (0, inf): no-op; transformers' single-token
      decode path does not clamp at all, llama.cpp never);
    A = -exp(A_log) [H]; head h reads B, C of group h // (H / G) (heads 0-3
      group 0, 4-7 group 1);
    per head, state S [P, N] from 0, per token:
      S = exp(dt_h A_h) S + dt_h x_h (outer) B_g;  y_h = S C_g + D_h x_h;
    y [T, D] = concat heads; y = y * silu(z) (the gate FIRST), then RMS
      normalised per group of D / G = 64 channels (eps rms_norm_eps) times
      norm.weight [128] (plain w): norm(y * silu(z)) * w, not
      norm(y) * w * silu(z) (norm_before_gate False);
    out_proj [64, 128]. A cache keeps the last K - 1 = 3 rows of
    [x | B | C] before the conv and S [H, P, N].

Run in the oracle venv (torch 2.15 CPU, transformers 5.23.0):
    VENV/bin/python tests/golden/make_hybrid_golden.py [qwen35_tiny lfm2_tiny
        qwen35_moe_tiny qwen3_next_tiny granite_hybrid_tiny granite_micro_tiny]
"""
import contextlib
import copy
import inspect
import json
import os
import re
import sys
import tempfile
import textwrap

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from transformers import (GraniteMoeHybridConfig, GraniteMoeHybridForCausalLM, Lfm2Config, Lfm2ForCausalLM,
                          Qwen3_5Config, Qwen3_5ForConditionalGeneration, Qwen3_5MoeConfig,
                          Qwen3_5MoeForConditionalGeneration, Qwen3NextConfig, Qwen3NextForCausalLM)
import transformers.models.granitemoehybrid.modeling_granitemoehybrid as modeling_granitemoehybrid
import transformers.models.lfm2.modeling_lfm2 as modeling_lfm2
import transformers.models.qwen3_5.modeling_qwen3_5 as modeling_qwen3_5
import transformers.models.qwen3_5_moe.modeling_qwen3_5_moe as modeling_qwen3_5_moe
import transformers.models.qwen3_next.modeling_qwen3_next as modeling_qwen3_next

HERE = os.path.dirname(os.path.abspath(__file__))


def bf16(t):
    return t.to(torch.bfloat16).to(t.dtype)


# ---------------------------------------------------------------------------
# float64 throughout. transformers computes these pieces in float32 whatever
# the model's dtype; the reference takes transformers' own source with the
# float32 casts edited out (each edit counted, so a changed transformers
# stops this script rather than silently computing something else).

def retyped(fn, edits, decorators=()):
    """`fn` recompiled from its own source with each (old, new, count) edit."""
    fn = inspect.unwrap(fn)
    src = textwrap.dedent(inspect.getsource(fn))
    lines = src.splitlines(keepends=True)
    while lines[0].lstrip().startswith("@"):  # re-applied below
        lines.pop(0)
    src = "".join(lines)
    for old, new, count in edits:
        if src.count(old) != count:
            sys.exit(f"{fn.__qualname__}: {src.count(old)} of {old!r}, expected {count}: transformers changed")
        src = src.replace(old, new)
    local = {}  # defined against the module's live globals, so patched names resolve
    exec(compile(src, f"<float64 {fn.__qualname__}>", "exec"), fn.__globals__, local)
    new = local[fn.__name__]
    for d in reversed(decorators):
        new = d(new)
    return new


def _rotary_edits():
    # cos/sin from float64 positions and float64 inverse frequencies
    # (transformers: float32 positions times the float32 inv_freq buffer).
    return [(".float()", ".double()", 1),
            ("self.inv_freq.to(device=x.device, dtype=torch.float)",
             "self.compute_default_rope_parameters(self.config)[0].to(x.device)", 1)]


def eager_patch(m):
    """Eager attention's softmax(dtype=float32) in the query's dtype."""
    return (m, "eager_attention_forward",
            retyped(m.eager_attention_forward, [("dtype=torch.float32", "dtype=query.dtype", 1)]))


def qwen35_patches():
    m = modeling_qwen3_5
    rot = m.Qwen3_5TextRotaryEmbedding
    return [
        eager_patch(m),
        (m.Qwen3_5RMSNorm, "forward", retyped(m.Qwen3_5RMSNorm.forward, [(".float()", "", 2)])),
        (m.Qwen3_5RMSNormGated, "forward",
         retyped(m.Qwen3_5RMSNormGated.forward, [("torch.float32", "input_dtype", 2)])),
        (m, "torch_chunk_gated_delta_rule",
         retyped(m.torch_chunk_gated_delta_rule, [("torch.float32", "initial_dtype", 1)])),
        (m, "torch_recurrent_gated_delta_rule",
         retyped(m.torch_recurrent_gated_delta_rule, [("torch.float32", "initial_dtype", 1)])),
        # g = -A_log.float().exp() * softplus(a.float() + dt_bias)
        (m.Qwen3_5GatedDeltaNet, "forward",
         retyped(m.Qwen3_5GatedDeltaNet.forward,
                 [("-self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias)",
                   "-self.A_log.exp() * F.softplus(a + self.dt_bias)", 1)],
                 [m.force_accelerate_hooks("conv1d")])),
        (rot, "compute_default_rope_parameters",
         staticmethod(retyped(rot.compute_default_rope_parameters, [("dtype=torch.float)", "dtype=torch.float64)", 1)]))),
        (rot, "forward", retyped(rot.forward, _rotary_edits(), [torch.no_grad(), m.dynamic_rope_update])),
    ]


def lfm2_patches():
    m = modeling_lfm2
    rot = m.Lfm2RotaryEmbedding
    return [
        eager_patch(m),
        (m.Lfm2RMSNorm, "forward", retyped(m.Lfm2RMSNorm.forward, [("torch.float32", "input_dtype", 1)])),
        (rot, "compute_default_rope_parameters",
         staticmethod(retyped(rot.compute_default_rope_parameters, [("dtype=torch.float)", "dtype=torch.float64)", 1)]))),
        (rot, "forward", retyped(rot.forward, _rotary_edits(), [torch.no_grad(), m.dynamic_rope_update])),
    ]


@contextlib.contextmanager
def patched(patches):
    saved = [(owner, attr, owner.__dict__[attr]) for owner, attr, _ in patches]
    try:
        for owner, attr, new in patches:
            setattr(owner, attr, new)
        yield
    finally:
        for owner, attr, old in saved:
            setattr(owner, attr, old)


class DtypeWatch(TorchDispatchMode):
    """Counts the aten ops that produce a floating tensor other than float64."""

    def __init__(self):
        super().__init__()
        self.narrow = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64:
                key = f"{func} -> {t.dtype}"
                self.narrow[key] = self.narrow.get(key, 0) + 1
        return out


# ---------------------------------------------------------------------------
# As make_family_golden.py.

class Bf16Linear(TorchFunctionMode):
    """Rounds both operands of every F.linear to bf16: in transformers 5 the
    experts (3-D gate_up_proj / down_proj) and the routers are F.linear
    calls, no nn.Linear, which Flover computes in bf16 as any other matmul.
    (For an nn.Linear, whose weight and input are rounded already, it rounds
    nothing more.)"""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear:
            self.calls += 1
            x, w = args[0], args[1] if len(args) > 1 else kwargs.pop("weight")
            args = (bf16(x), bf16(w), *args[2:])
        return func(*args, **kwargs)


def emulated_logits(model, module, prompts, kv, round_values, functional=False):
    """Logits in float32 with Flover's bf16 rounding: every Linear's weight
    and input (with `functional` every F.linear's, the experts' and routers'
    too); with `kv` also keys after rotary (`module`'s apply_rotary_pos_emb;
    None where there is no rotary) and values (`round_values(model)` returns
    hooks)."""
    saved, hooks = {}, []
    original_rope = module.apply_rotary_pos_emb if module is not None else None
    # A tied head is its own bf16 copy in Flover; the embedding stays f32.
    head, table = model.get_output_embeddings(), model.get_input_embeddings()
    tied = head.weight is table.weight
    if tied:
        head.weight = torch.nn.Parameter(table.weight.detach().clone())
    try:
        for mod in model.modules():
            if isinstance(mod, torch.nn.Linear):
                saved[mod] = mod.weight.data.clone()
                mod.weight.data = bf16(mod.weight.data)
                hooks.append(mod.register_forward_pre_hook(lambda m, inp: (bf16(inp[0]),)))
        if kv and module is not None:
            def rope(q, k, cos, sin, *args, **kwargs):
                q_embed, k_embed = original_rope(q, k, cos, sin, *args, **kwargs)
                return q_embed, bf16(k_embed)
            module.apply_rotary_pos_emb = rope
        if kv:
            hooks.extend(round_values(model))
        with torch.no_grad(), (Bf16Linear() if functional else contextlib.nullcontext()):
            return [model(torch.tensor([p]), use_cache=False).logits[0].float().contiguous() for p in prompts]
    finally:
        if module is not None:
            module.apply_rotary_pos_emb = original_rope
        for h in hooks:
            h.remove()
        for mod, w in saved.items():
            mod.weight.data = w
        if tied:
            head.weight = table.weight


def attention_values(layers):
    """Rounds the values of the full-attention layers only (the recurrent
    layers keep no K/V cache)."""
    def hooks(model):
        return [layer.self_attn.v_proj.register_forward_hook(lambda m, inp, out: bf16(out))
                for layer in layers(model) if hasattr(layer, "self_attn")]
    return hooks


def logits64(model, patches, prompt):
    with patched(patches), torch.no_grad():
        return model(torch.tensor([prompt]), use_cache=False).logits[0]


def double_of(model, config=None):
    other = type(model)(copy.deepcopy(config if config is not None else model.config)).eval().double()
    other.load_state_dict(model.state_dict())
    return other


def must_matter(name, model, patches, prompt, what, change=None, alter=None):
    """Exits unless `change` (a function of a copy of the config) or `alter`
    (a function of a float64 copy of the model that changes its weights, or
    adds hooks or float64 patches, which it returns) changes the float64
    logits of `prompt`: a fixture that exercises nothing proves nothing."""
    config = copy.deepcopy(model.config)
    if change is not None:
        change(config)
    other = double_of(model, config)
    added = (alter(other) if alter is not None else None) or []
    hooks = [h for h in added if not isinstance(h, tuple)]
    try:
        a = logits64(model, patches, prompt)
        b = logits64(other, patches + [p for p in added if isinstance(p, tuple)], prompt)
    finally:
        for h in hooks:
            h.remove()
    if torch.allclose(a, b, rtol=1e-6, atol=1e-6):
        sys.exit(f"{name}: {what} changed nothing")
    print(f"  {name}: {what} matters: max |logit change| {(a - b).abs().max().item():.3g}")


def make(name, config, model_class, module, patches, round_values, seed, perturb, positions=None,
         functional=False, layout=None, edit_config=None):
    """make_family_golden.py's `make`, the float64 model under `patches`.
    model.safetensors holds the model's state_dict under the names
    save_pretrained writes (checked equal) unless `layout` says otherwise:
    "saved", what save_pretrained writes (transformers 5 renames and splits
    some tensors on saving: the released checkpoints' names); "fused", the
    model's own fused expert tensors (as Qwen3.5-MoE is released), checked
    equal to the per-expert tensors save_pretrained writes. `edit_config`
    edits config.json's dict (where the released files differ from what
    to_json_file writes)."""
    torch.manual_seed(seed)
    model = model_class(config).eval()
    with torch.no_grad():  # non-trivial norms and biases, so every parameter matters
        for pname, p in model.named_parameters():
            if "norm" in pname or ".ln_" in pname or pname.endswith(".bias"):
                p.add_(0.3 * torch.randn_like(p))
        perturb(model)
    out_dir = os.path.join(HERE, name)
    os.makedirs(out_dir, exist_ok=True)
    tensors = {k: v.detach().contiguous() for k, v in model.state_dict().items()
               if "rotary_emb" not in k}
    if config.tie_word_embeddings:  # saved once, as transformers saves it
        tensors.pop("lm_head.weight", None)
    with tempfile.TemporaryDirectory() as tmp:  # the names transformers saves
        model.save_pretrained(tmp)
        if layout is None:
            with safe_open(os.path.join(tmp, "model.safetensors"), "pt") as f:
                if set(f.keys()) != set(tensors):
                    sys.exit(f"{name}: save_pretrained writes {sorted(set(f.keys()) ^ set(tensors))} differently")
        else:
            saved = load_file(os.path.join(tmp, "model.safetensors"))
    if layout == "saved":
        tensors = {k: v.contiguous() for k, v in saved.items()}
    elif layout == "fused":
        check_fused(name, tensors, saved)
    save_file(tensors, os.path.join(out_dir, "model.safetensors"))
    os.chmod(os.path.join(out_dir, "model.safetensors"), 0o644)  # save_file writes 0600
    write_config(out_dir, config, edit_config)

    text = config.get_text_config()
    V, P = text.vocab_size, positions or text.max_position_embeddings
    g = torch.Generator().manual_seed(seed + 1)
    prompts = [torch.randint(0, V, (n,), generator=g).tolist() for n in (1, 7, 20, P - 2)]
    logits = {}
    double = double_of(model)
    with torch.no_grad():
        for i, p in enumerate(prompts):
            logits[f"logits.{i}"] = logits64(double, patches, p).float().contiguous()
    seq = greedy(double, patches, prompts[1])
    for kind, kv in (("bf16", False), ("bf16kv", True)):
        for i, l in enumerate(emulated_logits(model, module, prompts, kv, round_values, functional)):
            logits[f"logits_{kind}.{i}"] = l
    write_goldens(out_dir, name, prompts, logits, seq)
    return double, prompts, logits


def write_config(out_dir, config, edit=None):
    """config.json as to_json_file writes it, then `edit` (a dict -> dict:
    the keys as the released checkpoint spells them) written back the same way."""
    path = os.path.join(out_dir, "config.json")
    config.to_json_file(path)
    if edit is not None:
        with open(path) as f:
            edited = edit(json.load(f))
        with open(path, "w") as f:
            f.write(json.dumps(edited, indent=2, sort_keys=True) + "\n")  # as to_json_file


def write_goldens(out_dir, name, prompts, logits, seq):
    """golden_logits.safetensors (`logits`) and golden.json (the prompts, and
    the greedy continuation `seq` of prompts[1]); refuses a greedy run that
    repeats itself, which would test little."""
    save_file(logits, os.path.join(out_dir, "golden_logits.safetensors"))
    os.chmod(os.path.join(out_dir, "golden_logits.safetensors"), 0o644)
    with open(os.path.join(out_dir, "golden.json"), "w") as f:
        json.dump({"prompts": prompts, "greedy_prompt": prompts[1],
                   "greedy_output": seq[len(prompts[1]):], "stored_dtype": "float32"}, f)
    if len(set(seq[len(prompts[1]):])) < 8:
        sys.exit(f"{name}: the greedy run repeats itself: {seq[len(prompts[1]):]}")
    print(f"{name}: greedy {seq[len(prompts[1]):]}")


# ---------------------------------------------------------------------------
# Checks of the float64 reference.

def check_reference(name, double, patches, prompts, logits, prefill=(50, 50)):
    """(a) and (b) below; `prefill`: the two chunks before the token-by-token
    run (fit to the long prompt's length)."""
    long = prompts[3]
    # (a) nothing narrower than float64 anywhere in the patched forward
    watch = DtypeWatch()
    with watch:
        exact = logits64(double, patches, long)
    if watch.narrow:
        sys.exit(f"{name}: the float64 forward still narrows: {watch.narrow}")
    # ... and what the patches removed
    watch = DtypeWatch()
    with watch, torch.no_grad():
        plain = double(torch.tensor([long]), use_cache=False).logits[0]
    print(f"  {name}: unpatched float64 forward narrows in {sum(watch.narrow.values())} ops "
          f"({', '.join(sorted(watch.narrow))})")
    print(f"  {name}: max |patched - unpatched float64| = {(exact - plain).abs().max().item():.3g} "
          f"(logits up to {exact.abs().max().item():.3g})")
    # (b) full forward == token by token with the cache (generate-style),
    # and == the two prefill chunks, then token by token
    scale = exact.abs().max().item()
    for split in ((1,) * len(long), tuple(prefill) + (1,) * (len(long) - sum(prefill))):
        rows, cache, at = [], None, 0
        watch = DtypeWatch()
        with patched(patches), torch.no_grad(), watch:
            for n in split:
                out = double(torch.tensor([long[at:at + n]]), past_key_values=cache, use_cache=True)
                cache, at = out.past_key_values, at + n
                rows.append(out.logits[0])
        if watch.narrow:
            sys.exit(f"{name}: the cached float64 forward narrows: {watch.narrow}")
        step = torch.cat(rows)
        err = (step - exact).abs().max().item() / scale
        what = "token by token" if split[0] == 1 else f"prefill {prefill[0]} + {prefill[1]}, then token by token"
        print(f"  {name}: {what} with the cache vs full forward: max |diff| / max |logit| = {err:.3g}")
        if err > 1e-12:
            sys.exit(f"{name}: the cached run differs from the full forward")
    if not torch.equal(exact.float(), logits["logits.3"]):
        sys.exit(f"{name}: logits.3 is not the checked reference")


def rounding_sensitivity(name, double, module, patches, prompts, round_values, logits, functional=False,
                         emulate=None):
    """The bf16 emulation again with float64 arithmetic between the same
    roundings: how far an implementation that rounds exactly where
    emulated_logits does, but computes the rest differently, may land from
    logits_bf16*.{i} (a value on a bf16 rounding boundary rounds the other
    way). Printed, for the tolerances of the tests that read the fixture.
    `emulate(model, prompts, kv)`: a family's own bf16 emulation."""
    if emulate is None:
        emulate = lambda model, runs, kv: emulated_logits(model, module, runs, kv, round_values, functional)  # noqa: E731
    with torch.no_grad():  # transformers' own float32 (its float32 casts and all)
        f32 = [double.float()(torch.tensor([p]), use_cache=False).logits[0] for p in prompts]
        double.double()
    rows = torch.cat([(a - logits[f"logits.{i}"]).abs().max(1).values / logits[f"logits.{i}"].abs().max(1).values
                      for i, a in enumerate(f32)])
    print(f"  {name}: transformers in float32 vs logits (float64): max {rows.max().item():.3g}")
    for kind, kv in (("bf16", False), ("bf16kv", True)):
        with patched(patches):
            again = emulate(double, prompts, kv)
        rows = torch.cat([(a.float() - logits[f"logits_{kind}.{i}"]).abs().max(1).values
                          / logits[f"logits_{kind}.{i}"].abs().max(1).values for i, a in enumerate(again)])
        away = torch.cat([(logits[f"logits_{kind}.{i}"] - logits[f"logits.{i}"]).abs().max(1).values
                          / logits[f"logits.{i}"].abs().max(1).values for i in range(len(prompts))])
        print(f"  {name}: logits_{kind} vs logits (float64): max {away.max().item():.3g}, median "
              f"{away.median().item():.3g}; the same roundings in float64 vs logits_{kind}: max "
              f"{rows.max().item():.3g}, median {rows.median().item():.3g}")


def reload_check(name, model_class, patches, prompts, logits):
    """config.json and model.safetensors alone reproduce the references."""
    d = os.path.join(HERE, name)
    config = model_class.config_class.from_pretrained(d)
    for c in (config, *(getattr(config, k) for k in ("text_config", "vision_config") if hasattr(config, k))):
        c._attn_implementation = "eager"
    model = model_class(config).eval()
    tensors = load_file(os.path.join(d, "model.safetensors"))
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    # What from_pretrained drops as the released checkpoints have it (Qwen3.5's
    # mtp.*: make_mtp_golden.py).
    ignored = getattr(model_class, "_keys_to_ignore_on_load_unexpected", None) or []
    unexpected = [k for k in unexpected if not any(re.search(p, k) for p in ignored)]
    if config.tie_word_embeddings and missing == ["lm_head.weight"]:
        missing = []
        assert model.lm_head.weight is model.get_input_embeddings().weight
    if missing or unexpected:
        sys.exit(f"{name}: reloading: missing {missing}, unexpected {unexpected}")
    model = model.double()
    worst = max((logits64(model, patches, p).float() - logits[f"logits.{i}"]).abs().max().item()
                for i, p in enumerate(prompts))
    print(f"  {name}: reloaded from config.json + model.safetensors: max |logit - golden| {worst:.3g}")
    if worst != 0.0:
        sys.exit(f"{name}: the files do not reproduce the references")


# ---------------------------------------------------------------------------

def qwen35():
    m = modeling_qwen3_5
    text = dict(vocab_size=331, hidden_size=64, intermediate_size=96, num_hidden_layers=8,
                layer_types=["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3
                + ["full_attention"],
                num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                                 "mrope_section": [2, 1, 1], "mrope_interleaved": True},
                linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
                linear_value_head_dim=16, linear_conv_kernel_dim=4, max_position_embeddings=128,
                tie_word_embeddings=True, rms_norm_eps=1e-6, initializer_range=0.2, eos_token_id=2)
    vision = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, patch_size=4,
                  temporal_patch_size=2, spatial_merge_size=2, out_hidden_size=64, num_position_embeddings=16)
    config = Qwen3_5Config(text_config=text, vision_config=vision, tie_word_embeddings=True)
    config.architectures = ["Qwen3_5ForConditionalGeneration"]
    for c in (config, config.text_config, config.vision_config):
        c._attn_implementation = "eager"

    def perturb(model):
        """A_log, dt_bias perturbed; and conditioned for bf16 (see the docstring)."""
        g = torch.Generator().manual_seed(90)
        model.get_input_embeddings().weight.mul_(3.0)
        for layer in model.model.language_model.layers:
            if hasattr(layer, "linear_attn"):
                la = layer.linear_attn
                n, kd = la.A_log.numel(), la.key_dim
                la.A_log.copy_(torch.empty(n).uniform_(0.01, 0.1, generator=g).log())
                la.dt_bias.add_(0.3 * torch.randn(n, generator=g))
                for w in (la.in_proj_qkv.weight, la.conv1d.weight):  # keys correlated with queries
                    w[kd:2 * kd] = 0.9 * w[:kd] + 0.19 ** 0.5 * w[kd:2 * kd]

    patches = qwen35_patches()
    layers = lambda model: model.model.language_model.layers  # noqa: E731
    double, prompts, logits = make("qwen35_tiny", config, Qwen3_5ForConditionalGeneration, m, patches,
                                   attention_values(layers), 97, perturb)
    print(f"  attention implementation: {double.model.language_model.layers[3].self_attn.config._attn_implementation}")
    check_reference("qwen35_tiny", double, patches, prompts, logits)
    reload_check("qwen35_tiny", Qwen3_5ForConditionalGeneration, patches, prompts, logits)
    rounding_sensitivity("qwen35_tiny", double, m, patches, prompts, attention_values(layers), logits)
    return double, prompts, patches


def qwen35_must_matter(double, prompts, patches):
    m = modeling_qwen3_5
    name, long = "qwen35_tiny", prompts[3]
    t = double.config.text_config
    H, D = t.num_attention_heads, t.head_dim

    def partial(c):
        c.text_config.rope_parameters["partial_rotary_factor"] = 0.5
    must_matter(name, double, patches, long, "the partial rotary (8 of 32 dims, not 16)", change=partial)

    def attn_layers(model):
        return [l.self_attn for l in model.model.language_model.layers if hasattr(l, "self_attn")]

    def no_gate(model):  # gate half of each head's q_proj rows saturated: sigmoid = 1
        def hook(mod, inp, out):
            out = out.view(*out.shape[:-1], H, 2 * D).clone()
            out[..., D:] = 40.0
            return out.view(*out.shape[:-2], -1)
        return [a.q_proj.register_forward_hook(hook) for a in attn_layers(model)]
    must_matter(name, double, patches, long, "the attention output gate sigmoid(gate)", alter=no_gate)

    def blocked(model):  # q_proj read as [all q | all gates] instead of per head [q, gate]
        def hook(mod, inp, out):
            q, g = out[..., :H * D], out[..., H * D:]
            return torch.stack([q.view(*q.shape[:-1], H, D), g.view(*g.shape[:-1], H, D)], -2).flatten(-3)
        return [a.q_proj.register_forward_hook(hook) for a in attn_layers(model)]
    must_matter(name, double, patches, long, "the per-head [q, gate] layout of q_proj", alter=blocked)

    def linear(model):
        return [l.linear_attn for l in model.model.language_model.layers if hasattr(l, "linear_attn")]

    def swap_qk(model):  # in_proj_qkv's rows (and the conv's channels) read as [k, q, v]
        with torch.no_grad():
            for la in linear(model):
                kd = la.key_dim
                for w in (la.in_proj_qkv.weight, la.conv1d.weight):
                    w.copy_(torch.cat([w[kd:2 * kd], w[:kd], w[2 * kd:]]))
        return None
    must_matter(name, double, patches, long, "the q, k, v order of in_proj_qkv (q and k swapped)", alter=swap_qk)

    def current_tap_only(model):
        with torch.no_grad():
            for la in linear(model):
                la.conv1d.weight[..., :-1] = 0
        return None
    must_matter(name, double, patches, long, "the conv kernel's taps on past tokens", alter=current_tap_only)

    def flipped(model):
        with torch.no_grad():
            for la in linear(model):
                la.conv1d.weight.copy_(la.conv1d.weight.flip(-1))
        return None
    must_matter(name, double, patches, long, "the conv kernel's orientation (flipped)", alter=flipped)

    def a_log(model):
        with torch.no_grad():
            for la in linear(model):
                la.A_log.add_(0.5)
        return None
    must_matter(name, double, patches, long, "A_log (+0.5)", alter=a_log)

    def dt_bias(model):
        with torch.no_grad():
            for la in linear(model):
                la.dt_bias.zero_()
        return None
    must_matter(name, double, patches, long, "dt_bias (zeroed)", alter=dt_bias)

    def plain_norms(model):  # (1 + w) read as w
        return [(m.Qwen3_5RMSNorm, "forward",
                 retyped(m.Qwen3_5RMSNorm.forward, [(".float()", "", 2), ("(1.0 + self.weight)", "self.weight", 1)]))]
    must_matter(name, double, patches, long, "the (1 + w) zero-centred norms (as plain w)", alter=plain_norms)

    def centred_gated_norm(model):  # the gated norm's plain w read as (1 + w)
        return [(m.Qwen3_5RMSNormGated, "forward",
                 retyped(m.Qwen3_5RMSNormGated.forward, [("torch.float32", "input_dtype", 2),
                                                         ("self.weight * hidden_states", "(1.0 + self.weight) * hidden_states", 1)]))]
    must_matter(name, double, patches, long, "the gated norm's plain w (as 1 + w)", alter=centred_gated_norm)

    def tiled(model):  # value head j on key head j % n_k instead of j // (n_v / n_k)
        edits = [("torch.float32", "initial_dtype", 1),
                 (".repeat_interleave(num_v_heads // num_k_heads, dim=2)", ".repeat(1, 1, num_v_heads // num_k_heads, 1)", 2)]
        return [(m, "torch_chunk_gated_delta_rule", retyped(m.torch_chunk_gated_delta_rule, edits)),
                (m, "torch_recurrent_gated_delta_rule", retyped(m.torch_recurrent_gated_delta_rule, edits))]
    must_matter(name, double, patches, long, "the grouping of value heads on key heads (repeat_interleave, not tile)",
                alter=tiled)


def qwen35_decay_stats(double, prompts, patches):
    """Per-token decay exp(g) and beta of the linear-attention layers."""
    stats = []
    def hook(mod, args, kwargs, out):
        x = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
        a, b = mod.in_proj_a(x), mod.in_proj_b(x)
        g = -mod.A_log.exp() * F.softplus(a + mod.dt_bias)
        stats.append((g.exp(), b.sigmoid()))
    hooks = [l.linear_attn.register_forward_hook(hook, with_kwargs=True) for l in double.model.language_model.layers
             if hasattr(l, "linear_attn")]
    logits64(double, patches, prompts[3])
    for h in hooks:
        h.remove()
    d = torch.cat([s[0].flatten() for s in stats])
    b = torch.cat([s[1].flatten() for s in stats])
    print(f"  qwen35_tiny: decay exp(g) quartiles {[round(v, 3) for v in d.quantile(torch.tensor([0.0, .25, .5, .75, 1.0], dtype=d.dtype)).tolist()]}, "
          f"beta quartiles {[round(v, 3) for v in b.quantile(torch.tensor([0.0, .25, .5, .75, 1.0], dtype=b.dtype)).tolist()]}")


def lfm2():
    m = modeling_lfm2
    layer_types = ["conv", "conv", "full_attention", "conv", "full_attention", "conv"]
    config = Lfm2Config(vocab_size=331, hidden_size=64, intermediate_size=128, num_hidden_layers=6,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                        initializer_range=0.2, norm_eps=1e-5, conv_L_cache=3, conv_bias=False,
                        block_multiple_of=32, block_ffn_dim_multiplier=1.0, block_auto_adjust_ff_dim=True,
                        layer_types=layer_types,
                        full_attn_idxs=[i for i, t in enumerate(layer_types) if t == "full_attention"],
                        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                        tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    config.architectures = ["Lfm2ForCausalLM"]
    config._attn_implementation = "eager"
    patches = lfm2_patches()
    layers = lambda model: model.model.layers  # noqa: E731
    double, prompts, logits = make("lfm2_tiny", config, Lfm2ForCausalLM, m, patches,
                                   attention_values(layers), 99, lambda model: None)
    print(f"  MLP width {double.model.layers[0].feed_forward.w1.out_features} "
          f"(intermediate_size {config.intermediate_size})")
    check_reference("lfm2_tiny", double, patches, prompts, logits)
    reload_check("lfm2_tiny", Lfm2ForCausalLM, patches, prompts, logits)
    rounding_sensitivity("lfm2_tiny", double, m, patches, prompts, attention_values(layers), logits)
    return double, prompts, patches


def lfm2_must_matter(double, prompts, patches):
    name, long = "lfm2_tiny", prompts[3]
    C = double.config.hidden_size

    def convs(model):
        return [l.conv for l in model.model.layers if hasattr(l, "conv")]

    def current_tap_only(model):
        with torch.no_grad():
            for c in convs(model):
                c.conv.weight[..., :-1] = 0
        return None
    must_matter(name, double, patches, long, "the conv kernel's taps on past tokens", alter=current_tap_only)

    def flipped(model):
        with torch.no_grad():
            for c in convs(model):
                c.conv.weight.copy_(c.conv.weight.flip(-1))
        return None
    must_matter(name, double, patches, long, "the conv kernel's orientation (flipped)", alter=flipped)

    def swap_bc(model):  # in_proj's rows read as [C, B, x] instead of [B, C, x]
        with torch.no_grad():
            for c in convs(model):
                w = c.in_proj.weight
                w.copy_(torch.cat([w[C:2 * C], w[:C], w[2 * C:]]))
        return None
    must_matter(name, double, patches, long, "the B, C order of in_proj (B gates before the conv, C after)",
                alter=swap_bc)

    def no_qk_norm(model):
        for l in model.model.layers:
            if hasattr(l, "self_attn"):
                l.self_attn.q_layernorm = torch.nn.Identity()
                l.self_attn.k_layernorm = torch.nn.Identity()
        return None
    must_matter(name, double, patches, long, "the per-head q/k layernorms", alter=no_qk_norm)

    def theta(c):
        c.rope_parameters["rope_theta"] = 10000.0
    must_matter(name, double, patches, long, "rope_theta (1e6, not 1e4)", change=theta)


# ---------------------------------------------------------------------------
# Qwen3.5-MoE, Qwen3-Next, Granite 4.0-H: shared pieces.

SEEDS = {"qwen35_moe_tiny": 318, "qwen3_next_tiny": 309, "granite_hybrid_tiny": 306, "granite_micro_tiny": 300}
GRANITE_CHUNK = 16  # mamba_chunk_size (released: 256): 126 tokens span 8 chunks
GRANITE_EMBED = 0.15  # the embeddings' scale (before embedding_multiplier 12)
GRANITE_A = (0.05, 0.5)  # A = exp(A_log) drawn from U(GRANITE_A)
GRANITE_DT = -1.0  # dt_bias = GRANITE_DT + 0.5 randn
GRANITE_LAYERS = ["mamba", "attention", "mamba", "attention"]
# Granite 4.0-H's MLPs: 8 experts of 32 (2 per token) beside a shared MLP of
# 48 (as -Tiny); or no experts and the shared MLP alone, 96 wide (as -Micro,
# whose released config.json has num_experts_per_tok 0 and intermediate_size
# equal to shared_intermediate_size: transformers reads neither without
# experts, llama.cpp's converter writes intermediate_size as
# feed_forward_length, the width llama.cpp reads ffn_gate / ffn_up / ffn_down
# at, and llama.cpp refuses an expert_used_count without experts).
GRANITE_MLP = {
    "granite_hybrid_tiny": dict(num_local_experts=8, num_experts_per_tok=2, intermediate_size=32,
                                shared_intermediate_size=48),
    "granite_micro_tiny": dict(num_local_experts=0, num_experts_per_tok=0, intermediate_size=96,
                               shared_intermediate_size=96),
}

def check_fused(name, tensors, saved):
    """The model's fused expert tensors (gate_up_proj [E, 2I, H]: each
    expert's gate rows, then its up rows; down_proj [E, H, I]) hold exactly
    the per-expert tensors save_pretrained writes; all else is equal."""
    fused = {k for k in tensors if k.endswith((".mlp.experts.gate_up_proj", ".mlp.experts.down_proj"))}
    if {k for k in saved if ".mlp.experts." not in k} != set(tensors) - fused:
        sys.exit(f"{name}: save_pretrained writes other tensors than the fused layout's")
    for k, v in saved.items():
        base, sep, rest = k.partition(".mlp.experts.")
        if sep:
            e, proj = rest.split(".")[:2]
            gate_up, down = tensors[f"{base}.mlp.experts.gate_up_proj"], tensors[f"{base}.mlp.experts.down_proj"]
            half = gate_up.shape[1] // 2
            want = {"gate_proj": gate_up[int(e), :half], "up_proj": gate_up[int(e), half:],
                    "down_proj": down[int(e)]}[proj]
        else:
            want = tensors[k]
        if not torch.equal(v, want):
            sys.exit(f"{name}: {k} as save_pretrained writes it is not the fused tensors' slice")
    print(f"  {name}: the {len(fused)} fused expert tensors hold save_pretrained's "
          f"{sum('.mlp.experts.' in k for k in saved)} per-expert ones exactly")


def reload_pretrained(name, model_class, patches, prompts, logits):
    """config.json and model.safetensors alone, read by from_pretrained (its
    renaming of the saved names included), reproduce the references."""
    d = os.path.join(HERE, name)
    model, info = model_class.from_pretrained(d, dtype=torch.float32, attn_implementation="eager",
                                              experts_implementation="eager", output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    if problems:
        sys.exit(f"{name}: from_pretrained: {problems}")
    model = model.eval().double()
    worst = max((logits64(model, patches, p).float() - logits[f"logits.{i}"]).abs().max().item()
                for i, p in enumerate(prompts))
    print(f"  {name}: from_pretrained(config.json + model.safetensors): max |logit - golden| {worst:.3g}")
    if worst != 0.0:
        sys.exit(f"{name}: the files do not reproduce the references")


def attention_keys_values(layers):
    """Rounds the keys and values of the attention layers (no rotary: the
    keys are k_proj's output) and nothing of the recurrent ones."""
    def hooks(model):
        return [p.register_forward_hook(lambda m, inp, out: bf16(out))
                for layer in layers(model) if getattr(layer, "self_attn", None) is not None
                for p in (layer.self_attn.k_proj, layer.self_attn.v_proj)]
    return hooks


def module_io(model, patches, prompt, modules):
    """(module, input hidden_states, output) of each call of `modules` in the
    float64 forward of `prompt`."""
    seen = []

    def hook(mod, args, kwargs, out):
        x = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
        seen.append((mod, x.detach().clone(), (out[0] if isinstance(out, tuple) else out).detach().clone()))
    hooks = [m.register_forward_hook(hook, with_kwargs=True) for m in modules]
    try:
        logits64(model, patches, prompt)
    finally:
        for h in hooks:
            h.remove()
    return seen


def formula_check(name, what, model, patches, prompt, modules, reference):
    """`reference(module, x)`, the docstring's formula written out in float64
    (token by token where it is a recurrence), against each of `modules`."""
    worst = 0.0
    for mod, x, out in module_io(model, patches, prompt, modules):
        want = reference(mod, x.reshape(-1, x.shape[-1])).reshape(out.shape)
        worst = max(worst, ((want - out).abs().max() / out.abs().max()).item())
    print(f"  {name}: {what}, written out (float64) vs transformers: max |diff| / max |out| = {worst:.3g}")
    if worst > 1e-12:
        sys.exit(f"{name}: the written-out {what} is not what transformers computes")


def rms(x, w, eps):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def causal_conv(x, weight, bias=None):
    """Depthwise causal conv over time: x [T, C], weight [C, 1, K];
    out[t, c] = bias[c] + sum_j weight[c, 0, j] * x[t - K + 1 + j, c]."""
    K = weight.shape[-1]
    padded = torch.cat([x.new_zeros(K - 1, x.shape[1]), x])
    out = sum(weight[:, 0, j] * padded[j:j + x.shape[0]] for j in range(K))
    return out if bias is None else out + bias


# Smallest gap allowed between the k-th and (k+1)-th routing probabilities,
# in float64 and in both bf16 emulations (as make_moe_golden.py): summing in
# another order moves them by ~1e-6, so no token may sit near a tie.
MIN_MARGIN = 1e-4
# Smallest gap allowed between the greedy run's best two logits, over the
# largest |logit| of the position.
MIN_GAP = 1e-3


def greedy_sequence(name):
    with open(os.path.join(HERE, name, "golden.json")) as f:
        golden = json.load(f)
    return golden["greedy_prompt"] + golden["greedy_output"]


def check_greedy_gap(name, double, patches):
    """No near-tie in the greedy run (its logits from one forward of the
    whole sequence: position i's are the full recompute's at step i)."""
    seq = greedy_sequence(name)
    out = logits64(double, patches, seq)[len(seq) - 33:-1]
    top = out.topk(2, -1).values
    gap = ((top[:, 0] - top[:, 1]) / out.abs().max(-1).values).min().item()
    print(f"  {name}: greedy run: {len(set(seq[-32:]))} distinct tokens of 32, smallest best-vs-second logit "
          f"gap {gap:.3g} of the logit scale")
    if gap < MIN_GAP:
        sys.exit(f"{name}: a near-tie in the greedy run makes it fragile")


def _router_logits(out):
    """A router module's logits: its output, or the first of a tuple."""
    return out[0] if isinstance(out, tuple) else out


def routes(model, routers, run):
    """The softmax over the router logits (tokens x experts) of each of
    `routers(model)`, over what `run()` computes."""
    record = {}
    hooks = [r.register_forward_hook(
        lambda mod, inp, out, j=j: record.setdefault(j, []).append(
            torch.softmax(_router_logits(out).detach().double().reshape(-1, _router_logits(out).shape[-1]), -1)))
        for j, r in enumerate(routers(model))]
    try:
        with torch.no_grad():
            run()
    finally:
        for h in hooks:
            h.remove()
    return {j: torch.cat(v) for j, v in record.items()}


def greedy(double, patches, prompt, steps=32):
    """`steps` greedy tokens after `prompt`, each by a full recompute in float64."""
    seq = list(prompt)
    with torch.no_grad():
        for _ in range(steps):
            seq.append(int(logits64(double, patches, seq)[-1].argmax()))
    return seq


def route_margins(model, patches, runs, k, routers, emulate):
    """Per MoE layer, the smallest k-th minus (k+1)-th routing probability
    (softmax over all router logits) over `runs`: float64, and both bf16
    emulations (`emulate(model, runs, kv)`; they follow their own routing)."""
    def smallest(rec):
        return [(lambda t: (t[:, k - 1] - t[:, k]).min().item())(v.topk(k + 1, -1).values) for _, v in sorted(rec.items())]
    double = double_of(model)
    out = {"float64": smallest(routes(double, routers, lambda: [logits64(double, patches, p) for p in runs]))}
    f = copy.deepcopy(double).float()
    for kind, kv in (("bf16", False), ("bf16kv", True)):
        out[kind] = smallest(routes(f, routers, lambda: emulate(f, runs, kv)))
    return out


def tune_routers(name, model, seed, prompts, k, routers, param, patches, emulate, nudge, clear, what):
    """With k of E experts a random draw may leave some token within
    MIN_MARGIN of a routing tie in float64 or a bf16 emulation. So, layer by
    layer, `param(router)` (the router's bias, or its weight: `what`) gets +
    nudge * randn (seeded by the sweep, the layer and the trial; trial 0
    leaves it as it is) until every token of the prompts and the greedy run
    is clear * MIN_MARGIN clear of a tie in all three; layer j's routing
    depends on layers <= j, and on the later ones through the greedy
    sequence only, so the sweep is repeated until no layer needs a nudge."""
    chosen = {}
    for sweep in range(12):
        changed = False
        for j, r in enumerate(routers(model)):
            target = param(r)
            base = target.detach().clone()
            for t in range(400):
                with torch.no_grad():
                    if t:
                        g = torch.Generator().manual_seed(seed * 100000 + sweep * 10000 + j * 1000 + t)
                        target.copy_(base + nudge * torch.randn(base.shape, generator=g))
                    else:
                        target.copy_(base)
                runs = prompts + [greedy(double_of(model), patches, prompts[1])]
                worst = min(v[j] for v in route_margins(model, patches, runs, k, routers, emulate).values())
                if worst >= clear * MIN_MARGIN:
                    break
            else:
                sys.exit(f"{name}: no router {what} nudge clears layer {j}'s routing ties")
            if t:
                changed = True
                chosen.setdefault(j, []).append((sweep, t))
        if not changed:
            print(f"{name}: router {what} nudged (MoE layer: [(sweep, trial), ...]) {chosen}")
            return
    sys.exit(f"{name}: the router nudges do not settle")


def check_routing(name, double, module, patches, prompts, routers, k, round_values, emulate=None):
    """As make_moe_golden.py: every expert used in every MoE layer, at least
    8 distinct expert sets, and over the prompts and the greedy sequence the
    k-th and (k+1)-th routing probabilities at least MIN_MARGIN apart in
    float64 and in both bf16 emulations (whose logits_bf16* follow their own
    routing: how often it differs from float64's is printed). `emulate(model,
    runs, kv)`: a family's own bf16 emulation (make_gpt_oss_golden.py's)."""
    if emulate is None:
        emulate = lambda model, runs, kv: emulated_logits(model, module, runs, kv, round_values, True)  # noqa: E731
    runs = prompts + [greedy_sequence(name)]
    ref = routes(double, routers, lambda: [logits64(double, patches, p) for p in runs])
    margins, counts, sets = {}, [], []
    for j, probs in sorted(ref.items()):
        top = probs.topk(k + 1, -1)
        counts.append(torch.bincount(top.indices[:, :k].flatten(), minlength=probs.shape[-1]).tolist())
        sets.append(len({tuple(sorted(row)) for row in top.indices[:, :k].tolist()}))
        margins.setdefault("float64", []).append((top.values[:, k - 1] - top.values[:, k]).min().item())
        if min(counts[-1]) == 0 or sets[-1] < 8:
            sys.exit(f"{name}: MoE layer {j}'s router does not spread the tokens over the experts")
    print(f"  {name}: routing, top {k} of {len(counts[0])} experts in {len(ref)} layers over "
          f"{next(iter(ref.values())).shape[0]} tokens (prompts and greedy sequence): expert uses per layer "
          f"from {min(min(c) for c in counts)} to {max(max(c) for c in counts)}, {min(sets)} or more distinct "
          f"expert sets per layer")
    model = copy.deepcopy(double).float()
    chosen = lambda v: v.topk(k, -1).indices.sort(-1).values  # noqa: E731
    for kind, kv in (("bf16", False), ("bf16kv", True)):
        low = routes(model, routers, lambda: emulate(model, runs, kv))
        flips = sum(int((chosen(low[j]) != chosen(ref[j])).any(-1).sum()) for j in ref)
        margins[kind] = [(lambda t: t[:, k - 1] - t[:, k])(v.topk(k + 1, -1).values).min().item() for v in low.values()]
        print(f"    the {kind} emulation routes {flips} of {sum(v.shape[0] for v in ref.values())} token-layers "
              f"otherwise than float64")
    print("    smallest k-th vs (k+1)-th probability margin: "
          + ", ".join(f"{min(v):.2e} ({kind})" for kind, v in margins.items()))
    if min(min(v) for v in margins.values()) < MIN_MARGIN:
        sys.exit(f"{name}: a routing near-tie (margin under {MIN_MARGIN:g}) makes the goldens fragile")


def qwen_moe_reference(mod, x):
    """Qwen3.5-MoE's / Qwen3-Next's sparse MoE block (norm_topk_prob: renormalised)."""
    p = torch.softmax(x @ mod.gate.weight.T, -1)
    top, idx = p.topk(mod.gate.top_k, -1)
    if getattr(mod.gate, "norm_topk_prob", True):
        top = top / top.sum(-1, keepdim=True)
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for w, e in zip(top[t], idx[t]):
            gu = mod.experts.gate_up_proj[e]
            half = gu.shape[0] // 2
            out[t] += w * (mod.experts.down_proj[e] @ (F.silu(gu[:half] @ x[t]) * (gu[half:] @ x[t])))
    s = mod.shared_expert
    shared = (F.silu(x @ s.gate_proj.weight.T) * (x @ s.up_proj.weight.T)) @ s.down_proj.weight.T
    return out + torch.sigmoid(x @ mod.shared_expert_gate.weight.T) * shared


def gdn_moe_patches(m, prefix, rot):
    """qwen35_patches for the Qwen3.5-MoE / Qwen3-Next modules, and the
    router's softmax(dtype=float32) in the logits' dtype."""
    cls = lambda n: getattr(m, prefix + n)  # noqa: E731
    return [
        eager_patch(m),
        (cls("RMSNorm"), "forward", retyped(cls("RMSNorm").forward, [(".float()", "", 2)])),
        (cls("RMSNormGated"), "forward", retyped(cls("RMSNormGated").forward, [("torch.float32", "input_dtype", 2)])),
        (m, "torch_chunk_gated_delta_rule",
         retyped(m.torch_chunk_gated_delta_rule, [("torch.float32", "initial_dtype", 1)])),
        (m, "torch_recurrent_gated_delta_rule",
         retyped(m.torch_recurrent_gated_delta_rule, [("torch.float32", "initial_dtype", 1)])),
        (cls("GatedDeltaNet"), "forward",
         retyped(cls("GatedDeltaNet").forward,
                 [("-self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias)",
                   "-self.A_log.exp() * F.softplus(a + self.dt_bias)", 1)],
                 [m.force_accelerate_hooks("conv1d")])),
        (rot, "compute_default_rope_parameters",
         staticmethod(retyped(rot.compute_default_rope_parameters, [("dtype=torch.float)", "dtype=torch.float64)", 1)]))),
        (rot, "forward", retyped(rot.forward, _rotary_edits(), [torch.no_grad(), m.dynamic_rope_update])),
        (cls("TopKRouter"), "forward",
         retyped(cls("TopKRouter").forward, [("dtype=torch.float,", "dtype=router_logits.dtype,", 1)])),
    ]


def moe_must_matter(name, double, patches, long, mlps, m, prefix):
    """The routing of Qwen3.5-MoE's / Qwen3-Next's MoE blocks matters."""
    def rolled(model):  # expert e routed by router row e - 1
        with torch.no_grad():
            for mlp in mlps(model):
                mlp.gate.weight.copy_(mlp.gate.weight.roll(1, 0))
        return None
    must_matter(name, double, patches, long, "the router (its rows rolled by one expert)", alter=rolled)

    def bottom(model):  # the k least likely experts instead
        router = getattr(m, prefix + "TopKRouter")
        return [(router, "forward", retyped(router.forward, [
            ("dtype=torch.float,", "dtype=router_logits.dtype,", 1),
            ("torch.topk(router_probs, self.top_k, dim=-1)", "torch.topk(router_probs, self.top_k, dim=-1, largest=False)", 1)]))]
    must_matter(name, double, patches, long, "the top-k choice (the k least likely experts instead)", alter=bottom)

    def unnormalised(model):
        router = getattr(m, prefix + "TopKRouter")
        return [(router, "forward", retyped(router.forward, [
            ("dtype=torch.float,", "dtype=router_logits.dtype,", 1),
            ("router_top_value /= router_top_value.sum(dim=-1, keepdim=True)", "router_top_value = router_top_value", 1)]))]
    must_matter(name, double, patches, long, "the renormalisation of the top-k probabilities", alter=unnormalised)

    def swapped(model):  # each expert's gate_up_proj read as [up | gate]
        with torch.no_grad():
            for mlp in mlps(model):
                w = mlp.experts.gate_up_proj
                w.copy_(w.roll(w.shape[1] // 2, 1))
        return None
    must_matter(name, double, patches, long, "the [gate | up] order of the experts' gate_up_proj", alter=swapped)

    def ungated(model):  # sigmoid(shared_expert_gate) = 1
        return [mlp.shared_expert_gate.register_forward_hook(lambda mod, inp, out: torch.full_like(out, 40.0))
                for mlp in mlps(model)]
    must_matter(name, double, patches, long, "the shared expert's gate sigmoid(shared_expert_gate(x))", alter=ungated)

    def no_shared(model):
        return [mlp.shared_expert.register_forward_hook(lambda mod, inp, out: torch.zeros_like(out))
                for mlp in mlps(model)]
    must_matter(name, double, patches, long, "the shared expert", alter=no_shared)


# ---------------------------------------------------------------------------
# Qwen3.5-MoE

def qwen35_moe():
    m = modeling_qwen3_5_moe
    text = dict(vocab_size=331, hidden_size=64, num_hidden_layers=4,
                layer_types=["linear_attention", "full_attention"] * 2, full_attention_interval=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                                 "mrope_section": [2, 1, 1], "mrope_interleaved": True},
                linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
                linear_value_head_dim=16, linear_conv_kernel_dim=4, max_position_embeddings=128,
                num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48,
                tie_word_embeddings=False, rms_norm_eps=1e-6, initializer_range=0.2, eos_token_id=2)
    vision = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, patch_size=4,
                  temporal_patch_size=2, spatial_merge_size=2, out_hidden_size=64, num_position_embeddings=16)
    config = Qwen3_5MoeConfig(text_config=text, vision_config=vision, tie_word_embeddings=False)
    config.architectures = ["Qwen3_5MoeForConditionalGeneration"]
    for c in (config, config.text_config, config.vision_config):
        c._attn_implementation = "eager"
        c._experts_implementation = "eager"

    def perturb(model):
        """As qwen35_tiny's."""
        g = torch.Generator().manual_seed(90)
        model.get_input_embeddings().weight.mul_(3.0)
        for layer in model.model.language_model.layers:
            if hasattr(layer, "linear_attn"):
                la = layer.linear_attn
                n, kd = la.A_log.numel(), la.key_dim
                la.A_log.copy_(torch.empty(n).uniform_(0.01, 0.1, generator=g).log())
                la.dt_bias.add_(0.3 * torch.randn(n, generator=g))
                for w in (la.in_proj_qkv.weight, la.conv1d.weight):
                    w[kd:2 * kd] = 0.9 * w[:kd] + 0.19 ** 0.5 * w[kd:2 * kd]

    patches = gdn_moe_patches(m, "Qwen3_5Moe", m.Qwen3_5MoeTextRotaryEmbedding)
    layers = lambda model: model.model.language_model.layers  # noqa: E731
    name = "qwen35_moe_tiny"
    double, prompts, logits = make(name, config, Qwen3_5MoeForConditionalGeneration, m, patches,
                                   attention_values(layers), SEEDS[name], perturb, functional=True, layout="fused")
    check_reference(name, double, patches, prompts, logits)
    reload_pretrained(name, Qwen3_5MoeForConditionalGeneration, patches, prompts, logits)
    rounding_sensitivity(name, double, m, patches, prompts, attention_values(layers), logits, functional=True)
    return double, prompts, patches


def qwen35_moe_checks(double, prompts, patches):
    m, name, long = modeling_qwen3_5_moe, "qwen35_moe_tiny", prompts[3]
    mlps = lambda model: [l.mlp for l in model.model.language_model.layers]  # noqa: E731
    formula_check(name, "the sparse MoE block (softmax, top 2, renormalised; shared expert gated)", double,
                  patches, long, mlps(double), qwen_moe_reference)
    check_greedy_gap(name, double, patches)
    check_routing(name, double, m, patches, prompts, lambda model: [mlp.gate for mlp in mlps(model)], 2,
                  attention_values(lambda model: model.model.language_model.layers))
    moe_must_matter(name, double, patches, long, mlps, m, "Qwen3_5Moe")

    def tiled(model):
        edits = [("torch.float32", "initial_dtype", 1),
                 (".repeat_interleave(num_v_heads // num_k_heads, dim=2)", ".repeat(1, 1, num_v_heads // num_k_heads, 1)", 2)]
        return [(m, "torch_chunk_gated_delta_rule", retyped(m.torch_chunk_gated_delta_rule, edits)),
                (m, "torch_recurrent_gated_delta_rule", retyped(m.torch_recurrent_gated_delta_rule, edits))]
    must_matter(name, double, patches, long, "the grouping of value heads on key heads (repeat_interleave, not tile)",
                alter=tiled)

    def plain_norms(model):
        return [(m.Qwen3_5MoeRMSNorm, "forward",
                 retyped(m.Qwen3_5MoeRMSNorm.forward, [(".float()", "", 2), ("(1.0 + self.weight)", "self.weight", 1)]))]
    must_matter(name, double, patches, long, "the (1 + w) zero-centred norms (as plain w)", alter=plain_norms)


# ---------------------------------------------------------------------------
# Qwen3-Next

def qwen3_next_gdn_reference(la, x):
    """Qwen3NextGatedDeltaNet as the docstring writes it, token by token."""
    nk, nv, dk, dv = la.num_k_heads, la.num_v_heads, la.head_k_dim, la.head_v_dim
    r, T = nv // nk, x.shape[0]
    qkvz = (x @ la.in_proj_qkvz.weight.T).view(T, nk, 2 * dk + 2 * r * dv)
    ba = (x @ la.in_proj_ba.weight.T).view(T, nk, 2 * r)
    q, k = qkvz[..., :dk], qkvz[..., dk:2 * dk]
    v = qkvz[..., 2 * dk:2 * dk + r * dv].reshape(T, nv, dv)  # value head g * r + i
    z = qkvz[..., 2 * dk + r * dv:].reshape(T, nv, dv)
    b, a = ba[..., :r].reshape(T, nv), ba[..., r:].reshape(T, nv)
    mixed = F.silu(causal_conv(torch.cat([q.reshape(T, -1), k.reshape(T, -1), v.reshape(T, -1)], -1),
                               la.conv1d.weight))
    q = mixed[:, :nk * dk].view(T, nk, dk)
    k = mixed[:, nk * dk:2 * nk * dk].view(T, nk, dk)
    v = mixed[:, 2 * nk * dk:].view(T, nv, dv)
    beta = torch.sigmoid(b)
    decay = torch.exp(-la.A_log.exp() * F.softplus(a + la.dt_bias))
    q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) / dk ** 0.5
    k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    S = x.new_zeros(nv, dk, dv)
    o = x.new_zeros(T, nv, dv)
    for t in range(T):
        for j in range(nv):
            kt, qt = k[t, j // r], q[t, j // r]
            S[j] = decay[t, j] * S[j]
            delta = beta[t, j] * (v[t, j] - S[j].T @ kt)
            S[j] = S[j] + torch.outer(kt, delta)
            o[t, j] = S[j].T @ qt
    o = rms(o, la.norm.weight, la.layer_norm_epsilon) * F.silu(z)
    return o.reshape(T, -1) @ la.out_proj.weight.T


def qwen3_next():
    m = modeling_qwen3_next
    config = Qwen3NextConfig(vocab_size=331, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                             layer_types=["linear_attention", "full_attention"] * 2, full_attention_interval=2,
                             num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                             rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                              "partial_rotary_factor": 0.25},
                             linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
                             linear_value_head_dim=16, linear_conv_kernel_dim=4, max_position_embeddings=128,
                             num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                             shared_expert_intermediate_size=48, norm_topk_prob=True, decoder_sparse_step=1,
                             mlp_only_layers=[], tie_word_embeddings=False, rms_norm_eps=1e-6,
                             initializer_range=0.2, eos_token_id=2)
    config.architectures = ["Qwen3NextForCausalLM"]
    config._attn_implementation = "eager"
    config._experts_implementation = "eager"

    def perturb(model):
        """As qwen35_tiny's; the key rows sit in each key head's block of in_proj_qkvz."""
        g = torch.Generator().manual_seed(90)
        model.get_input_embeddings().weight.mul_(3.0)
        for layer in model.model.layers:
            if hasattr(layer, "linear_attn"):
                la = layer.linear_attn
                n, kd, dk = la.A_log.numel(), la.key_dim, la.head_k_dim
                la.A_log.copy_(torch.empty(n).uniform_(0.01, 0.1, generator=g).log())
                la.dt_bias.add_(0.3 * torch.randn(n, generator=g))
                w, per = la.in_proj_qkvz.weight, la.in_proj_qkvz.weight.shape[0] // la.num_k_heads
                for h in range(la.num_k_heads):
                    q = slice(h * per, h * per + dk)
                    k = slice(h * per + dk, h * per + 2 * dk)
                    w[k] = 0.9 * w[q] + 0.19 ** 0.5 * w[k]
                c = la.conv1d.weight
                c[kd:2 * kd] = 0.9 * c[:kd] + 0.19 ** 0.5 * c[kd:2 * kd]

    patches = gdn_moe_patches(m, "Qwen3Next", m.Qwen3NextRotaryEmbedding)
    layers = lambda model: model.model.layers  # noqa: E731
    name = "qwen3_next_tiny"
    double, prompts, logits = make(name, config, Qwen3NextForCausalLM, m, patches, attention_values(layers),
                                   SEEDS[name], perturb, functional=True, layout="saved")
    check_reference(name, double, patches, prompts, logits)
    reload_pretrained(name, Qwen3NextForCausalLM, patches, prompts, logits)
    rounding_sensitivity(name, double, m, patches, prompts, attention_values(layers), logits, functional=True)
    return double, prompts, patches


def qwen3_next_checks(double, prompts, patches):
    m, name, long = modeling_qwen3_next, "qwen3_next_tiny", prompts[3]
    linear = lambda model: [l.linear_attn for l in model.model.layers if hasattr(l, "linear_attn")]  # noqa: E731
    mlps = lambda model: [l.mlp for l in model.model.layers]  # noqa: E731
    formula_check(name, "the gated delta net (in_proj_qkvz / in_proj_ba per key head)", double, patches,
                  prompts[2], linear(double), qwen3_next_gdn_reference)
    formula_check(name, "the sparse MoE block (softmax, top 2, renormalised; shared expert gated)", double,
                  patches, long, mlps(double), qwen_moe_reference)
    check_greedy_gap(name, double, patches)
    check_routing(name, double, m, patches, prompts, lambda model: [mlp.gate for mlp in mlps(model)], 2,
                  attention_values(lambda model: model.model.layers))
    stats = []
    for la, x, _ in module_io(double, patches, long, linear(double)):
        ba = (x @ la.in_proj_ba.weight.T).view(-1, la.num_k_heads, 2 * la.num_v_heads // la.num_k_heads)
        r = la.num_v_heads // la.num_k_heads
        a, b = ba[..., r:].reshape(-1), ba[..., :r].reshape(-1)
        dt = la.dt_bias.repeat(a.numel() // la.num_v_heads)
        A = la.A_log.exp().repeat(a.numel() // la.num_v_heads)
        stats.append((torch.exp(-A * F.softplus(a + dt)), b.sigmoid()))
    d, b = torch.cat([s[0] for s in stats]), torch.cat([s[1] for s in stats])
    qs = torch.tensor([0.0, .25, .5, .75, 1.0], dtype=d.dtype)
    print(f"  {name}: decay exp(g) quartiles {[round(v, 3) for v in d.quantile(qs).tolist()]}, "
          f"beta quartiles {[round(v, 3) for v in b.quantile(qs).tolist()]}")

    nk, nv, dk, dv = 2, 4, 16, 16
    r = nv // nk

    def blocked_qkvz(model):  # in_proj_qkvz read as [all q | all k | all v | all z]
        def hook(mod, inp, out):
            flat = [out[..., :nk * dk], out[..., nk * dk:2 * nk * dk], out[..., 2 * nk * dk:2 * nk * dk + nv * dv],
                    out[..., 2 * nk * dk + nv * dv:]]
            parts = [t.reshape(*t.shape[:-1], nk, -1) for t in flat]
            return torch.cat(parts, -1).flatten(-2)
        return [la.in_proj_qkvz.register_forward_hook(hook) for la in linear(model)]
    must_matter(name, double, patches, long, "the per-key-head [q, k, v, z] layout of in_proj_qkvz (as blocked)",
                alter=blocked_qkvz)

    def blocked_ba(model):  # in_proj_ba read as [all b | all a]
        def hook(mod, inp, out):
            parts = [out[..., :nv].reshape(*out.shape[:-1], nk, r), out[..., nv:].reshape(*out.shape[:-1], nk, r)]
            return torch.cat(parts, -1).flatten(-2)
        return [la.in_proj_ba.register_forward_hook(hook) for la in linear(model)]
    must_matter(name, double, patches, long, "the per-key-head [b, a] layout of in_proj_ba (as blocked)",
                alter=blocked_ba)

    def tiled(model):
        edits = [("torch.float32", "initial_dtype", 1),
                 (".repeat_interleave(num_v_heads // num_k_heads, dim=2)", ".repeat(1, 1, num_v_heads // num_k_heads, 1)", 2)]
        return [(m, "torch_chunk_gated_delta_rule", retyped(m.torch_chunk_gated_delta_rule, edits)),
                (m, "torch_recurrent_gated_delta_rule", retyped(m.torch_recurrent_gated_delta_rule, edits))]
    must_matter(name, double, patches, long, "the grouping of value heads on key heads (repeat_interleave, not tile)",
                alter=tiled)

    def current_tap_only(model):
        with torch.no_grad():
            for la in linear(model):
                la.conv1d.weight[..., :-1] = 0
        return None
    must_matter(name, double, patches, long, "the conv kernel's taps on past tokens", alter=current_tap_only)

    def a_log(model):
        with torch.no_grad():
            for la in linear(model):
                la.A_log.add_(0.5)
        return None
    must_matter(name, double, patches, long, "A_log (+0.5)", alter=a_log)

    def dt_bias(model):
        with torch.no_grad():
            for la in linear(model):
                la.dt_bias.zero_()
        return None
    must_matter(name, double, patches, long, "dt_bias (zeroed)", alter=dt_bias)

    def plain_norms(model):
        return [(m.Qwen3NextRMSNorm, "forward",
                 retyped(m.Qwen3NextRMSNorm.forward, [(".float()", "", 2), ("(1.0 + self.weight)", "self.weight", 1)]))]
    must_matter(name, double, patches, long, "the (1 + w) zero-centred norms (as plain w)", alter=plain_norms)

    def centred_gated_norm(model):
        return [(m.Qwen3NextRMSNormGated, "forward",
                 retyped(m.Qwen3NextRMSNormGated.forward, [("torch.float32", "input_dtype", 2),
                                                           ("self.weight * hidden_states", "(1.0 + self.weight) * hidden_states", 1)]))]
    must_matter(name, double, patches, long, "the gated norm's plain w (as 1 + w)", alter=centred_gated_norm)

    H, D = 4, 32

    def attn_layers(model):
        return [l.self_attn for l in model.model.layers if hasattr(l, "self_attn")]

    def no_gate(model):
        def hook(mod, inp, out):
            out = out.view(*out.shape[:-1], H, 2 * D).clone()
            out[..., D:] = 40.0
            return out.view(*out.shape[:-2], -1)
        return [a.q_proj.register_forward_hook(hook) for a in attn_layers(model)]
    must_matter(name, double, patches, long, "the attention output gate sigmoid(gate)", alter=no_gate)

    def blocked(model):
        def hook(mod, inp, out):
            q, g = out[..., :H * D], out[..., H * D:]
            return torch.stack([q.view(*q.shape[:-1], H, D), g.view(*g.shape[:-1], H, D)], -2).flatten(-3)
        return [a.q_proj.register_forward_hook(hook) for a in attn_layers(model)]
    must_matter(name, double, patches, long, "the per-head [q, gate] layout of q_proj", alter=blocked)

    def partial(c):
        c.rope_parameters["partial_rotary_factor"] = 0.5
    must_matter(name, double, patches, long, "the partial rotary (8 of 32 dims, not 16)", change=partial)

    moe_must_matter(name, double, patches, long, mlps, m, "Qwen3Next")

    def norm_topk(c):
        c.norm_topk_prob = False
    must_matter(name, double, patches, long, "norm_topk_prob (true; false as a config change)", change=norm_topk)


# ---------------------------------------------------------------------------
# Granite 4.0-H

def granite_patches():
    m = modeling_granitemoehybrid
    rot = m.GraniteMoeHybridRotaryEmbedding
    return [
        eager_patch(m),
        (m.GraniteMoeHybridRMSNorm, "forward",
         retyped(m.GraniteMoeHybridRMSNorm.forward, [("torch.float32", "input_dtype", 1)])),
        (m.GraniteMoeHybridRMSNormGated, "forward",
         retyped(m.GraniteMoeHybridRMSNormGated.forward, [("torch.float32", "input_dtype", 2)])),
        (m, "mamba2_chunk_scan", retyped(m.mamba2_chunk_scan, [(".float()", "", 5)])),
        (m, "mamba2_selective_state_update",
         retyped(m.mamba2_selective_state_update, [("torch.exp(dt.float() * A.float())", "torch.exp(dt * A)", 1)])),
        (m.GraniteMoeHybridMambaLayer, "forward",
         retyped(m.GraniteMoeHybridMambaLayer.forward, [("-torch.exp(self.A_log.float())", "-torch.exp(self.A_log)", 1)],
                 [m.force_accelerate_hooks("conv1d")])),
        (m.GraniteMoeHybridTopKRouter, "forward",
         retyped(m.GraniteMoeHybridTopKRouter.forward,
                 [("F.linear(hidden_states, self.weight).float()", "F.linear(hidden_states, self.weight)", 1)])),
        (rot, "compute_default_rope_parameters",
         staticmethod(retyped(rot.compute_default_rope_parameters, [("dtype=torch.float)", "dtype=torch.float64)", 1)]))),
        (rot, "forward", retyped(rot.forward, _rotary_edits(), [torch.no_grad(), m.dynamic_rope_update])),
    ]


def mamba2_reference(c, x):
    """GraniteMoeHybridMambaLayer as the docstring writes it: the selective
    scan token by token."""
    H, P, N, G, Di = c.num_heads, c.head_dim, c.ssm_state_size, c.n_groups, c.intermediate_size
    T = x.shape[0]
    zxbcdt = x @ c.in_proj.weight.T
    z, xBC, dt = zxbcdt[:, :Di], zxbcdt[:, Di:2 * Di + 2 * G * N], zxbcdt[:, 2 * Di + 2 * G * N:]
    xBC = F.silu(causal_conv(xBC, c.conv1d.weight, c.conv1d.bias))
    xs = xBC[:, :Di].view(T, H, P)
    B, C = xBC[:, Di:Di + G * N].view(T, G, N), xBC[:, Di + G * N:].view(T, G, N)
    dt = F.softplus(dt + c.dt_bias).clamp(*c.time_step_limit)
    A = -torch.exp(c.A_log)
    group = torch.arange(H) // (H // G)  # head h reads B, C of group h // (H / G)
    h = x.new_zeros(H, P, N)
    y = x.new_zeros(T, H, P)
    for t in range(T):
        h = torch.exp(dt[t] * A)[:, None, None] * h + dt[t][:, None, None] * xs[t][:, :, None] * B[t, group][:, None, :]
        y[t] = (h * C[t, group][:, None, :]).sum(-1) + c.D[:, None] * xs[t]
    y = y.reshape(T, Di) * F.silu(z)  # gate first, then the norm per group of Di / G
    y = rms(y.view(T, G, Di // G), 1.0, c.norm.variance_epsilon).reshape(T, Di) * c.norm.weight
    return y @ c.out_proj.weight.T


def granite_moe_reference(mod, x):
    """GraniteMoeHybridMoE: the top k router logits, softmax over those k."""
    logits = x @ mod.router.weight.T
    top, idx = logits.topk(mod.router.top_k, -1)
    w = torch.softmax(top, -1)
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for wt, e in zip(w[t], idx[t]):
            gu = mod.experts.gate_up_proj[e]
            half = gu.shape[0] // 2
            out[t] += wt * (mod.experts.down_proj[e] @ (F.silu(gu[:half] @ x[t]) * (gu[half:] @ x[t])))
    return out


def granite_mlp_reference(mod, x):
    """GraniteMoeHybridMLP (the shared MLP): input_linear rows [gate | up]."""
    gu = x @ mod.input_linear.weight.T
    half = gu.shape[-1] // 2
    return (F.silu(gu[:, :half]) * gu[:, half:]) @ mod.output_linear.weight.T


def granite_reference(model, prompt):
    """The whole GraniteMoeHybridForCausalLM as the docstring writes it."""
    c, body = model.config, model.model
    eps = c.rms_norm_eps
    h = body.embed_tokens.weight[torch.tensor(prompt)] * c.embedding_multiplier
    T = h.shape[0]
    for layer in body.layers:
        x = rms(h, layer.input_layernorm.weight, eps)
        if layer.mamba is not None:
            y = mamba2_reference(layer.mamba, x)
        else:
            a = layer.self_attn
            nh, nkv = c.num_attention_heads, c.num_key_value_heads
            d = c.hidden_size // nh
            q = (x @ a.q_proj.weight.T).view(T, nh, d)
            k = (x @ a.k_proj.weight.T).view(T, nkv, d)
            v = (x @ a.v_proj.weight.T).view(T, nkv, d)
            kv = torch.arange(nh) // (nh // nkv)
            s = torch.einsum("thd,shd->hts", q, k[:, kv]) * c.attention_multiplier  # no rotary (NoPE)
            s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
            y = torch.einsum("hts,shd->thd", torch.softmax(s, -1), v[:, kv]).reshape(T, -1) @ a.o_proj.weight.T
        h = h + c.residual_multiplier * y
        x = rms(h, layer.post_attention_layernorm.weight, eps)
        y = granite_mlp_reference(layer.shared_mlp, x)
        if layer.block_sparse_moe is not None:  # -Micro: the shared MLP alone
            y = granite_moe_reference(layer.block_sparse_moe, x) + y
        h = h + c.residual_multiplier * y
    return rms(h, body.norm.weight, eps) @ model.lm_head.weight.T / c.logits_scaling


def released_granite_config(d):
    """config.json as the released Granite 4.0-H files have it: layer_types
    "mamba" / "attention" (transformers 5.23 writes "linear_attention" /
    "full_attention" and reads either; llama.cpp's converter knows only
    "attention"), and no time_step_limit (transformers writes its default
    [0.0, {"__float__": "Infinity"}], no JSON number)."""
    legacy = {"linear_attention": "mamba", "full_attention": "attention"}
    d["layer_types"] = [legacy[t] for t in d["layer_types"]]
    if d.get("time_step_limit") != [0.0, {"__float__": "Infinity"}]:
        sys.exit(f"granite: time_step_limit {d.get('time_step_limit')} is not the default")
    del d["time_step_limit"]
    return d


def granite(name):
    m = modeling_granitemoehybrid
    layer_types = GRANITE_LAYERS
    config = GraniteMoeHybridConfig(vocab_size=331, hidden_size=64, **GRANITE_MLP[name],
                                    num_hidden_layers=len(layer_types), layer_types=layer_types, num_attention_heads=4,
                                    num_key_value_heads=2, position_embedding_type="nope",
                                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                                    mamba_n_heads=8, mamba_d_state=16,
                                    mamba_n_groups=2, mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=GRANITE_CHUNK,
                                    mamba_conv_bias=True, mamba_proj_bias=False,
                                    embedding_multiplier=12.0, attention_multiplier=0.125, residual_multiplier=0.22,
                                    logits_scaling=6.0, max_position_embeddings=128, rms_norm_eps=1e-5,
                                    initializer_range=0.2, tie_word_embeddings=True, bos_token_id=1,
                                    eos_token_id=2, pad_token_id=None)
    config.architectures = ["GraniteMoeHybridForCausalLM"]
    config._attn_implementation = "eager"
    config._experts_implementation = "eager"

    def perturb(model):
        g = torch.Generator().manual_seed(92)
        model.get_input_embeddings().weight.mul_(GRANITE_EMBED)
        for layer in model.model.layers:
            if layer.mamba is not None:
                mb = layer.mamba
                n = mb.num_heads
                mb.A_log.copy_(torch.empty(n).uniform_(*GRANITE_A, generator=g).log())
                mb.dt_bias.copy_(GRANITE_DT + 0.5 * torch.randn(n, generator=g))
                mb.D.copy_(1.0 + 0.5 * torch.randn(n, generator=g))

    patches = granite_patches()
    layers = lambda model: model.model.layers  # noqa: E731
    experts = config.num_local_experts > 0  # the F.linear of the experts and router (none in -Micro)
    double, prompts, logits = make(name, config, GraniteMoeHybridForCausalLM, None, patches,
                                   attention_keys_values(layers), SEEDS[name], perturb, functional=experts,
                                   layout="saved", edit_config=released_granite_config)
    check_reference(name, double, patches, prompts, logits)
    reload_pretrained(name, GraniteMoeHybridForCausalLM, patches, prompts, logits)
    rounding_sensitivity(name, double, None, patches, prompts, attention_keys_values(layers), logits,
                         functional=experts)
    return name, double, prompts, patches


def granite_dense_checks(name, double, patches, long):
    """-Micro: no MoE block in any layer, and intermediate_size (the experts'
    width, in config.json for llama.cpp) changes nothing."""
    if any(l.block_sparse_moe is not None or l.has_experts for l in double.model.layers):
        sys.exit(f"{name}: a layer has a MoE block")
    width = {tuple(l.shared_mlp.input_linear.weight.shape) for l in double.model.layers}
    config = copy.deepcopy(double.config)
    config.intermediate_size = 7
    other = double_of(double, config)
    same = torch.equal(logits64(double, patches, long), logits64(other, patches, long))
    print(f"  {name}: no MoE block; the shared MLP's input_linear {sorted(width)}; intermediate_size 7 instead "
          f"of {double.config.intermediate_size}: logits {'bit for bit the same' if same else 'CHANGED'}")
    if not same:
        sys.exit(f"{name}: intermediate_size matters without experts")


def granite_checks(name, double, prompts, patches):
    m, long = modeling_granitemoehybrid, prompts[3]
    experts = double.config.num_local_experts > 0
    mambas = lambda model: [l.mamba for l in model.model.layers if l.mamba is not None]  # noqa: E731
    formula_check(name, "the Mamba-2 mixer (selective scan token by token)", double, patches, long,
                  mambas(double), mamba2_reference)
    if experts:
        formula_check(name, "the routed experts (top 2 router logits, softmax over them)", double, patches, long,
                      [l.block_sparse_moe for l in double.model.layers], granite_moe_reference)
    else:
        granite_dense_checks(name, double, patches, long)
    formula_check(name, "the shared MLP", double, patches, long, [l.shared_mlp for l in double.model.layers],
                  granite_mlp_reference)
    with torch.no_grad():
        worst = max(((granite_reference(double, p) - logits64(double, patches, p)).abs().max()
                     / logits64(double, patches, p).abs().max()).item() for p in prompts)
    mlp = "experts + shared MLP" if experts else "the shared MLP alone"
    print(f"  {name}: the whole model written out (multipliers, NoPE attention, {mlp}) vs "
          f"transformers: max |diff| / max |logit| = {worst:.3g}")
    if worst > 1e-12:
        sys.exit(f"{name}: the written-out model is not what transformers computes")
    # the chunked scan (mamba_chunk_size) against other chunkings: the same
    exact = logits64(double, patches, long)
    for chunk in (1, 7, 128, 256):
        config = copy.deepcopy(double.config)
        config.mamba_chunk_size = chunk
        err = ((logits64(double_of(double, config), patches, long) - exact).abs().max() / exact.abs().max()).item()
        print(f"  {name}: chunk_size {chunk} instead of {double.config.mamba_chunk_size}: max |diff| / max |logit| = {err:.3g}")
        if err > 1e-12:
            sys.exit(f"{name}: the chunked scan depends on the chunk size")
    check_greedy_gap(name, double, patches)
    if experts:
        check_routing(name, double, None, patches, prompts,
                      lambda model: [l.block_sparse_moe.router for l in model.model.layers], 2,
                      attention_keys_values(lambda model: model.model.layers))
    dts, decays = [], []
    for mb, x, _ in module_io(double, patches, long, mambas(double)):
        raw = (x.reshape(-1, x.shape[-1]) @ mb.in_proj.weight.T)[:, -mb.num_heads:]
        dt = F.softplus(raw + mb.dt_bias)
        dts.append(dt.flatten())
        decays.append(torch.exp(-dt * mb.A_log.exp()).flatten())
    qs = torch.tensor([0.0, .25, .5, .75, 1.0], dtype=exact.dtype)
    print(f"  {name}: dt quartiles {[round(v, 3) for v in torch.cat(dts).quantile(qs).tolist()]}, "
          f"decay exp(dt A) quartiles {[round(v, 3) for v in torch.cat(decays).quantile(qs).tolist()]}")

    for what, attr, value in (("embedding_multiplier (12, not 1)", "embedding_multiplier", 1.0),
                              ("attention_multiplier (0.125, not 1/sqrt(16))", "attention_multiplier", 0.25),
                              ("residual_multiplier (0.22, not 1)", "residual_multiplier", 1.0),
                              ("logits_scaling (a divisor, 6, not 1)", "logits_scaling", 1.0),
                              ("position_embedding_type \"nope\" (RoPE, theta 1e4, instead)", "position_embedding_type", "rope")):
        must_matter(name, double, patches, long, what, change=lambda c, a=attr, v=value: setattr(c, a, v))

    Di, GN = 128, 2 * 16

    def rows(model, fn):
        with torch.no_grad():
            for mb in mambas(model):
                fn(mb)
        return None

    def swap(t, a, b, n):  # swaps t[a:a+n] and t[b:b+n]
        t[a:a + n], t[b:b + n] = t[b:b + n].clone(), t[a:a + n].clone()

    must_matter(name, double, patches, long, "the z, x order of in_proj (z the gate, x the input)",
                alter=lambda model: rows(model, lambda mb: swap(mb.in_proj.weight, 0, Di, Di)))

    def swap_bc(mb):  # in_proj rows and conv channels read as [x, C, B]
        swap(mb.in_proj.weight, 2 * Di, 2 * Di + GN, GN)
        swap(mb.conv1d.weight, Di, Di + GN, GN)
        swap(mb.conv1d.bias, Di, Di + GN, GN)
    must_matter(name, double, patches, long, "the B, C order of in_proj and the conv", alter=lambda model: rows(model, swap_bc))
    must_matter(name, double, patches, long, "the conv kernel's taps on past tokens",
                alter=lambda model: rows(model, lambda mb: mb.conv1d.weight[..., :-1].zero_()))
    must_matter(name, double, patches, long, "the conv kernel's orientation (flipped)",
                alter=lambda model: rows(model, lambda mb: mb.conv1d.weight.copy_(mb.conv1d.weight.flip(-1))))
    must_matter(name, double, patches, long, "the conv bias (zeroed)",
                alter=lambda model: rows(model, lambda mb: mb.conv1d.bias.zero_()))
    must_matter(name, double, patches, long, "A_log (+0.5)", alter=lambda model: rows(model, lambda mb: mb.A_log.add_(0.5)))
    must_matter(name, double, patches, long, "D (zeroed)", alter=lambda model: rows(model, lambda mb: mb.D.zero_()))
    must_matter(name, double, patches, long, "dt_bias (zeroed)", alter=lambda model: rows(model, lambda mb: mb.dt_bias.zero_()))

    def tiled_groups(model):  # head h on group h % n_groups instead of h // (heads / n_groups)
        return [(m, "mamba2_chunk_scan", retyped(m.mamba2_chunk_scan, [
            (".float()", "", 5),
            ("B.repeat_interleave(num_heads // num_groups, dim=2, output_size=num_heads)",
             "B.repeat(1, 1, num_heads // num_groups, 1)", 1),
            ("C.repeat_interleave(num_heads // num_groups, dim=2, output_size=num_heads)",
             "C.repeat(1, 1, num_heads // num_groups, 1)", 1)]))]
    must_matter(name, double, patches, long, "the heads' groups (head h on group h // 4, not h % 2)", alter=tiled_groups)

    def one_group_norm(model):
        for mb in mambas(model):
            mb.norm.group_size = mb.intermediate_size
        return None
    must_matter(name, double, patches, long, "the gated norm per group of 64 (not over all 128)", alter=one_group_norm)

    def norm_then_gate(model):
        return [(m.GraniteMoeHybridRMSNormGated, "forward", retyped(m.GraniteMoeHybridRMSNormGated.forward, [
            ("torch.float32", "input_dtype", 2),
            ("hidden_states = hidden_states * nn.functional.silu(gate.to(input_dtype))", "pass", 1),
            ("return self.weight * hidden_states.to(input_dtype)",
             "return self.weight * hidden_states.to(input_dtype) * nn.functional.silu(gate)", 1)]))]
    must_matter(name, double, patches, long, "the gate before the norm (norm(y * silu(z)) * w, not norm(y) * w * silu(z))",
                alter=norm_then_gate)

    if experts:
        granite_moe_must_matter(name, double, patches, long)

    def shared_up_gate(model):
        with torch.no_grad():
            for layer in model.model.layers:
                w = layer.shared_mlp.input_linear.weight
                w.copy_(w.roll(w.shape[0] // 2, 0))
        return None
    must_matter(name, double, patches, long, "the [gate | up] order of the shared MLP's input_linear", alter=shared_up_gate)

    def no_shared(model):
        return [l.shared_mlp.register_forward_hook(lambda mod, inp, out: torch.zeros_like(out)) for l in model.model.layers]
    must_matter(name, double, patches, long, "the shared MLP", alter=no_shared)


def granite_moe_must_matter(name, double, patches, long):
    m = modeling_granitemoehybrid

    def rolled(model):
        with torch.no_grad():
            for layer in model.model.layers:
                r = layer.block_sparse_moe.router
                r.weight.copy_(r.weight.roll(1, 0))
        return None
    must_matter(name, double, patches, long, "the router (its rows rolled by one expert)", alter=rolled)

    def softmax_all(model):  # softmax over all experts, the top k's share not renormalised
        return [(m.GraniteMoeHybridTopKRouter, "forward", retyped(m.GraniteMoeHybridTopKRouter.forward, [
            ("F.linear(hidden_states, self.weight).float()", "F.linear(hidden_states, self.weight)", 1),
            ("top_k_weights = torch.softmax(top_k_logits, dim=-1)",
             "top_k_weights = torch.softmax(router_logits, dim=-1).gather(-1, top_k_index)", 1)]))]
    must_matter(name, double, patches, long, "the softmax over the top k only (= renormalised)", alter=softmax_all)

    def experts_up_gate(model):
        with torch.no_grad():
            for layer in model.model.layers:
                w = layer.block_sparse_moe.experts.gate_up_proj
                w.copy_(w.roll(w.shape[1] // 2, 1))
        return None
    must_matter(name, double, patches, long, "the [gate | up] order of the experts' input_linear", alter=experts_up_gate)


def main(names):
    torch.set_num_threads(max(1, min(8, os.cpu_count() or 1)))
    if "qwen35_tiny" in names:
        double, prompts, patches = qwen35()
        qwen35_decay_stats(double, prompts, patches)
        qwen35_must_matter(double, prompts, patches)
    if "lfm2_tiny" in names:
        double, prompts, patches = lfm2()
        lfm2_must_matter(double, prompts, patches)
    if "qwen35_moe_tiny" in names:
        qwen35_moe_checks(*qwen35_moe())
    if "qwen3_next_tiny" in names:
        qwen3_next_checks(*qwen3_next())
    for name in ("granite_hybrid_tiny", "granite_micro_tiny"):
        if name in names:
            granite_checks(*granite(name))


ALL = ("qwen35_tiny", "lfm2_tiny", "qwen35_moe_tiny", "qwen3_next_tiny", "granite_hybrid_tiny", "granite_micro_tiny")

if __name__ == "__main__":
    main(sys.argv[1:] or ALL)
